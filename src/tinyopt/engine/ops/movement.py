"""Shape and movement ops: reshape, transpose/permute, expand, indexing and slicing, cat/stack.

Most are views: the planner gives them no buffer, they share their source's storage.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.dtypes import FLOATS
from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import Tensor, as_tensor


def _dim(op: str, d: int, ndim: int) -> int:
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {d})")
    return d % max(ndim, 1)


# ---- reshape -----------------------------------------------------------------------------------
defop("reshape", view=lambda t: (lambda x: x.reshape(t.shape)),
      backward=lambda t, g: (g.reshape(t.srcs[0].shape),))


def reshape(x: Tensor, *shape) -> Tensor:
    """``x`` with a new shape of the same number of elements (one dimension may be -1)."""
    x = as_tensor(x)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    n = x.numel()
    if shape.count(-1) > 1:
        raise RuntimeError("reshape: only one dimension can be inferred")
    if -1 in shape:
        known = math.prod([s for s in shape if s != -1])
        if known == 0 or n % known:
            raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {n}")
        shape = tuple(n // known if s == -1 else s for s in shape)
    if math.prod(shape) != n:
        raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                           f"(input shape {x.shape})")
    if shape == x.shape:
        return x
    if x.op == "input" and x._value is not None:  # a reshaped batch (nn.Flatten): a new leaf
        return Tensor("input", (), (), shape, x.dtype, value=x._value.reshape(shape))
    return node("reshape", (x,), shape, x.dtype, (shape,))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = _dim("flatten", start_dim, x.ndim), _dim("flatten", end_dim, x.ndim)
    if s > e:
        raise RuntimeError("flatten: start_dim cannot come after end_dim")
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),)
                   + x.shape[e + 1:])


def squeeze(x: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    x = as_tensor(x)
    if dim is None:
        dims = {i for i, s in enumerate(x.shape) if s == 1}
    else:
        dims = {_dim("squeeze", d, x.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
        dims = {d for d in dims if x.shape[d] == 1}
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in dims))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    x = as_tensor(x)
    d = _dim("unsqueeze", dim, x.ndim + 1)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


# ---- permute -----------------------------------------------------------------------------------
def _permute_backward(t, g):
    return (permute(g, tuple(int(i) for i in np.argsort(t.attrs[0]))),)


defop("permute", view=lambda t: (lambda x: x.transpose(t.attrs[0])), backward=_permute_backward)


def permute(x: Tensor, *dims) -> Tensor:
    x = as_tensor(x)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if len(dims) != x.ndim:
        raise RuntimeError(f"permute: number of dims {len(dims)} does not match the input's "
                           f"{x.ndim} (shape {x.shape})")
    dims = tuple(_dim("permute", d, x.ndim) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: dims {dims} are not a permutation of the input dims")
    if dims == tuple(range(x.ndim)):
        return x
    return node("permute", (x,), tuple(x.shape[d] for d in dims), x.dtype, (dims,))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    x = as_tensor(x)
    d0, d1 = _dim("transpose", dim0, x.ndim), _dim("transpose", dim1, x.ndim)
    if x.ndim == 0:  # dims 0 and -1 name the 0-d tensor itself, as in PyTorch
        return x
    dims = list(range(x.ndim))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(x, tuple(dims))


def t(x: Tensor) -> Tensor:
    """The transpose of a matrix; 0-D and 1-D tensors are returned as is (``Tensor.t``)."""
    x = as_tensor(x)
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return transpose(x, 0, 1) if x.ndim == 2 else x


# ---- expand ------------------------------------------------------------------------------------
def _expand_backward(t, g):
    from tinyopt.engine.ops.elementwise import sum_to
    return (sum_to(g, t.srcs[0].shape),)


defop("expand", view=lambda t: (lambda x: np.broadcast_to(x, t.shape)), backward=_expand_backward)


def expand(x: Tensor, *shape) -> Tensor:
    x = as_tensor(x)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    lead = len(shape) - x.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({x.ndim})")
    full = []
    for i, s in enumerate(shape):
        src = x.shape[i - lead] if i >= lead else 1
        s = src if s == -1 else int(s)
        if src != s and src != 1:
            raise RuntimeError(f"expand: the expanded size of the tensor ({s}) must match the "
                               f"existing size ({src}) at non-singleton dimension {i}; target "
                               f"sizes {list(shape)}, tensor sizes {list(x.shape)}")
        full.append(s)
    full = tuple(full)
    if full == x.shape:
        return x
    return node("expand", (x,), full, x.dtype, (full,))


# ---- indexing ----------------------------------------------------------------------------------
def _key_to_attr(key):
    return tuple(("s", k.start, k.stop, k.step) if isinstance(k, slice) else
                 ("e",) if k is Ellipsis else ("n",) if k is None else ("i", k) for k in key)


def _attr_to_key(attr):
    out = []
    for a in attr:
        out.append(slice(a[1], a[2], a[3]) if a[0] == "s" else Ellipsis if a[0] == "e" else
                   None if a[0] == "n" else a[1])
    return tuple(out)


def _getitem_backward(t, g):
    return (node("getitem_grad", (g,), t.srcs[0].shape, g.dtype, t.attrs),)


def _getitem_grad_forward(t):
    key = _attr_to_key(t.attrs[0])

    def fwd(out, g):
        out[...] = 0
        out[key] = g
    return fwd


defop("getitem", view=lambda t: (lambda x, key=_attr_to_key(t.attrs[0]): x[key]),
      backward=_getitem_backward)
defop("getitem_grad", forward=_getitem_grad_forward,
      backward=lambda t, g: (node("getitem", (g,), t.srcs[0].shape, g.dtype, t.attrs),))


def _take_backward(t, g):
    x, idx = t.srcs
    return node("take_grad", (g, idx), x.shape, g.dtype), None


def _take_grad_forward(t):
    def fwd(out, g, idx):
        out[...] = 0
        np.add.at(out, idx, g)
    return fwd


defop("take", forward=lambda t: (lambda out, x, idx: np.take(x, idx, axis=0, out=out)),
      backward=_take_backward)
defop("take_grad", forward=_take_grad_forward)


def getitem(x: Tensor, key) -> Tensor:
    """Basic indexing and slicing (ints, slices, None, ...) as a view; an integer array or
    int64 tensor selects rows along dimension 0."""
    x = as_tensor(x)
    if isinstance(key, (Tensor, np.ndarray, list)):
        if isinstance(key, list):  # an empty list selects no rows (not float64 indices)
            key = np.asarray(key, dtype=np.int64 if not key else None)
        idx = as_tensor(key)
        if idx.dtype != np.int64:
            raise IndexError(f"tensors used as indices must be int64, got {idx.dtype}")
        if idx.is_leaf and idx._value is not None and idx._value.size:
            v = idx._value
            if v.min() < -x.shape[0] or v.max() >= x.shape[0]:
                raise IndexError(f"index {int(v.max() if v.max() >= x.shape[0] else v.min())} is "
                                 f"out of bounds for dimension 0 with size {x.shape[0]}")
        return node("take", (x, idx), idx.shape + x.shape[1:], x.dtype)
    if not isinstance(key, tuple):
        key = (key,)
    for k in key:
        if not (isinstance(k, (slice, numbers.Integral)) or k is None or k is Ellipsis):
            raise IndexError(f"unsupported index {k!r}: use ints, slices, None, Ellipsis, or one "
                             f"integer array")
    key = tuple(int(k) if isinstance(k, numbers.Integral) else k for k in key)
    try:
        shape = np.empty(x.shape, dtype=np.bool_)[key].shape if x.numel() < 1 << 20 else \
            np.broadcast_to(np.empty((), np.bool_), x.shape)[key].shape
    except IndexError as e:
        raise IndexError(f"index {key} for a tensor of shape {x.shape}: {e}") from None
    return node("getitem", (x,), shape, x.dtype, (_key_to_attr(key),))


# ---- cat / stack -------------------------------------------------------------------------------
def _cat_backward(t, g):
    dim = t.attrs[0]
    grads, start = [], 0
    for s in t.srcs:
        key = (slice(None),) * dim + (slice(start, start + s.shape[dim]),)
        grads.append(getitem(g, key))
        start += s.shape[dim]
    return tuple(grads)


defop("cat", forward=lambda t: (lambda out, *xs: np.concatenate(xs, axis=t.attrs[0], out=out)),
      backward=_cat_backward)


def cat(tensors, dim: int = 0) -> Tensor:
    ts = [as_tensor(x) for x in tensors]
    if not ts:
        raise RuntimeError("cat: expected a non-empty list of tensors")
    d = _dim("cat", dim, ts[0].ndim)
    ref = ts[0]
    for k, x in enumerate(ts):
        if x.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, ref.shape))
                                     if i != d):
            raise RuntimeError(f"cat: sizes of tensors must match except in dimension {d}; "
                               f"tensor 0 has shape {ref.shape}, tensor {k} has shape {x.shape}")
    # PyTorch's type promotion: any float makes a float result, the widest float wins.
    floats = {x.dtype for x in ts if x.dtype in FLOATS}
    dtype = np.result_type(*floats) if floats else ref.dtype
    ts = [x.to(dtype) for x in ts]
    shape = ref.shape[:d] + (sum(x.shape[d] for x in ts),) + ref.shape[d + 1:]
    return node("cat", tuple(ts), shape, dtype, (d,))


def stack(tensors, dim: int = 0) -> Tensor:
    ts = [as_tensor(x) for x in tensors]
    if not ts:
        raise RuntimeError("stack: expected a non-empty list of tensors")
    for k, x in enumerate(ts):
        if x.shape != ts[0].shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, but got "
                               f"{ts[0].shape} at entry 0 and {x.shape} at entry {k}")
    d = _dim("stack", dim, ts[0].ndim + 1)
    return cat([unsqueeze(x, d) for x in ts], d)


defop("contiguous", forward=lambda t: (lambda out, x: np.copyto(out, x)),
      backward=lambda t, g: (g,))


def contiguous(x: Tensor) -> Tensor:
    x = as_tensor(x)
    return node("contiguous", (x,), x.shape, x.dtype)
