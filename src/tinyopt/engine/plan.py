"""Compiled plans and the plan cache.

A :class:`Plan` is a graph compiled once: the forward nodes, the backward nodes autodiff added, a
memory plan, and a flat list of kernel calls on preallocated arrays.  Running it binds the leaves of
a new graph of the same structure (input arrays, the *current* ``.data`` of each Parameter), runs the
calls and delivers the outputs and the parameter gradients.  Plans refer to parameters by position,
never to the arrays they held at compile time, so an optimizer may move parameter storage freely.

Threads.  A plan is shared by every graph of its structure, so two threads training two models of
one architecture run the same plan.  What a run writes -- the arena, the array table that binds the
leaves, the kernels' scratch arrays, the gradient scratch -- is therefore not the plan's but a
:class:`_Run`'s: ``Plan.run`` takes an idle run from the plan's pool (a list: ``pop`` and ``append``
are atomic) and puts it back afterwards, so runs in flight at the same time never share memory, and
a lone thread (or a thread pool stepping one after another) keeps reusing one arena.  A plan run by
N threads at once holds N arenas; the cache counts them all.  Cost: about 0.1 us a run for the pool
and 0.35 us a lookup for the cache's lock, against an MLP batch-1 training step of about 270 us
(``benchmarks/bench_threads.py --against <older tree>`` times the whole step).

Sizes.  A loop whose batch size or sequence length changes (a last partial batch, episodes of
every length) compiles a plan per size -- its shapes, kernels (chosen by shape), memory layout and
constants are those of that size, so its results are the bits of a plan built for it -- but plans
that differ only in sizes share one :class:`_Family` of runs: a thread holds one arena for all of
them, grown to the largest it has run, and one gradient scratch.  Memory then follows the largest
size, not the number of sizes (``benchmarks/bench_dynplan.py``: a policy-gradient loop over 113
episode lengths held 2.2 MB of plans instead of 107 MB); ``cache_info().structures`` counts the
families.  ``TINYOPT_PLAN_SHARING=0`` gives every plan a family of its own, as before.

Only structures that repeat are compiled: the cache counts the sightings of structures it has
no plan for, and until a structure's ``compile_after``-th one (``COMPILE_AFTER``) realization
runs it eagerly (``engine/eager.py``), with the same bits.

The cache is bounded by bytes (arenas, scratch, constants and the Python objects of every plan;
default 1 GiB, environment variable ``TINYOPT_PLAN_CACHE_BYTES``, or :func:`set_cache_limit`),
and, only if asked, by count; it logs each compile and eviction on the ``tinyopt`` logger
(``logging.INFO``), with one warning, naming the bound to raise, when a plan it evicted is
compiled again (a cache too small for the loop, thrashing).  Structures seen once never enter
it, so a loop over many one-off structures neither fills nor thrashes it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from tinyopt.engine.dtypes import FLOATS
from tinyopt.engine.fuse import fuse
from tinyopt.engine.gc_pause import paused
from tinyopt.engine.graph import backward_graph, held, held_candidates, signature, toposort
from tinyopt.engine.op import OPS
from tinyopt.engine.planner import MemoryPlan, plan_memory
from tinyopt.engine.tensor import LEAF_OPS, Tensor, _make
from tinyopt.engine import fpstate, fused_update
from tinyopt.kernels import shared_threads


NODE_BYTES = 1536
"""What the cache counts for a plan's Python objects, per node (node specs, kernel closures,
array tables): measured with ``tracemalloc``, 1.4-1.6 KB a node for chains of 32-128 small ops,
where arenas and constants are a few dozen bytes a node.  Without it, a cache bounded by bytes
alone would let thousands of small plans hold gigabytes of Python objects."""


class Plan:
    """A graph compiled into kernel calls over a planned arena (see the module docstring)."""

    def __init__(self, fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None,
                 family_of=None):
        self.fwd_leaves = [i for i, t in enumerate(fwd) if t.op in LEAF_OPS]
        n = len(self.fwd_leaves)
        # leaves(fwd): the leaves of a graph of this structure, in order (one C call a run)
        self.leaves = (itemgetter(*self.fwd_leaves) if n > 1 else
                       (lambda fwd, i=self.fwd_leaves[0]: (fwd[i],)) if n else (lambda fwd: ()))
        # the leaves that get gradients: Parameters and tensors that require grad (a freed value
        # raises when a gradient reaches it)
        params = [fwd[i] for i in self.fwd_leaves
                  if fwd[i].requires_grad and fwd[i].op != "freed"]
        leaves = [fwd[i] for i in self.fwd_leaves]
        fwd, outputs, loss = fuse(fwd, outputs, loss)  # a rewritten copy; the same leaves
        grads = backward_graph(loss, fwd, params) if loss is not None else {}
        grad_nodes = [(p, grads[id(p)]) for p in params if id(p) in grads]

        roots = list(outputs) + ([loss] if loss is not None else []) + [g for _, g in grad_nodes]
        nodes = toposort(roots)
        # The forward graph's nodes keep their topological positions, so leaves bind by position.
        index = {id(t): i for i, t in enumerate(nodes)}
        self.nodes = _specs(nodes)  # the graph without its arrays, for kernels and inspection
        self.leaf_slots = [index[id(t)] if id(t) in index else -1 for t in leaves]
        leaf_pos = {id(t): k for k, t in enumerate(leaves)}
        self.output_slots = [index[id(t)] for t in outputs]
        self.loss_slot = index[id(loss)] if loss is not None else -1

        # Gradient outputs: a computed gradient node writes straight into the parameter's storage
        # ("extern") when the grad is unset; otherwise into a scratch array (one per run) that is
        # then added.
        self.grad_outs: list[tuple[int, int, bool]] = []
        extern = set()
        for p, g in grad_nodes:
            gi = index[id(g)]
            is_extern = (g.op not in LEAF_OPS and OPS[g.op].forward is not None and gi not in extern
                         and gi not in self.output_slots and gi != self.loss_slot)
            if is_extern:
                extern.add(gi)
            self.grad_outs.append((leaf_pos[id(p)], gi, is_extern))

        srcs = [tuple([index[id(s)] for s in t.srcs]) for t in nodes]
        # Plans that differ only in sizes (a batch, a sequence length) share one family: its
        # runs, i.e. the arenas (grown to the largest plan run in them) and the gradient scratch,
        # and the tables below, which follow from the structure alone.
        grad_specs = tuple([(k, gi, is_extern, self.nodes[gi].shape if is_extern else None,
                             self.nodes[gi].dtype.char) for k, gi, is_extern in self.grad_outs])
        key = (tuple([(t.op, s, t.dtype.char) for t, s in zip(nodes, srcs)]),
               tuple(self.leaf_slots), tuple(self.output_slots), self.loss_slot, grad_specs)
        self.family: _Family = (_Family(key, grad_specs) if family_of is None
                                else family_of(key, grad_specs))
        if self.family.structure is None:
            self.family.structure = _structure(nodes, extern, self.leaf_slots, self.output_slots,
                                            self.loss_slot, self.grad_outs)
        kind, inplace, keep, self._bound = self.family.structure
        nbytes = [t.numel() * t.dtype.itemsize for t in nodes]
        self.memory: MemoryPlan = plan_memory(srcs, nbytes, kind, inplace, keep)
        self._kind, self._srcs, self._nbytes = kind, srcs, nbytes
        # constants made by backward rules: read-only, shared by every run
        bound_leaves = set(self.leaf_slots)
        self._consts = [(i, t._value) for i, t in enumerate(nodes)
                        if t.op == "input" and i not in bound_leaves]
        # its constants, and its Python objects (node specs, kernel closures, tables)
        self.own_bytes = sum(v.nbytes for _, v in self._consts) + NODE_BYTES * len(nodes)
        self.evicted = False  # set when the cache drops it: runs then drop its tables
        self.used = 0  # the cache's tick of its last lookup (least recently used goes first)
        self.fronts: list = []  # the cache's _Front entries filing it
        try:
            r = self.family._idle.pop()
        except IndexError:
            r = _Run(self.family)
        try:
            self.run_bytes = r.prepare(self)  # the bytes a run of its own holds
        finally:
            self.family._idle.append(r)

    @property
    def peak_bytes(self) -> int:
        """Bytes of the planned arena: the peak memory of intermediate values."""
        return self.memory.arena_bytes

    @property
    def _idle(self) -> list[_Run]:
        """The idle runs of this plan's family (see the module docstring)."""
        return self.family._idle

    @property
    def nbytes(self) -> int:
        """Bytes this plan needs: its constants and its family's runs."""
        return self.own_bytes + self.family.nbytes

    def run(self, leaves: list[Tensor], update=None) -> list[np.ndarray]:
        """Bind ``leaves`` (the new graph's leaves in topological order), run, deliver results;
        ``update`` steps parameters during the run (``engine/fused_update.py``)."""
        fam = self.family
        try:
            r = fam._idle.pop()
        except IndexError:  # the family is running in another thread: a run of its own
            r = _Run(fam)
        try:
            return r.run(self, leaves, update and fused_update.begin(self, leaves, update))
        finally:
            fam._idle.append(r)


