"""``DistributedDataParallel``: one model replica per rank, gradients averaged after backward.

    model = DistributedDataParallel(net)      # rank 0's parameters and buffers on every rank
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn(model(x_local), y_local).backward()   # then every .grad is the mean over the ranks
    opt.step()                                # identical steps: the replicas stay identical

What is reduced, and when:

- at construction, every rank's parameters and buffers are checked against rank 0's (names,
  order, shapes, dtypes, ``requires_grad``: torch's ``_verify_param_shape_across_processes``,
  with its messages), then rank 0's values are broadcast (one Bcast per dtype);
- with ``broadcast_buffers=True`` (the default), rank 0's buffers (BatchNorm's running
  statistics) are broadcast at every forward in training mode, as in PyTorch;
- after every backward that follows a forward of this module (outside ``no_sync()``), the
  gradients are summed over the ranks and divided by the world size: one ``MPI_Allreduce`` per
  flat gradient buffer.  The flat buffers are those of the optimizer holding the parameters'
  newest slots (``p.slot``, ``engine/slot.py``: ``tinyopt.optim`` writes each group's fresh
  gradients into one contiguous array), so an MLP under Adam reduces all its gradients in ONE
  call with no copy; parameters no optimizer holds get slots in buckets of at most
  ``bucket_cap_mb`` megabytes made by this module.  Buffers whose gradients a
  ``ZeroRedundancyOptimizer`` reduces itself (reduce-scatter) are left to it.  Each reduction
  carries the number of backwards this module has seen (inside ``no_sync()`` or not), so ranks
  that disagree (a backward under ``no_sync()`` on some ranks only) get a RuntimeError at once.

Every parameter that requires grad must receive a gradient in each synchronized backward
(RuntimeError otherwise, naming the parameters), unless ``find_unused_parameters=True``: then one
small Allreduce of has-gradient flags runs first, a parameter unused on a rank counts as a zero
gradient there, and one unused on every rank keeps ``grad is None``.

Overlap: the reductions start after the whole backward plan has run.  The plan is a flat list of
kernel calls, and the first gradient buffers are final only after most of it has run; MPICH
progresses a non-blocking Allreduce only inside MPI calls, so overlap would need MPI calls between
kernel calls.  ``benchmarks/bench_ddp.py`` measures what overlap could save (see
docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import pickle
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyopt.distributed.fingerprint import Purpose
from tinyopt.distributed.process_group import ProcessGroup, _default
from tinyopt.engine import realize
from tinyopt.engine.grad_mode import is_grad_enabled
from tinyopt.engine.tensor import Parameter
from tinyopt.nn.module import Module
from tinyopt.optim.flat import FlatBuffer

if TYPE_CHECKING:
    from tinyopt.train.strategy import FitStrategy

_UNSUPPORTED = ("device_ids", "output_device", "mixed_precision", "device_mesh",
                "delay_all_reduce_named_params", "param_to_hook_all_reduce", "bucket_cap_mb_list")


class DistributedDataParallel(Module):
    """Data parallelism over the ranks of the default process group (see the module docstring).

    Args:
        module: the model to replicate; ``ddp.module`` is it, and ``state_dict()`` keys carry the
            ``module.`` prefix, as in PyTorch.
        broadcast_buffers: broadcast rank 0's buffers at every forward in training mode.
        init_sync: broadcast rank 0's parameters and buffers at construction.
        process_group: None or the default group (tinyopt has only that one).
        bucket_cap_mb: the largest bucket (MiB) this module makes for parameters no optimizer
            holds (default 25, as PyTorch).
        find_unused_parameters: allow parameters without a gradient (module docstring).
        gradient_as_bucket_view, static_graph, check_reduction, dim: accepted for compatibility
            (gradients are always views of flat buffers; plans are static).
        device_ids, output_device, mixed_precision, device_mesh, ...: CPU only; must be None.
    """

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0, broadcast_buffers: bool | None = None, init_sync: bool = True,
                 process_group: Any = None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 delay_all_reduce_named_params: Any = None, param_to_hook_all_reduce: Any = None,
                 mixed_precision: Any = None, device_mesh: Any = None,
                 skip_all_reduce_unused_params: bool = False,
                 bucket_cap_mb_list: Any = None) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a tinyopt.nn.Module, got "
                            f"{type(module).__name__}")
        given = {"device_ids": device_ids, "output_device": output_device,
                 "mixed_precision": mixed_precision, "device_mesh": device_mesh,
                 "delay_all_reduce_named_params": delay_all_reduce_named_params,
                 "param_to_hook_all_reduce": param_to_hook_all_reduce,
                 "bucket_cap_mb_list": bucket_cap_mb_list}
        for name in _UNSUPPORTED:
            if given[name] is not None:
                raise ValueError(f"DistributedDataParallel: {name} is not supported (tinyopt "
                                 f"runs on the CPU, one process per rank); got {given[name]!r}")
        if bucket_cap_mb is None:
            bucket_cap_mb = 25
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
                or not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be a positive number, "
                             f"got {bucket_cap_mb!r}")
        pg = _default(process_group)
        self.module = module
        d = self.__dict__  # plain attributes, not registered as parameters, buffers or modules
        d["process_group"] = pg
        d["broadcast_buffers"] = True if broadcast_buffers is None else bool(broadcast_buffers)
        d["find_unused_parameters"] = bool(find_unused_parameters)
        d["bucket_cap_mb"] = float(bucket_cap_mb)
        d["gradient_as_bucket_view"] = bool(gradient_as_bucket_view)
        d["static_graph"] = bool(static_graph)
        d["require_backward_grad_sync"] = True
        d["_pending"] = False       # a forward outside no_sync() awaits its backward
        d["_seen"] = False          # a forward (in or outside no_sync()) awaits its backward
        d["_backwards"] = 0         # backwards that followed a forward: the step of reductions
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        d["_names"] = [n for n, _ in named]
        d["_params"] = [p for _, p in named]
        d["_buckets"] = []          # the buckets this module made (FlatBuffers without state)
        d["_owners"] = None         # each parameter's flat buffer when the ranges were made
        d["_ranges"] = []           # the gradient views to Allreduce, one call each
        d["_flags"] = np.zeros(len(self._params), dtype=np.uint8)
        self._verify_same_model()
        self._pack_unowned()
        if init_sync:
            _bcast_coalesced(pg, [p.value for _, p in module.named_parameters()]
                             + [b.numpy() for b in module.buffers()], Purpose.DDP_SYNC)
        _LIVE.append(weakref.ref(self, _LIVE.remove))

    # ---- forward ------------------------------------------------------------------------------
    def fit_strategy(self) -> FitStrategy:
        """How ``tinyopt.fit`` trains this model: every rank on its share of the data, metrics
        combined over the ranks, rank 0 reporting and checkpointing
        (``tinyopt.distributed.fitting``)."""
        # imported here: the DDP class alone does not load the training driver
        from tinyopt.distributed.fitting import DataParallelFit
        return DataParallelFit(self)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers and self.training:
            _bcast_coalesced(self.process_group, [b.numpy() for b in self.module.buffers()],
                             Purpose.DDP_BUFFERS)
        if is_grad_enabled():
            self.__dict__["_seen"] = True
            self.__dict__["_pending"] |= self.require_backward_grad_sync
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Skip the gradient reduction of backwards whose forward ran inside this block: the
        gradients accumulate locally and are reduced (all of them) by the first synchronized
        backward after it.  Put the forward inside the block, as in PyTorch."""
        old = self.require_backward_grad_sync
        self.__dict__["require_backward_grad_sync"] = False
        try:
            yield
        finally:
            self.__dict__["require_backward_grad_sync"] = old

    # ---- construction helpers -----------------------------------------------------------------
    def _verify_same_model(self) -> None:
        """Every rank must wrap the same parameters and buffers (names, order, shapes, dtypes,
        ``requires_grad``), as torch's ``_verify_param_shape_across_processes`` checks: the
        broadcast that follows copies rank 0's values over, and would silently reshape or
        reinterpret what does not match.  Every rank raises when any rank differs."""
        mine = _model_description(self.module)
        every = [pickle.loads(b) for b in self.process_group.allgather_bytes(
            pickle.dumps(mine), purpose=Purpose.DDP_MODEL)]
        me = self.process_group.rank()
        diffs = {q: _model_difference(q, theirs, every[0]) for q, theirs in enumerate(every)}
        bad = [q for q, d in diffs.items() if d]
        if bad:
            q = me if me in bad else bad[0]
            prefix = "" if q == me else f"rank {q}'s model differs from rank 0's: "
            raise RuntimeError(prefix + diffs[q])

    def _pack_unowned(self) -> None:
        """Put the parameters that no optimizer holds into buckets of ``bucket_cap_mb``
        (in reverse registration order, as PyTorch: the last layers' gradients come first)."""
        loose = [p for p in self._params if _owner(p) is None]
        if not loose:
            return
        cap = self.bucket_cap_mb * 2**20
        by_dtype: dict[np.dtype, list[list[Parameter]]] = {}
        for p in reversed(loose):
            lists = by_dtype.setdefault(np.dtype(p.dtype), [[]])
            size = sum(q.value.nbytes for q in lists[-1])
            if lists[-1] and size + p.value.nbytes > cap:
                lists.append([])
            lists[-1].append(p)
        self._buckets.extend(FlatBuffer(ps, dt) for dt, lists in by_dtype.items() for ps in lists)

    def _reduction_ranges(self) -> list[np.ndarray]:
        """The contiguous gradient ranges to Allreduce, one per flat buffer holding this module's
        parameters (remade when an optimizer has taken the parameters since)."""
        owners = [_owner(p) for p in self._params]
        cached = self._owners
        if cached is not None and all(a is b for a, b in zip(owners, cached)):
            return self._ranges
        if any(o is None for o in owners):  # an optimizer that held them is gone
            self._pack_unowned()
            owners = [_owner(p) for p in self._params]
        self._buckets[:] = [b for b in self._buckets if any(o is b for o in owners)]
        groups: dict[int, tuple[Any, list[int]]] = {}
        for p, o in zip(self._params, owners):  # parameter order: the same on every rank
            groups.setdefault(id(o), (o, []))[1].append(p.slot.index)
        ranges = []
        for o, slots in groups.values():
            if getattr(o, "reduces_grads", False):  # ZeroRedundancyOptimizer reduces these
                continue
            spans = sorted((int(o.seg[j]), int(o.seg[j + 1])) for j in slots)
            lo, hi = spans[0]
            for a, b in spans[1:]:
                if a == hi:
                    hi = b
                else:
                    ranges.append(o.grad[lo:hi])
                    lo, hi = a, b
            ranges.append(o.grad[lo:hi])
        self.__dict__["_owners"] = owners
        self.__dict__["_ranges"] = ranges
        return ranges

    # ---- the reduction ------------------------------------------------------------------------
    def _reduce_gradients(self) -> None:
        """Average every gradient over the ranks (see the module docstring)."""
        self.__dict__["_pending"] = False
        params = self._params
        flags = self._flags
        for i, p in enumerate(params):
            flags[i] = p._grad is not None
        pg = self.process_group
        local = None
        if self.find_unused_parameters:  # every rank, so the collectives stay matched
            local = flags.copy()
            if pg.size() > 1:
                pg.allreduce_(flags, "MAX", purpose=Purpose.DDP_FLAGS, step=self._backwards)
        elif not flags.all():
            names = [n for n, f in zip(self._names, flags) if not f]
            raise RuntimeError(
                f"DistributedDataParallel: parameters {names} received no gradient in this "
                f"backward on rank {pg.rank()}, so the ranks cannot average them.  Make every "
                f"forward output take part in the loss, or pass find_unused_parameters=True to "
                f"DistributedDataParallel (parameters unused on a rank then count as zero "
                f"gradients there).")
        ranges = self._reduction_ranges()
        if local is not None:
            for k in np.flatnonzero(local == 0):  # a zero contribution, not stale memory
                params[k].slot.grad_view[...] = 0
        owners = list({id(o): o for o in self._owners}.values())
        if pg.size() > 1:
            for o in owners:  # (a gradient assigned by hand is reduced in its own array too)
                o.gather_grads()
            for grad in ranges:
                pg.allreduce_(grad, purpose=Purpose.DDP_GRADS, step=self._backwards)
                np.divide(grad, pg.size(), out=grad)
            for o in owners:
                o.scatter_grads()
        if local is not None:
            for k in np.flatnonzero((local == 0) & (flags == 1)):
                params[k].slot.use_grad_view()  # marks the (reduced) gradient as present


