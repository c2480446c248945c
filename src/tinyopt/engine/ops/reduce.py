"""Reductions: sum, mean, max/min (with indices), argmax/argmin, var, logsumexp, softmax,
log_softmax.

Each kernel reduces one run of consecutive dimensions, seen as the middle axis of a 3-D view
``(before, run, after)``; a reduction over scattered dimensions is built as several of them.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.dtypes import int64, is_float, scalar_type_name
from tinyopt.engine.op import defop, node, own_reshape, refuse_unsigned
from tinyopt.engine.ops.elementwise import (eq, in_float32, isfinite, isnan, logical_and,
                                            logical_or, maximum, minimum, ne, where)
from tinyopt.engine.ops.family import c_contiguous, require_float
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import reduce as K


def _dims(op: str, x: Tensor, dim) -> tuple[int, ...]:
    nd = builtins.max(x.ndim, 1)
    ds = (dim,) if isinstance(dim, int) else () if dim is None else tuple(dim)
    if not ds:  # None and () both mean every dimension, as in PyTorch
        return tuple(range(x.ndim))
    out = []
    for d in ds:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                             f"{nd - 1}], but got {d})")
        out.append(d % nd)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dim {out} appears multiple times in the list of dims")
    return tuple(sorted(out)) if x.ndim else ()


def _split(shape: tuple[int, ...], d0: int, d1: int) -> tuple[int, int, int]:
    """(before, run, after) sizes for the run of dims d0..d1 inclusive."""
    return math.prod(shape[:d0]), math.prod(shape[d0:d1 + 1]), math.prod(shape[d1 + 1:])


def dim_runs(dims: tuple[int, ...]) -> list[tuple[int, int]]:
    """Sorted dims as runs of consecutive dims, ``(first, last)`` each: one ``sum_run`` node
    a run."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and runs[-1][1] == d - 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return [tuple(r) for r in runs]


# ---- sum / mean --------------------------------------------------------------------------------
def _sum_forward(t):
    src = t.srcs[0]
    d0, d1 = t.attrs
    A, R, B = _split(src.shape, d0, d1)
    if t.dtype == int64:  # the kernel accumulates in float64, inexact beyond 2**53
        return lambda out, x: np.sum(c_contiguous(x).reshape(A, R, B), axis=1, out=out.reshape(A,
                                                                                               B))

    kernel = K.sum_kernel(B)

    def fwd(out, x):
        kernel(c_contiguous(x).reshape(A, R, B), out.reshape(A, B))
    return fwd


def _sum_backward(t, g):
    src = t.srcs[0]
    d0, d1 = t.attrs
    kept = src.shape[:d0] + (1,) * (d1 - d0 + 1) + src.shape[d1 + 1:]
    return (g.reshape(kept).expand(src.shape),)


defop("sum_run", forward=_sum_forward, backward=_sum_backward)


def sum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None,
        keepdims: bool | None = None) -> Tensor:
    """Sum over ``dim`` (an int, a tuple, or None for all dimensions)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "bui" and input.dtype != int64:  # (PyTorch sums them as int64)
        input = input.to(int64)
    dims = _dims("sum", input, dim)
    r = input
    for d0, d1 in reversed(dim_runs(dims)):
        shape = r.shape[:d0] + (1,) * (d1 - d0 + 1) + r.shape[d1 + 1:]
        r = node("sum_run", (r,), shape, r.dtype, (d0, d1))
    if r is input:  # nothing summed (a 0-d tensor): a new tensor still, as torch's
        if input.dtype.kind in "fc":  # torch adds to a zero: -0.0 sums to 0.0
            return input + 0.0
        return node("contiguous", (input,), input.shape, input.dtype)
    shape = tuple(s for i, s in enumerate(input.shape) if i not in dims)
    if not keepdim and shape != r.shape:
        r = own_reshape(r, shape)
    return r


@in_float32
def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None,
         keepdims: bool | None = None) -> Tensor:
    """The mean over ``dim`` (all elements when None; a float dtype is required, or ``dtype``)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if dtype is not None:
        input = input.to(dtype)
    if not is_float(input.dtype):  # (torch's words)
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {scalar_type_name(input.dtype)}")
    dims = _dims("mean", input, dim)
    n = math.prod([input.shape[d] for d in dims])
    if n == 1:  # (x * 1.0 is x, bit for bit: the sum alone, two nodes fewer)
        return sum(input, dims, keepdim)
    return sum(input, dims, keepdim) * (1.0 / n if n else float("nan"))


