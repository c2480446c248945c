"""Realization: turn requested tensors (and a loss to differentiate) into numbers.

``realize`` sorts the graph reaching its targets, finds or compiles the plan for that structure in
the plan cache, binds this graph's leaves and runs it; a structure the cache has not seen often
enough to compile runs node by node instead (``engine/eager.py``), with the same bits.  This is
the one place the lazy front end meets the compiled back end.

Nodes of the graph that the program still holds (``out`` in ``loss = f(model(x)); out = ...``)
are computed by the same run anyway: the plan also outputs them, and they keep their values, as
they would in eager PyTorch.  A node that needs no gradient becomes a concrete tensor holding its
value; after ``backward`` (without ``retain_graph``) so do the held nodes that require grad, as
values whose graph is freed.
"""

from __future__ import annotations

import weakref
from time import perf_counter

import numpy as np

from tinyopt.engine import eager, fpstate
from tinyopt.engine.gc_pause import paused
from tinyopt.engine.graph import check_saved, toposort, toposort_signed
from tinyopt.engine.inplace import alias_value
from tinyopt.engine.op import OPS
from tinyopt.engine.plan import Plan
from tinyopt.engine.plan_cache import CACHE
from tinyopt.engine.tensor import LEAF_OPS, MUTATIONS, Tensor, _freeze


@paused
def realize(outputs: list[Tensor], loss: Tensor | None = None, *,
            retain_graph: bool = False, update=None) -> list[np.ndarray]:
    """Values of ``outputs``; with ``loss``, also backpropagate it into ``.grad`` (and append its
    value to the returned list).  The returned arrays are the tensors' own values (shared, as
    ``Tensor.numpy()`` shares storage).  After a backward pass the graph is freed unless
    ``retain_graph``.  ``update`` steps parameters during the run (``engine/update_in_plan.py``)."""
    if loss is None:
        for t in outputs:
            if t.value is None and not _view_of_values(t) and not _op_of_values(t):
                break
        else:
            return [t.value for t in outputs]
    roots = list(outputs) + ([loss] if loss is not None else [])
    fwd, index, sig = toposort_signed(roots)
    if loss is not None and fwd and MUTATIONS.last > fwd[0].node_id:
        check_saved(fwd)
    effects = _effects_in(fwd) if _PENDING else []
    if effects:  # run them as extra outputs of this plan (they are part of its signature)
        roots = list(outputs) + effects + ([loss] if loss is not None else [])
        fwd, index, sig = toposort_signed(roots)
    wanted = list(outputs) + effects if effects else list(outputs)
    plan, kept, key = CACHE.find(fwd, wanted, loss, index, sig)
    if plan is None:  # a structure not worth a plan yet: run it node by node
        t0 = perf_counter()
        values = eager.run(fwd, wanted + kept, loss, update)
        CACHE.ran_eagerly(key, perf_counter() - t0)
    else:
        leaves = plan.leaves(fwd)
        values = plan.run(leaves) if update is None else plan.run(leaves, update)
    for e in effects:
        _PENDING.pop(id(e), None)
    free = loss is not None and not retain_graph
    for t, v in zip(wanted + kept, values):
        _keep(t, v, free)
    _share_views(wanted + kept)
    if loss is not None:
        _keep(loss, values[-1], free)
        if BACKWARD_HOOKS:
            backward_done()
        return [t.value for t in outputs] + [loss.value]
    return [t.value for t in outputs]


def _view_of_values(t: Tensor, depth: int = 8) -> bool:
    """Compute ``t`` without a plan when it is a short chain of views over tensors that have
    values (``h_n`` of a recurrent layer read after ``backward`` freed the layer's workspace: an
    RNN's ``hidden.detach()``), keeping a copy of the value as a plan's output would (a torch
    view keeps the view: it shares its base's memory); whether it did."""
    if t.value is not None:
        return True
    if depth == 0 or id(t) in _PENDING:
        return False
    op = OPS[t.op]
    if op.view is None or not all(_view_of_values(s, depth - 1) for s in t.srcs):
        return False
    value = op.view(t)(*[s.value for s in t.srcs])
    _keep(t, value if getattr(t, "view_info", None) is not None else np.array(value), False)
    return True


