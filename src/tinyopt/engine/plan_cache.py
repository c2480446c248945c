"""The plan cache: compiled plans (``engine/plan.py``) by graph signature.

Only structures that repeat are compiled: the cache counts the sightings of structures it has
no plan for and the time their eager runs took, and until a structure is worth a plan
(``PlanCache._hot``: at once when it recurs soon, else once its eager runs cost what compiling
would) realization runs it eagerly (``engine/eager.py``), with the same bits.

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
from typing import NamedTuple

from tinyopt.engine.gc_pause import paused
from tinyopt.engine.graph import held, held_candidates, signature
from tinyopt.engine.plan import Family, Plan
from tinyopt.engine.tensor import Tensor
from tinyopt.kernels.native import shared_threads


class CacheInfo(NamedTuple):
    """The plan cache's counters and bounds, as :func:`cache_info` returns them."""
    hits: int
    misses: int      # plans compiled (a lookup that found none and compiled one)
    currsize: int
    maxsize: int | None  # plans at most (None: bounded by bytes alone, the default)
    nbytes: int      # bytes the cached plans hold (arenas, scratch, constants)
    max_bytes: int
    structures: int  # plan structures the cached plans share (plans differing only in sizes)
    eager: int       # realizations run without a plan (structures not worth a plan yet)


log = logging.getLogger("tinyopt")

DEFAULT_MAX_BYTES = 1 << 30

COMPILE_AFTER: int | None = None
"""A fixed threshold: a structure is compiled into a plan the ``COMPILE_AFTER``-th time it is
realized, and runs eagerly (``engine/eager.py``) before.  None (the default) adapts the
threshold to how the structure recurs (:meth:`PlanCache._hot`).  Environment variable
``TINYOPT_COMPILE_AFTER`` (1: always a plan, as before eager execution; 2: the second sighting,
as before the threshold adapted).

Why adapt.  Measured on a chain of 32 small ops with backward (~80 nodes, 2026-12-06, shared
2-core machine, process time): eager 600 us, compiling plus the first run 2700 us, a replay
280 us; the actor-critic's update (``benchmarks/bench_eager.py``, 200-1200 forward nodes):
eager ~12 us and compiling ~27 us a forward node.  A fixed threshold of 2 loses the most on a
structure seen exactly twice (ski rental: the chain's 3300 us against two eager runs' 1200,
2.75x), and a larger one makes a training loop run its one structure eagerly t - 1 times
first.  So a structure is compiled at its second sighting when it recurs soon (a loop over a
few structures: its last sighting was at most ``RECUR_GAP`` realizations ago), and otherwise
once its eager runs, this one counted, have cost ``PAYBACK`` times what compiling it is
estimated to cost (ski rental's break-even).  ``PAYBACK`` was 0.5 while an eager run built
its backward graph (~12 us a forward node); since the backward is computed over arrays
(``engine/eager_grad.py``) an eager run of the actor-critic's update costs ~8 us a forward
node (5.6 ms against a replay's 2.3 and a compile's 20, 2026-12-06, load 5), so a compile pays
back after about six more sightings, not two: with 0.5 its episodes 60-210 took 513 us an
environment step (39 compiles in the window), with 1 396 (21), with 2 326 (5); in the long run
(episodes 400-700, every length compiled) 310 with 0.5, 314 with 1 and 401 with 2 (still
compiling).  A structure compiled and then never seen again cost at most about
1 + 1 / ``PAYBACK`` times its eager runs (its plan's one run counted as one of them).

A replay is not free, and for the actor-critic's update it is far from it: its plan computes
again every environment step's forward, which an eager run takes from the values the steps'
``.item()`` realized (2.3 ms a replay against 2.7-3.3 an eager run, 2026-12-06).  So the rule
counts what the eager runs would have saved as replays (``PlanCache.ran_plan`` measures the
replays of the plans this rule compiled against their eager runs: a ratio of 0.4-0.6 there)
instead of their whole cost: the actor-critic's episodes 150-300 compiled 4 plans, not 25, and
took 300-365 us an environment step against 349-514 (the two run side by side, load ~4)."""


RECUR_GAP = 8
"""A structure realized again within this many realizations recurs soon (a training loop, with
an evaluation or a metric's ``.item()`` in between): compiled at its second sighting."""

