"""Selection: gather/scatter along a dimension, index_select/index_add, masked_select, sorting
(sort, argsort, topk, median), and the data-dependent results (nonzero, unique, bincount).

Gather and scatter work on ``(A, R, B)`` views of their operands (R the indexed dimension) with
the checked kernels of ``kernels/gather.py``; each is one op with its backward next to it:
``gather``'s gradient scatter-adds, ``scatter_add``'s and ``scatter``'s gather.  Sorting ops give
their indices as a node (computed when the plan runs) and their values as a ``gather`` of them,
so gradients flow to the selected elements.  ``nonzero``, ``unique`` and ``bincount`` have a
data-dependent shape: they compute their input now and return concrete tensors (no gradient).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.dtypes import FLOATS, int64, is_float, stored_scalar
from tinyopt.engine.op import defop, node, own_reshape, refuse_unsigned
from tinyopt.engine.ops.elementwise import broadcast_shape, clone, lt, where
from tinyopt.engine.ops.family import c_contiguous, wrap_dim
from tinyopt.engine.ops.reduce import MaxMin, shared_value
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels import gather as K


def _arb(shape: tuple[int, ...], d: int) -> tuple[int, int, int]:
    return math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])


def _raise_bad(op: str, idx: np.ndarray, bad: int, d: int, size: int) -> None:
    value = int(np.asarray(idx).reshape(-1)[bad])  # (torch's words, for gather and scatter)
    raise RuntimeError(f"index {value} is out of bounds for dimension {d} with size {size}")


def _index(op: str, index) -> Tensor:
    i = as_tensor(index)
    if i.dtype != int64:
        raise RuntimeError(f"{op}(): Expected dtype int64 for index")
    return i


def _check_shapes(op: str, x: Tensor, d: int, idx: Tensor, other: Tensor | None = None) -> None:
    if idx.ndim != x.ndim and not (idx.ndim == 0 and x.ndim == 0):
        raise RuntimeError(f"Index tensor must have the same number of dimensions as input tensor "
                           f"({op}: input {list(x.shape)}, index {list(idx.shape)})")
    for k, (a, b) in enumerate(zip(idx.shape, x.shape)):
        if k != d and a > b:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(idx.shape)} to be no larger than self {list(x.shape)} apart "
                               f"from dimension {d}")
    if other is not None:
        for k, (a, b) in enumerate(zip(idx.shape, other.shape)):
            if a > b:
                raise RuntimeError(f"Size does not match at dimension {k} expected index "
                                   f"{list(idx.shape)} to be no larger than src "
                                   f"{list(other.shape)}")


def _region(shape: tuple[int, ...], idx_shape: tuple[int, ...], d: int) -> tuple:
    """The part of a tensor of ``shape`` an index of ``idx_shape`` along ``d`` addresses."""
    return tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(idx_shape[:len(shape)]))


def _prefix(x: Tensor, idx_shape: tuple[int, ...], d: int) -> Tensor:
    """``x`` cut to the index's extent in every dimension but ``d`` (a view; itself if equal)."""
    if all(k == d or a == b for k, (a, b) in enumerate(zip(idx_shape, x.shape))):
        return x
    from tinyopt.engine.ops.indexing import getitem
    return getitem(x, _region(x.shape, idx_shape, d))


# ---- gather --------------------------------------------------------------------------------------
def _gather_forward(t):
    d = t.attrs[0]
    A, R, B = _arb(t.srcs[0].shape, d)
    K_ = t.shape[d] if t.ndim else 1
    bad = np.empty(1, np.int64)

    def fwd(out, x, idx):
        K.gather_axis(c_contiguous(x).reshape(A, R, B), c_contiguous(idx).reshape(A, K_, B),
                      out.reshape(A, K_, B),
                      bad)
        if bad[0] >= 0:
            _raise_bad("gather", idx, int(bad[0]), d, R)
    return fwd


