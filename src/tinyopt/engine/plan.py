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
that differ only in sizes share one :class:`Family` of runs: a thread holds one arena for all of
them, grown to the largest it has run, and one gradient scratch.  Memory then follows the largest
size, not the number of sizes (``benchmarks/bench_dynplan.py``: a policy-gradient loop over 113
episode lengths held 2.2 MB of plans instead of 107 MB); ``cache_info().structures`` counts the
families.  ``TINYOPT_PLAN_SHARING=0`` gives every plan a family of its own, as before.

The cache of plans is ``engine/plan_cache.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from operator import itemgetter

import numpy as np

from tinyopt.engine.dtypes import FLOATS
from tinyopt.engine.op_fusion import fuse
from tinyopt.engine.graph import backward_graph, toposort
from tinyopt.engine.op import OPS
from tinyopt.engine.planner import MemoryPlan, plan_memory
from tinyopt.engine.tensor import LEAF_OPS, Tensor, make_node
from tinyopt.engine import fpstate, update_in_plan


NODE_BYTES = 1536
"""What the cache counts for a plan's Python objects, per node (node specs, kernel closures,
array tables): measured with ``tracemalloc``, 1.4-1.6 KB a node for chains of 32-128 small ops,
where arenas and constants are a few dozen bytes a node.  Without it, a cache bounded by bytes
alone would let thousands of small plans hold gigabytes of Python objects."""