COMPILE_SECONDS_PER_NODE = 30e-6
"""What compiling a plan costs per forward node before the cache has timed a compile of its own
(autodiff, sorting, memory planning, kernel calls; measured on chains of small ops): the
estimate then follows the compiles it times, within ``PER_NODE_BOUNDS``."""

PAYBACK = 1.0
"""The multiple of a compile's estimated cost a rarely recurring structure's eager runs must
reach before it is compiled (1: ski rental's break-even; see ``COMPILE_AFTER``)."""

REPLAY_RATIO_MAX = 0.9
"""The most of an eager run's time a replay is taken to cost (see ``PlanCache.ran_plan``): a
structure whose replays seem to save nothing is still compiled once its eager runs reach ten
times a compile, so the estimate keeps being measured."""

PER_NODE_BOUNDS = (5e-6, 200e-6)
"""The compile times per node the estimate may follow: a first compile of numba's kernels or a
busy moment must not make every later structure look expensive."""


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
        if compile_after is None and os.environ.get("TINYOPT_COMPILE_AFTER"):
            compile_after = int(os.environ["TINYOPT_COMPILE_AFTER"])
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.compile_after: int | None = compile_after  # None: adaptive (see COMPILE_AFTER)
        # key hash -> [sightings, the realization it was last seen at, seconds its eager runs
        # took] of the structures without a plan
        self._seen: OrderedDict[int, list] = OrderedDict()
        self._looks = 0  # realizations looked up
        self._per_node = COMPILE_SECONDS_PER_NODE  # compile seconds per forward node, estimated
        # a replay's time over the eager runs' it replaced, estimated from the plans the cost
        # rule compiled (0 until one is replayed: a replay taken as free; then the first
        # measurement, then their moving average)
        self._replay_ratio = 0.0
        self._replays = 0  # replays measured for it
        self._payback_mean: dict[int, float] = {}  # key hash -> mean eager seconds, compiling
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.eager = 0
        # hashes of recently evicted keys -> the bound that evicted them ("maxsize", "max_bytes")
        self._evicted: OrderedDict[int, str] = OrderedDict()
        self._warned = False
        # plans that differ only in sizes share their runs (arenas, scratch): see Family
        self.share_sizes = os.environ.get("TINYOPT_PLAN_SHARING", "1") != "0"
        self._families: dict[tuple, Family] = {}
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
             index: dict[int, int], sig: tuple) -> tuple[Plan | None, list[Tensor], int]:
        """The plan realizing ``wanted`` (and ``loss``) of the sorted graph ``fwd`` (``index``,
        ``sig``: from ``graph.toposort_signed``) together with the nodes of ``fwd`` the program
        still holds (``graph.held``), which the plan outputs too: ``(plan, held nodes, key)``.
        The plan is None for a structure not worth a plan yet: the caller runs it eagerly and
        reports the time to :meth:`ran_eagerly` under ``key``.  What a cache hit needs of the
        signature (the held candidates, the plans by held nodes) is kept per (signature,
        outputs, loss), so a hit hashes the signature once."""
        front_key = (sig, tuple([index[id(t)] for t in wanted]),
                     index[id(loss)] if loss is not None else -1)
        front = self._front.get(front_key)
        if front is None:
            roots = set(front_key[1])
            roots.add(front_key[2])
            front = _Front(front_key, held_candidates(sig, roots))
        kept = tuple(held(fwd, front.candidates, index))
        with self._lock:
            self._looks += 1
            plan = front.plans.get(kept)
            if plan is not None and not plan.evicted:
                self.hits += 1
                self._tick += 1
                plan.used = self._tick
                return plan, [fwd[i] for i in kept], 0
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
                return plan, held_nodes, 0
            if not self._hot(h, len(fwd)):
                self.eager += 1
                return None, held_nodes, h
            self.misses += 1
        plan = self._compile(key, fwd, wanted + held_nodes, loss)
        with self._lock:
            if not plan.evicted:
                self._enter(front, kept, plan)
        return plan, held_nodes, 0

    def _hot(self, h: int, nodes: int) -> bool:
        """Whether the structure of key hash ``h`` (``nodes`` forward nodes), which has no plan,
        is worth one now (lock held): at once when a plan of it was evicted (it was hot then);
        with a fixed ``compile_after``, at that sighting; else at a sighting after the first
        when it recurs soon (``RECUR_GAP``) or when what its eager runs, this one counted as
        their mean, would have saved as replays (their time less the estimated share a replay
        costs: :meth:`ran_plan`) reaches ``PAYBACK`` times what compiling it is estimated to
        cost (see ``COMPILE_AFTER``).  Sightings are kept for the ``SEEN`` structures seen
        last."""
        fixed = self.compile_after
        if fixed is not None and fixed <= 1 or h in self._evicted:
            return True
        seen = self._seen
        entry = seen.pop(h, None)
        if entry is None:
            entry = [0, 0, 0.0]
        n = entry[0] + 1
        if fixed is not None:
            hot = n >= fixed
        elif n > 1 and self._looks - entry[1] <= RECUR_GAP:
            hot = True
        elif n > 1:  # what its eager runs would have saved as replays (this one counted as
            mean = entry[2] / entry[0]  # their mean) against what compiling it would cost
            hot = mean * n * (1.0 - self._replay_ratio) >= PAYBACK * self._per_node * nodes
            if hot and entry[0] > 1:  # (one run may have loaded the kernels: no measure of
                self._payback_mean[h] = mean  # what its replays save)
        else:
            hot = False
        if hot:
            return True
        entry[0], entry[1] = n, self._looks
        seen[h] = entry
        if len(seen) > self.SEEN:
            seen.popitem(last=False)
        return False

    def ran_eagerly(self, key: int, seconds: float) -> None:
        """Count ``seconds`` of an eager run of the structure ``find`` gave ``key`` for."""
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None:
                entry[2] += seconds

    def ran_plan(self, plan: Plan, seconds: float) -> None:
        """Count a replay of ``plan`` that took ``seconds``: for a plan the cost rule compiled
        (``_hot``), its ratio to the mean eager run of its structure updates the estimate of
        what replays save (a replay is not free: a plan computes again the values an eager run
        takes from nodes realized before, such as an episode's forward).  Its first run, which
        builds the plan's tables, is not counted, nor the replays of a plan compiled on one
        eager run (which may have loaded kernels: the actor-critic's first update took 300 ms
        against 5)."""
        mean = plan.eager_seconds
        if mean is None:
            return
        if mean < 0:  # the first run
            plan.eager_seconds = -mean
            return
        ratio = min(seconds / mean, REPLAY_RATIO_MAX)
        with self._lock:
            # (an average started from the prior of 0 would take a dozen replays to come near
            # the ratio measured, and compile meanwhile as if replays were nearly free)
            weight = 0.25 if self._replays else 1.0
            self._replay_ratio += weight * (ratio - self._replay_ratio)
            self._replays += 1

    def _enter(self, front: _Front, kept: tuple, plan: Plan) -> None:
        """File ``plan`` under ``front`` for the held positions ``kept`` (lock held)."""
        front.plans[kept] = plan
        plan.fronts.append((front, kept))
        self._front[front.key] = front

    @paused
    def _compile(self, key: tuple, fwd: list[Tensor], outputs: list[Tensor],
                 loss: Tensor | None) -> Plan:
        shared_threads.share()  # numpy's BLAS on the kernels' threads, once (kernels/native/shared_threads.py)
        t0 = time.perf_counter()
        plan = Plan(fwd, outputs, loss, self._family_of if self.share_sizes else None)
        seconds = time.perf_counter() - t0
        ms = seconds * 1e3
        h = hash(key)
        with self._lock:
            low, high = PER_NODE_BOUNDS
            per_node = min(max(seconds / max(len(fwd), 1), low), high)
            self._per_node += 0.25 * (per_node - self._per_node)
            mean = self._payback_mean.pop(h, None)
            kept = self._plans.get(key)
            if kept is not None:  # another thread compiled it meanwhile
                return kept
            self._plans[key] = plan
            plan.eager_seconds = None if mean is None else -mean  # (negative: not run yet)
            self._tick += 1
            plan.used = self._tick
            fam = plan.family
            if not fam.cached:
                fam.on_grow = self._grew  # (a family made by _family_of has it already)
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

    def _family_of(self, key: tuple, grad_specs: tuple) -> Family:
        """The family of plans of structure ``key`` (made now if none is cached)."""
        with self._lock:
            fam = self._families.get(key)
            if fam is None:
                fam = self._families[key] = Family(key, grad_specs)
                fam.on_grow = self._grew  # threads compiling two sizes at once count under the lock
            return fam

    def _grew(self, fam: Family, delta: int) -> None:
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
            self._looks = 0
            self._per_node = COMPILE_SECONDS_PER_NODE
            self._replay_ratio = 0.0
            self._replays = 0
            self._payback_mean.clear()
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
