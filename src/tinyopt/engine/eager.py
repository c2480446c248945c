"""Eager execution: a graph structure seen for the first time runs node by node, without a plan.

Compiling a plan (autodiff, sorting, memory planning, kernel closures: ~30 us a node) pays only
when the plan is replayed; code whose graph changes every step (episodes of every length, a
per-sample loop, a CRF's path) would compile a plan per step and use it once.  So realization
works like a tracing JIT: the plan cache counts the structures it misses, and a structure is
compiled only once it repeats (``plan.PlanCache.compile_after``); until then :func:`run`
computes the graph here, as PyTorch eager does, on the same kernels:

1. the forward graph gets the plan's rewrites (``fuse.fuse``), and autodiff the same backward
   graph a plan would compile (``graph.backward_graph``): the graph is the tape;
2. every node runs in topological order, its ``forward`` (or ``view``) writing into a fresh
   array, which is dropped after its last reader (the plan's liveness, with numpy's allocator
   in place of an arena);
3. gradients land in ``.grad`` as a plan delivers them: a fresh one is computed straight into
   the parameter's gradient storage (an optimizer's flat slot), an accumulated one is added.

Both paths run the same kernels on the same operands in the same order, so they give the same
bits (``tests/test_eager.py`` checks every op of the table, forward and backward); only where
the arrays live differs.  An update stepping parameters during a run (``fused_update``) is
offered no parameter here, so the optimizer steps after the backward, as when unfused: the
same bits again.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine import fpstate
from tinyopt.engine.fuse import fuse
from tinyopt.engine.graph import backward_graph
from tinyopt.engine.op import OPS
from tinyopt.engine.tensor import LEAF_OPS, Tensor


def run(fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None, update=None
        ) -> list[np.ndarray]:
    """Compute ``outputs`` of the sorted graph ``fwd`` (and backpropagate ``loss`` into the
    leaves' ``.grad``): the values of ``outputs`` (and the loss, last), as ``Plan.run``
    returns them."""
    params = [t for t in fwd if t.requires_grad and (t.op == "param" or t.op == "input")]
    fwd, outputs, loss = fuse(fwd, outputs, loss)
    grad_of: list[tuple[Tensor, Tensor]] = []
    if loss is not None:
        grads = backward_graph(loss, fwd, params)
        grad_of = [(p, grads[id(p)]) for p in params if id(p) in grads]
    # each node's sources by position, and its last reader (its array is dropped after that)
    index: dict[int, int] = {}
    srcs: list[list[int]] = []
    last: list[int] = []
    _wire(fwd, index, srcs, last)
    nodes = fwd
    if grad_of:
        nodes = fwd + _new_nodes([g for _, g in grad_of], index)
        _wire(nodes[len(fwd):], index, srcs, last)
    n = len(nodes)
    keep = [index[id(t)] for t in outputs]
    if loss is not None:
        keep.append(index[id(loss)])
    for i in keep:
        last[i] = n
    dest: dict[int, np.ndarray] = {}  # fresh gradients: computed in the parameter's storage
    fresh: dict[int, Tensor] = {}      # ... and whose storage it is
    for p, g in grad_of:
        i = index[id(g)]
        last[i] = n
        if (p._grad is None and g.op not in LEAF_OPS and OPS[g.op].view is None
                and i not in dest and i not in keep):
            dest[i] = p._grad_dest()
            fresh[i] = p

    A: list[np.ndarray | None] = [None] * n
    token = fpstate.quiet()  # NaN/inf compute silently, as in PyTorch
    try:
        for i, t in enumerate(nodes):
            if t.op in LEAF_OPS:
                A[i] = t._value
                continue
            ss = srcs[i]
            op = OPS[t.op]
            if op.view is not None:
                A[i] = op.view(t)(*[A[s] for s in ss])
            else:
                out = dest.get(i) if dest else None
                if out is None:
                    out = np.empty(t.shape, t.dtype)
                op.forward(t)(out, *[A[s] for s in ss])
                A[i] = out
            for s in ss:
                if last[s] == i:
                    A[s] = None
    except BaseException:
        for p in fresh.values():
            p.grad = None
        raise
    finally:
        fpstate.restore(token)
    for p, g in grad_of:
        i = index[id(g)]
        if fresh.get(i) is not p:
            p._accumulate_grad(A[i])
    values = [_own(nodes[i], A[i]) for i in keep]
    if update is not None and grad_of:
        taken = [p for p, g in grad_of]
        take = update.begin(taken, [False] * len(taken))
        if take:
            for p, on in zip(taken, take):
                if on:
                    update.ready(p)
    return values


def _wire(nodes: list[Tensor], index: dict[int, int], srcs: list[list[int]],
          last: list[int]) -> None:
    """Append ``nodes`` (sorted; their sources in ``index`` or among them) to the run's tables:
    each one's position, its sources' positions, and as the last reader of its sources."""
    for t in nodes:
        i = len(srcs)
        index[id(t)] = i
        ss = [index[id(s)] for s in t.srcs]
        for s in ss:
            last[s] = i
        srcs.append(ss)
        last.append(-1)


def _new_nodes(roots: list[Tensor], seen: dict[int, int]) -> list[Tensor]:
    """The nodes reaching ``roots`` whose ``id`` is not in ``seen`` (the forward graph's),
    sorted by creation, which puts every source before its consumers."""
    found: dict[int, Tensor] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        k = id(t)
        if k not in seen and k not in found:
            found[k] = t
            stack.extend(t.srcs)
    return sorted(found.values(), key=_creation)


def _creation(t: Tensor) -> int:
    return t._id


def _own(t: Tensor, value: np.ndarray) -> np.ndarray:
    """An output's array as the program may keep it: a view or a leaf's value shares storage
    with something else, so it is copied (a plan copies every output out of its arena)."""
    if t.op in LEAF_OPS or OPS[t.op].view is not None:
        return value.copy()
    return value
