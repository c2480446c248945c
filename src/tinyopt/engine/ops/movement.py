"""Shape and movement ops: reshape, transpose/permute, expand, indexing and slicing, cat/stack.

Most are views: the planner gives them no buffer, they share their source's storage.
"""

from __future__ import annotations

import math
import numbers
from contextlib import nullcontext

import numpy as np

from tinyopt.engine.dtypes import result_type
from tinyopt.engine import grad_mode
from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.inplace import geometry, stand_in
from tinyopt.engine.op import OPS, defop, node, own_reshape, view_array, view_node
from tinyopt.engine.storage import MULTI, ViewStep, storage_of
from tinyopt.engine.ops.elementwise import broadcast_shape, sum_to, where
from tinyopt.engine.ops.family import wrap_dim
from tinyopt.engine.tensor import Size, Tensor, as_tensor, int_shape, leaf


def _same(x: Tensor) -> Tensor:
    """A view of all of ``x``, for a view op that changes nothing: torch makes a view even
    then (``x.reshape(x.shape)._base is x``), so writing it, or changing its shape in place,
    acts as through any other view (a multi-output view whose base was written since cannot
    give one: it raises at once)."""
    return node("reshape", (x,), x.shape, x.dtype, (x.shape,))


# ---- reshape -----------------------------------------------------------------------------------
defop("reshape", view=lambda t: (lambda x: x.reshape(t.shape)), aliases=True,
      backward=lambda t, g: (g.reshape(t.srcs[0].shape),))


def reshape(input: Tensor, *shape) -> Tensor:
    """``x`` with a new shape of the same number of elements (one dimension may be -1)."""
    input = as_tensor(input)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    n = input.numel()
    if shape.count(-1) > 1:
        raise RuntimeError("reshape: only one dimension can be inferred")
    if -1 in shape:
        known = math.prod([s for s in shape if s != -1])
        if known == 0 or n % known:
            raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {n}")
        shape = tuple(n // known if s == -1 else s for s in shape)
    if math.prod(shape) != n:
        raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {n} "
                           f"(input shape {input.shape})")
    if shape == input.shape:
        return _same(input)
    if getattr(input, "view_info", None) is not None and not _viewable(input, shape):
        input = contiguous(input)  # torch's reshape copies exactly where view would raise
    return node("reshape", (input,), shape, input.dtype, (shape,))


def view(x: Tensor, *shape) -> Tensor:
    """``reshape`` that never copies: a concrete tensor whose memory layout cannot be viewed
    with the new shape (after a transpose, say) raises, as in PyTorch."""
    x = as_tensor(x)
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)) and shape[0] is not None:
        raise NotImplementedError("view(dtype) (reinterpreting the bytes) is not supported")
    target = _target_shape(x, shape)
    if not _viewable(x, target):
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    if target == x.shape or (math.prod(target) == x.numel() and min(target, default=0) >= 0):
        # (a new view even of the same shape, as torch's; checked viewable: no second check)
        return node("reshape", (x,), target, x.dtype, (target,))
    return reshape(x, *shape)  # (its errors)


def _viewable(x: Tensor, shape: tuple[int, ...]) -> bool:
    """Whether ``x``'s memory (its view's geometry in its base, as torch's strides) can be seen
    with ``shape`` without a copy."""
    info = getattr(x, "view_info", None)
    if info is None:
        if x.op not in ("input", "freed"):
            return True  # a node's own buffer is contiguous
        if x.value.flags.c_contiguous:
            return True
    elif all(s.op == "reshape" for s in info.steps):
        base = x._base
        if base.op not in ("input", "freed") or base.value.flags.c_contiguous:
            return True  # reshapes of contiguous memory are contiguous (autodiff makes many)
    if [n for n in shape if n != 1] == [n for n in x.shape if n != 1]:
        return True  # only size-1 dimensions added or removed: any layout is seen so
    shp, strides, _ = geometry(x)
    try:
        np.reshape(stand_in(shp, strides, x.dtype), shape, copy=False)
    except ValueError:
        return False
    return True


