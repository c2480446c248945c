"""Graphs: topological order, structural signatures and reverse-mode autodiff.

``toposort`` is ``ggml_build_forward_expand``: every node after its sources, each node once (in
creation order, so the same code builds the same order on every step).  The signature of a graph
captures everything a compiled plan depends on (ops, attributes, shapes, dtypes, wiring, which
leaves are parameters and which are inputs) and nothing it does not (the values of the leaves), so
a new batch of the same shape finds the same plan.

Versions.  A node reads its sources when the graph runs, not when it was built.  A write with
autograd rebinds the written tensors to new nodes (``engine/inplace.py``) and the nodes built
before keep reading the versions they were built from (``resolve_sources``); a plain write into
concrete memory cannot be undone, so a node built before it that reads that memory raises
instead (``check_versions``).  Every write stamps the storage with the engine's clock (creation
ids and stamps share one counter), which also dates what each node saved for its backward pass:
``check_saved`` raises torch's "modified by an inplace operation" error where torch does
(``engine/saved.py``).  Graphs whose nodes are all newer than the latest write skip both checks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import attrgetter

import numpy as np

from tinyopt.engine.dtypes import tensor_type_name
from tinyopt.engine import autocast
from tinyopt.engine.grad_mode import no_fold, no_grad
from tinyopt.engine.inplace import OVERLAP
from tinyopt.engine.op import OPS, accumulate
from tinyopt.engine.saved import saved
from tinyopt.engine.tensor import _SECOND_BACKWARD, LEAF_OPS, MUTATIONS, Tensor, make_node


def toposort(roots: list[Tensor]) -> list[Tensor]:
    """All nodes reaching ``roots``, sources before consumers: by creation order, which every
    source precedes its consumers in.  Raises if a node's source was modified in place after
    the node was built (see the module docstring)."""
    seen: dict[int, Tensor] = {}
    stack = list(roots)
    pop, push = stack.pop, stack.extend
    last = MUTATIONS.last
    while stack:
        t = pop()
        k = id(t)
        if k not in seen:
            seen[k] = t
            srcs = t.srcs
            if srcs:
                push(srcs if t.node_id > last else resolve_sources(t))
    order = sorted(seen.values(), key=_creation)
    if order and MUTATIONS.last > order[0].node_id:
        check_versions(order)
    return order


def signature(nodes: list[Tensor]) -> tuple:
    """The structural key of a topologically sorted graph (see the module docstring)."""
    index = {id(t): i for i, t in enumerate(nodes)}
    return tuple((t.op, t.attrs, t.shape, t.dtype.char, t.requires_grad,
                  tuple(index[id(s)] for s in t.srcs)) for t in nodes)


def toposort_signed(roots: list[Tensor]) -> tuple[list[Tensor], dict[int, int], tuple]:
    """``toposort(roots)``, each node's position in it (keyed by ``id``) and its ``signature``:
    realizing a graph needs all three on every training step.  Raises as :func:`toposort`."""
    order = toposort(roots)
    # one loop, no comprehension per node (a call each): most nodes have one or two sources
    index: dict[int, int] = {}
    sig = []
    entry = sig.append
    for i, t in enumerate(order):
        index[id(t)] = i
        srcs = t.srcs
        if not srcs:
            wiring: tuple = ()
        elif len(srcs) == 1:
            wiring = (index[id(srcs[0])],)
        elif len(srcs) == 2:
            wiring = (index[id(srcs[0])], index[id(srcs[1])])
        else:
            wiring = tuple([index[id(s)] for s in srcs])
        entry((t.op, t.attrs, t.shape, t.dtype.char, t.requires_grad, wiring))
    return order, index, tuple(sig)


_creation = attrgetter("node_id")


def resolve_sources(t: Tensor) -> tuple[Tensor, ...]:
    """``t``'s sources as they were when ``t`` was built: a source that in-place autograd turned
    into a newer node since (``h.add_(1)`` after ``y = f(h)``) is replaced, for good, by the
    version ``t`` read, which that rebuild kept in ``prev_version``."""
    srcs = t.srcs
    if not any(s.node_id > t.node_id for s in srcs):
        return srcs
    fixed = []
    for s in srcs:
        while s.node_id > t.node_id and getattr(s, "prev_version", None) is not None:
            s = s.prev_version
        fixed.append(s)
    t.srcs = tuple(fixed)
    return t.srcs


def _version(t: Tensor) -> int:
    """The id of the latest change to what ``t`` reads: its creation (or in-place rebuild), an
    in-place write into its storage, or, for a view, a change to what it views."""
    v = t.node_id
    m = getattr(t, "write_stamp", 0)
    base = getattr(t, "_base", None)
    if base is not None:
        m = max(m, getattr(base, "write_stamp", 0))
    if t.srcs and OPS[t.op].view is not None:
        v = max(v, _version(t.srcs[0]))
    return max(v, m)


def check_versions(order: list[Tensor]) -> None:
    """Raise if a node of ``order`` (sorted by id) reads concrete memory written in place after
    the node was built: it would compute with the new values."""
    last = MUTATIONS.last
    for t in order:
        if t.node_id >= last:
            break
        if not t.srcs or OPS[t.op].view is not None:
            continue
        for s in t.srcs:
            if _version(s) > t.node_id:
                raise RuntimeError(
                    version_error(s, t.node_id) + " (tinyopt computes graph nodes when their value "
                    "is needed, so a node built before an in-place write into memory it reads "
                    "would see the new values: compute it first with .item(), .numpy() or "
                    ".detach(), or use an out-of-place op.)")


def check_saved(order: list[Tensor]) -> None:
    """Raise torch's error if a node of ``order`` (sorted by id) that a backward pass goes
    through saved a value written in place since it was built (``engine/saved.py``), or cannot
    be differentiated; the first error torch's backward pass would meet (it goes from the loss
    backwards; a rebased multi-output view fails as soon as it is used).  Only nodes made before
    the latest write can fail (the nodes a write makes are dated before it ends too)."""
    last = MUTATIONS.last
    older = []
    for t in order:
        if t.node_id > last:
            break
        if t.requires_grad and t.srcs:
            older.append(t)
    for t in older:
        if t.op == "rebased_multi_view":
            raise RuntimeError(t.attrs[0])
    for t in reversed(older):
        if t.op == "view_scatter" and t.attrs[2] and t.attrs[1] and t.srcs[0].requires_grad:
            raise RuntimeError(OVERLAP)
        for s in saved(t):  # (a version already superseded when t was made: a copy)
            st = getattr(s, "shared_storage", None)
            if (st is not None and st.written_since(t.node_id)
                    and getattr(s, "superseded_at", t.node_id) >= t.node_id):
                raise RuntimeError(version_error(s, t.node_id))


def version_error(s: Tensor, since: int) -> str:
    """torch's words for ``s`` modified in place after ``since`` (the engine's clock)."""
    base = getattr(s, "_base", None)
    st = (getattr(s, "shared_storage", None)
          or getattr(s if base is None else base, "shared_storage", None))
    now = 0 if st is None else st.version
    then = 0 if st is None else st.version_at(since)
    what = f"[{tensor_type_name(s.dtype)} {list(s.shape)}]"
    owner = st.base if st is not None else None
    view = getattr(s, "view_info", None)
    if view is not None and not view.alias:
        what += ", which is output 0 of AsStrided"
    elif owner is not None and owner.op not in LEAF_OPS:
        name = ("torch::autograd::CopySlices" if owner.op == "view_scatter" else
                "".join(p.capitalize() for p in owner.op.split("_")))
        what += f", which is output 0 of {name}"
    return (f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: {what} is at version {now}; expected version {then} instead. "
            f"Hint: enable anomaly detection to find the operation that failed to compute its "
            f"gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")


def held_candidates(sig: tuple, roots: set[int]) -> list[tuple[int, int]]:
    """For a signature, the positions a program may hold a node at (non-leaf nodes other than
    ``roots``) and, for each, the CPython reference count above which it is held: references
    beyond the sorted list itself and its consumers' sources.  Depends on the signature only, so
    the plan cache keeps it beside the plans of that signature (see :func:`held`)."""
    counts = [0] * len(sig)
    for entry in sig:
        for i in entry[5]:
            counts[i] += 1
    base = _BASE_REFS
    return [(i, base + counts[i]) for i, entry in enumerate(sig) if entry[5] and i not in roots]


_refcount = sys.getrefcount


def held(order: list[Tensor], candidates: list[tuple[int, int]], index: dict[int, int]
         ) -> list[int]:
    """Positions of the non-leaf nodes of the sorted graph ``order`` (``index``: each node's
    position, keyed by ``id``) that the program still holds (a variable, a list, another graph),
    from ``held_candidates`` of its signature: realizing the graph computes them anyway, so
    their values are kept (see ``tensor``'s docstring).

    A view holds its base (``_base``), so a base whose views are nodes of this graph that are
    themselves unheld (``y`` in ``y.transpose(1, 2).contiguous()``, the logits under
    ``logits.view(-1, V)``) is not held by the program: keeping it would copy it out of every
    run (GPT-2's logits: 103 MB a step) and keep its buffer alive to the end of the plan."""
    over = [(i, most) for i, most in candidates if _refcount(order[i]) > most]
    if not over:
        return over
    views = _views_in(order, over, index)
    if not views:
        return [i for i, _ in over]
    unheld = {i for i, _ in candidates} - {i for i, _ in over}  # (roots are not candidates)
    out = []
    for i, most in over:
        vs = views.get(i, ())
        if _refcount(order[i]) > most + len(vs) or not unheld.issuperset(vs):
            out.append(i)
    return out


def _views_in(order: list[Tensor], over: list[tuple[int, int]], index: dict[int, int]
              ) -> dict[int, list[int]]:
    """For the positions ``over`` of ``order`` holding a base of views: where its views are in
    ``order``.  A base's storage lists its live views (``storage.note_view``), so this looks
    at a few views, not at every node (an episode's loss: ~600 nodes, one base of two views
    an environment step; 2-3 us an environment step)."""
    found: dict[int, list[int]] = {}
    for i, _ in over:
        s = getattr(order[i], "shared_storage", None)
        if s is None:
            continue
        for v in s.views():  # (a view's storage is its base's: its views are not its own)
            if getattr(v, "_base", None) is order[i]:
                j = index.get(id(v))
                if j is not None:
                    found.setdefault(i, []).append(j)
    return found


def _calibrate() -> int:
    """The reference count ``held`` sees for a node held only by the list and by no
    consumer (interpreters differ in how many references a call adds)."""
    x = make_node("input", (), (), (), np.dtype(np.float32))
    order = [x, make_node("neg", (x,), (), (), x.dtype)]
    return _refcount(order[1])


_BASE_REFS = _calibrate()


def use_counts(nodes: list[Tensor]) -> dict[int, int]:
    """How many times each node is used as a source (ggml's ``n_children``), keyed by ``id``."""
    counts = {id(t): 0 for t in nodes}
    for t in nodes:
        for s in t.srcs:
            counts[id(s)] += 1
    return counts


def backward_graph(loss: Tensor, nodes: list[Tensor], wrt: list[Tensor],
                   seed: Tensor | None = None,
                   on_grad: Callable[[Tensor, Tensor], Tensor] | None = None
                   ) -> dict[int, Tensor]:
    """Build the gradient graph of ``loss`` with respect to each tensor in ``wrt``.

    ``nodes`` is the topological order of the graph reaching ``loss``.  Walks it in reverse, as
    micrograd does, calling each op's backward rule; the rules emit ordinary graph nodes, reusing
    the forward nodes they need.  ``on_grad(t, g)``, when given, may replace each tensor's
    complete gradient (hooks).  Returns ``{id(t): grad}`` for the ``wrt`` tensors that ``loss``
    depends on.  Backpropagating into a value whose graph a previous backward freed raises.
    """
    from tinyopt.engine.ops.creation import constant_node

    with no_grad(), no_fold(), autocast.disabled():  # backward ops: their forward's dtypes
        grads: dict[int, Tensor] = {id(loss): seed if seed is not None else
                                    constant_node(loss.shape, 1.0, loss.dtype)}
        for t in reversed(nodes):
            g = grads.get(id(t))
            if g is None or not t.requires_grad:
                continue
            if on_grad is not None:
                g = grads[id(t)] = on_grad(t, g)
            if t.op in LEAF_OPS:
                if t.op == "freed":
                    raise RuntimeError(_SECOND_BACKWARD)
                continue
            rule = OPS[t.op].backward
            src_grads = rule(t, g)
            for s, gs in zip(t.srcs, src_grads):
                if gs is None or not s.requires_grad:
                    continue
                if gs.shape != s.shape:
                    raise AssertionError(f"backward of {t.op} gave a gradient of shape {gs.shape} "
                                         f"for a source of shape {s.shape}")
                prev = grads.get(id(s))
                grads[id(s)] = gs if prev is None else accumulate(prev, gs)
    return {id(t): grads[id(t)] for t in wrt if id(t) in grads}