def _structure(nodes: list[Tensor], extern: set[int], leaf_slots: list[int],
               output_slots: list[int], loss_slot: int, grad_outs: list) -> tuple:
    """What the planner and the runs read of a plan's structure: each node's kind, whether it
    may write in place, the nodes kept to the end of a run, the slots bound per run."""
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
    # In place only over a source laid out like the output: not over a transpose, an expand
    # or a strided slice, whose elements the kernel would overwrite while still reading them.
    inplace = [t.op not in LEAF_OPS and OPS[t.op].inplace and _same_layout(t.srcs[0])
               for t in nodes]
    keep = set(output_slots) | {loss_slot} | {gi for _, gi, _ in grad_outs}
    keep.discard(-1)
    # the slots bound per run: leaves, views of anything, gradients written into parameters
    leaves = set(leaf_slots)
    bound = [i for i in range(len(nodes)) if kind[i] in ("view", "extern")
             or kind[i] == "leaf" and i in leaves]
    return kind, inplace, keep, bound


class _Family:
    """The runs that plans of one structure share (plans that differ only in sizes: a batch, a
    sequence length), and the bytes they hold.  A run's arena is grown to the largest plan of
    the family it runs, so a loop over many sizes holds one arena per thread, not one per size.
    The values stay those of a plan built for the size: each plan keeps its own shapes, kernels
    and memory layout, only the bytes under the layout are shared."""

    def __init__(self, key: tuple, grad_specs: tuple):
        self.key = key
        self.grad_specs = grad_specs
        self.structure: tuple | None = None  # _structure() of its plans
        self._idle: list[_Run] = []
        self.nbytes = 0
        self.cached = 0        # plans of this family in the cache
        self._on_grow = None   # the cache's counter, once a cache made or holds this family

    def grew(self, delta: int) -> None:
        if delta:
            grow = self._on_grow
            if grow is None:
                self.nbytes += delta
            else:
                grow(self, delta)


