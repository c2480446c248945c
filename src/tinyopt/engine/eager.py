"""Eager execution: a graph structure seen for the first time runs node by node, without a plan.

Compiling a plan (autodiff, sorting, memory planning, kernel closures: ~30 us a node) pays only
when the plan is replayed; code whose graph changes every step (episodes of every length, a
per-sample loop, a CRF's path) would compile a plan per step and use it once.  So realization
works like a tracing JIT: the plan cache counts the structures it misses, and a structure is
compiled only once it repeats (``plan_cache.PlanCache._hot``); until then :func:`run`
computes the graph here, as PyTorch eager does, on the same kernels:

1. every node runs in topological order, its ``forward`` (or ``view``) writing into a fresh
   array; a big graph gets the plan's fusions first and drops each array after its last reader
   (the plan's liveness, with numpy's allocator in place of an arena; see :data:`BIG_BYTES`);
   a node an earlier realization computed gives its value, and a small graph leaves out what
   only such values read until a backward rule reads it (:class:`_Tape`);
2. the backward pass of a small graph is computed straight over those arrays, the forward
   graph and its values being the tape (``engine/eager_grad.py``); a big one runs autodiff's
   backward graph (``graph.backward_graph``), the graph a plan would compile, with its nodes;
3. gradients land in ``.grad`` as a plan delivers them: a fresh one is written into the
   parameter's gradient storage (an optimizer's flat slot), an accumulated one is added.

Both paths run the same kernels on the same operands in the same order, so they give the same
bits (``tests/test_eager.py`` checks every op of the table, forward and backward); only where
the arrays live differs.  An update stepping parameters during a run (``update_in_plan``) is
offered no parameter here, so the optimizer steps after the backward, as when unfused: the
same bits again.
"""

from __future__ import annotations

import math
import sys
from operator import attrgetter

import numpy as np

from tinyopt.engine import fpstate
from tinyopt.engine.dtypes import FLOATS
from tinyopt.engine.eager_grad import flat_loop, gradients, new_nodes
from tinyopt.engine.op_fusion import fuse
from tinyopt.engine.graph import backward_graph
from tinyopt.engine.heap import trim_heap
from tinyopt.engine.op import OPS
from tinyopt.engine.tensor import LEAF_OPS, MUTATIONS, Tensor, leaf, make_node


def run(fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None, update=None
        ) -> list[np.ndarray]:
    """Compute ``outputs`` of the sorted graph ``fwd`` (and backpropagate ``loss`` into the
    leaves' ``.grad``): the values of ``outputs`` (and the loss, last), as ``Plan.run``
    returns them."""
    params = [t for t in fwd if t.requires_grad and (t.op == "param" or t.op == "input")]
    big = _nbytes(fwd) >= BIG_BYTES
    if big:  # (a small graph runs unfused: see BIG_BYTES)
        fwd, outputs, loss = fuse(fwd, outputs, loss)
    wanted = {id(t) for t in outputs}
    if loss is not None:
        wanted.add(id(loss))
    vals: dict[int, np.ndarray] = {}  # id(node) -> its array, while someone still reads it
    delivered: list[tuple[Tensor, np.ndarray]] = []  # (leaf, its gradient)
    flat: set[int] = set()  # the nodes whose array is C-contiguous (of their shape and dtype)
    token = fpstate.quiet()  # NaN/inf compute silently, as in PyTorch
    try:
        if loss is not None and not big and params:
            # the forward, then the backward straight over its arrays (``eager_grad``)
            taken = _taken(fwd)
            if taken:
                vals = _Tape(flat)
                _run_nodes(vals.leave_out(fwd, taken, wanted), vals, flat, {}, None)
            else:
                _run_nodes(fwd, vals, flat, {}, None)
            grads = gradients(loss, fwd, vals,
                              lambda new: _run_nodes(new, vals, flat, {}, None))
            if grads is not None:
                delivered = [(p, grads[id(p)]) for p in params if id(p) in grads]
                grad_of = nodes = []
            else:
                grad_of = _backward_graph(loss, fwd, params)
                nodes = _grad_nodes(grad_of, fwd)
        else:
            grad_of = _backward_graph(loss, fwd, params) if loss is not None else []
            nodes = fwd + _grad_nodes(grad_of, fwd)
        keep = set(wanted)
        dest: dict[int, np.ndarray] = {}  # fresh gradients: computed in the parameter's storage
        fresh: dict[int, Tensor] = {}      # ... and whose storage it is
        for p, g in grad_of:
            k = id(g)
            keep.add(k)
            if (p._grad is None and g.op not in LEAF_OPS and OPS[g.op].view is None
                    and k not in dest and k not in wanted):
                dest[k] = p._grad_dest()
                fresh[k] = p
        readers = _readers(nodes, keep) if big else None
        try:
            _run_nodes(nodes, vals, flat, dest, readers)
        except BaseException:
            for p in fresh.values():
                p.grad = None
            raise
    finally:
        fpstate.restore(token)
    taken = [p for p, _ in grad_of or delivered]
    if grad_of:  # (the fresh ones are in place already)
        delivered = [(p, vals[id(g)]) for p, g in grad_of if fresh.get(id(g)) is not p]
    for p, value in delivered:
        p._accumulate_grad(value)
    values = [_own(t, vals[id(t)]) for t in outputs]
    if loss is not None:
        values.append(vals[id(loss)])
    if update is not None and taken:
        take = update.begin(taken, [False] * len(taken))
        if take:
            for p, on in zip(taken, take):
                if on:
                    update.ready(p)
    if big:  # its freed arrays (heap.py), those of nodes nobody read included
        vals.clear()
        trim_heap()
    return values


