"""In-place writes: into storage, or, with autograd, recorded in the graph as writes to the base.

``x.add_(y)``, ``x[i] = v``, ``x.copy_(src)``... all come here (``Tensor._inplace``) with a
``build(old) -> new`` function giving the tensor's new value from its old one.  Three cases:

1. *A plain write* (no gradient to record, and the memory is concrete: a concrete tensor, a
   Parameter or a view of one): the new value is computed and written into the base's memory
   through the view (numpy), and the storage's version is bumped.
2. *A recorded write* (grad mode on and the tensor or an operand requires grad), torch's
   functionalization: the written view's new value is ``build`` of the old base's region (the
   view ops replayed over it, so the op's gradient goes to the base, as torch's ``CopySlices``
   sends it); the base becomes a ``view_scatter`` node putting it into the old base (for a write
   to the base itself, the base simply becomes the new node), and every live view of the storage
   is regenerated from the new base by replaying its view ops.  Each rebound tensor keeps its
   previous version in ``prev_version``, so graph nodes built before the write still read what
   they read then (``graph.resolve_sources``); each write is stamped on the engine's clock, so
   ``graph.check_saved`` raises torch's error where a value saved for backward was written
   (``engine/saved.py``).
3. *A write autograd does not see* (a write under ``no_grad`` into a tensor that requires grad
   and is not concrete, or through a ``detach()``/``.data`` alias): as 2, with a ``view_scatter``
   whose gradient ignores the written value, so the base's values change and its gradient does
   not.

Before any of it, torch's checks (``check_inplace``): leaves and views of leaves that require
grad, views made under ``no_grad`` or by multi-output functions, and tensors whose elements
overlap in memory (expanded ones) raise torch's errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from tinyopt.engine import grad_mode
from tinyopt.engine import ops as F
from tinyopt.engine.op import node, view_array, view_node
from tinyopt.engine.storage import (MULTI, NO_GRAD, Storage, ViewInfo, ViewStep, storage_of,
                                    version_counter)
from tinyopt.engine.tensor import (LEAF_OPS, MUTATIONS, USER_EMPTY_ARRAYS, Parameter, Tensor,
                                   _Alias, _check_result, _ids, _mark_mutated, make_node)

OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation.")
VIEW_OF_ALIAS = ("tinyopt does not support an in-place write with an operand that requires grad "
                 "into a view of a detach()/.data alias (PyTorch makes the alias itself a graph "
                 "node, which tinyopt does not): write into the alias itself, or into a clone() "
                 "of it")
_MULTI_TAIL = (" This view is the output of a function that returns multiple views. Such "
               "functions do not allow the output views to be modified inplace. You should "
               "replace the inplace operation by an out-of-place one.")
_NO_GRAD_TAIL = (" Given that this use case is ambiguous and error-prone, it is forbidden. You "
                 "can clarify your code by moving both the view and the inplace either both "
                 "inside the no_grad block (if you don't want the inplace to be tracked) or both "
                 "outside (if you want the inplace to be tracked).")


def write(t: Tensor, build: Callable[[Tensor], Tensor], operands: tuple,
          check_cast: bool = True, overlap_ok: bool = False) -> None:
    """Make ``t`` hold ``build(t)`` in place (see the module docstring); ``overlap_ok`` when
    the caller checked the written region's overlap itself (``x[key] = v``, ``fill_``)."""
    info: ViewInfo | None = getattr(t, "view_info", None)
    root = t if info is None else _base(t)
    diff = grad_mode.current.enabled and (
        t.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in operands)
        or (info is not None and not info.alias and root.requires_grad))
    if diff:
        check_inplace(t, info)
        if info is not None and info.alias and len(info.steps) > info.alias_at and any(
                isinstance(o, Tensor) and o.requires_grad for o in operands):
            raise RuntimeError(VIEW_OF_ALIAS)
    if not diff and root.op in LEAF_OPS:
        target = writable(t, overlap_ok)
        new = build(_Alias._of(t) if t.op == "param" else t)
        _check_result(t, new, check_cast)
        value = new.numpy()
        if value is not target:
            np.copyto(target, value, casting="unsafe")
        _mark_mutated(t)
        regenerate(root, only_graphs=True)
        return
    overlap = False
    if info is not None:
        overlap = _overlaps(*geometry(t)[:2])
        if overlap and not overlap_ok:
            raise RuntimeError(OVERLAP)
    through = diff and (info is None or not info.alias)
    if not through and root.op in LEAF_OPS:
        # an alias written with autograd: its value goes into the memory now, and it becomes
        # a node of its own graph (torch: ``p.data.add_(w)`` is ``AddBackward0``, p changes)
        old_t = make_node("input", (), (), t.shape, t.dtype, False, np.array(writable(t, True)))
        old_t.node_id = t.node_id  # (a private copy: the memory is about to change under it)
        if t.op not in LEAF_OPS and t.requires_grad:  # (its graph from an earlier write: kept)
            old_t = scatter(snapshot(t), old_t, (), through=False)
        new_t = _built(t, build, old_t, check_cast)
        np.copyto(writable(t, overlap_ok), new_t.numpy(), casting="unsafe")
        _mark_mutated(t)
        become(t, new_t, old_t)
        return
    s = storage_of(root)
    stamp = next(_ids)  # before the new nodes: they see the written storage
    counter = version_counter(t)
    counter.bump(stamp)
    MUTATIONS.last = max(MUTATIONS.last, stamp)
    old_root = snapshot(root, stamp)
    skip = None
    if info is None:
        new = _built(root, build, old_root, check_cast, s, stamp)
        if not diff and root.requires_grad:  # under no_grad: the gradient ignores the write
            new = scatter(old_root, new, (), through=False)
        become(root, new, old_root)
    else:
        old_t = snapshot(t, stamp)
        if through:  # torch's CopySlices: the op reads the base's region, its gradient goes there
            region = old_root
            for step in info.steps:
                region = view_node(step, region)
        new_t = _built(t, build, region if through else old_t, check_cast, s, stamp)
        become(root, scatter(old_root, new_t, info.steps, through, overlap), old_root)
        if diff and not through:  # a detach()/.data alias keeps the graph of its own write
            become(t, new_t, old_t)
            skip = t
    regenerate(root, skip, stamp, rebase=counter is s)