class _Run:
    """What one run of a family's plans writes: the arena, the gradient scratch, and per plan
    (up to TABLES of them) the array table (computed nodes are fixed slices of the arena; leaves
    and views are bound per run) and the kernel closures over it (they own their scratch)."""

    TABLES = 64  # at most this many plans' tables (those of evicted plans go when one is made)

    def __init__(self, family: _Family):
        self.family = family
        self.arena = np.empty(0, dtype=np.uint8)
        self.grad_scratch = [np.empty(shape, dt) if is_extern else None
                             for _, _, is_extern, shape, dt in family.grad_specs]
        self.tables: OrderedDict[int, tuple] = OrderedDict()  # id(plan) -> (plan, A, steps, bytes)
        family.grew(sum(s.nbytes for s in self.grad_scratch if s is not None))

    def prepare(self, plan: Plan) -> int:
        """Make (or find) ``plan``'s table in this run; the bytes a run of its own would hold."""
        self._table(plan)
        return (plan.memory.arena_bytes + self.tables[id(plan)][3]
                + sum(s.nbytes for s in self.grad_scratch if s is not None))

    def _table(self, plan: Plan) -> tuple:
        entry = self.tables.get(id(plan))
        if entry is not None and entry[0] is plan:
            self.tables.move_to_end(id(plan))
            return entry
        delta = 0
        need = plan.memory.arena_bytes
        if self.arena.nbytes < need:  # a larger plan: a larger arena, the old tables go with it
            delta += need - self.arena.nbytes - sum(e[3] for e in self.tables.values())
            self.tables.clear()
            self.arena = np.empty(need, dtype=np.uint8)
        for k in [k for k, e in self.tables.items() if e[0].evicted]:
            delta -= self.tables.pop(k)[3]
        entry = self._build(plan)
        self.tables[id(plan)] = entry
        delta += entry[3]
        while len(self.tables) > self.TABLES:
            delta -= self.tables.popitem(last=False)[1][3]
        self.family.grew(delta)
        return entry

    def _build(self, plan: Plan) -> tuple:
        kind, nbytes = plan._kind, plan._nbytes
        A: list[np.ndarray | None] = [None] * len(plan.nodes)
        for i, v in plan._consts:
            A[i] = v
        for i, t in enumerate(plan.nodes):
            if kind[i] == "compute":
                blk = plan.memory.blocks[plan.memory.root[i]]
                A[i] = (self.arena[blk.offset:blk.offset + nbytes[i]]
                        .view(t.dtype).reshape(t.shape))
        steps = [_step(A, i, t, plan._srcs[i], kind[i]) for i, t in enumerate(plan.nodes)
                 if kind[i] in ("compute", "extern", "view")]
        return plan, A, steps, _held_bytes(steps)

    def run(self, plan: Plan, leaves: list[Tensor], scheduled=None) -> list[np.ndarray]:
        key = id(plan)
        entry = self.tables.get(key)
        if entry is not None and entry[0] is plan:  # (_table's hit, inline)
            self.tables.move_to_end(key)
        else:
            entry = self._table(plan)
        A, steps = entry[1], entry[2]
        token = fpstate.quiet()  # NaN/inf compute silently, as in PyTorch
        try:
            for slot, t in zip(plan.leaf_slots, leaves):
                if slot >= 0:
                    A[slot] = t._value  # a Parameter's _value is its _data
            fresh = []
            for (k, gi, is_extern), scratch in zip(plan.grad_outs, self.grad_scratch):
                if is_extern:
                    p = leaves[k]
                    if p._grad is None:
                        A[gi] = p._grad_dest()
                        fresh.append(p)
                    else:
                        A[gi] = scratch
            try:
                if scheduled is None:
                    for step in steps:
                        step()
                else:
                    scheduled.run_steps(steps, A)
            except BaseException:
                for p in fresh:
                    p.grad = None
                raise
            for (k, gi, is_extern), scratch in zip(plan.grad_outs, self.grad_scratch):
                p = leaves[k]
                if not is_extern:
                    p._accumulate_grad(A[gi])
                elif A[gi] is scratch:
                    np.add(p._grad, scratch, out=p._grad)
            out = [A[i].copy() for i in plan.output_slots] if plan.output_slots else []
            if plan.loss_slot >= 0:
                out.append(A[plan.loss_slot].copy())
            if scheduled is not None:
                scheduled.finish()
            return out
        finally:  # a cached plan must not keep a batch or a model alive, even after a failed run
            fpstate.restore(token)
            for slot in plan._bound:
                A[slot] = None


