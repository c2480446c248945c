"""Indexing: ``x[key]`` and ``x[key] = value``, with PyTorch's semantics and gradients.

A key is split as PyTorch applies it: its *basic* part (ints, slices, ``None``, ``...``) is a
view (``slice``), and its *advanced* part (integer index tensors, boolean masks) then gathers
from that view (``index``, a copy).  Integers select before advanced indexing, so
``x[0, :, idx]`` has the shape PyTorch gives (numpy would put ``idx``'s dimension first).

Offsets are run-time inputs, not part of the graph's structure: a slice's start and an integer
index enter as a small int64 tensor bound per run, and index tensors are sources, so
``data[i:i + bptt]``, ``h[:, t]`` or ``x[idx]`` with a new ``i``, ``t`` or ``idx`` every step reuse
one compiled plan.  Only lengths and steps are structural.  A boolean mask's ``True`` count sets
the result's shape, so a mask is computed when the indexing op is built and becomes index
tensors.

Gradients: a slice scatters its gradient into zeros of the source's shape; an advanced index
accumulates it (``np.add.at``, so repeated indices add up).  ``x[key] = v`` is an in-place op
(``Tensor._inplace`` rules): without autograd it writes into ``x``'s storage; with autograd ``x``
becomes a ``setitem`` node whose gradient is zero on the written region for ``x`` and the region's
gradient (summed over broadcast dimensions) for ``v``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine import grad_mode
from tinyopt.engine.dtypes import bool_, int64
from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import (Parameter, Tensor, _mark_mutated, _rebind, _writable,
                                   as_tensor, leaf)
from tinyopt.kernels.gather import index_add_axis


class _Key:
    """A parsed key: the basic part's structure and start offsets, the shape after it, and the
    advanced index tensors with their positions in that shape."""

    __slots__ = ("struct", "starts", "shape", "arrays", "positions", "identity")

    def __init__(self) -> None:
        self.struct: list[tuple] = []   # ("s", length, step) | ("i",) | ("n",)
        self.starts: list[int] = []
        self.shape: list[int] = []
        self.arrays: list[Tensor] = []
        self.positions: list[int] = []
        self.identity = True            # the basic part selects everything


def _index_tensor(k, what: str = "index") -> Tensor:
    if isinstance(k, Tensor):
        return k
    arr = np.asarray(k)
    if arr.dtype == np.float64 and arr.size == 0:
        arr = arr.astype(np.int64)  # an empty list selects nothing (not float indices)
    return leaf(arr)


def _parse(shape: tuple[int, ...], key) -> _Key:
    if not isinstance(key, tuple):
        key = (key,)
    entries: list = []
    used = 0
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice):
            entries.append(k)
            used += isinstance(k, slice)
        elif isinstance(k, (bool, np.bool_)):
            raise IndexError("indexing with a Python bool is not supported; use a bool tensor")
        elif isinstance(k, numbers.Integral):
            entries.append(int(k))
            used += 1
        elif isinstance(k, (Tensor, np.ndarray, list, tuple, range)):
            t = _index_tensor(k)
            if t.dtype == bool_ or t.dtype == np.uint8:
                entries.append(("mask", t))
                used += max(t.ndim, 1)
            elif t.dtype.kind in "iu":
                if t.ndim == 0 and t.op == "input":
                    entries.append(int(t._value))  # a concrete scalar index: basic indexing
                else:
                    entries.append(("array", t))
                used += 1
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte Variables are valid indices (got {type(k).__name__})")
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    if sum(k is Ellipsis for k in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    out = _Key()
    d = 0
    for k in entries:
        if k is None:
            out.struct.append(("n",))
            out.shape.append(1)
            out.identity = False
        elif k is Ellipsis:
            for _ in range(len(shape) - used):
                _full(out, shape[d])
                d += 1
        elif isinstance(k, slice):
            size = shape[d]
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, _ = slice(k.start, k.stop, step).indices(size)
            n = len(range(start, stop, step))
            out.struct.append(("s", n, step))
            out.starts.append(start if n else 0)
            out.shape.append(n)
            out.identity &= n == size and step == 1
            d += 1
        elif isinstance(k, int):
            size = shape[d]
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for dimension {d} with size {size}")
            out.struct.append(("i",))
            out.starts.append(k % size)
            out.identity = False
            d += 1
        elif k[0] == "array":
            out.positions.append(len(out.shape))
            out.arrays.append(k[1])
            _full(out, shape[d])
            d += 1
        else:  # a boolean mask over the next mask.ndim dimensions
            m = k[1]
            dims = shape[d:d + m.ndim]
            if m.shape != dims:
                j = next(i for i, (a, b) in enumerate(zip(m.shape, dims)) if a != b)
                raise IndexError(f"The shape of the mask {list(m.shape)} at index {j} does not "
                                 f"match the shape of the indexed tensor {list(shape)} at index "
                                 f"{d + j}")
            if m.ndim == 0:
                raise IndexError("indexing with a 0-d mask is not supported")
            for idx in np.nonzero(m.numpy()):
                out.positions.append(len(out.shape))
                out.arrays.append(leaf(idx.astype(np.int64)))
                _full(out, shape[d])
                d += 1
    for size in shape[d:]:  # the dimensions the key does not mention
        out.shape.append(size)
    return out


def _full(out: _Key, size: int) -> None:
    out.struct.append(("s", size, 1))
    out.starts.append(0)
    out.shape.append(size)


def _basic(struct: tuple, starts: np.ndarray) -> tuple:
    """The numpy key of a basic part from its structure and its run-time starts."""
    key = []
    j = 0
    for e in struct:
        if e[0] == "s":
            s = int(starts[j])
            j += 1
            key.append(slice(s, s + e[1] * e[2], e[2]))
        elif e[0] == "i":
            key.append(int(starts[j]))
            j += 1
        else:
            key.append(None)
    key.append(Ellipsis)  # so an all-integer key gives a 0-d view, not a numpy scalar
    return tuple(key)


def _advanced(positions: tuple[int, ...], arrays: list[np.ndarray]) -> tuple:
    key: list = [slice(None)] * (max(positions) + 1)
    for p, a in zip(positions, arrays):
        key[p] = a
    return tuple(key)


def _advanced_shape(shape: tuple[int, ...], positions: tuple[int, ...],
                    arrays: list[Tensor]) -> tuple[int, ...]:
    """numpy's rule: the index tensors' broadcast shape replaces their dimensions in place when
    they are adjacent, and goes first otherwise."""
    try:
        b = tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
    except ValueError:
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with "
                         f"shapes {', '.join(str(list(a.shape)) for a in arrays)}") from None
    rest = [s for i, s in enumerate(shape) if i not in positions]
    if list(positions) == list(range(positions[0], positions[-1] + 1)):
        p0 = positions[0]
        return tuple(rest[:p0]) + b + tuple(rest[p0:])
    return b + tuple(rest)


def _check_bounds(shape: tuple[int, ...], positions: tuple[int, ...],
                  arrays: list[Tensor]) -> None:
    for p, a in zip(positions, arrays):
        if a.op == "input" and a._value.size:
            v = a._value
            lo, hi = int(v.min()), int(v.max())
            if lo < -shape[p] or hi >= shape[p]:
                bad = hi if hi >= shape[p] else lo
                raise IndexError(f"index {bad} is out of bounds for dimension {p} with size "
                                 f"{shape[p]}")


# ---- ops -----------------------------------------------------------------------------------------
def _slice_view(t):
    struct = t.attrs[0]
    return lambda x, st: x[_basic(struct, st)]


def _slice_grad_forward(t):
    struct = t.attrs[0]

    def fwd(out, g, st):
        out[...] = 0
        out[_basic(struct, st)] = g
    return fwd


defop("slice", view=_slice_view,
      backward=lambda t, g: (node("slice_grad", (g, t.srcs[1]), t.srcs[0].shape, g.dtype,
                                  t.attrs), None))
defop("slice_grad", forward=_slice_grad_forward)


def _index_forward(t):
    positions = t.attrs[0]
    if len(positions) == 1:
        axis = positions[0]
        return lambda out, x, idx: np.take(x, idx, axis=axis, out=out)
    return lambda out, x, *idx: np.copyto(out, x[_advanced(positions, idx)])


def _index_grad_forward(t):
    positions = t.attrs[0]
    if len(positions) == 1 and len(t.srcs) == 2 and t.srcs[1].ndim == 1:  # x[idx] along one axis
        d = positions[0]
        A, R, B = math.prod(t.shape[:d]), t.shape[d], math.prod(t.shape[d + 1:])
        bad = np.empty(1, np.int64)

        def add_rows(out, g, idx):
            out[...] = 0
            K = idx.shape[0]
            index_add_axis(np.ascontiguousarray(g).reshape(A, K, B), idx, out.reshape(A, R, B),
                           bad)
            if bad[0] >= 0:
                raise IndexError(f"index {int(idx[bad[0]])} is out of bounds for dimension {d} "
                                 f"with size {R}")
        return add_rows

    def fwd(out, g, *idx):
        out[...] = 0
        np.add.at(out, _advanced(positions, idx), g)
    return fwd


defop("index", forward=_index_forward,
      backward=lambda t, g: (node("index_grad", (g,) + t.srcs[1:], t.srcs[0].shape, g.dtype,
                                  t.attrs),) + (None,) * (len(t.srcs) - 1))
defop("index_grad", forward=_index_grad_forward)


def _region(x: Tensor, k: _Key) -> Tensor:
    """``x`` indexed by the parsed key ``k``."""
    if not k.identity:
        x = node("slice", (x, leaf(np.array(k.starts, dtype=int64))), tuple(k.shape), x.dtype,
                 (tuple(k.struct),))
    if k.arrays:
        positions = tuple(k.positions)
        _check_bounds(x.shape, positions, k.arrays)
        arrays = [a if a.dtype == int64 else a.to(int64) for a in k.arrays]
        x = node("index", (x, *arrays), _advanced_shape(x.shape, positions, arrays), x.dtype,
                 (positions,))
    return x


def getitem(x, key) -> Tensor:
    """``x[key]`` (see the module docstring)."""
    x = as_tensor(x)
    if x.ndim == 0:
        keys = key if isinstance(key, tuple) else (key,)
        if not all(k is None or k is Ellipsis or isinstance(k, Tensor) and k.dtype == bool_
                   for k in keys):
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
    return _region(x, _parse(x.shape, key))


# ---- x[key] = value ------------------------------------------------------------------------------
def _setitem_forward(t):
    struct, positions = t.attrs

    def fwd(out, x, v, st, *idx):
        np.copyto(out, x)
        region = out[_basic(struct, st)]
        if positions:
            region[_advanced(positions, idx)] = v
        else:
            region[...] = v
    return fwd


def _setitem_grad_x_forward(t):
    struct, positions = t.attrs

    def fwd(out, g, st, *idx):
        np.copyto(out, g)
        region = out[_basic(struct, st)]
        if positions:
            region[_advanced(positions, idx)] = 0
        else:
            region[...] = 0
    return fwd


def _setitem_backward(t, g):
    x, v, st, *idx = t.srcs
    struct, positions = t.attrs
    gx = node("setitem_grad_x", (g, st, *idx), x.shape, g.dtype, t.attrs) \
        if x.requires_grad else None
    gv = None
    if v.requires_grad:
        from tinyopt.engine.ops.elementwise import sum_to
        r = node("slice", (g, st), _sliced_shape(x.shape, struct), g.dtype, (struct,))
        if positions:
            r = node("index", (r, *idx), _advanced_shape(r.shape, positions, list(idx)), g.dtype,
                     (positions,))
        gv = sum_to(r, v.shape)
    return (gx, gv, None) + (None,) * len(idx)


def _sliced_shape(shape: tuple[int, ...], struct: tuple) -> tuple[int, ...]:
    out, d = [], 0
    for e in struct:
        if e[0] == "s":
            out.append(e[1])
            d += 1
        elif e[0] == "i":
            d += 1
        else:
            out.append(1)
    return tuple(out) + tuple(shape[d:])


defop("setitem", forward=_setitem_forward, backward=_setitem_backward)
defop("setitem_grad_x", forward=_setitem_grad_x_forward)


def setitem(x: Tensor, key, value) -> Tensor:
    """``x[key] = value`` in place (see the module docstring); returns ``x``."""
    if not isinstance(x, Tensor):
        raise TypeError("setitem: expected a Tensor")
    v = value if isinstance(value, Tensor) else None
    grad_on = grad_mode.is_grad_enabled()
    if grad_on and x.requires_grad and x.op in ("param", "input"):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    k = _parse(x.shape, key)
    region_shape = _advanced_shape(tuple(k.shape), tuple(k.positions), k.arrays) \
        if k.arrays else tuple(k.shape)
    if v is not None:
        try:
            np.broadcast_shapes(v.shape, region_shape)
        except ValueError:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be "
                               f"broadcast to indexing result of shape "
                               f"{list(region_shape)}") from None
    if grad_on and (x.requires_grad or (v is not None and v.requires_grad)):
        return _setitem_graph(x, k, value)
    target = _writable(x)
    region = target[_basic(tuple(k.struct), np.array(k.starts, dtype=np.int64))] \
        if not k.identity else target
    values = v.numpy() if v is not None else np.asarray(value)
    if k.arrays:
        _check_bounds(region.shape, tuple(k.positions), k.arrays)
        region[_advanced(tuple(k.positions), [a.numpy() for a in k.arrays])] = values
    else:
        np.copyto(region, values, casting="unsafe")
    _mark_mutated(x)
    return x


def _setitem_graph(x: Tensor, k: _Key, value) -> Tensor:
    if isinstance(x, Parameter):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    positions = tuple(k.positions)
    if k.arrays:
        _check_bounds(tuple(k.shape), positions, k.arrays)
    arrays = [a if a.dtype == int64 else a.to(int64) for a in k.arrays]
    st = leaf(np.array(k.starts, dtype=int64))
    attrs = (tuple(k.struct), positions)

    def build(old: Tensor) -> Tensor:
        v = as_tensor(value).to(old.dtype) if isinstance(value, Tensor) else \
            leaf(np.asarray(value, dtype=old.dtype))
        return node("setitem", (old, v, st, *arrays), old.shape, old.dtype, attrs)
    return _rebind(x, build, check_cast=False)


def masked_fill(x, mask, value) -> Tensor:
    """``x`` with ``value`` (a number or a 0-d tensor) where the bool ``mask`` (broadcast to
    ``x``'s shape) is true."""
    from tinyopt.engine.ops.elementwise import broadcast_shape, where
    x = as_tensor(x)
    m = as_tensor(mask)
    if m.dtype != bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{m.dtype}")
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    if broadcast_shape("masked_fill", x.shape, m.shape) != x.shape:
        raise RuntimeError(f"The size of the mask {list(m.shape)} must match the size of the "
                           f"tensor {list(x.shape)} it fills")
    v = value.to(x.dtype) if isinstance(value, Tensor) else leaf(np.asarray(value, x.dtype))
    return where(m, v, x)