def _taken(fwd: list[Tensor]) -> list[Tensor]:
    """The nodes of ``fwd`` whose values an earlier realization computed, which a run takes
    (see ``_run_nodes``)."""
    last = MUTATIONS.last
    return [t for t in fwd if t.value is not None and t.srcs and t.node_id > last]


class _Tape(dict):
    """``id(node) -> array`` of an eager run that leaves out the nodes only values it takes
    read (an episode's linear layers under the relu and softmax its steps realized: ~4 us an
    environment step each), and computes one when a backward rule first reads it, its sources
    first, in creation order: the same kernels on the same values as in the forward."""

    def __init__(self, flat: set[int]):
        super().__init__()
        self.flat = flat
        self.left_out: dict[int, Tensor] = {}

    def leave_out(self, fwd: list[Tensor], taken: list[Tensor], wanted: set[int]
                  ) -> list[Tensor]:
        """``fwd`` without the computed nodes whose one reader is a node of ``taken`` or one
        left out: one whose only reference, besides ``fwd``, is its reader's sources (a
        reference count, as ``graph.held`` counts them: a node anything else holds is run)."""
        left_out = self.left_out
        last = MUTATIONS.last
        todo = taken
        while todo:
            t = todo.pop()
            for s in t.srcs:
                if (_refcount(s) == _ONE_READER and s.srcs and id(s) not in wanted
                        and (s.value is None or s.node_id <= last)):
                    left_out[id(s)] = s
                    todo.append(s)
        return [t for t in fwd if id(t) not in left_out] if left_out else fwd

    def __missing__(self, k: int) -> np.ndarray:
        t = self.left_out.pop(k, None)
        if t is None:
            raise KeyError(k)
        todo, found, last = [t], {}, MUTATIONS.last
        while todo:
            x = todo.pop()
            kx = id(x)
            if kx not in found and kx not in self:
                found[kx] = x
                if x.op not in LEAF_OPS and (x.value is None or x.node_id <= last):
                    todo.extend(x.srcs)  # (computed, not taken: its sources first)
        _run_nodes(sorted(found.values(), key=_creation), self, self.flat, {}, None)
        return dict.__getitem__(self, k)


_creation = attrgetter("node_id")
_refcount = sys.getrefcount


def _count_one_reader() -> int:
    """The reference count ``_Tape.leave_out`` sees for a node that only the sorted list and
    its one reader's sources hold (interpreters differ in how many references a call adds)."""
    x = leaf(np.zeros(1))
    order = [x, make_node("neg", (x,), (), (1,), x.dtype)]
    order.append(make_node("neg", (order[1],), (), (1,), x.dtype))
    for s in order[2].srcs:
        return _refcount(s)
    raise AssertionError


_ONE_READER = _count_one_reader()


def _backward_graph(loss: Tensor, fwd: list[Tensor], params: list[Tensor]
                    ) -> list[tuple[Tensor, Tensor]]:
    """Autodiff's backward graph, as a plan compiles it: (parameter, its gradient node)."""
    grads = backward_graph(loss, fwd, params)
    return [(p, grads[id(p)]) for p in params if id(p) in grads]


def _grad_nodes(grad_of: list[tuple[Tensor, Tensor]], fwd: list[Tensor]) -> list[Tensor]:
    """The backward graph's nodes: those reaching the gradients that ``fwd`` does not hold,
    sources first."""
    return new_nodes([g for _, g in grad_of], {id(t) for t in fwd}) if grad_of else []