@in_float32
def var(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction: float | None = None, keepdims: bool | None = None) -> Tensor:
    """Variance over ``dim`` with Bessel's ``correction`` (1 by default, as in PyTorch;
    ``unbiased=False`` is correction 0)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if not is_float(input.dtype):  # (torch's words, for std too)
        raise RuntimeError("std and var only support floating point and complex dtypes")
    if correction is None:
        correction = 0 if unbiased is False else 1
    dims = _dims("var", input, dim)
    n = math.prod([input.shape[d] for d in dims])
    centered = input - mean(input, dims, keepdim=True)
    scale = 1.0 / (n - correction) if n - correction > 0 else float("nan")
    return sum(centered * centered, dims, keepdim) * scale


@in_float32
def std(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
        correction: float | None = None, keepdims: bool | None = None) -> Tensor:
    """Standard deviation: the square root of ``var`` (same arguments)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


# ---- max / min ---------------------------------------------------------------------------------
def _extreme_forward(largest: bool, want_index: bool):
    def compile(t):
        src = t.srcs[0]
        d = t.attrs[0]
        A, R, B = _split(src.shape, d, d)
        scratch_v = np.empty((A, B), src.dtype)
        scratch_i = np.empty((A, B), np.int64)
        if want_index:
            return lambda out, x: K.extreme_axis(c_contiguous(x).reshape(A, R, B), scratch_v,
                                                 out.reshape(A, B), largest)
        return lambda out, x: K.extreme_axis(c_contiguous(x).reshape(A, R, B), out.reshape(A, B),
                                             scratch_i, largest)
    return compile


def _extreme_backward(t, g):
    x = t.srcs[0]
    idx = node(t.op.replace("vals", "idx"), (x,), t.shape, int64, t.attrs)
    return (node("scatter_run", (g, idx), x.shape, g.dtype, t.attrs),)


def _scatter_forward(t):
    d = t.attrs[0]
    A, R, B = _split(t.shape, d, d)
    return lambda out, g, idx: K.scatter_axis(c_contiguous(g).reshape(A, B),
                                              c_contiguous(idx).reshape(A, B),
                                              out.reshape(A, R, B))


defop("max_vals", forward=_extreme_forward(True, False), backward=_extreme_backward)
defop("min_vals", forward=_extreme_forward(False, False), backward=_extreme_backward)
defop("max_idx", forward=_extreme_forward(True, True))
defop("min_idx", forward=_extreme_forward(False, True))
defop("scatter_run", forward=_scatter_forward)


class MaxMin(tuple):
    """``(values, indices)`` as returned by ``max(dim)`` / ``min(dim)``."""

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def _no_reduction_dim(name: str) -> RuntimeError:
    return RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == "
                        f"0. Specify the reduction dim with the 'dim' argument.")


def _extreme(op: str, x: Tensor, dim, keepdim: bool, name: str | None = None):
    """``(values, indices)`` of max/min along ``dim`` (the value alone when None); ``name`` is
    the function the errors name (``argmax``...).  An empty tensor reduces along a non-empty
    dimension to empty results, as torch's."""
    x = as_tensor(x)
    name = name or op
    if dim is None:
        if x.numel() == 0:
            raise _no_reduction_dim(name)
        return node(f"{op}_all", (x,), (), x.dtype)
    if x.ndim == 0:  # one element along its only "dimension", as in torch
        _dims(name, x, dim)
        vals, idx = _extreme(op, x.reshape(1), 0, False)
        return MaxMin((vals.reshape(()), idx.reshape(())))
    (d,) = _dims(name, x, dim)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    shape = x.shape[:d] + (1,) + x.shape[d + 1:]
    vals = node(f"{op}_vals", (x,), shape, x.dtype, (d,))
    idx = node(f"{op}_idx", (x,), shape, int64, (d,))
    if not keepdim:
        shape = x.shape[:d] + x.shape[d + 1:]
        vals, idx = own_reshape(vals, shape), own_reshape(idx, shape)
    return MaxMin((vals, idx))


