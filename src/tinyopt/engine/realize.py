"""Realization: turn requested tensors (and a loss to differentiate) into numbers.

``realize`` sorts the graph reaching its targets, finds or compiles the plan for that structure in
the plan cache, binds this graph's leaves and runs it.  This is the one place the lazy front end
meets the compiled back end.
"""

from __future__ import annotations

import weakref

import numpy as np

from tinyopt.engine.graph import toposort, toposort_signed
from tinyopt.engine.plan import CACHE, Plan
from tinyopt.engine.tensor import Tensor


def realize(outputs: list[Tensor], loss: Tensor | None = None) -> list[np.ndarray]:
    """Values of ``outputs`` as new arrays; with ``loss``, also backpropagate it into ``.grad``.

    With a loss, its value is appended to the returned list and cached on the loss tensor, so a
    following ``loss.item()`` costs nothing.
    """
    todo = [t for t in outputs if t._value is None or loss is not None]
    if not todo and loss is None:
        return [t._value.copy() for t in outputs]
    roots = list(outputs) + ([loss] if loss is not None else [])
    fwd, index, sig = toposort_signed(roots)
    effects = _effects_in(fwd) if _PENDING else []
    if effects:  # run them as extra outputs of this plan (they are part of its signature)
        roots = list(outputs) + effects + ([loss] if loss is not None else [])
        fwd, index, sig = toposort_signed(roots)
    plan = CACHE.get(fwd, list(outputs) + effects, loss, (index, sig))
    values = plan.run([fwd[i] for i in plan.fwd_leaves])
    for e in effects:
        _PENDING.pop(id(e), None)
    result = []
    for t, v in zip(outputs, values):
        if not t.is_leaf:
            t._value = v
            v = v.copy()  # the cached value stays private
        result.append(v)
    if loss is not None:
        loss._value = values[-1]
        result.append(values[-1].copy())
        for hook in BACKWARD_HOOKS:
            hook()
    return result


BACKWARD_HOOKS: list = []
"""Callables run after every backward, once the gradients are in ``.grad``
(``DistributedDataParallel`` averages them over the ranks there)."""


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
# dropped: a lazy graph that is never computed has no side effects.
_PENDING: dict[int, tuple[weakref.ref, Tensor]] = {}


def add_effect(anchor: Tensor, effect: Tensor) -> None:
    """Run node ``effect`` with the first realization that computes ``anchor`` (see above)."""
    key = id(effect)
    _PENDING[key] = (weakref.ref(anchor, lambda _, k=key: _PENDING.pop(k, None)), effect)


def _effects_in(nodes: list[Tensor]) -> list[Tensor]:
    """The pending effects whose anchor is in ``nodes``, in the order they were recorded."""
    ids = {id(t) for t in nodes}
    return [e for ref, e in list(_PENDING.values()) if id(ref()) in ids]
