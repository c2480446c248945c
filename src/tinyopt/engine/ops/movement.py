"""Shape and movement ops: reshape, transpose/permute, expand, indexing and slicing, cat/stack.

Most are views: the planner gives them no buffer, they share their source's storage.
"""

from __future__ import annotations

import math

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
    return node("reshape", (x,), shape, x.dtype, (shape,))


def view(x: Tensor, *shape) -> Tensor:
    """``reshape`` that never copies: a concrete tensor whose memory layout cannot be viewed
    with the new shape (after a transpose, say) raises, as in PyTorch."""
    x = as_tensor(x)
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)) and shape[0] is not None:
        raise NotImplementedError("view(dtype) (reinterpreting the bytes) is not supported")
    if x.op == "input" and not x._value.flags.c_contiguous:
        try:
            np.reshape(x._value, _target_shape(x, shape), copy=False)
        except ValueError:
            raise RuntimeError("view size is not compatible with input tensor's size and stride "
                               "(at least one dimension spans across two contiguous subspaces). "
                               "Use .reshape(...) instead.") from None
    return reshape(x, *shape)


def _target_shape(x: Tensor, shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if -1 in shape:
        known = math.prod([s for s in shape if s != -1])
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    return shape


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


# ---- cat / stack -------------------------------------------------------------------------------
def _cat_backward(t, g):
    from tinyopt.engine.ops.indexing import getitem
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