def _step(A: list, i: int, t: Tensor, srcs: tuple[int, ...], kind: str):
    """The call that computes node ``i`` (spec ``t``) of an array table ``A``.

    Its operands are bound as default arguments, not closed over: a closure keeps a cell per
    variable, each an object the garbage collector tracks, and a cached plan of a few thousand
    nodes kept ~5 cells a node (a full collection walked ~1M of them for an actor-critic's 50
    plans, ~0.2 s each); defaults are one tuple, and read as fast as locals."""
    op = OPS[t.op]
    if kind == "view":
        fn = op.view(t)
        if len(srcs) == 1:
            def run_view(A=A, i=i, fn=fn, s0=srcs[0]):
                A[i] = fn(A[s0])
            return run_view
        if len(srcs) == 2:
            def run_view_2(A=A, i=i, fn=fn, s0=srcs[0], s1=srcs[1]):
                A[i] = fn(A[s0], A[s1])
            return run_view_2

        def run_view_n(A=A, i=i, fn=fn, srcs=srcs):
            A[i] = fn(*[A[s] for s in srcs])
        return run_view_n
    if op.elementwise is not None and not t.attrs and t.dtype in FLOATS and A[i] is not None:
        # an elementwise kernel over arrays fixed for the table (the arena's, constants): its
        # call made once, without the per-call checks and reshapes (the same loop, the same bits)
        ins = [A[s] for s in srcs]
        if all(a is not None for a in ins):
            bound = op.elementwise.bound(A[i], *ins)
            if bound is not None:
                return bound
    fn = op.forward(t)
    if len(srcs) == 1:
        return lambda A=A, i=i, fn=fn, s0=srcs[0]: fn(A[i], A[s0])
    if len(srcs) == 2:
        return lambda A=A, i=i, fn=fn, s0=srcs[0], s1=srcs[1]: fn(A[i], A[s0], A[s1])
    if len(srcs) == 3:
        return lambda A=A, i=i, fn=fn, s0=srcs[0], s1=srcs[1], s2=srcs[2]: fn(
            A[i], A[s0], A[s1], A[s2])
    if len(srcs) == 4:
        return lambda A=A, i=i, fn=fn, s0=srcs[0], s1=srcs[1], s2=srcs[2], s3=srcs[3]: fn(
            A[i], A[s0], A[s1], A[s2], A[s3])
    return lambda A=A, i=i, fn=fn, srcs=srcs: fn(A[i], *[A[s] for s in srcs])