def _target_shape(x: Tensor, shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = int_shape(shape)  # (not a generator: ~1.2 us that way, a CRF sentence views ~90 times)
    if -1 in shape:
        known = math.prod([s for s in shape if s != -1])
        n = x.numel() // known
        shape = tuple([n if s == -1 else s for s in shape])
    return shape


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim`` to ``end_dim`` into one (a view where possible)."""
    input = as_tensor(input)
    shape = input.shape
    nd = len(shape)
    if nd and -nd <= start_dim < nd and -nd <= end_dim < nd:  # (the checks of _dim, inline)
        s, e = start_dim % nd, end_dim % nd
    else:
        s, e = wrap_dim("flatten", start_dim, nd), wrap_dim("flatten", end_dim, nd)
    if nd == 0:
        return reshape(input, (1,))
    if s > e:
        raise RuntimeError("flatten: start_dim cannot come after end_dim")
    if s == e:  # (torch's: the input itself, not a view of it)
        return input
    new = shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]
    if getattr(input, "view_info", None) is not None and not _viewable(input, new):
        input = contiguous(input)  # (as reshape: a copy where a view cannot be made)
    # (reshape's checks hold by construction)
    return node("reshape", (input,), new, input.dtype, (new,))


def squeeze(input: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """``x`` without its dimensions of size 1 (only those of ``dim`` when given)."""
    input = as_tensor(input)
    if dim is None:
        dims = {i for i, s in enumerate(input.shape) if s == 1}
    else:
        dims = {wrap_dim("squeeze", d, input.ndim)
                for d in ((dim,) if isinstance(dim, int) else dim)}
        dims = {d for d in dims if d < input.ndim and input.shape[d] == 1}  # (0-d: none)
    if input.numel() == 0 and dims:  # (indexing keeps torch's strides there: a reshape's differ)
        for d in sorted(dims, reverse=True):
            input = select(input, d, 0)
        return input
    return reshape(input, tuple(s for i, s in enumerate(input.shape) if i not in dims))


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """``x`` with a dimension of size 1 inserted at ``dim``."""
    input = as_tensor(input)
    d = wrap_dim("unsqueeze", dim, input.ndim + 1)
    if input.numel() == 0:  # (indexing's None gives torch's stride there: a reshape's differs)
        return _along(input, d, None)
    return reshape(input, input.shape[:d] + (1,) + input.shape[d:])


# ---- permute -----------------------------------------------------------------------------------
def _permute_backward(t, g):
    return (permute(g, tuple(int(i) for i in np.argsort(t.attrs[0]))),)


defop("permute", view=lambda t: (lambda x: x.transpose(t.attrs[0])), backward=_permute_backward,
      aliases=True)


def permute(input: Tensor, *dims) -> Tensor:
    """``x`` with its dimensions reordered as ``dims`` (a view)."""
    input = as_tensor(input)
    if not dims:
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if len(dims) != input.ndim:  # (torch's words, sparse_coo included)
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {input.ndim} is not equal to len(dims) = {len(dims)}")
    dims = tuple(wrap_dim("permute", d, input.ndim) for d in dims)
    if sorted(dims) != list(range(input.ndim)):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    if dims == tuple(range(input.ndim)):
        return _same(input)
    return node("permute", (input,), tuple(input.shape[d] for d in dims), input.dtype, (dims,))


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped (a view)."""
    input = as_tensor(input)
    d0, d1 = wrap_dim("transpose", dim0, input.ndim), wrap_dim("transpose", dim1, input.ndim)
    if input.ndim == 0:  # dims 0 and -1 name the 0-d tensor itself, as in PyTorch
        return _same(input)
    dims = list(range(input.ndim))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(input, tuple(dims))


def t(input: Tensor) -> Tensor:
    """The transpose of a matrix; 0-D and 1-D tensors are returned as is (``Tensor.t``)."""
    input = as_tensor(input)
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else _same(input)


# ---- expand ------------------------------------------------------------------------------------
def _expand_backward(t, g):
    return (sum_to(g, t.srcs[0].shape),)


def _expand_view(t):
    def view(x):  # (writable, unlike np.broadcast_to: a write through a view of it may be legal)
        lead = len(t.shape) - x.ndim
        strides = (0,) * lead + tuple(0 if n == 1 and m != 1 else s for n, m, s in
                                      zip(x.shape, t.shape[lead:], x.strides))
        return np.lib.stride_tricks.as_strided(x, t.shape, strides)
    return view


defop("expand", view=_expand_view, backward=_expand_backward, aliases=True)


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
        return _same(x)
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
    """Concatenate ``tensors`` along ``dim`` (dtypes promoted as PyTorch does; every other
    dimension must match); ``concat`` and ``concatenate`` are the same."""
    ts = [as_tensor(x) for x in tensors]
    if not ts:
        raise RuntimeError("cat: expected a non-empty list of tensors")
    for k, x in enumerate(ts):
        if x.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {k}) cannot be "
                               f"concatenated")
    d = wrap_dim("cat", dim, ts[0].ndim)
    ref = ts[0]
    for k, x in enumerate(ts):
        if x.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, ref.shape))
                                     if i != d):
            raise RuntimeError(f"cat: sizes of tensors must match except in dimension {d}; "
                               f"tensor 0 has shape {ref.shape}, tensor {k} has shape {x.shape}")
    dtype = result_type(*ts)  # PyTorch's type promotion
    ts = [x.to(dtype) for x in ts]
    shape = ref.shape[:d] + (sum(x.shape[d] for x in ts),) + ref.shape[d + 1:]
    return node("cat", tuple(ts), shape, dtype, (d,))


