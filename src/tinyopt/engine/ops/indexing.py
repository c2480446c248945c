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
from typing import cast

import numpy as np

from tinyopt.engine import grad_mode
from tinyopt.engine.dtypes import bool_, int64, scalar_array, stored_scalar
from tinyopt.engine.inplace import OVERLAP, overlaps, regenerate, writable
from tinyopt.engine.inplace import write as _write
from tinyopt.engine.op import defop, node, refuse_unsigned
from tinyopt.engine.storage import ViewStep, note_view
from tinyopt.engine.tensor import (CONCRETE, LEAF_OPS, Tensor, _mark_mutated, as_tensor, leaf,
                                   make_node)
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


def _as_tuple(key) -> tuple:
    """The key as a tuple of entries, by torch's (and numpy's) rule: a list of fewer than 32
    elements holding a sequence, a tensor, a slice, None or ``...`` is a tuple of entries
    (``x[[0, [1]]]`` is ``x[0, [1]]``); any other key is one entry."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and len(key) < 32 and any(
            k is None or k is Ellipsis or isinstance(k, (list, tuple, str, bytes, slice, Tensor,
                                                          np.ndarray)) for k in key):
        return tuple(key)
    return (key,)


def _specified_dims(key: tuple) -> int:
    """How many dimensions of the indexed tensor ``key`` addresses, counted as torch counts them
    before it looks at any entry: a bool or byte tensor its ndim, None, ``...`` and Python bools
    none, anything else one."""
    n = 0
    for k in key:
        if k is None or k is Ellipsis or k is True or k is False:
            continue
        n += k.ndim if isinstance(k, Tensor) and k.dtype in (bool_, np.uint8) else 1
    return n


def _index_data(k) -> Tensor:
    """A list or array used as an index, as torch converts one: bools and bytes stay masks, any
    other numbers become int64 (``[0.5, 1.7]`` is ``[0, 1]``)."""
    if isinstance(k, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(k).__name__}'")
    arr = np.asarray(k)
    if arr.dtype.kind in "USO":
        raise TypeError(f"new(): invalid data type '{arr.dtype.type.__name__.rstrip('_')}'")
    if arr.dtype != bool_ and arr.dtype != np.uint8:
        arr = arr.astype(np.int64)
    return leaf(arr)


def _type_name(k) -> str:
    t = type(k)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


_I32, _U8 = np.dtype(np.int32), np.dtype(np.uint8)  # (numpy's dtypes are singletons)
_INDEX_DTYPES = (int64, _I32)


def parse_index(shape: tuple[int, ...], key, fill: bool = False) -> _Key:
    """Parse ``key`` for a tensor of ``shape``, raising torch's errors in torch's order: too many
    indices first, then each entry in turn (integers out of range, bad slices, lists that are no
    numbers), then the index tensors (their dtypes, masks' shapes, broadcasting).  ``fill``: the
    key is to be written with one value (torch checks leading masks first then)."""
    single = not isinstance(key, tuple)
    key = _as_tuple(key)
    used = _specified_dims(key)
    if not shape and single and len(key) == 1:  # torch's errors for x[0] and x[:] of a 0-d x
        k = key[0]
        if isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)):
            if not -2**63 <= k < 2**63:
                raise ValueError("Overflow when unpacking long long")
            if k:
                raise IndexError(f"index {k} is out of bounds for dimension 0 with size 0")
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
        if isinstance(k, slice):
            if k.indices(1)[2] <= 0:  # (the slice's own errors first)
                raise ValueError("step must be greater than zero")
            raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    out = _Key()
    deferred: list[tuple[int, Tensor, int]] = []  # (position in out.shape, index tensor, dim)
    d = 0
    for entry, k in enumerate(key):  # (torch names an integer's dimension by its entry)
        if isinstance(k, (list, tuple, np.ndarray, str, bytes, range)):
            k = _index_data(k)
        new_dim = k is True or k is False  # (x[True] is x[None]; x[False] picks none of it)
        if isinstance(k, Tensor):
            if k.ndim == 0 and k.op == "input" and k.dtype in _INDEX_DTYPES:
                k = int(k.value)  # a concrete scalar index: basic indexing
            elif k.ndim == 0 and k.dtype == bool_:
                new_dim = True
        if k is None:
            out.struct.append(("n",))
            out.shape.append(1)
            out.identity = False
        elif k is Ellipsis:  # (a second one stands for no dimension: torch allows it)
            for _ in range(min(len(shape) - used, len(shape) - d)):
                _full(out, shape[d])
                d += 1
        elif new_dim:  # a new dimension, kept (size 1) or masked out (size 0)
            out.struct.append(("n",))
            out.shape.append(1)
            out.identity = False
            keep = bool(k.numpy()) if isinstance(k, Tensor) else k
            if not (single and k is True):  # (torch indexes with [0] or [] there)
                deferred.append((len(out.shape) - 1, leaf(np.zeros(int(keep), np.int64)), -1))
        elif isinstance(k, slice):
            size = shape[d] if d < len(shape) else 0
            start, stop, step = k.indices(size)  # (Python's errors: float bounds, step 0)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            if d >= len(shape):  # (a list mask took more dimensions than it was counted for)
                raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
            n = len(range(start, stop, step))
            out.struct.append(("s", n, step))
            out.starts.append(start)  # (an empty slice's too: torch's offset counts it)
            out.shape.append(n)
            out.identity &= n == size and step == 1
            d += 1
        elif isinstance(k, Tensor):
            deferred.append((len(out.shape), k, d))
            for _ in range(k.ndim if k.dtype in (bool_, np.uint8) else 1):
                if d < len(shape):  # (a list mask may reach past them: an error below)
                    _full(out, shape[d])
                d += 1
        elif type(k) is int or isinstance(k, numbers.Integral) and not isinstance(k, np.bool_):
            k = int(k)
            if not -2**63 <= k < 2**63:
                raise ValueError("Overflow when unpacking long long")
            size = shape[d] if d < len(shape) else 0
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for dimension {entry} with size "
                                 f"{size}")
            out.struct.append(("i",))
            out.starts.append(k % size)
            out.identity = False
            d += 1
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte Variables are valid indices (got {_type_name(k)})")
    for size in shape[d:]:  # the dimensions the key does not mention
        out.shape.append(size)
    if not deferred:
        return out
    is_mask = [d >= 0 and (t.dtype is bool_ or t.dtype is _U8) for _, t, d in deferred]
    if fill:  # torch first tries masked_fill_, which checks the leading masks' shapes
        for (p, t, _), mask in zip(deferred, is_mask):
            if not mask:
                break
            _check_mask(out.shape, p, t)
    for (_, t, _), mask in zip(deferred, is_mask):
        if not mask and t.dtype is not int64 and t.dtype is not _I32:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if True in is_mask:
        for (p, t, _), mask in zip(deferred, is_mask):
            if mask:
                _check_mask(out.shape, p, t)
    for (p, t, _), mask in zip(deferred, is_mask):
        if not mask:
            out.positions.append(p)
            out.arrays.append(t)
            continue
        for i, idx in enumerate(np.nonzero(t.numpy())):
            out.positions.append(p + i)
            out.arrays.append(leaf(idx.astype(np.int64)))
    if len(out.arrays) > 1:
        _advanced_shape(tuple(out.shape), tuple(out.positions), out.arrays)  # (broadcasting)
    if any(out.shape[p] == 0 for p in out.positions) and math.prod(
            np.broadcast_shapes(*[a.shape for a in out.arrays])):
        raise IndexError("index is out of bounds for dimension with size 0")
    return out


def _check_mask(shape: list[int], p: int, mask: Tensor) -> None:
    """torch's errors for a mask over ``shape[p:p + mask.ndim]`` that does not fit it."""
    for j, n in enumerate(mask.shape):
        if p + j >= len(shape):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-len(shape)}, "
                             f"{len(shape) - 1}], but got {p + j})")
        if n != shape[p + j]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not "
                             f"match the shape of the indexed tensor {shape} at index {p + j}")


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
    if 0 in _advanced_shape(shape, positions, arrays):
        return  # nothing is read or written, and torch checks no index then
    for i, (p, a) in enumerate(zip(positions, arrays)):
        if a.op == "input" and a.value.size:
            v = a.value
            lo, hi = int(v.min()), int(v.max())
            if lo < -shape[p] or hi >= shape[p]:  # (torch counts the index tensors)
                bad = hi if hi >= shape[p] else lo
                raise IndexError(f"index {bad} is out of bounds for dimension {i} with size "
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


defop("slice", view=_slice_view, aliases=True,
      backward=lambda t, g: (node("slice_grad", (g, t.srcs[1]), t.srcs[0].shape, g.dtype,
                                  t.attrs), None))
defop("slice_grad", forward=_slice_grad_forward)


def _index_forward(t):
    positions = t.attrs[0]
    if not math.prod(t.shape):
        return lambda out, x, *idx: None  # nothing to read (torch checks no index then)
    if len(positions) == 1:
        axis = positions[0]

        def take(out, x, idx):
            try:
                np.take(x, idx, axis=axis, out=out)
            except IndexError:  # a computed index out of range: torch's words, not numpy's
                _raise_out_of_range(x.shape, positions, [idx])
        return take

    def pick(out, x, *idx):
        try:
            np.copyto(out, x[_advanced(positions, idx)])
        except IndexError:
            _raise_out_of_range(x.shape, positions, idx)
    return pick


def _raise_out_of_range(shape: tuple[int, ...], positions, arrays) -> None:
    """torch's error for the first index tensor (of the ones a key has) with a value out of
    range of its dimension; numpy's own if none is (a broadcasting error)."""
    for i, (p, a) in enumerate(zip(positions, arrays)):
        a = np.asarray(a)
        bad = a[(a < -shape[p]) | (a >= shape[p])]
        if bad.size:
            raise IndexError(f"index {int(bad.reshape(-1)[0])} is out of bounds for dimension {i} "
                             f"with size {shape[p]}") from None
    raise


def _index_grad_forward(t):
    positions = t.attrs[0]
    if not t.srcs[0].numel():  # an empty pick: a zero gradient (its indices are never read)
        return lambda out, g, *idx: out.fill(0)
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


_ONE_INT = ((("i",),),)  # the slice attrs of a key that is one integer


def _select_now(x: Tensor, i: int, starts: Tensor) -> Tensor:
    """``x[i]`` (``0 <= i < len(x)``, ``starts`` holding it) of a concrete ``x`` with no gradient
    to record: the view ``node`` would make and run at once (same value, view record and
    storage), without its generic passes; iterating a realized tensor pays this per element."""
    # (``i, ...``: a 0-d view for a 1-d x, not a numpy scalar)
    t = make_node("input", (), (), x.shape[1:], x.dtype, False, x.value[i, ...])
    note_view(t, x, ViewStep("slice", _ONE_INT, t.shape, x.dtype, (starts,)))
    return t


def getitem(x, key) -> Tensor:
    """``x[key]`` (see the module docstring)."""
    x = as_tensor(x)
    if type(key) is int and x.shape and -x.shape[0] <= key < x.shape[0]:
        # ``x[i]`` in a Python loop: the node ``parse_index`` and ``_region`` make, without
        # their passes over the key (an index out of range takes them, for torch's error)
        i = key % x.shape[0]
        starts = leaf(np.array([i], dtype=int64))
        state = grad_mode.current
        if x.op in CONCRETE and state.fold and not (x.requires_grad and state.enabled):
            return _select_now(x, i, starts)
        return node("slice", (x, starts), x.shape[1:], x.dtype, _ONE_INT)
    k = parse_index(x.shape, key)
    if k.identity and not k.arrays:  # (``x[:]`` is a view of all of x, as torch's)
        return node("reshape", (x,), x.shape, x.dtype, (x.shape,))
    return _region(x, k)


# ---- x[key] = value ------------------------------------------------------------------------------
def _setitem_forward(t):
    struct, positions = t.attrs

    def fwd(out, x, v, st, *idx):
        np.copyto(out, x)
        region = out[_basic(struct, st)]
        if positions:
            if 0 not in _advanced_shape(region.shape, positions, idx):  # (else no index is read)
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
            if 0 not in _advanced_shape(region.shape, positions, idx):
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


def setitem(x: Tensor, key, value, overlap_ok: bool = False) -> Tensor:
    """``x[key] = value`` in place (see the module docstring); returns ``x``.  The region
    written must not have elements sharing memory unless ``overlap_ok`` (``fill_``)."""
    if not isinstance(x, Tensor):
        raise TypeError("setitem: expected a Tensor")
    v = value if isinstance(value, Tensor) else None
    if key is False:
        return x  # torch writes nothing, and checks nothing
    if isinstance(value, numbers.Number) and not (x.dtype.kind in "fV" and x.dtype.itemsize == 2):
        stored_scalar(value, x.dtype)  # (torch's overflow error: x[i] = 300 of uint8; a 16-bit
        # float it does not check: x[i] = 1e5 stores inf)
    k = parse_index(x.shape, key, fill=v is None or v.numel() == 1)
    region_shape = _advanced_shape(tuple(k.shape), tuple(k.positions), k.arrays) \
        if k.arrays else tuple(k.shape)
    if v is not None:
        _check_value_shape(v.shape, region_shape, bool(k.arrays))
    if k.arrays and (v is None or v.numel() == 1) and _byte_mask(key):
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           "unsigned char")
    info = getattr(x, "view_info", None)
    root = x if info is None else cast(Tensor, x._base)
    if (grad_mode.current.enabled and (x.requires_grad or (v is not None and v.requires_grad) or
                                      (info is not None and not info.alias
                                       and root.requires_grad))
            or root.op not in LEAF_OPS):
        if not k.identity:  # torch writes through the view x[key]
            x_key = node("slice", (x, leaf(np.array(k.starts, dtype=int64))), tuple(k.shape),
                         x.dtype, (tuple(k.struct),))
            _setitem_graph(x_key, _whole(k), value, overlap_ok)
        else:
            _setitem_graph(x, k, value, overlap_ok)
        return x
    target = writable(x, overlap_ok=True)
    region = target[_basic(tuple(k.struct), np.array(k.starts, dtype=np.int64))] \
        if not k.identity else target
    if not overlap_ok and overlaps(region):
        raise RuntimeError(OVERLAP)
    values = v.numpy() if v is not None else np.asarray(value)
    if k.arrays:
        _check_bounds(region.shape, tuple(k.positions), k.arrays)
        if 0 not in region_shape:
            region[_advanced(tuple(k.positions), [a.numpy() for a in k.arrays])] = values
    else:
        np.copyto(region, values, casting="unsafe")
    _mark_mutated(x)
    regenerate(root, only_graphs=True)
    return x


