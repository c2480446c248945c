"""``ZeroRedundancyOptimizer``: ZeRO stage 1, each rank keeps the optimizer state of a shard only.

    model = DDP(net)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=1e-3)
    loss_fn(model(x), y).backward()
    opt.step()                       # reduce-scatter, local fused step on the shard, allgather
    opt.consolidate_state_dict(to=0) # on every rank; then on rank 0:
    tinyopt.save("ckpt.tinyopt", model=model, optimizer=opt)   # a plain Adam state dict

As DeepSpeed's ZeRO-1 (Rajbhandari et al. 2020, https://arxiv.org/abs/1910.02054): each param
group is laid out (per dtype) as one flat buffer of parameters and gradients, as ``tinyopt.optim``
lays out its own (the parameters' storage stays theirs: the flat parameters are a copy that
is read at every step and written back after it, unless the parameters lie end to end in one
array, which then is the flat buffer).  Of a buffer of ``n`` elements, rank ``r`` owns the contiguous
shard ``[lo_r, hi_r)`` (``n // N`` elements, one more for the first ``n % N`` ranks), cutting
across parameter boundaries.  ``optim``, the local optimizer (an ``optimizer_class``), works on
one Parameter per piece of a parameter inside the shard: its flat parameter storage IS the
shard of the big buffer, its gradient buffer receives the shard's reduced gradient, and its state
(``exp_avg``, ``exp_avg_sq``...) exists for the shard only, about ``1/N`` of the plain optimizer's.
``step()`` is:

1. one small Allreduce (MAX) of the has-gradient flags, so a parameter with a gradient on any
   rank is stepped everywhere (a rank without one contributes zeros) and one with none is skipped;
2. per flat buffer, ``MPI_Reduce_scatter`` of the gradients: rank ``r`` receives the sum of its
   shard, divided by ``N`` (the average, as DDP gives);
3. ONE fused kernel call per buffer of the local optimizer, on the shard, updating the shard of the
   parameter buffer in place;
4. per flat buffer, ``MPI_Allgatherv`` in place: every rank gets every shard.

Bytes per rank and step: ``(N-1)/N`` of the gradients in, ``(N-1)/N`` of the parameters out, the
same as one ring Allreduce of the gradients.  Because this optimizer reduces the gradients,
``DistributedDataParallel`` leaves them alone: between ``backward()`` and ``step()``, ``p.grad``
holds this rank's own gradient, not the average (clip gradients with DDP and a plain optimizer,
or not at all).  Without DDP, make every rank start from the same parameters.

The optimizer must be elementwise (SGD, Adam, AdamW, Adagrad, RMSprop, or a fused optimizer
declaring ``_elementwise = True``): a shard may end inside a parameter, and a piece must step
exactly as the whole parameter would.  The 8-bit optimizers (``Adam8bit``, ``AdamW8bit``,
``Lion8bit``, ``SGD8bit``) quantize blocks of 256 elements of each parameter: with them each
shard boundary moves to the nearest block boundary of its parameter (or its end), so a rank's
pieces keep the whole parameter's blocks and step bit for bit as the plain 8-bit optimizer,
and the consolidated state dict is the plain optimizer's (``absmax`` joined block by block).

``consolidate_state_dict(to)`` gathers the shards' states on rank ``to``, where ``state_dict()``
then returns exactly what ``optimizer_class`` in one process returns (full-size arrays, global
ids, every hyperparameter), so it loads into the plain optimizer; ``load_state_dict`` takes such a
dict (from ZeRO on any number of ranks, or from the plain optimizer) and keeps this rank's shard
of it: checkpoints reshard.  Loading is collective: unless every rank accepts the dict, no rank
keeps it.
"""

from __future__ import annotations

import copy
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.distributed.fingerprint import Purpose
from tinyopt.distributed.process_group import _default
from tinyopt.engine.tensor import Parameter, leaf
from tinyopt.optim.flat import FlatBuffer
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim.optimizer import Optimizer, StateDict, call_closure


class _ZeroBuffer(FlatBuffer):
    """A param group's flat buffer (one dtype) whose gradients ZeRO reduces: DDP skips it."""

    reduces_grads = True