def _owner(p: Parameter) -> Any:
    """The flat buffer holding ``p``'s newest slot (an optimizer's or a bucket), or None."""
    slot = p.slot
    return None if slot is None else slot.owner


def _model_description(module: Module) -> tuple[list, list]:
    return ([(n, tuple(p.shape), np.dtype(p.dtype).name, p.requires_grad)
             for n, p in module.named_parameters()],
            [(n, tuple(b.shape), np.dtype(b.dtype).name) for n, b in module.named_buffers()])


def _model_difference(rank: int, mine: tuple[list, list], first: tuple[list, list]) -> str:
    """How rank ``rank``'s model description differs from rank 0's, in torch's words ("" if
    they agree)."""
    for what, ours, theirs in (("params", mine[0], first[0]), ("buffers", mine[1], first[1])):
        if len(ours) != len(theirs):
            return (f"DDP expects same model across all ranks, but Rank {rank} has {len(ours)} "
                    f"{what}, while rank 0 has inconsistent {len(theirs)} {what}.")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            where = f"[{rank}]: {what}[{i}] in this process"
            if a[0] != b[0]:
                return (f"{where} is {a[0]!r}, but {b[0]!r} in process 0 (every rank must "
                        f"build the same model, in the same order)")
            if a[1] != b[1]:
                return (f"{where} ({a[0]!r}) with sizes {list(a[1])} appears not to match "
                        f"sizes of the same param in process 0 ({list(b[1])}).")
            if a[2] != b[2]:
                return (f"{where} ({a[0]!r}) with dtype {a[2]} appears not to match dtype of "
                        f"the same param in process 0 ({b[2]}).")
            if a[3:] != b[3:]:
                return (f"{where} ({a[0]!r}) has requires_grad={a[3]}, but {b[3]} in process "
                        f"0 (every rank must train the same parameters)")
    return ""