def _held_bytes(fns) -> int:
    """Bytes of the arrays that kernel closures hold (scratch made when they were compiled),
    looking through closures of closures (kernels, dispatchers and other callables that are
    not Python functions are skipped without a look)."""
    seen: set[int] = set()
    total = 0
    stack = list(fns)
    while stack:
        for v in _captured(stack.pop()):
            t = type(v)
            if t is _FUNCTION or t is np.ndarray or isinstance(v, np.ndarray):
                if id(v) in seen:
                    continue
                seen.add(id(v))
                if t is _FUNCTION:
                    stack.append(v)
                else:
                    total += v.nbytes
    return total


_FUNCTION = type(_held_bytes)


def _captured(fn) -> list:
    """What a Python function keeps: its closure's contents and its default arguments (a plan
    step binds its operands as defaults, ``_step``); nothing for other callables."""
    if type(fn) is not _FUNCTION:
        return []
    found = list(fn.__defaults__ or ())
    for cell in fn.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return found


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
    """The plan cache's counters and bounds, as :func:`cache_info` returns them."""
    hits: int
    misses: int      # plans compiled (a lookup that found none and compiled one)
    currsize: int
    maxsize: int | None  # plans at most (None: bounded by bytes alone, the default)
    nbytes: int      # bytes the cached plans hold (arenas, scratch, constants)
    max_bytes: int
    structures: int  # plan structures the cached plans share (plans differing only in sizes)
    eager: int       # realizations run without a plan (structures not seen often enough yet)


log = logging.getLogger("tinyopt")

DEFAULT_MAX_BYTES = 1 << 30