class _Shard:
    """One flat buffer of a group, and this rank's shard of it: each rank ``n // N`` elements,
    one more for the first ``n % N`` ranks, each cut moved to the nearest multiple of
    ``block`` elements from its parameter's start (or to the parameter's end)."""

    def __init__(self, params: list[Parameter], dtype: np.dtype, world: int, rank: int,
                 block: int = 1) -> None:
        self.buffer = _ZeroBuffer(params, dtype)
        n, seg = self.buffer.numel, self.buffer.seg
        cuts = [_block_cut(seg, n // world * r + min(r, n % world), block)
                for r in range(world + 1)]
        self.counts = [b - a for a, b in zip(cuts, cuts[1:])]
        self.starts = cuts[:-1]
        self.lo = self.starts[rank]
        self.hi = self.lo + self.counts[rank]
        self.mine = self.pieces(rank)
        self.piece_param = np.array([j for j, _, _ in self.mine], dtype=np.int64)
        self.local: FlatBuffer  # the local optimizer's buffer of this shard (set by the owner)

    def pieces(self, rank: int) -> list[tuple[int, int, int]]:
        """``(parameter index, start, stop)`` of each piece of rank ``rank``'s shard, in order
        (``start``/``stop`` within the parameter's flattened elements); a rank with an empty
        shard gets one empty piece so that every rank's local optimizer has every group."""
        seg = self.buffer.seg
        lo, hi = self.starts[rank], self.starts[rank] + self.counts[rank]
        out = [(j, max(lo, int(seg[j])) - int(seg[j]), min(hi, int(seg[j + 1])) - int(seg[j]))
               for j in range(len(self.buffer.params)) if seg[j] < hi and seg[j + 1] > lo]
        return out or [(-1, 0, 0)]


class ZeroRedundancyOptimizer(Optimizer):
    """ZeRO-1 over the default process group (see the module docstring).

    Args:
        params: Parameters or param groups, as for any optimizer.
        optimizer_class: the local optimizer's class, e.g. ``tinyopt.optim.Adam``.
        process_group: None or the default group.
        parameters_as_bucket_view: accepted (parameters are always views of flat buffers).
        overlap_with_ddp: must be False.
        **defaults: the hyperparameters, passed to ``optimizer_class``.
    """

    def __init__(self, params: Iterable, optimizer_class: type, process_group: Any = None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False,
                 **defaults: Any) -> None:
        if not _elementwise(optimizer_class):
            raise TypeError(f"ZeroRedundancyOptimizer: optimizer_class must be one of tinyopt's "
                            f"fused elementwise optimizers ({', '.join(_ELEMENTWISE)}, the "
                            f"8-bit ones, or an optimizer declaring _elementwise = True): a "
                            f"shard may end inside a parameter; got {optimizer_class!r}")
        if overlap_with_ddp:
            raise ValueError("ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported (the "
                             "step runs after backward)")
        self.process_group = _default(process_group)
        self.world_size = self.process_group.size()
        self.rank = self.process_group.rank()
        self.global_rank = self.rank
        self.optimizer_class: Any = optimizer_class
        self._optim_defaults = defaults
        # Every hyperparameter the local optimizer would have, validated with its messages.
        full = self._probe({}).defaults
        self.optim: Optimizer  # the local optimizer, made with the first group
        self._shards: list[list[_Shard]] = []
        self._all_state_dicts: list[StateDict] = []
        self._steps = 0  # step() calls: the step of this optimizer's collectives
        super().__init__(params, dict(full))

    # ---- groups -------------------------------------------------------------------------------
    def _probe(self, group: dict[str, Any], dtype: Any = np.float32) -> Optimizer:
        """A throw-away local optimizer with one group of ``group``'s hyperparameters and a
        parameter of ``dtype``: checks them (and the constructor's ``**defaults``) with the
        class's own messages."""
        dummy = Parameter(np.zeros(1, dtype=dtype))
        return self.optimizer_class([{**group, "params": [dummy]}], **self._optim_defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        hyper = {k: v for k, v in group.items() if k not in ("params", "param_names")}
        for p in group["params"]:
            if np.dtype(p.dtype).kind != "f" or np.dtype(p.dtype).itemsize == 2:
                raise TypeError(f"ZeroRedundancyOptimizer can only optimize float32 or float64 "
                                f"parameters, but one has dtype {p.dtype}")
        for dt in {np.dtype(p.dtype) for p in group["params"]} or {np.dtype(np.float32)}:
            _check_elementwise_group(self._probe(hyper, dt).param_groups[0])

    def _add_group(self, group: dict[str, Any]) -> None:
        super()._add_group(group)
        by_dtype: dict[np.dtype, list[Parameter]] = {}
        seen: set[int] = set()
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                by_dtype.setdefault(np.dtype(p.dtype), []).append(p)
        block = getattr(self.optimizer_class, "_shard_block", 1)
        shards = [_Shard(ps, dt, self.world_size, self.rank, block)
                  for dt, ps in by_dtype.items()]
        self._shards.append(shards)
        pieces = []
        for sh in shards:  # this rank's pieces: views of its shard of the flat parameters, which
            seg = sh.buffer.seg  # the local kernel updates in place and the allgather sends
            flat = sh.buffer.gather_params()
            pieces.append([Parameter(leaf(flat[seg[j] + a:seg[j] + b]) if j >= 0
                                     else np.zeros(0, sh.buffer.dtype)) for j, a, b in sh.mine])
        local_group = {k: v for k, v in group.items() if k not in ("params", "param_names")}
        local_group["params"] = [p for ps in pieces for p in ps]
        if block > 1:  # a piece is quantized when its whole parameter is (see eight_bit.py)
            local_group["_whole_numel"] = [sh.buffer.params[j].numel() if j >= 0 else 0
                                           for sh in shards for j, _, _ in sh.mine]
        if not hasattr(self, "optim"):
            self.optim = self.optimizer_class([local_group])
        else:
            self.optim.add_param_group(local_group)
        for sh, ps in zip(shards, pieces):
            sh.local = ps[0].slot.owner  # the local optimizer's flat buffer of the shard
        self._flags = np.zeros(sum(len(sh.buffer.params) for g in self._shards for sh in g),
                               dtype=np.uint8)

    def _sync_param_groups(self) -> None:
        """Hyperparameters (changed by schedulers or users) from ``param_groups`` to ``optim``."""
        for group, local in zip(self.param_groups, self.optim.param_groups):
            for key, value in group.items():
                if key not in ("params", "param_names"):
                    local[key] = value

    # ---- stepping -----------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None):
        """Reduce-scatter the gradients, step the local optimizer on this rank's shard, allgather
        the parameters (see the module docstring).  Call it on every rank."""
        for group in self.param_groups:  # before anything moves (a user may set it on a group)
            _check_elementwise_group(group)
        loss = call_closure(closure)
        pg, world = self.process_group, self.world_size
        self._steps += 1
        step = self._steps
        shards = [sh for g in self._shards for sh in g]
        flags, at = self._flags, 0
        for sh in shards:
            sh.buffer.gather_params()  # (the parameters as they are now, unless the flat
            k = len(sh.buffer.params)  # parameters are their storage)
            flags[at:at + k] = sh.buffer.flags
            at += k
        local_flags = flags.copy()
        if world > 1:
            pg.allreduce_(flags, "MAX", purpose=Purpose.ZERO_FLAGS, step=step)
        self._sync_param_groups()
        at = 0
        for sh in shards:
            fb, k = sh.buffer, len(sh.buffer.params)
            fb.gather_grads()
            for j in np.flatnonzero(local_flags[at:at + k] == 0):  # contributes zeros
                fb.grad[fb.seg[j]:fb.seg[j + 1]] = 0
            if world > 1:
                pg.reduce_scatter_(fb.grad, sh.local.grad, sh.counts,
                                   purpose=Purpose.ZERO_GRADS, step=step)
                np.divide(sh.local.grad, world, out=sh.local.grad)
            else:
                sh.local.grad[...] = fb.grad
            has = flags[at:at + k]
            for piece, j in zip(sh.local.params, sh.piece_param):
                if j >= 0 and has[j]:
                    piece.slot.use_grad_view()  # the reduced shard is already in place
                else:
                    piece.grad = None
            at += k
        self.optim.step()
        for sh in shards:
            if world > 1:
                pg.allgather_(sh.buffer.data, sh.counts, purpose=Purpose.ZERO_PARAMS, step=step)
            sh.buffer.scatter_params()
        return loss

    # ---- state dict ---------------------------------------------------------------------------
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's shard of the state on rank ``to`` (a collective: call it on every
        rank); ``state_dict()`` on rank ``to`` then returns the whole state."""
        if isinstance(to, bool) or not isinstance(to, (int, np.integer)) \
                or not 0 <= to < self.world_size:
            raise ValueError(f"consolidate_state_dict: to must be a rank in "
                             f"0..{self.world_size - 1}, got {to!r}")
        self._sync_param_groups()
        every = self.process_group.gather_bytes(pickle.dumps(self.optim.state_dict()), to,
                                                purpose=Purpose.ZERO_CONSOLIDATE)
        self._all_state_dicts = [pickle.loads(b) for b in every] if every is not None else []

    def state_dict(self) -> StateDict:
        """The whole state, as ``optimizer_class`` in one process gives it (after
        ``consolidate_state_dict`` on this rank; the state as of that call)."""
        if not self._all_state_dicts:
            raise RuntimeError(f"Optimizer state has not been consolidated on this rank. Please "
                               f"call `consolidate_state_dict(to={self.rank})` on all ranks "
                               f"beforehand if you meant to save the global state.")
        return super().state_dict()

    def load_state_dict(self, state_dict: StateDict) -> None:
        """Load a whole state dict (from ``state_dict()`` here or from ``optimizer_class`` in one
        process, saved on any number of ranks) and keep this rank's shard of it.

        A collective: every rank checks what it was given, then the ranks compare verdicts, and
        unless every rank accepted it, none keeps it (each raises; the ranks that accepted it
        name the rank that did not)."""
        before = self._rollback_state()
        error: Exception | None = None
        try:
            super().load_state_dict(state_dict)
        except Exception as e:  # every rank must take part in the vote below
            error = e
        verdict = None if error is None else (type(error).__name__, str(error))
        verdicts = [pickle.loads(b) for b in self.process_group.allgather_bytes(
            pickle.dumps(verdict), purpose=Purpose.ZERO_LOAD)]
        refused = [(q, v) for q, v in enumerate(verdicts) if v is not None]
        if not refused:
            return
        if error is not None:
            raise error
        self._restore_rollback(before)
        q, (kind, text) = refused[0]
        cls = {"ValueError": ValueError, "TypeError": TypeError}.get(kind, RuntimeError)
        raise cls(f"load_state_dict: rank {q} rejected the state dict ({kind}: {text}), so no "
                  f"rank loaded it")

    def _scalar_keys(self) -> tuple[str, ...]:
        return self.optim._scalar_keys()

    def _layout(self, key: str) -> str:
        """``"element"``, ``"block"``, ``"shared"`` or ``"scalar"`` (see the 8-bit optimizers'
        ``_state_layout``; others keep one value per element or scalars)."""
        own = getattr(self.optim, "_state_layout", None)
        if own is not None:
            return own(key)
        return "scalar" if key in self._scalar_keys() else "element"

    def _cast_loaded(self, p, key, value, label: str, scalar: bool):
        cast = getattr(self.optimizer_class, "_cast_whole", None)
        if cast is None:
            return super()._cast_loaded(p, key, value, label, scalar)
        group = next(g for g in self.param_groups if any(q is p for q in g["params"]))
        return cast(group, p, key, value, label, scalar)

    def restore_point(self) -> Callable[[], None]:
        """A function that puts this rank's shard of the state back as it is now (the rollback
        protocol of ``tinyopt.load_into``, see ``tinyopt.checkpoint.restore``; a copy of
        ``state_dict()`` would need every rank)."""
        saved = self._rollback_state()
        return lambda: self._restore_rollback(saved)

    def _rollback_state(self) -> dict[str, Any]:
        """This rank's shard of the state and the hyperparameters, as they are now."""
        return {"zero_rank_state": self.optim.state_dict(),
                "param_groups": [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                                 for g in self.param_groups]}

    def _restore_rollback(self, saved: dict[str, Any]) -> None:
        self.optim.load_state_dict(saved["zero_rank_state"])
        for group, hyper in zip(self.param_groups, saved["param_groups"]):
            group.update(copy.deepcopy(hyper))

    def _local_ids(self) -> list[list[list[tuple[Parameter | None, int, int]]]]:
        """Per rank, per local group: the global parameter and element range of each piece."""
        out = []
        for rank in range(self.world_size):
            per_group = []
            for shards in self._shards:
                pieces = []
                for sh in shards:
                    pieces += [(sh.buffer.params[j] if j >= 0 else None, a, b)
                               for j, a, b in sh.pieces(rank)]
                per_group.append(pieces)
            out.append(per_group)
        return out

    def _state_items(self):
        parts: dict[int, list[tuple[int, dict]]] = defaultdict(list)
        for local_sd, per_group in zip(self._all_state_dicts, self._local_ids()):
            ids = [i for g in local_sd["param_groups"] for i in g["params"]]
            pieces = [piece for g in per_group for piece in g]
            for i, (p, a, _) in zip(ids, pieces):
                st = local_sd["state"].get(i)
                if p is not None and st:
                    parts[id(p)].append((a, st))
        for group in self.param_groups:
            for p in group["params"]:
                got = sorted(parts.get(id(p), []), key=lambda t: t[0])
                if not got:
                    continue
                state = {}
                for key, first in got[0][1].items():
                    layout = self._layout(key)
                    if layout in ("scalar", "shared"):
                        state[key] = first
                    else:
                        joined = np.concatenate([np.ravel(st[key]) for _, st in got])
                        state[key] = joined.reshape(p.shape) if layout == "element" else joined
                yield p, state

    def _set_state(self, state: defaultdict, groups: list[dict]) -> None:
        block = getattr(self.optimizer_class, "_shard_block", 1)
        local_state: dict[int, dict] = {}
        local_groups = []
        k = 0
        for group, local, pieces in zip(groups, self.optim.param_groups,
                                        self._local_ids()[self.rank]):
            ids = []
            for p, a, b in pieces:
                st = state.get(p) if p is not None else None
                if st:
                    local_state[k] = {key: self._cut(key, v, a, b, block)
                                      for key, v in st.items()}
                ids.append(k)
                k += 1
            hyper = {key: v for key, v in group.items() if key not in ("params", "param_names")}
            if "_whole_numel" in local:
                hyper["_whole_numel"] = local["_whole_numel"]
            local_groups.append({**hyper, "params": ids})
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
        self.param_groups = groups
        self.state = defaultdict(dict, {k: v for k, v in state.items()
                                        if not isinstance(k, Parameter)})
        self._all_state_dicts = []

    def _cut(self, key: str, value, a: int, b: int, block: int):
        """The part of a whole parameter's state entry for its elements ``[a, b)``."""
        layout = self._layout(key)
        if layout in ("scalar", "shared"):
            return value
        if layout == "block":
            return np.ravel(value)[a // block:-(-b // block)]
        return np.ravel(value)[a:b]

    def __repr__(self) -> str:
        return (f"ZeroRedundancyOptimizer(rank {self.rank} of {self.world_size}, "
                f"optimizer_class={self.optimizer_class.__name__})\n" + repr(self.optim))


_ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop")


def _elementwise(cls: Any) -> bool:
    """Whether ``cls`` updates each element from that element's state alone (plus per-parameter
    scalars such as the step), so a piece of a parameter steps exactly as the whole would.  An
    optimizer that reads a whole parameter (LAMB's trust ratio, Adafactor's factored moments) is
    not; unknown optimizers must say so (``_elementwise = True``) rather than be assumed."""
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        return False
    declared = cls.__dict__.get("_elementwise")
    if declared is not None:
        return bool(declared)
    if not issubclass(cls, FusedOptimizer):
        return False
    import tinyopt.optim as optim
    return any(cls is getattr(optim, name, None) for name in _ELEMENTWISE)


def _check_elementwise_group(group: dict[str, Any]) -> None:
    """A cautious group (``cautious=True``: the update is rescaled by a count over the whole
    parameter) is not elementwise, so a piece of a parameter would not step as the whole does."""
    if group.get("cautious", False):
        raise ValueError("ZeroRedundancyOptimizer: cautious=True is not supported: its update is "
                         "rescaled by a count over each whole parameter, and a shard may end "
                         "inside a parameter")


def _block_cut(seg: np.ndarray, t: int, block: int) -> int:
    """The cut of a flat buffer (parameters at ``seg``) nearest element ``t`` that is a
    multiple of ``block`` elements from its parameter's start or its parameter's end."""
    j = int(np.searchsorted(seg, t, side="right")) - 1  # the parameter holding element t
    if block == 1 or j >= len(seg) - 1:
        return t
    down = int(seg[j]) + (t - int(seg[j])) // block * block
    up = min(down + block, int(seg[j + 1]))
    return down if t - down <= up - t else up