class Plan:
    """A graph compiled into kernel calls over a planned arena (see the module docstring)."""

    def __init__(self, fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None,
                 family_of=None):
        leaves, params = self._find_leaves(fwd)
        fwd, outputs, loss = fuse(fwd, outputs, loss)  # a rewritten copy; the same leaves
        grads = backward_graph(loss, fwd, params) if loss is not None else {}
        grad_nodes = [(p, grads[id(p)]) for p in params if id(p) in grads]
        roots = list(outputs) + ([loss] if loss is not None else []) + [g for _, g in grad_nodes]
        nodes = toposort(roots)
        index = self._place(nodes, leaves, outputs, loss)
        into_grad_slots = self._route_gradients(grad_nodes, index, leaves)
        self._chain_gradients(nodes, index, into_grad_slots)
        srcs = [tuple([index[id(s)] for s in t.srcs]) for t in nodes]
        self._join_family(nodes, srcs, into_grad_slots, family_of)
        self._plan_memory(nodes, srcs)
        self._prepare_run()

    def _find_leaves(self, fwd: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The leaves of the forward graph (positions, and a getter of them), and those that
        get gradients: Parameters and tensors that require grad (a freed value raises when a
        gradient reaches it)."""
        self.fwd_leaves = [i for i, t in enumerate(fwd) if t.op in LEAF_OPS]
        n = len(self.fwd_leaves)
        # leaves(fwd): the leaves of a graph of this structure, in order (one C call a run)
        self.leaves = (itemgetter(*self.fwd_leaves) if n > 1 else
                       (lambda fwd, i=self.fwd_leaves[0]: (fwd[i],)) if n else (lambda fwd: ()))
        params = [fwd[i] for i in self.fwd_leaves
                  if fwd[i].requires_grad and fwd[i].op != "freed"]
        return [fwd[i] for i in self.fwd_leaves], params

    def _place(self, nodes: list[Tensor], leaves: list[Tensor], outputs: list[Tensor],
               loss: Tensor | None) -> dict[int, int]:
        """The node specs and the slots of leaves, outputs and loss; the index of each node.
        The forward graph's nodes keep their topological positions, so leaves bind by
        position."""
        index = {id(t): i for i, t in enumerate(nodes)}
        self.nodes = _specs(nodes)  # the graph without its arrays, for kernels and inspection
        self.leaf_slots = [index[id(t)] if id(t) in index else -1 for t in leaves]
        self.output_slots = [index[id(t)] for t in outputs]
        self.loss_slot = index[id(loss)] if loss is not None else -1
        return index

    def _route_gradients(self, grad_nodes: list[tuple[Tensor, Tensor]], index: dict[int, int],
                         leaves: list[Tensor]) -> set[int]:
        """Gradient outputs: a computed gradient node writes straight into the parameter's
        gradient storage (kind "into_grad") when the grad is unset; otherwise into a scratch
        array (one per run) that is then added.  The slots of the "into_grad" nodes."""
        leaf_pos = {id(t): k for k, t in enumerate(leaves)}
        self.grad_outs: list[tuple[int, int, bool]] = []
        into_grad_slots: set[int] = set()
        for p, g in grad_nodes:
            gi = index[id(g)]
            into_grad = (g.op not in LEAF_OPS and OPS[g.op].forward is not None
                         and gi not in into_grad_slots and gi not in self.output_slots
                         and gi != self.loss_slot)
            if into_grad:
                into_grad_slots.add(gi)
            self.grad_outs.append((leaf_pos[id(p)], gi, into_grad))
        return into_grad_slots

    def _chain_gradients(self, nodes: list[Tensor], index: dict[int, int],
                         into_grad_slots: set[int]) -> None:
        """A gradient node that may write in place over its source 0 (a tied embedding's rows
        added into the head's weight gradient, ``embedding_grad_add``) has that source, when
        nothing else reads it, computed into the same gradient storage (``grad_chain``: pairs
        (slot bound, slot whose array it takes)): not in the arena for the rest of the backward
        pass (GPT-2 small: the head's 147 MiB from the loss to the embedding).  Not through an
        elementwise op: its source is made just before it, and its call over the arena is bound
        once (``_step``)."""
        self.grad_chain: list[tuple[int, int]] = []
        heads = [(gi, nodes[gi]) for _, gi, into_grad in self.grad_outs
                 if into_grad and _chains(nodes[gi])]
        if not heads:
            return
        readers: dict[int, int] = {}
        for t in nodes:
            for src in t.srcs:
                readers[id(src)] = readers.get(id(src), 0) + 1
        taken = {gi for _, gi, _ in self.grad_outs} | set(self.output_slots) | {self.loss_slot}
        for gi, g in heads:
            while _chains(g):
                s0 = g.srcs[0]
                si = index[id(s0)]
                if (s0.op in LEAF_OPS or OPS[s0.op].forward is None or si in taken
                        or readers[id(s0)] != 1 or s0.shape != g.shape or s0.dtype != g.dtype):
                    break
                into_grad_slots.add(si)
                taken.add(si)
                self.grad_chain.append((si, gi))
                g = s0

    def _join_family(self, nodes: list[Tensor], srcs: list[tuple[int, ...]],
                     into_grad_slots: set[int], family_of) -> None:
        """Plans that differ only in sizes (a batch, a sequence length) share one family: its
        runs, i.e. the arenas (grown to the largest plan run in them) and the gradient scratch,
        and the tables of ``_structure``, which follow from the structure alone."""
        grad_specs = tuple([(k, gi, into_grad, self.nodes[gi].shape if into_grad else None,
                             self.nodes[gi].dtype.char) for k, gi, into_grad in self.grad_outs])
        key = (tuple([(t.op, s, t.dtype.char) for t, s in zip(nodes, srcs)]),
               tuple(self.leaf_slots), tuple(self.output_slots), self.loss_slot, grad_specs)
        self.family: Family = (Family(key, grad_specs) if family_of is None
                               else family_of(key, grad_specs))
        if self.family.structure is None:
            self.family.structure = _structure(nodes, srcs, into_grad_slots, self.leaf_slots,
                                               self.output_slots, self.loss_slot, self.grad_outs)

    def _plan_memory(self, nodes: list[Tensor], srcs: list[tuple[int, ...]]) -> None:
        """The arena's layout, the constants backward rules made (read-only, shared by every
        run) and the bytes the plan holds itself (constants, Python objects)."""
        kind, inplace, keep, self._bound, self._fixed_views = self.family.structure
        nbytes = [t.numel() * t.dtype.itemsize for t in nodes]
        self.memory: MemoryPlan = plan_memory(srcs, nbytes, kind, inplace, keep)
        self._kind, self._srcs, self._nbytes = kind, srcs, nbytes
        bound_leaves = set(self.leaf_slots)
        self._consts = [(i, t.value) for i, t in enumerate(nodes)
                        if t.op == "input" and i not in bound_leaves]
        self.own_bytes = sum(v.nbytes for _, v in self._consts) + NODE_BYTES * len(nodes)
        self.evicted = False  # set when the cache drops it: runs then drop its tables
        self.used = 0  # the cache's tick of its last lookup (least recently used goes first)
        self.fronts: list = []  # the cache's _Front entries filing it
        self.eager_seconds: float | None = None  # (the cache's: see PlanCache.ran_plan)

    def _prepare_run(self) -> None:
        """Build this plan's table in an idle run of its family (or a new one), and count the
        bytes a run of its own holds."""
        try:
            r = self.family._idle.pop()
        except IndexError:
            r = _Run(self.family)
        try:
            self.run_bytes = r.prepare(self)
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
        ``update`` steps parameters during the run (``engine/update_in_plan.py``)."""
        fam = self.family
        try:
            r = fam._idle.pop()
        except IndexError:  # the family is running in another thread: a run of its own
            r = _Run(fam)
        try:
            return r.run(self, leaves, update and update_in_plan.begin(self, leaves, update))
        finally:
            fam._idle.append(r)


def _structure(nodes: list[Tensor], srcs: list[tuple[int, ...]], into_grad_slots: set[int],
               leaf_slots: list[int], output_slots: list[int], loss_slot: int, grad_outs: list
               ) -> tuple:
    """What the planner and the runs read of a plan's structure: each node's kind, whether it
    may write in place, the nodes kept to the end of a run, the slots bound per run, and the
    views that may be fixed for a run's table (:func:`_fixed_views`)."""
    kind = []
    for i, t in enumerate(nodes):
        if t.op in LEAF_OPS:
            kind.append("leaf")
        elif i in into_grad_slots:
            kind.append("into_grad")
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
    # the slots bound per run: leaves, views of anything but fixed arrays, gradients written
    # into parameters
    leaves = set(leaf_slots)
    fixed = _fixed_views(nodes, srcs, kind, leaves)
    bound = [i for i in range(len(nodes)) if kind[i] == "view" and i not in fixed
             or kind[i] == "into_grad" or kind[i] == "leaf" and i in leaves]
    return kind, inplace, keep, bound, fixed


def _fixed_views(nodes: list[Tensor], srcs: list[tuple[int, ...]], kind: list[str],
                 leaves: set[int]) -> dict[int, None]:
    """The views whose array is the same in every run of a table: a view of a computed node
    (a fixed slice of the arena), of a constant or of such a view, whose other sources (a
    slice's run-time starts) are constants.  A run's table computes them once (``_Run._build``)
    instead of on every run (``benchmarks/bench_eager.py``'s CRF: ~300 of the ~510 views a
    sentence's plan made per run, ``logsumexp(...).view(1)``, ``cat(steps).view(1, -1)``, the
    backward's reshapes; ~0.9 us each), and an elementwise kernel reading them is bound once
    like one reading the arena (``_step``).  A view of a leaf bound per run (a Parameter, an
    input, a slice's starts) or of a gradient written into a parameter's storage is not
    fixed."""
    fixed: dict[int, None] = {}  # (a set in node order)
    for i, t in enumerate(nodes):
        if kind[i] != "view" or not srcs[i]:
            continue
        s0, extras = srcs[i][0], srcs[i][1:]
        if (kind[s0] == "compute" or s0 in fixed or _const(nodes, kind, leaves, s0)) and all(
                _const(nodes, kind, leaves, e) for e in extras):
            fixed[i] = None
    return fixed


def _const(nodes: list[Tensor], kind: list[str], leaves: set[int], i: int) -> bool:
    """Whether slot ``i`` holds a constant of the plan (``Plan._consts``)."""
    return kind[i] == "leaf" and i not in leaves and nodes[i].op == "input"


class Family:
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
        self.on_grow = None   # the cache's counter, once a cache made or holds this family

    def grew(self, delta: int) -> None:
        if delta:
            grow = self.on_grow
            if grow is None:
                self.nbytes += delta
            else:
                grow(self, delta)


class _Run:
    """What one run of a family's plans writes: the arena, the gradient scratch, and per plan
    (up to TABLES of them) the array table (computed nodes are fixed slices of the arena, and so
    are views of them: ``_fix_views``; leaves and other views are bound per run) and the kernel
    closures over it (they own their scratch): ``(plan, A, steps a run calls, bytes the
    closures hold, every step)``."""

    TABLES = 64  # at most this many plans' tables (those of evicted plans go when one is made)

    def __init__(self, family: Family):
        self.family = family
        self.arena = np.empty(0, dtype=np.uint8)
        self.grad_scratch = [np.empty(shape, dt) if into_grad else None
                             for _, _, into_grad, shape, dt in family.grad_specs]
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
                offset = plan.memory.spans[plan.memory.root[i]][0]
                A[i] = (self.arena[offset:offset + nbytes[i]]
                        .view(t.dtype).reshape(t.shape))
        fixed = self._fix_views(plan, A) if plan._fixed_views else ()
        run = [i for i in range(len(plan.nodes)) if kind[i] in ("compute", "into_grad", "view")]
        every = [_step(A, i, plan.nodes[i], plan._srcs[i], kind[i]) for i in run]
        # the steps a run calls (those of the fixed views were made above)
        steps = [st for i, st in zip(run, every) if i not in fixed] if fixed else every
        return plan, A, steps, _held_bytes(every), every

    @staticmethod
    def _fix_views(plan: Plan, A: list) -> set[int]:
        """Compute into ``A`` the views of ``plan._fixed_views`` over this table's fixed arrays,
        once (the same view a run's step makes: a window onto the same memory); the slots set.
        A view numpy could only make as a copy (a reshape of a constant whose layout does not
        allow it) stays a step of every run, as do the views over it."""
        done: set[int] = set()
        for i in plan._fixed_views:  # (in order: a view's source before it)
            srcs = plan._srcs[i]
            ins = [A[s] for s in srcs]
            if any(a is None for a in ins) or (plan._kind[srcs[0]] == "view"
                                               and srcs[0] not in done):
                continue
            v = OPS[plan.nodes[i].op].view(plan.nodes[i])(*ins)
            owner = ins[0] if ins[0].base is None else ins[0].base
            if v.base is not owner and v.size and not np.may_share_memory(v, ins[0]):
                continue  # (a copy: computed by its step in every run)
            A[i] = v
            done.add(i)
        return done

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
                    A[slot] = t.value  # a Parameter's _value is its _data
            fresh = []
            for (k, gi, into_grad), scratch in zip(plan.grad_outs, self.grad_scratch):
                if into_grad:
                    p = leaves[k]
                    if p._grad is None:
                        A[gi] = p._grad_dest()
                        fresh.append(p)
                    else:
                        A[gi] = scratch
            for si, gi in plan.grad_chain:  # (in order: a chain's head is bound first)
                A[si] = A[gi]
            try:
                if scheduled is None:
                    for step in steps:
                        step()
                else:  # (every step: the schedule counts them; a fixed view's is made again)
                    scheduled.run_steps(entry[4], A)
            except BaseException:
                for p in fresh:
                    p.grad = None
                raise
            for (k, gi, into_grad), scratch in zip(plan.grad_outs, self.grad_scratch):
                p = leaves[k]
                if not into_grad:
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
        bound = (op.elementwise.bound(A[i], *ins) if all(a is not None for a in ins) else None
                 ) or _bound_copied(op.elementwise, A, i, t, srcs)
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


SMALL_COPIED = 256
"""The most elements of an elementwise node whose operands :func:`_bound_copied` copies into
arrays laid out as its output (below it the kernel call's checks cost more than the copies;
above, the copies would cost a pass over memory and an output-sized array each)."""


def _bound_copied(kernel, A: list, i: int, t: Tensor, srcs: tuple[int, ...]):
    """For an elementwise kernel writing a small arena array ``A[i]`` (node spec ``t``) from
    operands of its dtype of which some are broadcast, strided or bound per run (``alpha +
    feat[t]``, a slice with run-time starts; ``x - max`` in a logsumexp's backward: (1, 5)
    and (1, 1)): each run copies those operands into arrays of the output's shape,
    C-contiguous, then calls the kernel's flat loop bound over them (~1.5 us against ~4.5
    for the call, which works out again on every run how each operand is read).  The same
    scalar function on the same values, element for element, as the kernel's broadcast loop
    or its ufunc computes (an operand overlapping the output is read from a copy there too);
    None where this does not apply.  A plan's signature fixes every operand's shape and
    dtype; a copy takes any layout."""
    out = A[i]
    if not (type(out) is np.ndarray and 0 < out.size <= SMALL_COPIED and out.flags.c_contiguous):
        return None
    copied = []  # per operand: whether it is copied
    for s, spec in zip(srcs, t.srcs):
        a = A[s]
        if spec.dtype != out.dtype or a is not None and (type(a) is not np.ndarray
                                                         or a.dtype != out.dtype):
            return None
        copied.append(a is None or a.shape != out.shape or not a.flags.c_contiguous)
    if not any(copied):
        return None
    # the copies' arrays in one block, a default of the step, so the cache counts its bytes
    # (``_held_bytes``; the operands' own arrays, in a tuple, are not the step's)
    buf = np.empty(sum(copied) * out.size, out.dtype)
    flat, fixed, per_run = [], [], []
    for s, copy in zip(srcs, copied):
        if not copy:
            flat.append(A[s])
            continue
        n = len(fixed) + len(per_run)
        c = buf[n * out.size:(n + 1) * out.size].reshape(out.shape)
        flat.append(c)
        if A[s] is None:
            per_run.append((c, s))
        else:
            fixed.append((c, A[s]))
    loop = kernel.bound(out, *flat)
    if loop is None:
        return None
    if len(fixed) == 1 and not per_run:
        def run_copied(copy=np.copyto, ca=fixed[0], loop=loop, buf=buf):
            copy(*ca)
            loop()
        return run_copied
    if len(per_run) == 1 and not fixed:
        (c, s), = per_run  # (c is all of buf)

        def run_copied_bound(copy=np.copyto, A=A, c=c, s=s, loop=loop):
            copy(c, A[s])
            loop()
        return run_copied_bound

    def run_copied_n(copy=np.copyto, A=A, fixed=tuple(fixed), per_run=tuple(per_run),
                     loop=loop, buf=buf):
        for c, a in fixed:
            copy(c, a)
        for c, s in per_run:
            copy(c, A[s])
        loop()
    return run_copied_n


def _held_bytes(fns) -> int:
    """Bytes of the arrays that kernel closures hold (scratch made when they were compiled),
    looking through closures of closures (kernels, dispatchers and other callables that are
    not Python functions are skipped without a look)."""
    seen: set[int] = set()
    total = 0
    stack = [f for f in fns if type(f) is _FUNCTION]
    while stack:
        for v in _captured(stack.pop()):
            t = type(v)
            if t is _FUNCTION:
                if id(v) not in seen:
                    seen.add(id(v))
                    stack.append(v)
            elif t is np.ndarray or t not in _PLAIN and isinstance(v, np.ndarray):
                if id(v) not in seen:
                    seen.add(id(v))
                    total += v.nbytes
    return total


_FUNCTION = type(_held_bytes)
_PLAIN = frozenset((int, float, str, bool, tuple, list, type(None)))
"""Types a step binds often (slots, its array table) that are surely no arrays."""


def _captured(fn) -> list:
    """What a Python function keeps: its closure's contents and its default arguments (a plan
    step binds its operands as defaults, ``_step``)."""
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
        copies[id(t)] = make_node(t.op, tuple(copies[id(s)] for s in t.srcs), t.attrs, t.shape,
                              t.dtype, t.requires_grad)
    return [copies[id(t)] for t in nodes]


def _chains(t: Tensor) -> bool:
    """Whether gradient node ``t`` may take its source 0's place in a gradient's storage."""
    op = OPS[t.op]
    return bool(t.srcs) and op.inplace and op.elementwise is None and op.forward is not None


def _same_layout(t: Tensor) -> bool:
    """Whether ``t``'s array is C-contiguous in its own shape when its chain of views is."""
    while t.op not in LEAF_OPS and OPS[t.op].view is not None:
        if t.op != "reshape":
            return False
        t = t.srcs[0]
    return True
