"""Tensors made from nothing: factories (``zeros``, ``arange``, ``randn``...), random fills, and the
``full`` node that gradient graphs use for constants.

Factories follow PyTorch's signatures and dtype rules: sizes as ``zeros(2, 3)`` or
``zeros((2, 3))``; ``dtype=``, ``device=`` (the CPU) and ``requires_grad=`` keywords; floats are
float32 unless asked, ``full((2,), 7)`` is int64 and ``arange(3)`` int64 as in PyTorch.  Random
values come from tinyopt's generator (``manual_seed``) or the ``generator=`` given.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.device import check_device
from tinyopt.engine.dtypes import (FLOATS, as_dtype, bool_, float32, int64, scalar_array,
                                   scalar_dtype, stored_scalar)
from tinyopt.engine.op import defop, node
from tinyopt.engine.random import Generator, default_generator
from tinyopt.engine.tensor import Tensor, as_tensor, leaf

defop("full", forward=lambda t: (lambda out: out.fill(t.attrs[0])))


def constant_node(shape, fill_value, dtype) -> Tensor:
    """A graph node filled with ``fill_value`` when the plan runs (no input to bind)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return node("full", (), shape, as_dtype(dtype), (fill_value,))


def _size(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    elif len(size) == 1 and hasattr(size[0], "__len__") and not isinstance(size[0], Tensor):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = s.item()
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"size must be a tuple of ints, but got {type(s).__name__}")
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: "
                               f"{list(size)}")
        out.append(int(s))
    return tuple(out)


def new_leaf(arr: np.ndarray, device, requires_grad: bool) -> Tensor:
    """A concrete tensor holding ``arr`` on ``device`` (checked), requiring grad if asked: what
    the factory functions return."""
    check_device(device)
    t = leaf(arr)
    if requires_grad:
        t.requires_grad_()
    return t


def _rng(generator) -> np.random.Generator:
    if generator is None:
        return default_generator.numpy
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, Generator):
        return generator.numpy
    raise TypeError(f"generator must be a tinyopt.Generator or a numpy Generator, got "
                    f"{type(generator).__name__}")


def _float_dtype(dtype) -> np.dtype:
    d = as_dtype(dtype or float32)
    if d not in FLOATS:
        raise RuntimeError(f"expected a floating point dtype, got {d}")
    return d


# ---- constant fills ------------------------------------------------------------------------------
def zeros(*shape, size=None, out=None, dtype=None, layout=None, device=None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with zeros (float32 unless ``dtype``)."""
    return new_leaf(np.zeros(_size(shape if size is None else (size,)), as_dtype(dtype or float32)),
                device, requires_grad)


def ones(*shape, size=None, out=None, dtype=None, layout=None, device=None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ones (float32 unless ``dtype``)."""
    return new_leaf(np.ones(_size(shape if size is None else (size,)), as_dtype(dtype or float32)),
                device, requires_grad)


def empty(*shape, size=None, out=None, dtype=None, layout=None, device=None,
          requires_grad: bool = False, pin_memory: bool = False, memory_format=None) -> Tensor:
    """A tensor of that shape (tinyopt fills it with zeros: no uninitialised memory)."""
    return zeros(*shape, size=size, dtype=dtype, device=device, requires_grad=requires_grad)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None,
         requires_grad: bool = False) -> Tensor:
    """A tensor filled with ``fill_value``; its dtype is the value's (bool, int64 or float32)
    unless ``dtype`` is given."""
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    d = as_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
    shape = (size,) if isinstance(size, numbers.Integral) else _size((size,))
    return new_leaf(np.full(shape, stored_scalar(fill_value, d)), device, requires_grad)


def scalar_tensor(s, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
                  pin_memory: bool = False) -> Tensor:
    """A 0-d tensor holding the number ``s``, float32 unless ``dtype`` (whatever the number's
    type, as torch's)."""
    if isinstance(s, Tensor):
        s = s.item()
    return new_leaf(scalar_array(s, as_dtype(dtype) if dtype is not None else float32), device,
                    requires_grad)