def check_inplace(t: Tensor, info: ViewInfo | None) -> None:
    """torch's checks before an in-place op that autograd records (``check_inplace``)."""
    if info is not None:
        if info.creation in (NO_GRAD, MULTI):
            if info.creation == MULTI and info.name and t.requires_grad:
                head = f"{info.name} is a view and is being modified inplace."
            else:
                head = ("A view was created in no_grad mode and is being modified inplace with "
                        "grad mode enabled.")
            raise RuntimeError(head + (_MULTI_TAIL if info.creation == MULTI else _NO_GRAD_TAIL))
        base = _base(t)
        if not info.alias and base.requires_grad and base.op in ("input", "param"):
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
    if t.requires_grad and t.op in ("input", "param"):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def writable(t: Tensor, overlap_ok: bool = False) -> np.ndarray:
    """The numpy array a plain write into ``t`` goes to: its value (a concrete view's is a view
    of its base's memory), or for a view that is a graph node, its view of the base's memory."""
    if t.op in LEAF_OPS:
        arr = t.value
    else:
        info = getattr(t, "view_info", None)
        if info is None or _base(t).op not in LEAF_OPS:
            raise AssertionError("writable: a graph node that is not a view of concrete memory")
        arr = view_array(info.steps, _base(t).value)
    if not overlap_ok and overlaps(arr):
        raise RuntimeError(OVERLAP)
    if not arr.flags.writeable:
        raise RuntimeError("the tensor's memory is read-only (a read-only numpy array, or one "
                           "numpy broadcast): clone() it before writing in place")
    return arr