def _run_nodes(nodes: list[Tensor], vals: dict[int, np.ndarray], flat: set[int],
               dest: dict[int, np.ndarray], readers: dict[int, int] | None) -> None:
    """Compute each node of the sorted ``nodes`` into ``vals`` (a node in ``dest`` into its
    array there), dropping an array after its last reader when ``readers`` counts them."""
    last = MUTATIONS.last
    for t in nodes:
        k = id(t)
        if t.op in LEAF_OPS:
            v = vals[k] = t.value
            if v.flags.c_contiguous:
                flat.add(k)
            continue
        op = OPS[t.op]
        srcs = t.srcs
        if (v := t.value) is not None and t.node_id > last and k not in dest:
            # computed by an earlier realization (``probs.item()`` inside an episode) and
            # nothing written since the node was made: the bits a run computes again
            vals[k] = v
            if v.flags.c_contiguous:
                flat.add(k)
        elif op.view is not None:
            v = vals[k] = op.view(t)(*[vals[id(s)] for s in srcs])
            if v.flags.c_contiguous:  # (``x[i]`` read by a flat loop: the log of a probability)
                flat.add(k)
        else:
            out = dest.get(k) if dest else None
            if out is None:
                out = np.empty(t.shape, t.dtype)
                flat.add(k)
            elif out.flags.c_contiguous:
                flat.add(k)
            kernel = op.elementwise
            floats = kernel is not None and not t.attrs and t.dtype in FLOATS
            loop = (_flat_loop(kernel, t, srcs, flat) if floats and len(t.shape) <= 1
                    else None)
            if loop is not None:
                if not t.shape:  # (0-d: the loop over one-element views, as the kernel's call)
                    loop(*[vals[id(s)].reshape(1) for s in srcs], out.reshape(1))
                elif len(srcs) == 1:
                    loop(vals[id(srcs[0])], out)
                elif len(srcs) == 2:
                    loop(vals[id(srcs[0])], vals[id(srcs[1])], out)
                else:
                    loop(*[vals[id(s)] for s in srcs], out)
            elif floats and kernel is not None and srcs[0].dtype in FLOATS:
                # the kernel the forward calls on float operands, called as a plan binds
                # it (``plan._step``): the same loop
                kernel(*[vals[id(s)] for s in srcs], out=out)
            else:
                op.forward(t)(out, *[vals[id(s)] for s in srcs])
            vals[k] = out
        if readers is not None:
            for src in srcs:
                k = id(src)
                readers[k] -= 1
                if not readers[k]:
                    del vals[k]


BIG_BYTES = 1 << 24
"""A graph whose forward arrays sum to this many bytes or more gets the plan's fusions
(``op_fusion.py``: fewer passes over big arrays) and drops each array after its last reader, as a
plan's arena reuses it and PyTorch frees it.  A smaller one runs unfused and keeps its arrays
to the end of the run: rewriting a graph costs a copy and a sort of it (the actor-critic's
update, whose ``linear -> relu`` fuses, ran 16% faster unfused), and counting readers 0.8 us a
node.  Fused or not, the values are the same bits (a fusion computes what the chain does, in
the same order; ``tests/test_eager.py`` compares unfused eager runs with fused plans)."""


def _flat_loop(kernel, t: Tensor, srcs: tuple[Tensor, ...], flat: set[int]):
    """The loop ``kernel(*ins, out=out)`` runs for node ``t`` of a 0-d or 1-d shape whose
    sources all have its shape and dtype and C-contiguous arrays (``flat``): the flat loop over
    the arrays (``kernels.jit._LazyUfunc.__call__``'s first case), called here without the
    ~0.8 us of checks that call makes again on every node; None where it would take another
    way, has not built the loop yet, or is another kind of kernel (one without ``flat_loop``)."""
    found = flat_loop(kernel)
    if found is None:
        return None
    shape, dtype = t.shape, t.dtype
    if dtype not in found[1]:
        return None
    for s in srcs:
        if s.shape != shape or s.dtype != dtype or id(s) not in flat:
            return None
    return found[0]


def _nbytes(nodes: list[Tensor]) -> int:
    total = 0
    for t in nodes:
        total += math.prod(t.shape) * t.dtype.itemsize
    return total


def _readers(nodes: list[Tensor], keep: set[int]) -> dict[int, int]:
    """How many times each node is read (nodes in ``keep`` once more, so they are never
    dropped)."""
    readers = dict.fromkeys(keep, 1)
    for t in nodes:
        for s in t.srcs:
            k = id(s)
            readers[k] = readers.get(k, 0) + 1
    return readers


def _own(t: Tensor, value: np.ndarray) -> np.ndarray:
    """An output's array as the program may keep it: a view or a leaf's value shares storage
    with something else, so it is copied (a plan copies every output out of its arena)."""
    if t.op in LEAF_OPS or OPS[t.op].view is not None:
        return value.copy()
    return value