def _like(x, dtype) -> tuple[tuple[int, ...], np.dtype]:
    x = as_tensor(x)
    return x.shape, as_dtype(dtype) if dtype is not None else x.dtype


def zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    """Zeros of ``input``'s shape and dtype (unless ``dtype``)."""
    shape, d = _like(input, dtype)
    return new_leaf(np.zeros(shape, d), device, requires_grad)


def ones_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    """Ones of ``input``'s shape and dtype (unless ``dtype``)."""
    shape, d = _like(input, dtype)
    return new_leaf(np.ones(shape, d), device, requires_grad)


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    """A tensor of ``input``'s shape and dtype (zeros here: tinyopt never hands out uninitialized
    memory)."""
    return zeros_like(input, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(input, fill_value, *, dtype=None, layout=None, device=None,
              requires_grad: bool = False, memory_format=None) -> Tensor:
    """A tensor of ``input``'s shape (and dtype, unless ``dtype``) filled with ``fill_value``."""
    shape, d = _like(input, dtype)
    return new_leaf(np.full(shape, stored_scalar(fill_value, d)), device, requires_grad)


def eye(n: int, m: int | None = None, *, out=None, dtype=None, layout=None, device=None,
        requires_grad: bool = False) -> Tensor:
    """The ``n`` x ``m`` identity matrix (``m`` defaults to ``n``)."""
    return new_leaf(np.eye(n, n if m is None else m, dtype=as_dtype(dtype or float32)), device,
                requires_grad)


def arange(start, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           requires_grad: bool = False) -> Tensor:
    """Values from ``start`` (default 0) up to ``end`` (excluded) by ``step``; int64 when all
    three are integers, else float32 (PyTorch's rule)."""
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = int64 if ints else float32
    d = as_dtype(dtype)
    if d in FLOATS:  # PyTorch's count: ceil((end - start) / step), computed in double
        n = max(0, math.ceil((end - start) / step))
        arr = (start + step * np.arange(n, dtype=np.float64)).astype(d)
    else:
        arr = np.arange(start, end, step).astype(d)
    return new_leaf(arr, device, requires_grad)


def range_(start, end, step=1, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """``torch.range`` (deprecated there): like ``arange`` but ``end`` included, float32."""
    n = int(math.floor((end - start) / step)) + 1
    arr = (start + step * np.arange(n, dtype=np.float64)).astype(as_dtype(dtype or float32))
    return new_leaf(arr, device, requires_grad)


def linspace(start, end, steps: int, *, out=None, dtype=None, layout=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` (both included)."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    arr = np.linspace(float(start), float(end), int(steps), dtype=np.float64)
    return new_leaf(arr.astype(as_dtype(dtype or float32)), device, requires_grad)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """``steps`` numbers ``base ** t`` with ``t`` evenly spaced from ``start`` to ``end``."""
    arr = np.logspace(float(start), float(end), int(steps), base=base, dtype=np.float64)
    return new_leaf(arr.astype(as_dtype(dtype or float32)), device, requires_grad)


# ---- random -------------------------------------------------------------------------------------
def randn(*shape, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples."""
    d = _float_dtype(dtype)
    shape = _size(shape if size is None else (size,))
    return new_leaf(_rng(generator).standard_normal(shape).astype(d), device, requires_grad)


def rand(*shape, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples on [0, 1)."""
    d = _float_dtype(dtype)
    shape = _size(shape if size is None else (size,))
    return new_leaf(_rng(generator).random(shape).astype(d), device, requires_grad)


def randn_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    """Standard normal samples of ``input``'s shape and dtype, from the global generator."""
    shape, d = _like(input, dtype)
    return randn(shape, dtype=d, device=device, requires_grad=requires_grad)


def rand_like(input, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    """Uniform [0, 1) samples of ``input``'s shape and dtype, from the global generator."""
    shape, d = _like(input, dtype)
    return rand(shape, dtype=d, device=device, requires_grad=requires_grad)


def randint(low, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None,
            device=None, requires_grad: bool = False) -> Tensor:
    """Integers uniform in [low, high) (``randint(high, size)`` or ``randint(low, high, size)``),
    int64 unless ``dtype``."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    arr = _rng(generator).integers(low, high, _size((size,)))
    return new_leaf(arr.astype(as_dtype(dtype or int64)), device, requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None,
                 requires_grad: bool = False) -> Tensor:
    """Integers uniform in [low, high) of ``input``'s shape (``randint_like(x, high)`` or
    ``randint_like(x, low, high)``)."""
    shape, d = _like(input, dtype)
    if high is None:
        low, high = 0, low
    return randint(low, high, shape, dtype=d, device=device, requires_grad=requires_grad)


def randperm(n: int, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """A random permutation of 0..n-1."""
    return new_leaf(_rng(generator).permutation(int(n)).astype(as_dtype(dtype or int64)), device,
                requires_grad)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None,
           device=None, requires_grad: bool = False) -> Tensor:
    """Normal samples with the given mean and std (numbers, or tensors of one shape)."""
    rng = _rng(generator)
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        m, s = np.asarray(as_tensor(mean).numpy()), np.asarray(as_tensor(std).numpy())
        shape = np.broadcast_shapes(m.shape, s.shape)
        d = (m.dtype if m.dtype in FLOATS else s.dtype if s.dtype in FLOATS else float32)
        return new_leaf((m + s * rng.standard_normal(shape)).astype(d), device, requires_grad)
    shape = _size((size,)) if size is not None else ()
    arr = mean + std * rng.standard_normal(shape)
    return new_leaf(np.asarray(arr).astype(_float_dtype(dtype)), device, requires_grad)


def bernoulli(input, p=None, *, generator=None, out=None) -> Tensor:
    """1 with probability ``input`` (or ``p``) per element, else 0, in ``input``'s dtype."""
    x = as_tensor(input)
    probs = np.asarray(x.numpy()) if p is None else np.full(x.shape, float(p))
    return leaf((_rng(generator).random(x.shape) < probs).astype(x.dtype))


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None,
                out=None) -> Tensor:
    """Indices drawn from the categorical distribution(s) proportional to the rows of
    ``input`` (1-D or 2-D, non-negative weights), int64."""
    w = np.asarray(as_tensor(input).numpy(), dtype=np.float64)
    if w.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    rows = w.reshape(-1, w.shape[-1])
    if (rows < 0).any() or not np.isfinite(rows).all():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    rng = _rng(generator)
    out = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    for i, r in enumerate(rows):
        total = r.sum()
        if total <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if replacement:
            out[i] = rng.choice(r.size, size=num_samples, replace=True, p=r / total)
        else:
            out[i] = rng.choice(r.size, size=num_samples, replace=False, p=r / total)
    return leaf(out.reshape(w.shape[:-1] + (num_samples,)))


def fill_random(t: Tensor, kind: str, a, b, generator) -> Tensor:
    """``t.uniform_(a, b)``, ``normal_(mean, std)``, ``bernoulli_(p)``, ``exponential_(lambd)``,
    ``random_(from, to)``: fill ``t`` in place with new samples."""
    rng = _rng(generator)
    shape = t.shape
    if kind == "uniform":
        arr = rng.uniform(a, b, shape)
    elif kind == "normal":
        arr = rng.normal(a, b, shape)
    elif kind == "bernoulli":
        p = as_tensor(a).numpy() if isinstance(a, Tensor) else a
        arr = rng.random(shape) < p
    elif kind == "exponential":
        arr = rng.exponential(1.0 / a, shape)
    else:
        hi = b if b is not None else (2 ** 24 if t.dtype in FLOATS else
                                      np.iinfo(t.dtype).max if t.dtype != bool_ else 2)
        arr = rng.integers(a, hi, shape)
    arr = np.asarray(arr).astype(t.dtype)
    return t._inplace(lambda x: leaf(arr), check_cast=False)