def _bcast_coalesced(pg: ProcessGroup, arrays: list[np.ndarray], purpose: Purpose) -> None:
    """Overwrite ``arrays`` with rank 0's: one Bcast per dtype of a packed copy."""
    if pg.size() == 1 or not arrays:
        return
    by_dtype: dict[np.dtype, list[np.ndarray]] = {}
    for a in arrays:
        by_dtype.setdefault(a.dtype, []).append(a)
    for dtype, group in by_dtype.items():
        flat = np.concatenate([a.reshape(-1) for a in group]) if len(group) > 1 else \
            np.ascontiguousarray(group[0]).reshape(-1).copy()
        view = flat.view(np.uint8) if dtype.kind == "b" else flat
        pg.bcast_(view, 0, purpose=purpose)
        at = 0
        for a in group:
            a[...] = flat[at:at + a.size].reshape(a.shape)
            at += a.size


_LIVE: list[weakref.ref] = []  # in construction order, so every rank reduces in one order


def _after_backward() -> None:
    for ref in list(_LIVE):
        ddp = ref()
        if ddp is not None and ddp._seen:
            ddp.__dict__["_seen"] = False
            ddp.__dict__["_backwards"] += 1
        if ddp is not None and ddp._pending:
            ddp._reduce_gradients()


# (while no DDP model lives, the optimizer step may run inside the backward plan: it needs
# the gradients averaged first otherwise; engine/update_in_plan.py)
_after_backward.active = lambda: any(ref() is not None for ref in _LIVE)  # type: ignore[attr-defined]
realize.BACKWARD_HOOKS.append(_after_backward)