def _scatter_add_into(out: np.ndarray, src: np.ndarray, idx: np.ndarray, d: int, op: str,
                      assign: bool = False) -> None:
    """out[..., idx, ...] += src (or =) along ``d``, where ``idx``/``src`` may cover only a
    leading part of ``out`` in the other dimensions."""
    region = _region(out.shape, idx.shape, d)
    target = out[region] if any(s != slice(None) for s in region) else out
    tmp = c_contiguous(target)
    A, R, B = _arb(tmp.shape, d) if tmp.ndim else (1, 1, 1)
    K_ = idx.shape[d] if idx.ndim else 1
    bad = np.empty(1, np.int64)
    kernel = K.scatter_axis if assign else K.scatter_add_axis
    kernel(c_contiguous(src[_region(src.shape, idx.shape, d)] if src.shape != idx.shape else src)
           .reshape(A, K_, B), c_contiguous(idx).reshape(A, K_, B), tmp.reshape(A, R, B), bad)
    if bad[0] >= 0:
        _raise_bad(op, idx, int(bad[0]), d, R)
    if tmp is not target:
        target[...] = tmp


def _gather_grad_forward(t):
    d = t.attrs[0]

    def fwd(out, g, idx):
        out[...] = 0
        _scatter_add_into(out, g, idx, d, "gather")
    return fwd


defop("gather", forward=_gather_forward,
      backward=lambda t, g: (node("gather_grad", (g, t.srcs[1]), t.srcs[0].shape, g.dtype,
                                  t.attrs), None))
defop("gather_grad", forward=_gather_grad_forward)


def gather(input, dim: int, index, *, sparse_grad: bool = False) -> Tensor:
    """``out[i][j][k] = input[i][index[i][j][k]][k]`` for ``dim`` = 1 (and likewise for others):
    values picked along ``dim`` by an int64 index of the same number of dimensions."""
    x = as_tensor(input)
    refuse_unsigned("scatter_gather_tensor_cpu", x)
    idx = _index("gather", index)
    d = wrap_dim("gather", dim, x.ndim)
    if x.ndim == 0 and idx.ndim == 0:  # as a 1-element 1-d gather, as in torch
        return gather(x.reshape(1), 0, idx.reshape(1)).reshape(())
    _check_shapes("gather", x, d, idx)
    if idx.op == "input" and idx.value.size:
        v = idx.value
        if v.min() < 0 or v.max() >= x.shape[d]:
            bad = int(v.min()) if v.min() < 0 else int(v.max())
            raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size "
                               f"{x.shape[d]}")
    src = _prefix(x, idx.shape, d)
    return node("gather", (src, idx), idx.shape, x.dtype, (d,))


def take_along_dim(input, indices, dim: int | None = None) -> Tensor:
    """``gather`` with the index broadcast against the input in the other dimensions (flattened
    input when ``dim`` is None)."""
    x = as_tensor(input)
    idx = _index("take_along_dim", indices)
    if dim is None:
        return gather(x.reshape(-1), 0, idx.reshape(-1))
    d = wrap_dim("take_along_dim", dim, x.ndim)
    xs, ishape = list(x.shape), list(idx.shape)
    xs[d] = ishape[d] = 1
    b = list(np.broadcast_shapes(tuple(xs), tuple(ishape)))
    xb, ib = list(b), list(b)
    xb[d], ib[d] = x.shape[d], idx.shape[d]
    return gather(x.expand(tuple(xb)), d, idx.expand(tuple(ib)))


def take(input, index) -> Tensor:
    """The elements of the flattened ``input`` at ``index`` (any shape); an index i < 0 means
    i + numel, as in torch."""
    x = as_tensor(input)
    refuse_unsigned("take_cpu", x)
    idx = _index("take", index)
    n = x.numel()
    if idx.op == "input" and idx.value.size:
        v = idx.value
        bad = v[(v < -n) | (v >= n)]
        if bad.size:
            raise IndexError(f"out of range: tried to access index {int(bad[0])} on a tensor of "
                             f"{n} elements.")
        if (v < 0).any():
            idx = leaf(np.where(v < 0, v + n, v))
    elif idx.op != "input":
        idx = where(lt(idx, 0), idx + n, idx)
    return gather(x.reshape(-1), 0, idx.reshape(-1)).reshape(idx.shape)