def stack(tensors, dim: int = 0) -> Tensor:
    """Join equally shaped ``tensors`` along a new dimension ``dim``."""
    ts = [as_tensor(x) for x in tensors]
    if not ts:
        raise RuntimeError("stack: expected a non-empty list of tensors")
    for k, x in enumerate(ts):
        if x.shape != ts[0].shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, but got "
                               f"{ts[0].shape} at entry 0 and {x.shape} at entry {k}")
    d = wrap_dim("stack", dim, ts[0].ndim + 1)
    shape = ts[0].shape[:d] + (1,) + ts[0].shape[d:]
    return cat([_unsqueezed(x, shape) for x in ts], d)


def _unsqueezed(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x`` reshaped to ``shape`` for ``stack``'s ``cat`` alone: not recorded as a view of
    ``x`` (no write can reach a tensor the program never sees; a write into ``x`` after the
    stack leaves what ``cat`` read alone either way), which saves a storage record an input."""
    if x.op == "rebased_multi_view":  # (its error, as a recorded view raises it)
        return reshape(x, shape)
    return view_node(ViewStep("reshape", (shape,), shape, x.dtype, ()), x)


defop("contiguous", forward=lambda t: (lambda out, x: np.copyto(out, x)),
      backward=lambda t, g: (g,))


def contiguous(x: Tensor) -> Tensor:
    x = as_tensor(x)
    return node("contiguous", (x,), x.shape, x.dtype)


# ---- views by position: narrow, select, split, chunk, unbind ------------------------------------
def _along(x: Tensor, dim: int, key) -> Tensor:
    from tinyopt.engine.ops.indexing import getitem
    return getitem(x, (slice(None),) * dim + (key,))


def narrow(input, dim: int, start: int, length: int) -> Tensor:
    """The view ``x[..., start:start + length, ...]`` along ``dim``."""
    input = as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = wrap_dim("narrow", dim, input.ndim)
    start = int(start)
    size = input.shape[d]
    if start < 0:
        start += size
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return _along(input, d, slice(start, start + int(length)))


def select(input, dim: int, index: int) -> Tensor:
    """The view of ``x`` at ``index`` along ``dim`` (that dimension removed)."""
    input = as_tensor(input)
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    return _along(input, wrap_dim("select", dim, input.ndim), int(index))


def split(tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Views of consecutive pieces along ``dim``: of ``split_size`` each (the last may be
    smaller), or of the sizes in a list."""
    x = as_tensor(tensor)
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap_dim("split", dim, x.ndim)
    size = x.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and size:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {size}")
        # (an empty dim is one empty piece, as torch's)
        sizes = [min(step, size - i) for i in range(0, size, step)] if step and size else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sizes}")
    return _multi(_pieces(x, d, sizes),
                  "Split" if isinstance(split_size_or_sections, int) else "SplitWithSizes")