def overlaps(arr: np.ndarray) -> bool:
    """Whether elements of ``arr`` share memory: torch's ``has_internal_overlap`` YES (a
    dimension of size > 1 and stride 0)."""
    return _overlaps(arr.shape, arr.strides)


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return any(n > 1 and s == 0 for n, s in zip(shape, strides))


def geometry(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """``t``'s shape, strides and offset (in bytes) in its base's memory, as torch's would be:
    a graph node that is not a view is contiguous; a view's are computed by replaying its view
    ops over a stand-in array of the base's geometry that owns no memory (only strides are
    read, never elements), indexing ones by torch's rule (``_indexed``)."""
    info = getattr(t, "view_info", None)
    if info is None:
        if t.op in LEAF_OPS:
            return t.shape, _leaf_strides(t), 0
        return t.shape, _contiguous_strides(t.shape, t.dtype.itemsize), 0
    base = _base(t)
    if base.op in LEAF_OPS:
        shape, strides = base.shape, _leaf_strides(base)
    else:
        shape, strides = base.shape, _contiguous_strides(base.shape, base.dtype.itemsize)
    origin = v = stand_in(shape, strides, base.dtype)
    moved = 0  # (bytes the indexing steps moved the start, which the stand-in does not hold)
    for step in info.steps:
        if step.op == "slice":
            shape, strides, by = _indexed(step, v.shape, v.strides, v.itemsize)
            v = np.lib.stride_tricks.as_strided(v, shape, strides, writeable=False)
            moved += by
        else:
            v = view_array((step,), v)
    offset = v.__array_interface__["data"][0] - origin.__array_interface__["data"][0] + moved
    return v.shape, v.strides, offset


def _indexed(step: ViewStep, shape: tuple[int, ...], strides: tuple[int, ...],
             itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The shape, strides and start (bytes) of basic indexing ``step`` over an array of
    ``shape`` and ``strides``, by torch's rules, left to right: a slice starts at its start and
    multiplies the stride by its step, an empty one too (numpy's keeps start 0 and step 1); an
    integer moves the start; None inserts a dimension of stride size x stride of the one it
    goes before (1 at the end; numpy's: 0)."""
    shp, st, by, d = list(shape), list(strides), 0, 0
    starts = iter(int(s) for s in step.extras[0].value)
    for e in step.attrs[0]:
        if e[0] == "s":
            by += next(starts) * st[d]
            shp[d], st[d] = e[1], st[d] * e[2]
            d += 1
        elif e[0] == "i":
            by += next(starts) * st[d]
            del shp[d], st[d]
        else:
            st.insert(d, shp[d] * st[d] if d < len(shp) else itemsize)
            shp.insert(d, 1)
            d += 1
    return tuple(shp), tuple(st), by


def stand_in(shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A read-only array of ``shape`` and ``strides`` over one element of memory: numpy view ops
    over it compute strides and offsets, and nothing may read its elements."""
    return np.lib.stride_tricks.as_strided(np.empty(1, dtype), shape, strides, writeable=False)


def _base(t: Tensor) -> Tensor:
    """The base of view ``t`` (set with its ``view_info``)."""
    return cast(Tensor, t._base)


def _leaf_strides(t: Tensor) -> tuple[int, ...]:
    """A leaf's strides in bytes: its array's, or, for an empty one (whose array may keep any
    strides), the contiguous strides torch gives an empty tensor ((0, 3): (3, 1) elements) -
    unless the array is the user's (``from_numpy``, ``from_dlpack``), whose strides torch
    keeps, as numpy gives them."""
    a = t.value
    if a.size or USER_EMPTY_ARRAYS.get(id(a)) is a:
        return a.strides
    return _contiguous_strides(a.shape, a.itemsize)


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


# ---- rebinding ----------------------------------------------------------------------------------
def snapshot(t: Tensor, stamp: int = 0) -> Tensor:
    """A tensor holding ``t``'s current version (its node or value, id and storage), which
    nodes built before the write at ``stamp`` keep reading (and the write's own node, as
    torch's "original self": a copy no later write can reach, ``graph.check_saved``)."""
    old = make_node(t.op, t.srcs, t.attrs, t.shape, t.dtype, t.requires_grad, t.value)
    old.node_id = t.node_id
    old.superseded_at = stamp
    old.name = t.name
    old.prev_version = getattr(t, "prev_version", None)
    s = getattr(t, "shared_storage", None)
    if s is not None:
        old.shared_storage = s
    return old


def become(t: Tensor, new: Tensor, old: Tensor) -> None:
    """``t`` takes ``new``'s place in the graph (its op, sources, value and id); ``old`` is the
    version it had."""
    t.op, t.srcs, t.attrs, t.requires_grad = new.op, new.srcs, new.attrs, new.requires_grad
    t.value = new.value if not isinstance(t, _Alias) else None
    t.node_id = new.node_id
    t.prev_version = old
    MUTATIONS.last = max(MUTATIONS.last, t.node_id)


def _built(t: Tensor, build: Callable[[Tensor], Tensor], old: Tensor, check_cast: bool,
           storage: Storage | None = None, stamp: int = 0) -> Tensor:
    """``build(old)`` checked against ``t``, cast to its dtype, and a new node (never a leaf or
    ``old`` itself, which would alias the version before the write).  The op's own node (made
    after ``stamp``, the write's) is what ``storage`` now holds: a later write into it
    invalidates that node's saved output (``engine/saved.py``)."""
    new = build(old)
    if storage is not None and new.node_id > stamp and getattr(new, "shared_storage", None) is None:
        new.shared_storage = storage
    _check_result(t, new, check_cast)
    if new.dtype != t.dtype:
        new = F.to(new, t.dtype)
    if new.op in LEAF_OPS or new is old:
        new = F.clone(new)
    return new


def scatter(base: Tensor, src: Tensor, steps: tuple[ViewStep, ...] = (),
            through: bool = True, overlap: bool = False) -> Tensor:
    """The node ``base`` with its view ``steps`` replaced by ``src`` (``ops/view_scatter.py``);
    when not ``through``, ``src`` enters without a gradient and ``base``'s passes unchanged.
    ``overlap``: the view's elements share memory (a ``fill_`` of an expanded view), which
    torch can write but not differentiate."""
    if not through:
        src = view_node(ViewStep("alias", (), src.shape, src.dtype, ()), src)
    extras = tuple(e for s in steps for e in s.extras)
    metas = tuple((s.op, s.attrs, s.shape, s.dtype, len(s.extras)) for s in steps)
    with grad_mode.enable_grad():
        return node("view_scatter", (base, src) + extras, base.shape, base.dtype,
                    (metas, through, overlap))


def regenerate(root: Tensor, skip: Tensor | None = None, stamp: int = 0,
               rebase: bool = True, only_graphs: bool = False) -> None:
    """Rebind every live view of ``root``'s storage (but ``skip``) to its view ops replayed over
    ``root``'s new node: what reads a view after a write through another sees the write.
    ``rebase``: the storage's version moved (not a ``.data`` write), so a multi-output view can
    no longer be differentiated, as in torch.  ``only_graphs``: after a plain write into
    concrete memory, only the ``detach()``/``.data`` aliases that a recorded write made graph
    nodes of their own (concrete views read the memory itself; these read it again, as torch's
    share it)."""
    s = getattr(root, "shared_storage", None)
    if s is None:
        return
    for v in s.views():
        info: ViewInfo = v.view_info
        if v is skip or only_graphs and not (info.alias and v.requires_grad
                                             and v.op not in LEAF_OPS):
            continue
        old = snapshot(v, stamp)
        with grad_mode.set_grad_enabled(info.creation != NO_GRAD and not info.alias):
            cur = root
            for step in info.steps:
                cur = view_node(step, cur)
            if cur is root:
                cur = view_node(ViewStep("alias", (), root.shape, root.dtype, ()), root)
            if rebase and info.creation == MULTI and cur.requires_grad:  # torch: an error on use
                head = (f"{info.name} is a view and its base or another view of its base has "
                        f"been modified inplace." if old.requires_grad else
                        "A view was created in no_grad mode and its base or another view of its "
                        "base has been modified inplace with grad mode enabled.")
                cur = view_node(ViewStep("rebased_multi_view", (head + _MULTI_TAIL,), cur.shape,
                                         cur.dtype, ()), cur)
        if info.alias and old.requires_grad:  # an alias with a graph of its own keeps it
            graph = old  # (an earlier rebinding's values are replaced: its graph is enough)
            if old.op == "view_scatter" and not old.attrs[0] and not old.attrs[1]:
                graph = old.srcs[0]
            cur = scatter(graph, cur, (), through=False)
        become(v, cur, old)


def reshape(t: Tensor, build: Callable[[Tensor], Tensor]) -> None:
    """``t.unsqueeze_(0)``, ``t.t_()`` and the other in-place shape changes: ``t`` becomes
    ``build(t)``, a view of its own storage (or for ``resize_``/``as_strided_``, a concrete
    tensor over its memory); nodes built before keep reading the old ``t`` through
    ``prev_version``.
    A tensor other live tensors view is refused: their view steps are made against its shape."""
    if isinstance(t, (Parameter, _Alias)):
        raise RuntimeError("in-place shape changes are not supported on a Parameter or its .data "
                           "(use an out-of-place view such as unsqueeze)")
    if grad_mode.current.enabled and t.requires_grad and t.op in ("param", "input"):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    info: ViewInfo | None = getattr(t, "view_info", None)
    s = getattr(t, "shared_storage", None)
    if info is None and s is not None and any(v is not t for v in s.views()):
        raise RuntimeError("tinyopt does not support an in-place shape change (unsqueeze_, t_, "
                           "resize_...) of a tensor that other live tensors view: use the "
                           "out-of-place op (x = x.unsqueeze(0))")
    old = snapshot(t)
    if info is not None:  # so the new view's steps start from t's base, as t's do
        old.view_info, old._base = info, t._base
    new = build(old)
    if new.op in LEAF_OPS and getattr(new, "view_info", None) is None and info is not None:
        raise RuntimeError("tinyopt supports resize_ and as_strided_ only on a tensor that is "
                           "not a view (clone() it first)")
    become(t, new, old)
    t.shape = new.shape
    if info is not None:
        t.view_info, t._base = new.view_info, new._base


def relocate(s: Storage, array: np.ndarray) -> None:
    """Move the memory of storage ``s``'s concrete base to ``array`` (its shape and dtype; the
    values are copied in): the base and every view of it read and write ``array`` from now on
    (what ``share_memory_`` needs).  Views that are graph nodes follow by themselves."""
    base = s.base
    if base is None or base.value is None:
        raise RuntimeError("relocate: the storage's base has no memory of its own (a graph "
                           "node, or gone)")
    if array.shape != base.shape or array.dtype != base.dtype:
        raise ValueError(f"relocate: an array of shape {base.shape} and dtype {base.dtype} "
                         f"is needed, got {array.shape} {array.dtype}")
    np.copyto(array, base.value)
    base.value = array
    for v in s.views():
        info = v.view_info
        if info is not None and v.value is not None and not isinstance(v, _Alias):
            v.value = view_array(info.steps, array)  # (a Parameter's aliases follow it)


def alias_value(t: Tensor) -> Any:
    """For a realized view of a base that has a value: its value as a numpy view of the base's
    (so the two share memory, as torch's do); None when there is none to share."""
    info = getattr(t, "view_info", None)
    if info is None:
        return None
    base = _base(t)
    bv = base.value
    if bv is None:
        return None
    return view_array(info.steps, bv)
