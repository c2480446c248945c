"""Realization: turn requested tensors (and a loss to differentiate) into numbers.

``realize`` sorts the graph reaching its targets, finds or compiles the plan for that structure in
the plan cache, binds this graph's leaves and runs it.  This is the one place the lazy front end
meets the compiled back end.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.graph import toposort
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
    fwd = toposort(roots)
    plan = CACHE.get(fwd, list(outputs), loss)
    values = plan.run([fwd[i] for i in plan.fwd_leaves])
    result = []
    for t, v in zip(outputs, values):
        if not t.is_leaf:
            t._value = v
            v = v.copy()  # the cached value stays private
        result.append(v)
    if loss is not None:
        loss._value = values[-1]
        result.append(values[-1].copy())
    return result


def get_plan(*outputs: Tensor, loss: Tensor | None = None) -> Plan:
    """The compiled plan that realizing ``outputs`` (and backpropagating ``loss``) runs, from the
    plan cache or compiled now; e.g. ``get_plan(loss=loss).peak_bytes``.  Runs nothing."""
    fwd = toposort(list(outputs) + ([loss] if loss is not None else []))
    return CACHE.get(fwd, list(outputs), loss)