def _byte_mask(key) -> bool:
    """Whether ``key``'s only index tensor is a uint8 mask (torch fills a number through it with
    masked_fill_, which takes bool masks only)."""
    tensors = [k for k in _as_tuple(key)
               if isinstance(k, (Tensor, np.ndarray, list, tuple)) or k is True or k is False]
    return len(tensors) == 1 and getattr(tensors[0], "dtype", None) == np.uint8


def _check_value_shape(v: tuple[int, ...], region: tuple[int, ...], advanced: bool) -> None:
    """torch's errors for a value that does not broadcast to the region it is written to
    (leading dimensions of size 1 are dropped first, as torch does)."""
    trimmed = v
    while len(trimmed) > len(region) and trimmed[0] == 1:
        trimmed = trimmed[1:]
    if len(trimmed) <= len(region) and all(
            a == b or a == 1 for a, b in zip(reversed(trimmed), reversed(region))):
        return
    if advanced:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(v)} cannot be broadcast "
                           f"to indexing result of shape {list(region)}")
    if len(trimmed) > len(region):
        raise RuntimeError(f"expand(torch.FloatTensor{{{list(trimmed)}}}, size={list(region)}): "
                           f"the number of sizes provided ({len(region)}) must be greater or "
                           f"equal to the number of dimensions in the tensor ({len(trimmed)})")
    j = next(i for i, (a, b) in enumerate(zip(reversed(trimmed), reversed(region)))
             if a != b and a != 1)
    dim = len(region) - 1 - j
    raise RuntimeError(f"The expanded size of the tensor ({region[dim]}) must match the existing "
                       f"size ({trimmed[len(trimmed) - 1 - j]}) at non-singleton dimension {dim}.  "
                       f"Target sizes: {list(region)}.  Tensor sizes: {list(trimmed)}")