COMPILE_AFTER = 2
"""A structure is compiled into a plan the ``COMPILE_AFTER``-th time it is realized; before, it
runs eagerly (``engine/eager.py``).  Environment variable ``TINYOPT_COMPILE_AFTER`` (1: always
a plan, as before eager execution).

Why 2.  Measured on a chain of 32 small ops with backward (~80 nodes, 2026-12-06, shared
2-core machine, process time): eager 600 us, compiling plus the first run 2700 us, a replay
280 us.  Loops come in two kinds: the structure changes every step (episodes, per-sample
loops, a CRF's path), where any threshold above 1 runs everything eagerly; or a few structures
repeat for the whole run (batch shapes, sequence buckets), where every eager run beyond the
first costs 320 us that a plan would save, on every structure.  A threshold of t loses the most
on a structure seen exactly t times (ski rental: at t=2, 3300 us against the 1200 us of two
eager runs, 2.75x; at t=8 at most 1.5x), but a larger t makes every repeated structure run
eagerly t - 1 times first, with no memory planning and no step inside the plan; 2 keeps the
steady state from the second step on, as before, and costs at most one compile per structure
seen twice."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class _Front:
    """What a cache hit needs for one (signature, outputs, loss): where the program may hold a
    node and its reference-count bound (``graph.held_candidates``), and the plans by held
    positions."""

    __slots__ = ("key", "candidates", "plans")

    def __init__(self, key: tuple, candidates: list[tuple[int, int]]):
        self.key = key
        self.candidates = candidates
        self.plans: dict[tuple[int, ...], Plan] = {}


class PlanCache:
    """An LRU map from graph signatures to compiled plans, bounded by bytes (and by count if
    ``maxsize`` is set).

    The most recently used plan is never evicted, so a loop whose one plan is larger than
    ``max_bytes`` still runs (alone in the cache).  Thread-safe: a lock guards the map, and a plan
    is compiled outside it (two threads missing on one structure at once may both compile; the
    first to finish is kept).
    """

    SEEN = 4096  # structures whose sightings are counted (oldest forgotten first)

    def __init__(self, maxsize: int | None = None, max_bytes: int | None = None,
                 compile_after: int | None = None):
        if max_bytes is None:
            max_bytes = int(os.environ.get("TINYOPT_PLAN_CACHE_BYTES", DEFAULT_MAX_BYTES))
        if compile_after is None:
            compile_after = int(os.environ.get("TINYOPT_COMPILE_AFTER", COMPILE_AFTER))
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.compile_after = compile_after
        self._seen: OrderedDict[int, int] = OrderedDict()  # key hash -> sightings without a plan
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.eager = 0
        # hashes of recently evicted keys -> the bound that evicted them ("maxsize", "max_bytes")
        self._evicted: OrderedDict[int, str] = OrderedDict()
        self._warned = False
        # plans that differ only in sizes share their runs (arenas, scratch): see _Family
        self.share_sizes = os.environ.get("TINYOPT_PLAN_SHARING", "1") != "0"
        self._families: dict[tuple, _Family] = {}
        self._front: dict[tuple, _Front] = {}  # (signature, outputs, loss) -> what a hit needs
        self._tick = 0  # recency: a plan's ``used`` is the tick of its last lookup

    def get(self, fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None,
            signed: tuple[dict[int, int], tuple] | None = None) -> Plan:
        """The plan for the sorted graph ``fwd``; ``signed`` is its ``(index, signature)`` when
        the caller has them (``graph.toposort_signed``)."""
        index, sig = signed or ({id(t): i for i, t in enumerate(fwd)}, signature(fwd))
        key = (sig, tuple([index[id(t)] for t in outputs]),
               index[id(loss)] if loss is not None else -1)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self.hits += 1
                self._tick += 1
                plan.used = self._tick
                return plan
            self.misses += 1
        return self._compile(key, fwd, outputs, loss)

    def find(self, fwd: list[Tensor], wanted: list[Tensor], loss: Tensor | None,
             index: dict[int, int], sig: tuple) -> tuple[Plan, list[Tensor]]:
        """The plan realizing ``wanted`` (and ``loss``) of the sorted graph ``fwd`` (``index``,
        ``sig``: from ``graph.toposort_signed``) together with the nodes of ``fwd`` the program
        still holds (``graph.held``), which the plan outputs too: ``(plan, held nodes)``.  What a
        cache hit needs of the signature (the held candidates, the plans by held nodes) is kept
        per (signature, outputs, loss), so a hit hashes the signature once."""
        front_key = (sig, tuple([index[id(t)] for t in wanted]),
                     index[id(loss)] if loss is not None else -1)
        front = self._front.get(front_key)
        if front is None:
            roots = set(front_key[1])
            roots.add(front_key[2])
            front = _Front(front_key, held_candidates(sig, roots))
        kept = tuple(held(fwd, front.candidates))
        with self._lock:
            plan = front.plans.get(kept)
            if plan is not None and not plan.evicted:
                self.hits += 1
                self._tick += 1
                plan.used = self._tick
                return plan, [fwd[i] for i in kept]
        held_nodes = [fwd[i] for i in kept]
        key = (sig, front_key[1] + kept, front_key[2])
        h = hash(key)  # (outside the lock: hashing a signature is a pass over the graph)
        with self._lock:
            plan = self._plans.get(key)  # (the same outputs, split otherwise between the two)
            if plan is not None:
                self.hits += 1
                self._tick += 1
                plan.used = self._tick
                self._enter(front, kept, plan)
                return plan, held_nodes
            if not self._hot(h):
                self.eager += 1
                return None, held_nodes
            self.misses += 1
        plan = self._compile(key, fwd, wanted + held_nodes, loss)
        with self._lock:
            if not plan.evicted:
                self._enter(front, kept, plan)
        return plan, held_nodes

    def _hot(self, h: int) -> bool:
        """Whether the structure of key hash ``h``, which has no plan, is seen often enough now
        to compile one (lock held): the ``compile_after``-th time, or at once when a plan of it
        was evicted (it was hot then).  Counts are kept for the ``SEEN`` structures seen last."""
        if self.compile_after <= 1 or h in self._evicted:
            return True
        seen = self._seen
        n = seen.pop(h, 0) + 1
        if n >= self.compile_after:
            return True
        seen[h] = n
        if len(seen) > self.SEEN:
            seen.popitem(last=False)
        return False

    def _enter(self, front: _Front, kept: tuple, plan: Plan) -> None:
        """File ``plan`` under ``front`` for the held positions ``kept`` (lock held)."""
        front.plans[kept] = plan
        plan.fronts.append((front, kept))
        self._front[front.key] = front

    @paused
    def _compile(self, key: tuple, fwd: list[Tensor], outputs: list[Tensor],
                 loss: Tensor | None) -> Plan:
        shared_threads.share()  # numpy's BLAS on the kernels' threads, once (kernels/shared_threads.py)
        t0 = time.perf_counter()
        plan = Plan(fwd, outputs, loss, self._family_of if self.share_sizes else None)
        ms = (time.perf_counter() - t0) * 1e3
        h = hash(key)
        with self._lock:
            kept = self._plans.get(key)
            if kept is not None:  # another thread compiled it meanwhile
                return kept
            self._plans[key] = plan
            self._tick += 1
            plan.used = self._tick
            fam = plan.family
            if not fam.cached:
                fam._on_grow = self._grew  # (a family made by _family_of has it already)
                self.nbytes += fam.nbytes
                if self.share_sizes:
                    self._families.setdefault(fam.key, fam)
            fam.cached += 1
            self.nbytes += plan.own_bytes
            bound = self._evicted.pop(h, None)  # the bound that evicted it, if it was
            warn = bound is not None and not self._warned
            self._warned |= warn
            self._shrink()
            n, total = len(self._plans), self.nbytes
        log.info("compiled a plan of %d nodes in %.1f ms: %s (arena %s); cache %d plans, %s of %s",
                 len(plan.nodes), ms, _mib(plan.nbytes), _mib(plan.peak_bytes), n, _mib(total),
                 _mib(self.max_bytes))
        if warn and bound == "maxsize":
            log.warning("the plan cache is thrashing: a plan it evicted for room was compiled "
                        "again; raise its bound of %d plans with "
                        "tinyopt.engine.set_cache_limit(maxsize=...)", self.maxsize)
        elif warn:
            log.warning("the plan cache is thrashing: a plan it evicted for room was compiled "
                        "again; raise its bound of %s with "
                        "tinyopt.engine.set_cache_limit(max_bytes=...) or "
                        "TINYOPT_PLAN_CACHE_BYTES", _mib(self.max_bytes))
        return plan

    def _family_of(self, key: tuple, grad_specs: tuple) -> _Family:
        """The family of plans of structure ``key`` (made now if none is cached)."""
        with self._lock:
            fam = self._families.get(key)
            if fam is None:
                fam = self._families[key] = _Family(key, grad_specs)
                fam._on_grow = self._grew  # threads compiling two sizes at once count under the lock
            return fam

    def _grew(self, fam: _Family, delta: int) -> None:
        """Count bytes a run of ``fam`` took or gave back (a new run for a thread, a larger
        arena, a plan's table)."""
        with self._lock:
            fam.nbytes += delta
            if fam.cached:
                self.nbytes += delta
                self._shrink()

    def _shrink(self) -> None:
        """Evict least recently used plans until within both bounds (call with the lock held)."""
        while True:
            if self.maxsize is not None and len(self._plans) > self.maxsize:
                bound = "maxsize"
            elif self.nbytes > self.max_bytes and len(self._plans) > 1:
                bound = "max_bytes"
            else:
                return
            key = min(self._plans, key=lambda k: self._plans[k].used)
            plan = self._plans.pop(key)
            plan.evicted = True
            for front, kept in plan.fronts:
                if front.plans.get(kept) is plan:
                    del front.plans[kept]
                    if not front.plans and self._front.get(front.key) is front:
                        del self._front[front.key]
            plan.fronts.clear()
            self.nbytes -= plan.own_bytes
            fam = plan.family
            fam.cached -= 1
            if not fam.cached:
                self.nbytes -= fam.nbytes
                if self._families.get(fam.key) is fam:
                    del self._families[fam.key]
            self._evicted[hash(key)] = bound
            if len(self._evicted) > self.SEEN:
                self._evicted.popitem(last=False)
            log.info("evicted a plan of %d nodes (%s); cache %d plans, %s of %s",
                     len(plan.nodes), _mib(plan.nbytes), len(self._plans), _mib(self.nbytes),
                     _mib(self.max_bytes))

    def info(self) -> CacheInfo:
        with self._lock:
            structures = len({id(p.family) for p in self._plans.values()})
            return CacheInfo(self.hits, self.misses, len(self._plans), self.maxsize, self.nbytes,
                             self.max_bytes, structures, self.eager)

    def clear(self) -> None:
        with self._lock:
            for plan in self._plans.values():
                plan.evicted = True
                plan.family.cached = 0
            self._plans.clear()
            self._front.clear()
            self._families.clear()
            self._evicted.clear()
            self._seen.clear()
            self.nbytes = self.hits = self.misses = self.eager = 0
            self._warned = False


CACHE = PlanCache()


def cache_info() -> CacheInfo:
    """``(hits, misses, currsize, maxsize, nbytes, max_bytes, structures, eager)`` of the plan
    cache, like ``functools.lru_cache``'s with the bytes its plans hold, their bound, how many
    plan structures the cached plans share (a loop over many batch sizes or sequence lengths
    caches a plan per size, ``currsize``, but one structure, whose runs hold one arena per
    thread), and how many realizations ran eagerly, without a plan (``engine/eager.py``).
    ``misses`` counts the plans compiled."""
    return CACHE.info()


def cache_clear() -> None:
    """Drop every cached plan (the next step of each structure compiles again)."""
    CACHE.clear()


def set_cache_limit(max_bytes: int | None = None, maxsize: int | None = None) -> None:
    """Bound the plan cache to ``max_bytes`` bytes (default 1 GiB, or the environment variable
    ``TINYOPT_PLAN_CACHE_BYTES``; the count includes ``NODE_BYTES`` a node for the plans' Python
    objects) and, if given, ``maxsize`` plans (by default the count is not bounded); evicts at
    once what no longer fits.  ``None`` leaves a bound as it is."""
    for name, v in (("max_bytes", max_bytes), ("maxsize", maxsize)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ValueError(f"set_cache_limit: {name} must be a non-negative int, got {v!r}")
    with CACHE._lock:
        if max_bytes is not None:
            CACHE.max_bytes = max_bytes
        if maxsize is not None:
            CACHE.maxsize = maxsize
        CACHE._shrink()