def _all_forward(largest: bool):
    def compile(t):
        n = t.srcs[0].numel()
        idx = np.empty((1, 1), np.int64)
        return lambda out, x: K.extreme_axis(c_contiguous(x).reshape(1, n, 1), out.reshape(1, 1),
                                             idx,
                                             largest)
    return compile


def _all_backward(t, g):
    """The gradient of a full max/min is shared evenly among the tied elements (PyTorch)."""
    x = t.srcs[0]
    mask = eq(x, t).to(x.dtype)
    return (mask * (g / sum(mask)),)


defop("max_all", forward=_all_forward(True), backward=_all_backward)
defop("min_all", forward=_all_forward(False), backward=_all_backward)


def max(input: Tensor, dim=None, keepdim: bool = False, *, keepdims: bool | None = None):
    """The largest element, ``(values, indices)`` along ``dim``, or with a tensor the
    elementwise maximum (``torch.max(a, b)``)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    return _extreme("max", input, dim, keepdim)


def min(input: Tensor, dim=None, keepdim: bool = False, *, keepdims: bool | None = None):
    """The smallest element, ``(values, indices)`` along ``dim``, or with a tensor the
    elementwise minimum."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    return _extreme("min", input, dim, keepdim)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False, *,
           keepdims: bool | None = None) -> Tensor:
    """The index of the largest element (of the flattened tensor when ``dim`` is None), int64; the
    first one among ties, and a NaN counts as the largest."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if input.dtype == np.bool_:
        raise RuntimeError("argmax(): does not support bool input")
    if dim is None:
        if input.numel() == 0:
            raise IndexError("argmax(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        return own_reshape(node("max_idx", (input.reshape(-1),), (1,), int64, (0,)), ())
    return _extreme("max", input, dim, keepdim, "argmax")[1]


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False, *,
           keepdims: bool | None = None) -> Tensor:
    """The index of the smallest element (of the flattened tensor when ``dim`` is None), int64; the
    first one among ties, and a NaN counts as the smallest."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if input.dtype == np.bool_:
        raise RuntimeError("argmin(): does not support bool input")
    if dim is None:
        if input.numel() == 0:
            raise IndexError("argmin(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        return own_reshape(node("min_idx", (input.reshape(-1),), (1,), int64, (0,)), ())
    return _extreme("min", input, dim, keepdim, "argmin")[1]


# ---- logsumexp / softmax -----------------------------------------------------------------------
def _axis_forward(kernel, keep_run: bool):
    def compile(t):
        src = t.srcs[0]
        d = t.attrs[0]
        A, R, B = _split(src.shape, d, d)
        if keep_run:
            return lambda out, x: kernel(c_contiguous(x).reshape(A, R, B), out.reshape(A, R, B))
        return lambda out, x: kernel(c_contiguous(x).reshape(A, R, B), out.reshape(A, B))
    return compile


def _axis_grad_forward(kernel):
    def compile(t):
        d = t.attrs[0]
        A, R, B = _split(t.shape, d, d)
        return lambda out, g, y: kernel(c_contiguous(g).reshape(A, R, B),
                                        c_contiguous(y).reshape(A, R, B),
                                        out.reshape(A, R, B))
    return compile


def _logsumexp_backward(t: Tensor, g: Tensor) -> tuple[Tensor]:
    """``g * exp(x - y)``, with ``y`` and ``g`` given back the reduced dim (of size 1) when the
    run dropped it (``keepdim=False``: the node has one dim fewer than ``x``)."""
    x = t.srcs[0]
    if t.ndim < x.ndim:
        d = t.attrs[0]
        kept = x.shape[:d] + (1,) + x.shape[d + 1:]
        t, g = own_reshape(t, kept), own_reshape(g, kept)
    return (g * (x - t).exp(),)


defop("logsumexp_run", forward=_axis_forward(K.logsumexp_axis, False),
      backward=_logsumexp_backward)
defop("softmax_run", forward=_axis_forward(K.softmax_axis, True),
      backward=lambda t, g: (node("softmax_grad", (g, t), t.shape, t.dtype, t.attrs),))
defop("log_softmax_run", forward=_axis_forward(K.log_softmax_axis, True),
      backward=lambda t, g: (node("log_softmax_grad", (g, t), t.shape, t.dtype, t.attrs),))
defop("softmax_grad", forward=_axis_grad_forward(K.softmax_axis_grad))
defop("log_softmax_grad", forward=_axis_grad_forward(K.log_softmax_axis_grad))


def logsumexp(input: Tensor, dim, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """``log(sum(exp(x), dim))``, computed without overflow (the maximum is subtracted first)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(input)
    if not is_float(input.dtype):  # integers and bools: float32, as torch's
        input = input.to(np.float32)
    dims = _dims("logsumexp", input, dim)
    if len(dims) != 1:
        flat = input.permute([d for d in range(input.ndim) if d not in dims] + list(dims))
        flat = flat.contiguous().reshape(flat.shape[:input.ndim - len(dims)] + (-1,))
        r = logsumexp(flat, -1, keepdim=False)
        if keepdim:
            r = r.reshape(tuple(1 if i in dims else s for i, s in enumerate(input.shape)))
        return r
    (d,) = dims  # (keepdim=False: the run's node is the result, as torch saves it)
    shape = input.shape[:d] + ((1,) if keepdim else ()) + input.shape[d + 1:]
    return node("logsumexp_run", (input,), shape, input.dtype, (d,))


def _normalized(op: str, x, dim: int, dtype) -> Tensor:
    """The ``op + "_run"`` node normalizing ``x`` along ``dim`` (softmax, log_softmax)."""
    x = as_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    require_float(op, x)
    if x.ndim == 0:  # a 0-d input is normalized as one of one element, as in PyTorch
        _dims(op, x, dim)
        return _normalized(op, x.reshape(1), 0, None).reshape(())
    (d,) = _dims(op, x, dim)
    return node(op + "_run", (x,), x.shape, x.dtype, (d,))


def softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    """``exp(x) / sum(exp(x), dim)`` along ``dim``, computed stably (the maximum is subtracted
    first)."""
    return _normalized("softmax", input, dim, dtype)


def log_softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    """``log(softmax(x, dim))``, computed stably: ``x - logsumexp(x, dim)``."""
    return _normalized("log_softmax", input, dim, dtype)




# ---- any / all -----------------------------------------------------------------------------------
def _logical_forward(ufunc):
    return lambda t: (lambda out, x: ufunc(x, axis=t.attrs[0], keepdims=t.attrs[1], out=out))


defop("any", forward=_logical_forward(np.any))
defop("all", forward=_logical_forward(np.all))


def _logical(op: str, x, dim, keepdim: bool) -> Tensor:
    x = as_tensor(x)
    dims = _dims(op, x, dim)
    shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape)) if keepdim else \
        tuple(s for i, s in enumerate(x.shape) if i not in dims)
    return node(op, (x,), shape, np.dtype(np.bool_), (dims, bool(keepdim)))


def any(input, dim=None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Whether any element (along ``dim``) is nonzero: a bool tensor."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    return _logical("any", input, dim, keepdim)


def all(input, dim=None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Whether every element (along ``dim``) is nonzero: a bool tensor."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    return _logical("all", input, dim, keepdim)


# ---- norms ---------------------------------------------------------------------------------------
def norm(input, p="fro", dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """``torch.norm``: the 2-norm (``"fro"``) or ``p``-norm of the elements over ``dim``
    (``distance.vector_norm``)."""
    from tinyopt.engine.ops.distance import vector_norm
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise NotImplementedError(f"norm(p={p!r}) is not supported (vector p-norms and 'fro')")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


# ---- products and scans --------------------------------------------------------------------------
def _exclusive_products(x: np.ndarray, axis: int) -> np.ndarray:
    """prod_{i != k} x_i along ``axis`` for every k, exactly (no division): the product of the
    elements before k times the product of those after."""
    n = x.shape[axis]
    ones = np.ones_like(np.take(x, [0], axis=axis))
    left = np.concatenate([ones, np.cumprod(np.take(x, range(n - 1), axis=axis), axis=axis)],
                          axis=axis)
    rev = np.flip(x, axis)
    right = np.flip(np.concatenate([ones, np.cumprod(np.take(rev, range(n - 1), axis=axis),
                                                     axis=axis)], axis=axis), axis)
    return left * right


def _prod_forward(t):
    d0, d1 = t.attrs
    A, R, B = _split(t.srcs[0].shape, d0, d1)
    return lambda out, x: np.prod(c_contiguous(x).reshape(A, R, B), axis=1, out=out.reshape(A, 1,
                                                                                            B),
                                  keepdims=True)


def _prod_grad_forward(t):
    d0, d1 = t.attrs
    A, R, B = _split(t.shape, d0, d1)

    def fwd(out, g, x):
        xs = c_contiguous(x).reshape(A, R, B)
        np.multiply(c_contiguous(g).reshape(A, 1, B), _exclusive_products(xs, 1),
                    out=out.reshape(A, R, B))
    return fwd


defop("prod_run", forward=_prod_forward,
      backward=lambda t, g: (node("prod_grad", (g, t.srcs[0]), t.srcs[0].shape, g.dtype,
                                  t.attrs),))
defop("prod_grad", forward=_prod_grad_forward)


def prod(input, dim=None, keepdim: bool = False, *, dtype=None,
         keepdims: bool | None = None) -> Tensor:
    """The product of the elements (over one ``dim`` if given); integers and bools give int64.
    The gradient is exact with zeros in the input (no division)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    input = as_tensor(autocast.fp32(input)[0])
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "bui" and input.dtype != int64:
        input = input.to(int64)
    if dim is None or (input.ndim == 0 and not _dims("prod", input, dim)):
        flat = input.reshape(-1)
        # (the run's node is the result, of the result's shape: torch saves it)
        return node("prod_run", (flat,), (1,) * input.ndim if keepdim else (), input.dtype,
                    (0, 0))
    (d,) = _dims("prod", input, dim)
    shape = input.shape[:d] + ((1,) if keepdim else ()) + input.shape[d + 1:]
    return node("prod_run", (input,), shape, input.dtype, (d, d))


def _scan_forward(ufunc):
    return lambda t: (lambda out, x: ufunc(x, axis=t.attrs[0], out=out))


def _cumsum_backward(t, g):
    """The reverse cumulative sum of ``g``."""
    d = t.attrs[0]
    return (node("cumsum_reverse", (g,), g.shape, g.dtype, (d,)),)


defop("cumsum", forward=_scan_forward(np.cumsum), backward=_cumsum_backward)
defop("cumsum_reverse", forward=lambda t: (lambda out, g: np.copyto(
    out, np.flip(np.cumsum(np.flip(g, t.attrs[0]), axis=t.attrs[0]), t.attrs[0]))))


def _cumprod_grad_forward(t):
    d = t.attrs[0]
    A, R, B = _split(t.shape, d, d)
    from tinyopt.kernels.scan import cumprod_grad
    return lambda out, g, x, y: cumprod_grad(c_contiguous(g).reshape(A, R, B),
                                             c_contiguous(x).reshape(A, R, B),
                                             c_contiguous(y).reshape(A, R, B), out.reshape(A, R, B))


defop("cumprod", forward=_scan_forward(np.cumprod),
      backward=lambda t, g: (node("cumprod_grad", (g, t.srcs[0], t), t.shape, g.dtype,
                                  t.attrs),))
defop("cumprod_grad", forward=_cumprod_grad_forward)


def _scan(op: str, x, dim: int, dtype) -> Tensor:
    x = as_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype.kind in "bui" and x.dtype != int64:
        x = x.to(int64)
    (d,) = _dims(op, x, dim) if x.ndim else (_dims(op, x, dim) or (0,))
    if x.ndim == 0:
        return node(op, (x.reshape(1),), (1,), x.dtype, (0,)).reshape(())
    return node(op, (x,), x.shape, x.dtype, (d,))


def cumsum(input, dim: int, *, dtype=None) -> Tensor:
    """Cumulative sums along ``dim``."""
    return _scan("cumsum", input, dim, dtype)


def cumprod(input, dim: int, *, dtype=None) -> Tensor:
    """Cumulative products along ``dim`` (exact gradient with zeros: ``kernels/scan.py``)."""
    return _scan("cumprod", input, dim, dtype)


@in_float32
def logcumsumexp(input, dim: int) -> Tensor:
    """log(cumsum(exp(x))) along ``dim``, computed without overflow: shifted by the largest
    finite element (0 if there is none), so that -inf adds nothing and +inf makes the rest
    +inf, as torch's (the shift's derivative cancels: it is held constant)."""
    input = as_tensor(input)
    require_float("logcumsumexp", input)
    if input.ndim == 0:  # one element along its only "dimension", as in torch
        _dims("logcumsumexp", input, dim)
        return logcumsumexp(input.reshape(1), 0).reshape(())
    finite = isfinite(input)
    m = max(where(finite, input, float("-inf")), dim, keepdim=True)[0].detach()
    m = where(isfinite(m), m, 0.0)
    return cumsum((input - m).exp(), dim).log() + m


# ---- amax / amin: the gradient shared by ties ----------------------------------------------------
def _shared_backward(t: Tensor, g: Tensor) -> tuple[Tensor, None]:
    """torch's gradient of a value the equal elements of ``x`` share (``amax``'s
    ``scale_grad_by_count``, ``median``'s ``evenly_distribute_backward``): ``g / count * mask``,
    ``mask`` where ``x`` equals the value (or both are NaN, with ``nan``), ``count`` its sum over
    the reduced dims."""
    x = t.srcs[0]
    dims, nan = t.attrs
    kept = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    v, g = own_reshape(t, kept), own_reshape(g, kept)
    hit = eq(x, v)
    if nan:
        hit = logical_or(hit, logical_and(isnan(x), isnan(v)))
    mask = hit.to(g.dtype)  # (eq has no gradient: the mask is a constant)
    return (g / sum(mask, dims, keepdim=True) * mask, None)


defop("shared_value", forward=lambda t: (lambda out, x, r: np.copyto(out, r.reshape(out.shape))),
      backward=_shared_backward)


def shared_value(x: Tensor, r: Tensor, dims: tuple[int, ...], shape: tuple[int, ...],
                 nan: bool = False) -> Tensor:
    """``r``, a value of ``x`` over ``dims`` (its extremes, its median), as a node of ``shape``
    whose gradient is shared evenly by the elements of ``x`` equal to it, as torch's, and which
    its backward reads (a write into it before backward raises torch's error)."""
    return node("shared_value", (x, r), shape, x.dtype, (dims, nan))


def _extreme_of(op: str, x, dim, keepdim: bool) -> Tensor:
    x = as_tensor(x)
    if x.numel() == 0 and (dim is None or isinstance(dim, (tuple, list)) and not dim):
        raise _no_reduction_dim(op)
    dims = _dims(op, x, dim)
    if not dims and x.ndim:
        dims = tuple(range(x.ndim))
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
    r = x
    for d in dims:
        r = (max if op == "amax" else min)(r, d, keepdim=True)[0]
    if r is x:  # (a 0-d tensor: nothing reduced, and torch's result is still a new tensor)
        return x.clone()
    shape = r.shape if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    if x.requires_grad:  # PyTorch: the gradient is shared evenly by the tied extremes
        return shared_value(x, r.detach(), dims, shape)
    return own_reshape(r, shape)


def amax(input, dim=(), keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """The largest values over ``dim`` (all dimensions by default); the gradient is split evenly
    among equal maxima."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    return _extreme_of("amax", input, dim, keepdim)


def amin(input, dim=(), keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """The smallest values over ``dim``; the gradient is split evenly among equal minima."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    return _extreme_of("amin", input, dim, keepdim)


def count_nonzero(input, dim=None) -> Tensor:
    """The number of nonzero elements, over ``dim`` (all dimensions when None), int64."""
    refuse_unsigned("nonzero_count_cpu", input)
    return sum(ne(as_tensor(input), 0), dim)