def _pieces(x: Tensor, d: int, sizes: list[int]) -> list[Tensor]:
    """The views of consecutive pieces of ``sizes`` along ``d`` (a piece that is all of ``x``
    is a new view of it too)."""
    out, start = [], 0
    for n in sizes:
        piece = _along(x, d, slice(start, start + n))
        out.append(view(x, x.shape) if piece is x else piece)
        start += n
    return out


def _multi(views: list[Tensor], name: str) -> tuple[Tensor, ...]:
    """Mark ``views`` as the outputs of multi-output function ``name`` (torch forbids writing
    them in place with autograd: ``engine/inplace.py``)."""
    for i, v in enumerate(views):
        info = getattr(v, "view_info", None)
        if info is not None:
            v.view_info = info._replace(creation=MULTI, name=f"Output {i} of {name}")
    return tuple(views)


def chunk(input, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most ``chunks`` views along ``dim``, each of ceil(size / chunks) (PyTorch's rule)."""
    input = as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: " + str(chunks))
    size = input.shape[wrap_dim("chunk", dim, input.ndim)]
    if not size:  # (torch's: ``chunks`` empty pieces)
        return split(input, [0] * chunks, dim)
    return split(input, max(1, -(-size // chunks)), dim)


def tensor_split(input, indices_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """``torch.tensor_split``: ``n`` pieces as equal as possible, or pieces between indices."""
    x = as_tensor(input)
    if x.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor "
                           "with 0 dims")
    d = wrap_dim("tensor_split", dim, x.ndim)
    size = x.shape[d]
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        base, extra = divmod(size, n)
        sizes = [base + 1] * extra + [base] * (n - extra)
        return tuple(_pieces(x, d, sizes))
    bounds = [0] + [min(max(int(i), 0), size) for i in indices_or_sections] + [size]
    return tuple(_along(x, d, slice(a, max(a, b))) for a, b in zip(bounds, bounds[1:]))


def unbind(input, dim: int = 0) -> tuple[Tensor, ...]:
    """The views of ``x`` at each index along ``dim`` (that dimension removed)."""
    input = as_tensor(input)
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim("unbind", dim, input.ndim)
    return _multi([_along(input, d, i) for i in range(input.shape[d])], "Unbind")


def movedim(input, source, destination) -> Tensor:
    """``x`` with dimensions ``source`` moved to ``destination`` (ints or sequences)."""
    input = as_tensor(input)
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    src = tuple(wrap_dim("movedim", d, input.ndim) for d in src)
    dst = tuple(wrap_dim("movedim", d, input.ndim) for d in dst)
    if input.ndim == 0:
        return _same(input)
    order = [d for d in range(input.ndim) if d not in src]
    for s_, d_ in sorted(zip(dst, src)):
        order.insert(s_, d_)
    return permute(input, tuple(order))


moveaxis = movedim


def swapaxes(input, axis0: int, axis1: int) -> Tensor:
    """``transpose(input, axis0, axis1)`` (NumPy's name)."""
    return transpose(input, axis0, axis1)


def swapdims(input, dim0: int, dim1: int) -> Tensor:
    """``transpose(input, dim0, dim1)``."""
    return transpose(input, dim0, dim1)


def unflatten(input, dim: int, sizes) -> Tensor:
    """``x`` with dimension ``dim`` split into ``sizes`` (one may be -1)."""
    input = as_tensor(input)
    if input.ndim == 0:
        raise RuntimeError(f"unflatten got an unexpected error:\nDimension specified as {dim} but "
                           f"tensor has no dimensions")
    d = wrap_dim("unflatten", dim, input.ndim)
    given = tuple(int(s) for s in sizes)
    sizes = given
    if -1 in given:
        known = math.prod(s for s in given if s != -1)
        sizes = tuple(input.shape[d] // known if s == -1 and known else s for s in given)
    if math.prod(sizes) != input.shape[d]:
        raise RuntimeError(f"unflatten: Provided sizes {list(given)} don't multiply up to the "
                           f"size of dim {d} ({input.shape[d]}) in the input tensor")
    return reshape(input, input.shape[:d] + sizes + input.shape[d + 1:])


def broadcast_to(input, size) -> Tensor:
    """``x`` expanded to ``size`` (a view, as ``expand``)."""
    return expand(input, tuple(size))


def broadcast_shapes(*shapes) -> Size:
    """The shape that tensors of ``shapes`` broadcast to (``torch.broadcast_shapes``)."""
    norm = [(int(s),) if isinstance(s, numbers.Integral) else tuple(int(d) for d in s)
            for s in shapes]
    return Size(broadcast_shape("broadcast_shapes", *norm) if norm else ())


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    """Each tensor expanded (a view, no copy) to their common broadcast shape; gradients sum
    back over the expanded dimensions."""
    ts = [as_tensor(t) for t in tensors]
    shape = tuple(broadcast_shapes(*(t.shape for t in ts)))
    # (one of that shape already is itself, not a view of itself, as torch's)
    return tuple(t if t.shape == shape else expand(t, shape) for t in ts)


def atleast_1d(input) -> Tensor:
    """``x`` with at least one dimension (a 0-d tensor becomes shape (1,))."""
    input = as_tensor(input)
    return reshape(input, (1,)) if input.ndim == 0 else input


def atleast_2d(input) -> Tensor:
    """``x`` with at least two dimensions (leading dimensions of size 1 added)."""
    input = as_tensor(input)
    return reshape(input, (1,) * (2 - input.ndim) + input.shape) if input.ndim < 2 else input


# ---- copies: repeat, tile, repeat_interleave, flip, roll, tril/triu ------------------------------
def repeat(x, *sizes) -> Tensor:
    """``x`` tiled ``sizes`` times along each dimension (leading new dimensions allowed), a copy;
    the gradient sums over the copies."""
    x = as_tensor(x)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    src = reshape(x, (1,) * (len(sizes) - x.ndim) + x.shape)
    # (s0, s1, ...) -> (1, s0, 1, s1, ...) -> expand (r0, s0, r1, s1, ...) -> (r0*s0, r1*s1, ...)
    inter = tuple(v for s in src.shape for v in (1, s))
    big = tuple(v for r, s in zip(sizes, src.shape) for v in (r, s))
    tiled = contiguous(expand(reshape(src, inter), big))
    return own_reshape(tiled, tuple(r * s for r, s in zip(sizes, src.shape)))


def tile(input, dims) -> Tensor:
    """``x`` repeated ``dims`` times along each dimension (``dims`` padded with ones at
    the front)."""
    input = as_tensor(input)
    dims = (int(dims),) if isinstance(dims, numbers.Integral) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def repeat_interleave(input, repeats, dim: int | None = None, *, output_size=None) -> Tensor:
    """Each element (or slice along ``dim``) repeated ``repeats`` times in place (an int, or
    one count per element given as a tensor or list)."""
    input = as_tensor(input)
    if dim is None:
        input = reshape(input, -1)
        dim = 0
    d = wrap_dim("repeat_interleave", dim, input.ndim)
    if isinstance(repeats, int) or (isinstance(repeats, Tensor) and repeats.numel() == 1
                                    and repeats.ndim == 0):
        r = int(repeats)
        shape = input.shape[:d + 1] + (r,) + input.shape[d + 1:]
        out = expand(unsqueeze(input, d + 1), shape)
        return reshape(contiguous(out),
                       input.shape[:d] + (input.shape[d] * r,) + input.shape[d + 1:])
    counts = np.asarray(as_tensor(repeats).numpy(), dtype=np.int64).reshape(-1)
    if counts.size != input.shape[d]:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {counts.size} and input.size({d}) = "
                           f"{input.shape[d]}")
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    return _along(input, d, leaf(np.repeat(np.arange(input.shape[d]), counts)))


def _flip_key(dims: tuple[int, ...], ndim: int) -> tuple:
    return tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(ndim))


defop("flip", forward=lambda t: (lambda out, x: np.copyto(out, x[_flip_key(t.attrs[0],
                                                                         x.ndim)])),
      backward=lambda t, g: (flip(g, t.attrs[0]),))


def flip(input, dims) -> Tensor:
    """``x`` reversed along ``dims`` (a copy, as in PyTorch)."""
    input = as_tensor(input)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    dims = tuple(sorted({wrap_dim("flip", d, input.ndim) for d in dims}))
    if not dims:
        return contiguous(input)
    return node("flip", (input,), input.shape, input.dtype, (dims,))


def fliplr(input) -> Tensor:
    """Reverse the order of the columns (dimension 1)."""
    return flip(input, 1)


def flipud(input) -> Tensor:
    """Reverse the order of the rows (dimension 0)."""
    return flip(input, 0)


defop("roll", forward=lambda t: (lambda out, x: np.copyto(out, np.roll(x, t.attrs[0],
                                                                      t.attrs[1]))),
      backward=lambda t, g: (node("roll", (g,), g.shape, g.dtype,
                                  (tuple(-s for s in t.attrs[0]), t.attrs[1])),))


def roll(input, shifts, dims=None) -> Tensor:
    """``x`` shifted circularly by ``shifts`` along ``dims`` (flattened when ``dims`` is None)."""
    input = as_tensor(input)
    if dims is None:
        return own_reshape(roll(reshape(input, -1), shifts, 0), input.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(int(s) for s in shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                           f"{len(dims)}")
    if input.ndim == 0:  # (torch wraps no dimension of a 0-d tensor here)
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    dims = tuple(wrap_dim("roll", d, input.ndim) for d in dims)
    return node("roll", (input,), input.shape, input.dtype, (shifts, dims))


def _triangle_forward(upper: bool):
    fn = np.triu if upper else np.tril
    return lambda t: (lambda out, x: np.copyto(out, fn(x, t.attrs[0])))


defop("tril", forward=_triangle_forward(False),
      backward=lambda t, g: (node("tril", (g,), g.shape, g.dtype, t.attrs),))
defop("triu", forward=_triangle_forward(True),
      backward=lambda t, g: (node("triu", (g,), g.shape, g.dtype, t.attrs),))


def tril(input, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions (elements above ``diagonal`` zeroed)."""
    input = as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return node("tril", (input,), input.shape, input.dtype, (int(diagonal),))


def triu(input, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions (elements below ``diagonal`` zeroed)."""
    input = as_tensor(input)
    if input.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return node("triu", (input,), input.shape, input.dtype, (int(diagonal),))


# ---- strided views: diagonal, unfold, as_strided ------------------------------------------------
# Their numpy views are made with ``as_strided`` from the source array's own strides (a diagonal
# steps by the sum of two strides), inside the source's memory by construction; the gradient of
# each is the generic ``view_grad``.
def _strided(a: np.ndarray, start: tuple, shape: tuple[int, ...], strides: tuple[int, ...]):
    """A view of the memory of ``a[start]`` (slices: a view, never a copied scalar) onwards with
    ``shape`` and byte ``strides`` (writable when ``a`` is)."""
    return np.lib.stride_tricks.as_strided(a[start], shape, strides)


def _diagonal_view(t):
    offset, d1, d2 = t.attrs

    def view(a):
        rest = [i for i in range(a.ndim) if i not in (d1, d2)]
        start = [slice(None)] * a.ndim
        n = t.shape[-1]
        if n:  # (an empty diagonal starts nowhere)
            start[d1], start[d2] = slice(max(0, -offset), None), slice(max(0, offset), None)
        shape = tuple(a.shape[i] for i in rest) + (n,)
        strides = tuple(a.strides[i] for i in rest) + (a.strides[d1] + a.strides[d2],)
        return _strided(a, tuple(start), shape, strides)
    return view


def _unfold_view(t):
    d, size, step = t.attrs

    def view(a):
        strides = a.strides[:d] + (a.strides[d] * step,) + a.strides[d + 1:] + (a.strides[d],)
        return _strided(a, (slice(None),) * a.ndim, t.shape, strides)
    return view


def _as_strided_view(t):
    size, stride, offset = t.attrs

    def view(a):
        flat = a.reshape(-1)  # (the source is contiguous: the base's own layout)
        return _strided(flat, (slice(offset, None),), size,
                        tuple(s * a.itemsize for s in stride))
    return view


def _view_grad_forward(t):
    """``out`` = zeros of the source's shape with the view's gradient added at the elements the
    view reads (several times where a view reads one element several times)."""
    step = t.attrs[0]
    index = OPS[step.op].view(step)(np.arange(math.prod(t.shape)).reshape(t.shape))
    index = np.array(index).reshape(-1)

    def fwd(out, g):
        flat = out.reshape(-1)
        flat[...] = 0
        np.add.at(flat, index, np.asarray(g).reshape(-1))
    return fwd


defop("view_grad", forward=_view_grad_forward)


def _view_backward(t, g):
    step = ViewStep(t.op, t.attrs, t.shape, t.dtype, ())
    return (node("view_grad", (g,), t.srcs[0].shape, g.dtype, (step,)),)


defop("diagonal", view=_diagonal_view, backward=_view_backward, aliases=True)
defop("unfold", view=_unfold_view, backward=_view_backward, aliases=True)
defop("as_strided", view=_as_strided_view, backward=_view_backward, aliases=True)


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The view of the diagonal of dimensions ``dim1`` and ``dim2`` (``offset`` above it, or
    below when negative), as the last dimension; writing into it writes ``x``."""
    input = as_tensor(input)
    d1, d2 = wrap_dim("diagonal", dim1, input.ndim), wrap_dim("diagonal", dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    offset = int(offset)
    n1, n2 = input.shape[d1], input.shape[d2]
    n = max(0, min(n1 - max(0, -offset), n2 - max(0, offset)))
    shape = tuple(s for i, s in enumerate(input.shape) if i not in (d1, d2)) + (n,)
    return node("diagonal", (input,), shape, input.dtype, (offset, d1, d2))


def unfold(x, dimension: int, size: int, step: int) -> Tensor:
    """The view of all windows of ``size`` elements along ``dimension``, ``step`` apart, as a
    new last dimension (``Tensor.unfold``)."""
    x = as_tensor(x)
    d = wrap_dim("unfold", dimension, x.ndim)
    length = x.shape[d] if x.ndim else 1
    size, step = int(size), int(step)
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if x.ndim == 0:  # (torch: the 0-d tensor as its one window, or none)
        return _along(reshape(x, (1,)), 0, slice(0, size))
    shape = x.shape[:d] + ((length - size) // step + 1,) + x.shape[d + 1:] + (size,)
    return node("unfold", (x,), shape, x.dtype, (d, size, step))


def as_strided(input, size, stride, storage_offset: int | None = None) -> Tensor:
    """The view of ``x``'s storage with ``size``, element ``stride`` and ``storage_offset``
    (default: ``x``'s own), as ``torch.as_strided``: the storage is the base's memory in its
    (contiguous) layout, and every element read must lie inside it."""
    input = as_tensor(input)
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    info = getattr(input, "view_info", None)
    base = input if info is None else input._base
    if base.op in ("input", "param", "freed") and not base.value.flags.c_contiguous:
        raise NotImplementedError("as_strided of a tensor whose memory is not contiguous (a "
                                  "non-contiguous numpy array): make it .contiguous() first")
    if storage_offset is None:
        storage_offset = geometry(input)[2] // input.dtype.itemsize if base is not input else 0
    storage_offset = int(storage_offset)
    if storage_offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {storage_offset}")
    need = storage_offset + 1 + sum((n - 1) * s for n, s in zip(size, stride)) \
        if all(size) else 0
    if need > base.numel():
        item = input.dtype.itemsize
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage "
                           f"offset {storage_offset}, and itemsize {item} requiring a storage "
                           f"size of {need * item} are out of bounds for storage of size "
                           f"{base.numel() * item}")
    attrs = (size, stride, storage_offset)
    if info is None:
        return node("as_strided", (base,), size, input.dtype, attrs)
    if info.alias or not input.requires_grad:
        with no_grad() if info.alias else nullcontext():
            t = node("as_strided", (base,), size, input.dtype, attrs)
        if getattr(t, "view_info", None) is None:  # (a copy: nothing to inherit)
            return t
    else:  # torch differentiates into x's elements only: the base's gradient outside is zero
        if input.op == "rebased_multi_view" and grad_mode.current.enabled:
            raise RuntimeError(input.attrs[0])
        covered = np.zeros(base.shape, np.bool_)
        view_array(info.steps, covered)[...] = True
        seen = where(leaf(covered), base,
                     view_node(ViewStep("alias", (), base.shape, base.dtype, ()), base))
        t = node("as_strided", (seen,), size, input.dtype, attrs)
        t._base, t.shared_storage = base, storage_of(base)  # (a view of the base itself)
        t.shared_storage.add_view(t)
    view = t.view_info
    assert view is not None
    if not info.alias:
        view = view._replace(steps=(ViewStep("as_strided", attrs, t.shape, input.dtype, ()),),
                             alias_at=0)
    name = "Output 0 of AsStrided" if info.creation == MULTI else ""
    t.view_info = view._replace(creation=info.creation, name=name, alias=info.alias,
                            counter=info.counter)
    return t


def diag(input, diagonal: int = 0) -> Tensor:
    """A 1-D tensor's values on the ``diagonal`` of a square matrix, or a matrix's diagonal."""
    from tinyopt.engine.ops.indexing import setitem
    from tinyopt.engine.ops.creation import zeros
    input = as_tensor(input)
    if input.ndim == 2:  # (a copy of the diagonal, as torch's)
        return contiguous(globals()["diagonal"](input, diagonal))
    if input.ndim != 1:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + str(input.ndim) + "D")
    n = input.shape[0] + abs(diagonal)
    out = zeros(n, n, dtype=input.dtype)
    i = np.arange(input.shape[0])
    setitem(out, (leaf(i + max(0, -diagonal)), leaf(i + max(0, diagonal))), input)
    return out


def trace(input) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor."""
    from tinyopt.engine.ops.reduce import sum as _sum
    return _sum(diagonal(as_tensor(input)))


def hstack(tensors) -> Tensor:
    """Stack horizontally: ``cat`` along dim 1 (dim 0 for 1-D tensors)."""
    ts = [atleast_1d(x) for x in tensors]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Stack vertically: ``cat`` along dim 0 (1-D tensors become rows)."""
    return cat([atleast_2d(x) for x in tensors], 0)


def column_stack(tensors) -> Tensor:
    """Stack 1-D tensors as columns (and 2-D ones as they are) side by side: ``cat`` along
    dim 1."""
    ts = [as_tensor(x) for x in tensors]
    return cat([x.reshape(-1, 1) if x.ndim <= 1 else x for x in ts], 1)


def meshgrid(*tensors, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors (``indexing="ij"`` or ``"xy"``), as expanded views."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [as_tensor(x).reshape(-1) for x in tensors]
    if indexing not in ("ij", "xy"):
        raise ValueError(f"torch.meshgrid: indexing must be one of 'xy' or 'ij', got {indexing}")
    if indexing == "xy" and len(ts) >= 2:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(x.shape[0] for x in ts)
    grids = [expand(reshape(x, tuple(-1 if j == i else 1 for j in range(len(ts)))), shape)
             for i, x in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2:  # computed as "ij" of (y, x): the grids swap back
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)
