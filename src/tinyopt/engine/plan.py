"""Compiled plans and the plan cache.

A :class:`Plan` is a graph compiled once: the forward nodes, the backward nodes autodiff added, a
memory plan, and a flat list of kernel calls on preallocated arrays.  Running it binds the leaves of
a new graph of the same structure (input arrays, the *current* ``.data`` of each Parameter), runs the
calls and delivers the outputs and the parameter gradients.  Plans refer to parameters by position,
never to the arrays they held at compile time, so an optimizer may move parameter storage freely.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from tinyopt.engine.graph import backward_graph, signature, toposort
from tinyopt.engine.op import OPS
from tinyopt.engine.planner import MemoryPlan, plan_memory
from tinyopt.engine.tensor import LEAF_OPS, Tensor, _make


class Plan:
    """A graph compiled into kernel calls over a planned arena (see the module docstring)."""

    def __init__(self, fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None):
        fwd_index = {id(t): i for i, t in enumerate(fwd)}
        self.fwd_leaves = [i for i, t in enumerate(fwd) if t.op in LEAF_OPS]
        # the leaves that get gradients: Parameters and tensors that require grad (a freed value
        # raises when a gradient reaches it)
        params = [fwd[i] for i in self.fwd_leaves
                  if fwd[i].requires_grad and fwd[i].op != "freed"]
        grads = backward_graph(loss, fwd, params) if loss is not None else {}
        grad_nodes = [(p, grads[id(p)]) for p in params if id(p) in grads]

        roots = list(outputs) + ([loss] if loss is not None else []) + [g for _, g in grad_nodes]
        nodes = toposort(roots)
        # The forward graph's nodes keep their topological positions, so leaves bind by position.
        index = {id(t): i for i, t in enumerate(nodes)}
        self.nodes = _specs(nodes)  # the graph without its arrays, for kernels and inspection
        self.leaf_slots = [index[id(fwd[i])] if id(fwd[i]) in index else -1 for i in self.fwd_leaves]
        leaf_pos = {fwd_index[id(p)]: k for k, p in enumerate(fwd[i] for i in self.fwd_leaves)}
        self.output_slots = [index[id(t)] for t in outputs]
        self.loss_slot = index[id(loss)] if loss is not None else -1

        # Gradient outputs: a computed gradient node writes straight into the parameter's storage
        # ("extern") when the grad is unset; otherwise into a scratch array that is then added.
        self.grad_outs: list[tuple[int, int, bool, np.ndarray | None]] = []
        extern = set()
        for p, g in grad_nodes:
            gi = index[id(g)]
            is_extern = (g.op not in LEAF_OPS and OPS[g.op].forward is not None and gi not in extern
                         and gi not in self.output_slots and gi != self.loss_slot)
            if is_extern:
                extern.add(gi)
            scratch = np.empty(g.shape, g.dtype) if is_extern else None
            self.grad_outs.append((leaf_pos[fwd_index[id(p)]], gi, is_extern, scratch))

        kind = []
        for i, t in enumerate(nodes):
            if t.op in LEAF_OPS:
                kind.append("leaf")
            elif i in extern:
                kind.append("extern")
            elif OPS[t.op].view is not None:
                kind.append("view")
            else:
                kind.append("compute")
        srcs = [tuple(index[id(s)] for s in t.srcs) for t in nodes]
        nbytes = [t.numel() * t.dtype.itemsize for t in nodes]
        # In place only over a source laid out like the output: not over a transpose, an expand
        # or a strided slice, whose elements the kernel would overwrite while still reading them.
        inplace = [t.op not in LEAF_OPS and OPS[t.op].inplace and _same_layout(t.srcs[0]) for t in nodes]
        keep = set(self.output_slots) | {self.loss_slot} | {gi for _, gi, _, _ in self.grad_outs}
        keep.discard(-1)
        self.memory: MemoryPlan = plan_memory(srcs, nbytes, kind, inplace, keep)
        self.arena = np.empty(self.memory.arena_bytes, dtype=np.uint8)

        # The array table: leaves are bound per run, views are made per run (their sources may be
        # leaves), computed nodes are fixed slices of the arena.
        A: list[np.ndarray | None] = [None] * len(nodes)
        for i, t in enumerate(nodes):
            if t.op == "input" and i not in self.leaf_slots:
                A[i] = t._value  # a constant made by a backward rule
            elif kind[i] == "compute":
                blk = self.memory.blocks[self.memory.root[i]]
                A[i] = (self.arena[blk.offset:blk.offset + nbytes[i]]
                        .view(t.dtype).reshape(t.shape))
        self.A = A
        # the slots bound per run: leaves, views of anything, gradients written into parameters
        self._bound = [i for i in range(len(nodes)) if kind[i] in ("view", "extern")
                       or kind[i] == "leaf" and i in self.leaf_slots]
        self.steps = [self._step(i, t, srcs[i], kind[i]) for i, t in enumerate(self.nodes)
                      if kind[i] in ("compute", "extern", "view")]

    def _step(self, i: int, t: Tensor, srcs: tuple[int, ...], kind: str):
        A = self.A
        op = OPS[t.op]
        if kind == "view":
            fn = op.view(t)
            if len(srcs) == 1:
                s0 = srcs[0]

                def run_view():
                    A[i] = fn(A[s0])
                return run_view

            def run_view_n():
                A[i] = fn(*[A[s] for s in srcs])
            return run_view_n
        fn = op.forward(t)
        if len(srcs) == 1:
            s0 = srcs[0]
            return lambda: fn(A[i], A[s0])
        if len(srcs) == 2:
            s0, s1 = srcs
            return lambda: fn(A[i], A[s0], A[s1])
        if len(srcs) == 3:
            s0, s1, s2 = srcs
            return lambda: fn(A[i], A[s0], A[s1], A[s2])
        return lambda: fn(A[i], *[A[s] for s in srcs])

    @property
    def peak_bytes(self) -> int:
        """Bytes of the planned arena: the peak memory of intermediate values."""
        return self.memory.arena_bytes

    def run(self, leaves: list[Tensor]) -> list[np.ndarray]:
        """Bind ``leaves`` (the new graph's leaves in topological order), run, deliver results."""
        A = self.A
        for slot, t in zip(self.leaf_slots, leaves):
            if slot >= 0:
                A[slot] = t._value  # a Parameter's _value is its _data
        fresh = []
        for k, gi, is_extern, scratch in self.grad_outs:
            if is_extern:
                p = leaves[k]
                if p._grad is None:
                    A[gi] = p._grad_dest()
                    fresh.append(p)
                else:
                    A[gi] = scratch
        try:
            for step in self.steps:
                step()
        except BaseException:
            for p in fresh:
                p.grad = None
            raise
        for k, gi, is_extern, scratch in self.grad_outs:
            p = leaves[k]
            if not is_extern:
                p._accumulate_grad(A[gi])
            elif A[gi] is scratch:
                np.add(p._grad, scratch, out=p._grad)
        out = [A[i].copy() for i in self.output_slots]
        if self.loss_slot >= 0:
            out.append(A[self.loss_slot].copy())
        for slot in self._bound:  # a cached plan must not keep a batch or a model alive
            A[slot] = None
        return out


def _specs(nodes: list[Tensor]) -> list[Tensor]:
    """Copies of the sorted ``nodes`` holding what kernels are compiled from (op, attributes,
    shapes, dtypes, wiring) and no arrays or Parameters: the kernel closures keep these, so a
    cached plan keeps no model or batch alive."""
    copies: dict[int, Tensor] = {}
    for t in nodes:
        copies[id(t)] = _make(t.op, tuple(copies[id(s)] for s in t.srcs), t.attrs, t.shape,
                              t.dtype, t.requires_grad)
    return [copies[id(t)] for t in nodes]


def _same_layout(t: Tensor) -> bool:
    """Whether ``t``'s array is C-contiguous in its own shape when its chain of views is."""
    while t.op not in LEAF_OPS and OPS[t.op].view is not None:
        if t.op != "reshape":
            return False
        t = t.srcs[0]
    return True


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    currsize: int
    maxsize: int


class PlanCache:
    """A bounded LRU map from graph signatures to compiled plans."""

    def __init__(self, maxsize: int = 64):
        self.maxsize = maxsize
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None,
            signed: tuple[dict[int, int], tuple] | None = None) -> Plan:
        """The plan for the sorted graph ``fwd``; ``signed`` is its ``(index, signature)`` when
        the caller has them (``graph.toposort_signed``)."""
        index, sig = signed or ({id(t): i for i, t in enumerate(fwd)}, signature(fwd))
        key = (sig, tuple([index[id(t)] for t in outputs]),
               index[id(loss)] if loss is not None else -1)
        plan = self._plans.get(key)
        if plan is not None:
            self.hits += 1
            self._plans.move_to_end(key)
            return plan
        self.misses += 1
        plan = Plan(fwd, outputs, loss)
        self._plans[key] = plan
        if len(self._plans) > self.maxsize:
            self._plans.popitem(last=False)
        return plan

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self._plans), self.maxsize)

    def clear(self) -> None:
        self._plans.clear()
        self.hits = self.misses = 0


CACHE = PlanCache()


def cache_info() -> CacheInfo:
    """``(hits, misses, currsize, maxsize)`` of the plan cache, like ``functools.lru_cache``."""
    return CACHE.info()


def cache_clear() -> None:
    CACHE.clear()