def _op_of_values(t: Tensor) -> bool:
    """Compute ``t`` with one call of its forward when every source holds a value, one of them
    a node an earlier realization computed, and nothing was written in place since ``t`` and
    those nodes were made (``v.item()`` after ``probs.item()`` realized the layer ``v`` reads:
    PyTorch had computed both): the rule by which an eager run takes a node's value instead of
    computing it again (``engine/eager.py``), so the same bits as realizing the whole graph;
    whether it did.  (One op over leaves alone is still a plan, replayed from the cache.)"""
    if _PENDING or t.op in LEAF_OPS or t.node_id <= MUTATIONS.last:
        return False
    op = OPS[t.op]
    if op.view is not None or op.forward is None:
        return False
    last = MUTATIONS.last
    computed = False
    for s in t.srcs:
        if s.value is None:
            return False
        if s.op not in LEAF_OPS:
            if s.node_id <= last:
                return False
            computed = True
    if not computed:
        return False
    out = np.empty(t.shape, t.dtype)
    token = fpstate.quiet()  # NaN/inf compute silently, as in PyTorch
    try:
        op.forward(t)(out, *[s.value for s in t.srcs])
    finally:
        fpstate.restore(token)
    _keep(t, out, False)
    return True


def _share_views(tensors: list[Tensor]) -> None:
    """Make the values of views among ``tensors`` views of their base's value, so the memory is
    shared as in torch (a later plain write into the base shows in them)."""
    for t in tensors:
        if getattr(t, "view_info", None) is not None and t.value is not None:
            v = alias_value(t)
            if v is not None:
                t.value = v


def _keep(t: Tensor, value: np.ndarray, free: bool) -> None:
    """Store a computed value: a node that needs no gradient becomes concrete; one that does
    becomes a freed value when ``free`` (its graph was just differentiated)."""
    if t.op in LEAF_OPS:
        return
    t.value = value
    if not t.requires_grad:
        _freeze(t, value, "input")
    elif free:
        _freeze(t, value, "freed")


def freeze_after_backward(fwd: list[Tensor], loss: Tensor) -> None:
    """Free the graph ``fwd`` of ``loss`` after a backward pass: nodes with values become freed
    values (the explicit autograd path's counterpart of ``realize(..., loss=...)``)."""
    for t in fwd:
        if t.op not in LEAF_OPS and t.value is not None and t.requires_grad:
            _freeze(t, t.value, "freed")


BACKWARD_HOOKS: list = []
"""Callables run after every backward, once the gradients are in ``.grad``
(``DistributedDataParallel`` averages them over the ranks there)."""


def backward_done() -> None:
    """Run :data:`BACKWARD_HOOKS`: called by every backward pass that accumulates into ``.grad``
    (this module's ``realize(loss=...)`` and autograd's explicit path)."""
    for hook in BACKWARD_HOOKS:
        hook()


def get_plan(*outputs: Tensor, loss: Tensor | None = None) -> Plan:
    """The compiled plan that realizing ``outputs`` (and backpropagating ``loss``) runs, from the
    plan cache or compiled now; e.g. ``get_plan(loss=loss).peak_bytes``.  Runs nothing."""
    fwd = toposort(list(outputs) + ([loss] if loss is not None else []))
    return CACHE.get(fwd, list(outputs), loss)


# ---- effects -------------------------------------------------------------------------------------
# An effect is a graph node whose kernel writes into arrays that enter the graph as input leaves
# (BatchNorm's running statistics), so a plan binds them per run like any leaf and never captures
# them.  ``add_effect(anchor, effect)`` records it when the graph is built; the first realization
# whose graph contains ``anchor`` runs it as an extra output, exactly once (later realizations of
# the same graph leave it out).  If the anchor is garbage-collected unrealized, the effect is
# dropped: a lazy graph that is never computed has no side effects.  An effect over concrete
# tensors ran when it was built (it is concrete already) and is not recorded.
_PENDING: dict[int, tuple[weakref.ref, Tensor]] = {}


def add_effect(anchor: Tensor, effect: Tensor) -> None:
    """Run node ``effect`` with the first realization that computes ``anchor`` (see above)."""
    if effect.op in LEAF_OPS:
        return
    key = id(effect)
    _PENDING[key] = (weakref.ref(anchor, lambda _, k=key: _PENDING.pop(k, None)), effect)


def _effects_in(nodes: list[Tensor]) -> list[Tensor]:
    """The pending effects whose anchor is in ``nodes``, in the order they were recorded."""
    ids = {id(t) for t in nodes}
    return [e for ref, e in list(_PENDING.values()) if id(ref()) in ids]