def _whole(k: _Key) -> _Key:
    """The key's advanced part alone, over the view its basic part makes."""
    w = _Key()
    for n in k.shape:
        _full(w, n)
    w.arrays, w.positions = k.arrays, k.positions
    return w


def _setitem_graph(x: Tensor, k: _Key, value, overlap_ok: bool) -> None:
    """``x[key] = value`` as a ``setitem`` node (``engine/inplace.py`` rebinds ``x``)."""
    positions = tuple(k.positions)
    if k.arrays:
        _check_bounds(tuple(k.shape), positions, k.arrays)
    arrays = [a if a.dtype == int64 else a.to(int64) for a in k.arrays]
    st = leaf(np.array(k.starts, dtype=int64))
    attrs = (tuple(k.struct), positions)

    def build(old: Tensor) -> Tensor:
        v = as_tensor(value).to(old.dtype) if isinstance(value, Tensor) else \
            leaf(scalar_array(value, old.dtype) if type(value) is int else
                 np.asarray(value, dtype=old.dtype))
        return node("setitem", (old, v, st, *arrays), old.shape, old.dtype, attrs)
    _write(x, build, (value,), check_cast=False, overlap_ok=overlap_ok)


def masked_fill(input, mask, value) -> Tensor:
    """``x`` with ``value`` (a number or a 0-d tensor) where the bool ``mask`` (broadcast to
    ``x``'s shape) is true."""
    from tinyopt.engine.ops.elementwise import broadcast_shape, where
    input = as_tensor(input)
    m = as_tensor(mask)
    refuse_unsigned("masked_fill", input)
    if m.dtype != bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{m.dtype}")
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    if broadcast_shape("masked_fill", input.shape, m.shape) != input.shape:
        raise RuntimeError(f"The size of the mask {list(m.shape)} must match the size of the "
                           f"tensor {list(input.shape)} it fills")
    v = (value.to(input.dtype) if isinstance(value, Tensor)
         else leaf(stored_scalar(value, input.dtype)))
    return where(m, v, input)