# ---- scatter / scatter_add -----------------------------------------------------------------------
def _scatter_forward(assign: bool):
    def compile(t):
        d = t.attrs[0]

        def fwd(out, x, idx, src):
            np.copyto(out, x)
            _scatter_add_into(out, src, idx, d, "scatter", assign)
        return fwd
    return compile


def _scatter_add_backward(t, g):
    x, idx, src = t.srcs
    d = t.attrs[0]
    gsrc = None
    if src.requires_grad:
        gsrc = _pad_to(node("gather", (_prefix(g, idx.shape, d), idx), idx.shape, g.dtype, (d,)),
                       src.shape)
    return g, None, gsrc


def _scatter_backward(t, g):
    x, idx, src = t.srcs
    d = t.attrs[0]
    gx = None
    if x.requires_grad:  # the written positions get nothing
        from tinyopt.engine.ops.creation import constant_node
        zeros = constant_node(idx.shape, 0.0, g.dtype)
        gx = node("scatter", (g, idx, zeros), g.shape, g.dtype, (d,))
    gsrc = None
    if src.requires_grad:
        gsrc = _pad_to(node("gather", (_prefix(g, idx.shape, d), idx), idx.shape, g.dtype, (d,)),
                       src.shape)
    return gx, None, gsrc


def _pad_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The gradient of a leading part of a tensor of ``shape``: zeros elsewhere."""
    if g.shape == shape:
        return g
    from tinyopt.engine.ops.indexing import parse_index
    k = parse_index(shape, tuple(slice(0, n) for n in g.shape))
    st = leaf(np.array(k.starts, dtype=int64))
    return node("slice_grad", (g, st), shape, g.dtype, (tuple(k.struct),))


defop("scatter", forward=_scatter_forward(True), backward=_scatter_backward)
defop("scatter_add", forward=_scatter_forward(False), backward=_scatter_add_backward)


def _scatter_args(op: str, input, dim, index, src, value):
    x = as_tensor(input)
    idx = _index(op, index)
    d = wrap_dim(op, dim, x.ndim)
    if src is None:
        if value is None:
            raise TypeError(f"{op}() needs src or value")
        src = leaf(np.full(idx.shape, value, dtype=x.dtype))
    elif isinstance(src, numbers.Number):
        src = leaf(np.full(idx.shape, src, dtype=x.dtype))
    src = as_tensor(src)
    if src.dtype != x.dtype:
        raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype")
    _check_shapes(op, x, d, idx, src)
    return x, idx, d, src


def scatter(input, dim: int, index, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """``input`` with ``src`` (or ``value``) written at ``index`` along ``dim``:
    ``out[i][index[i][j][k]][k] = src[i][j][k]`` for ``dim`` = 1.  ``reduce="add"``/``"multiply"``
    combine instead of writing."""
    if reduce == "add":
        return scatter_add(input, dim, index, src if src is not None else value)
    if reduce is not None:
        raise NotImplementedError(f"scatter(reduce={reduce!r}) is not supported (use 'add')")
    x, idx, d, s = _scatter_args("scatter", input, dim, index, src, value)
    return node("scatter", (x, idx, s), x.shape, x.dtype, (d,))


def scatter_add(input, dim: int, index, src) -> Tensor:
    """``input`` plus ``src`` accumulated at ``index`` along ``dim`` (repeated indices add)."""
    x, idx, d, s = _scatter_args("scatter_add", input, dim, index, src, None)
    return node("scatter_add", (x, idx, s), x.shape, x.dtype, (d,))


# ---- index_select / index_add / index_fill / index_copy --------------------------------------------
_OUT_OF_RANGE = {  # torch's error for an index outside [0, size) of each index_* op
    "index_select": (IndexError, "index out of range in self"),
    "index_add": (RuntimeError, "index {i} is out of bounds for dimension {d} with size {n}"),
    "index_fill": (IndexError, "index {i} is out of bounds for dimension {d} with size {n}"),
    "index_copy": (IndexError, "index_copy_(): index {i} is out of bounds for dimension {d} with "
                               "size {n}")}


def _index_1d(op: str, index, size: int, d: int = 0) -> Tensor:
    i = as_tensor(index)
    if i.dtype.kind not in "iu":
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index")
    if i.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector")
    i = i.reshape(-1) if i.ndim == 0 else i
    if i.op == "input" and i.value.size and (i.value.min() < 0 or i.value.max() >= size):
        v = i.value
        kind, words = _OUT_OF_RANGE[op]
        raise kind(words.format(i=int(v[(v < 0) | (v >= size)][0]), d=d, n=size))
    return i if i.dtype == int64 else i.to(int64)


def index_select(input, dim: int, index) -> Tensor:
    """The slices of ``input`` along ``dim`` at the positions of a 1-D ``index``."""
    from tinyopt.engine.ops.indexing import getitem
    x = as_tensor(input)
    refuse_unsigned("index_select", x)
    d = wrap_dim("index_select", dim, x.ndim)
    idx = _index_1d("index_select", index, x.shape[d] if x.ndim else 1)
    if x.ndim == 0:
        return own_reshape(getitem(x.reshape(1), idx), ())
    return getitem(x, (slice(None),) * d + (idx,))


def _index_add_forward(t):
    d, alpha = t.attrs
    A, R, B = _arb(t.shape, d)
    bad = np.empty(1, np.int64)

    def fwd(out, x, idx, src):
        np.copyto(out, x)
        s = c_contiguous(src).reshape(A, idx.shape[0], B)
        if alpha != 1:
            s = s * alpha
        K.index_add_axis(s, idx, out.reshape(A, R, B), bad)
        if bad[0] >= 0:
            raise RuntimeError(f"index {int(idx[bad[0]])} is out of bounds for dimension {d} with "
                               f"size {R}")
    return fwd


def _index_add_backward(t, g):
    x, idx, src = t.srcs
    d, alpha = t.attrs
    gsrc = None
    if src.requires_grad:
        gsrc = index_select(g, d, idx)
        if alpha != 1:
            gsrc = gsrc * alpha
    return g, None, gsrc


defop("index_add", forward=_index_add_forward, backward=_index_add_backward)


def index_add(input, dim: int, index, source, *, alpha=1) -> Tensor:
    """``input`` plus ``alpha * source`` added at the slices ``index`` along ``dim`` (repeated
    indices accumulate)."""
    x = as_tensor(input)
    d = wrap_dim("index_add", dim, x.ndim)
    idx = _index_1d("index_add", index, x.shape[d], d)
    s = as_tensor(source)
    expect = x.shape[:d] + (idx.shape[0],) + x.shape[d + 1:]
    if s.shape != expect:
        raise RuntimeError(f"index_add_(): Source/destination tensor must have same slice shapes "
                           f"(source {list(s.shape)}, expected {list(expect)})")
    return node("index_add", (x, idx, s.to(x.dtype)), x.shape, x.dtype, (d, alpha))


def _written(op: str, input, dim: int, index, value) -> Tensor:
    from tinyopt.engine.ops.indexing import setitem
    x = as_tensor(input)
    d = wrap_dim(op, dim, x.ndim)
    idx = _index_1d(op, index, x.shape[d], d)
    out = clone(x)
    setitem(out, (slice(None),) * d + (idx,), value)
    return out


def index_fill(input, dim: int, index, value) -> Tensor:
    """``input`` with the slices ``index`` along ``dim`` set to ``value``."""
    if isinstance(value, numbers.Number):
        stored_scalar(value, as_tensor(input).dtype)  # (torch's overflow error)
    return _written("index_fill", input, dim, index, value)


def index_copy(input, dim: int, index, source) -> Tensor:
    """``input`` with the slices ``index`` along ``dim`` replaced by those of ``source``."""
    return _written("index_copy", input, dim, index, source)


def masked_select(input, mask) -> Tensor:
    """The elements of ``input`` where the bool ``mask`` (broadcast together) is true, 1-D."""
    x, m = as_tensor(input), as_tensor(mask)
    refuse_unsigned("masked_select", x)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {m.dtype}")
    shape = broadcast_shape("masked_select", x.shape, m.shape)
    return x.expand(shape)[m.expand(shape)]


# ---- sorting -------------------------------------------------------------------------------------
def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable sorting indices along ``axis``; NaN counts as the largest value (PyTorch)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    if x.dtype.kind == "f":  # NaN first, then descending, ties in their original order
        return np.argsort(np.where(np.isnan(x), -np.inf, -x), axis=axis, kind="stable")
    if x.dtype.kind == "b":
        return np.argsort(~x, axis=axis, kind="stable")
    return np.argsort(-x.astype(np.int64), axis=axis, kind="stable") if x.dtype.kind == "u" \
        else np.argsort(-x, axis=axis, kind="stable")


defop("argsort", forward=lambda t: (lambda out, x: np.copyto(
    out, np.take(_order(x, t.attrs[0], t.attrs[1]), range(t.shape[t.attrs[0]]),
                 axis=t.attrs[0]))))


def _sort_indices(x: Tensor, d: int, descending: bool, k: int | None = None) -> Tensor:
    shape = x.shape if k is None else x.shape[:d] + (k,) + x.shape[d + 1:]
    return node("argsort", (x,), shape, int64, (d, bool(descending)))


def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """The indices that sort ``input`` along ``dim`` (ties keep their order)."""
    x = as_tensor(input)
    if x.ndim == 0:
        return leaf(np.zeros((), np.int64))
    return _sort_indices(x, wrap_dim("argsort", dim, x.ndim), descending)


def sort(input, dim: int = -1, descending: bool = False, *, stable: bool = False) -> MaxMin:
    """``(values, indices)`` of ``input`` sorted along ``dim``; gradients flow to the values."""
    x = as_tensor(input)
    if x.ndim == 0:  # (its value a copy: torch's is a new tensor, not the input)
        return MaxMin((x.clone(), leaf(np.zeros((), np.int64))))
    d = wrap_dim("sort", dim, x.ndim)
    idx = _sort_indices(x, d, descending)
    return MaxMin((node("gather", (x, idx), x.shape, x.dtype, (d,)), idx))


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> MaxMin:
    """``(values, indices)`` of the ``k`` largest (or smallest) elements along ``dim``."""
    x = as_tensor(input)
    refuse_unsigned("topk_cpu", x)
    if x.dtype == np.bool_:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    d = wrap_dim("topk", dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    if x.ndim == 0:  # (its value a copy: torch's is a new tensor, not the input)
        return MaxMin((x.clone(), leaf(np.zeros((), np.int64))))
    idx = _sort_indices(x, d, largest, k)
    return MaxMin((node("gather", (x, idx), idx.shape, x.dtype, (d,)), idx))


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False) -> MaxMin:
    """``(values, indices)`` of the ``k``-th smallest element along ``dim``."""
    x = as_tensor(input)
    refuse_unsigned("kthvalue_cpu", x)
    if x.dtype == np.bool_:
        raise NotImplementedError("\"kthvalue_cpu\" not implemented for 'Bool'")
    d = wrap_dim("kthvalue", dim, x.ndim)
    if not 1 <= k <= (x.shape[d] if x.ndim else 1):
        raise RuntimeError("kthvalue(): selected number k out of range")
    if x.ndim == 0:  # one element along its only "dimension", as in torch
        v, i = kthvalue(x.reshape(1), k, 0)
        return MaxMin((own_reshape(v, ()), own_reshape(i, ())))
    vals, idx = sort(x, d)
    from tinyopt.engine.ops.movement import narrow
    shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    return MaxMin(tuple(own_reshape(narrow(r, d, k - 1, 1), shape) for r in (vals, idx)))


def median(input, dim: int | None = None, keepdim: bool = False, *, keepdims: bool | None = None):
    """The lower median (of all elements, or ``(values, indices)`` along ``dim``)."""
    keepdim = keepdim if keepdims is None else keepdims  # numpy's spelling, as torch
    x = as_tensor(input)
    refuse_unsigned("median_cpu", x)
    if x.dtype == np.bool_:
        raise NotImplementedError("\"median_cpu\" not implemented for 'Bool'")
    nan_rule = is_float(x.dtype)  # (torch: a NaN is the median; bfloat16's numpy kind is "V")
    if dim is None:
        if x.numel() == 0:
            return _empty_median(x)
        flat = x.reshape(-1)
        r = kthvalue(flat, (flat.shape[0] - 1) // 2 + 1, 0)[0]
        if nan_rule:
            r = where(flat.isnan().any(), r.new_full((), math.nan), r)
        if not x.requires_grad:
            return r
        # (torch's gradient is shared by the elements equal to the median, or by its NaNs)
        return shared_value(x, r.detach(), tuple(range(x.ndim)), (), nan=True)
    d = _median_dim(x, dim)
    k = (x.shape[d] - 1) // 2 + 1 if x.ndim else 1
    if not nan_rule or x.ndim == 0:
        return kthvalue(x, k, d, keepdim)
    # a row with a NaN: its median is its first NaN, as torch's (kthvalue sorts NaN last)
    nans = x.isnan()
    indices = where(nans.any(d, keepdim=True), nans.to(np.uint8).argmax(d, keepdim=True),
                    kthvalue(x, k, d, True)[1])
    shape = indices.shape if keepdim else x.shape[:d] + x.shape[d + 1:]
    return MaxMin((own_reshape(x.gather(d, indices), shape), own_reshape(indices, shape)))


def _median_dim(x: Tensor, dim: int) -> int:
    d = wrap_dim("median", dim, x.ndim)
    if x.ndim and x.shape[d] == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
    return d


def _empty_median(x: Tensor) -> Tensor:
    """torch's median of no elements: NaN (an integer dtype's lowest value), on the graph."""
    if is_float(x.dtype):
        return x.sum() * math.nan
    return leaf(np.array(np.iinfo(x.dtype).min, x.dtype))


def nanmedian(input, dim: int | None = None, keepdim: bool = False):
    """The lower median of the elements that are not NaN (of all elements, or ``(values,
    indices)`` along ``dim``); NaN where every element is.  The ((n - 1) // 2)-th of the n
    non-NaN values in ascending order, which a stable sort puts before the NaNs; torch's."""
    x = as_tensor(input)
    if not is_float(x.dtype):
        return median(x, dim, keepdim)  # (no NaN to skip)
    if dim is None:
        if x.numel() == 0:
            return _empty_median(x)
        flat = x.reshape(-1)
        values = nanmedian(flat, 0)[0]
        if not x.requires_grad:
            return values
        # (torch's gradient is shared by the elements equal to it, or by the NaNs of all-NaN x)
        return shared_value(x, values.detach(), tuple(range(x.ndim)), (), nan=True)
    if x.ndim == 0:
        return median(x, dim, keepdim)
    d = _median_dim(x, dim)
    order = _sort_indices(x, d, False)
    count = x.isnan().logical_not().sum(d, keepdim=True)
    at = ((count - 1) // 2).clamp(min=0)  # (no number in the row: its first NaN; torch's is
    # std::nth_element's choice among them)
    indices = order.gather(d, at)
    shape = indices.shape if keepdim else x.shape[:d] + x.shape[d + 1:]
    return MaxMin((own_reshape(x.gather(d, indices), shape), own_reshape(indices, shape)))


def msort(input) -> Tensor:
    """``x`` sorted along dimension 0 (``sort(x, 0).values``)."""
    return sort(input, 0)[0]


# ---- data-dependent shapes: computed now ---------------------------------------------------------
def nonzero(input, *, as_tuple: bool = False):
    """The indices of the nonzero elements: an (n, ndim) int64 tensor, or one 1-D tensor per
    dimension with ``as_tuple=True``."""
    refuse_unsigned("nonzero_count_cpu", input)
    a = np.asarray(as_tensor(input).numpy())
    idx = np.nonzero(a) if a.ndim else np.nonzero(a.reshape(1))
    if as_tuple:  # (views of one (n, ndim) tensor, as torch's)
        return leaf(np.stack(idx, axis=1).astype(np.int64)).unbind(1)
    if not a.ndim:  # a 0-d tensor: one (or no) nonzero element with no coordinates, as in torch
        return leaf(np.zeros((len(idx[0]), 0), np.int64))
    return leaf(np.stack(idx, axis=1).astype(np.int64))


def argwhere(input) -> Tensor:
    """The indices of the nonzero elements, one row per element: (n, ndim) int64 (computed now)."""
    return nonzero(input)


def unique(input, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None):
    """The distinct values (sorted), with the inverse indices and counts on request."""
    a = np.asarray(as_tensor(input).numpy())
    res = np.unique(a, return_inverse=return_inverse, return_counts=return_counts, axis=dim)
    if not (return_inverse or return_counts):
        return leaf(res)
    out = [leaf(res[0])]
    k = 1
    if return_inverse:
        out.append(leaf(res[k].reshape(a.shape if dim is None else -1).astype(np.int64)))
        k += 1
    if return_counts:
        out.append(leaf(res[k].astype(np.int64)))
    return tuple(out)


def unique_consecutive(input, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None):
    """Each run of equal consecutive elements (of the flattened tensor, or slices along
    ``dim``) kept once, with the inverse indices and the run lengths on request; a NaN is a run
    of its own."""
    a = np.asarray(as_tensor(input).numpy())
    if dim is None:
        rows = a.reshape(-1, 1)
    else:
        d = wrap_dim("unique_consecutive", dim, a.ndim)
        n = a.shape[d] if a.ndim else 1
        if a.size == 0 and n:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so "
                               "unique cannot be applied")
        rows = np.moveaxis(a, d, 0).reshape(n, math.prod(a.shape) // n if n else 0)
    starts = np.ones(len(rows), bool)
    starts[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    values = a.reshape(-1)[starts] if dim is None else np.compress(starts, a, axis=d)
    if not (return_inverse or return_counts):
        return leaf(values)
    out = [leaf(values)]
    if return_inverse:
        inverse = np.cumsum(starts) - 1
        out.append(leaf(inverse.reshape(a.shape if dim is None else -1).astype(np.int64)))
    if return_counts:
        out.append(leaf(np.diff(np.append(np.flatnonzero(starts), len(rows))).astype(np.int64)))
    return tuple(out)


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """Counts (or weight sums) of each value of a 1-D non-negative int tensor."""
    refuse_unsigned("bincount_cpu", input)
    a = np.asarray(as_tensor(input).numpy())
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if a.size and a.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else np.asarray(as_tensor(weights).numpy())
    r = np.bincount(a, weights=w, minlength=minlength)
    if w is None:
        return leaf(r.astype(np.int64))
    return leaf(r.astype(w.dtype if w.dtype in FLOATS else np.float64))


def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter=None) -> Tensor:
    """Where the values ``input`` would go in the sorted last dimension of ``sorted_sequence``
    (torch documents them as ``values`` but takes the keyword ``input``)."""
    seq = np.asarray(as_tensor(sorted_sequence).numpy())
    v = np.asarray(as_tensor(input).numpy())
    side = side or ("right" if right else "left")
    if seq.ndim == 1:
        r = np.searchsorted(seq, v, side=side)
    else:
        r = np.stack([np.searchsorted(s, x, side=side) for s, x in
                      zip(seq.reshape(-1, seq.shape[-1]), v.reshape(-1, v.shape[-1]))])
        r = r.reshape(v.shape)
    return leaf(r.astype(np.int32 if out_int32 else np.int64))


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each element of ``input`` among the sorted 1-D ``boundaries``."""
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
