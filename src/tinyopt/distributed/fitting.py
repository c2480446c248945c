"""What ``tinyopt.fit`` does differently when the model is a ``DistributedDataParallel``: the
strategy ``DistributedDataParallel.fit_strategy()`` returns (``tinyopt.train.strategy``).

    model = DDP(net)                       # on every rank, launched with mpiexec
    history = tinyopt.fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=3, batch_size=64,
                          val_split=0.1, seed=0, checkpoint="run.tinyopt")

- each rank trains on its ``DistributedSampler`` share of the training part (``batch_size``
  samples per rank and physical batch; the sampler pads the shares to equal length, so every
  rank takes the same number of steps), reshuffled every epoch from ``seed`` (drawn on rank 0
  and broadcast when None);
- gradients are averaged by DDP after each logical batch (micro-batches of a gradient
  accumulation run under ``no_sync``, so one reduction per optimizer step);
- each rank validates on every ``world_size``-th sample of the validation part, without padding;
- the epoch's metrics are combined over the ranks (sample counts, losses and their spread,
  correct predictions), so every rank returns the same History and callbacks, schedulers and
  early stopping decide alike on every rank;
- only rank 0 reports progress and writes checkpoints; a ``ZeroRedundancyOptimizer`` is
  consolidated on rank 0 first, and the checkpoint also keeps the world size and every rank's
  global generator state, so ``resume`` continues bit for bit on the same number of ranks (every
  rank reads the file: on several machines, put it on a shared file system);
- ``resume`` on another number of ranks works too (the checkpoint holds whole, unsharded
  states) and warns that the world size changed: keep the global batch (``batch_size`` times
  the world size) to continue the same run, which then differs from the uninterrupted one only
  by the rounding of gradient sums taken in another order; ranks beyond the saved ones start
  new random streams (dropout masks differ).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tinyopt.checkpoint import load
from tinyopt.data import DataLoader, DistributedSampler, Subset
from tinyopt.distributed.process_group import (all_gather_object, barrier,
                                               broadcast_object_list)
from tinyopt.engine import random
from tinyopt.train.results import Accumulator
from tinyopt.train.strategy import FitStrategy


class DataParallelFit(FitStrategy):
    """The hooks ``fit`` calls under DDP (see the module docstring)."""

    update_in_backward = False  # DDP reduces the gradients between backward and step

    def __init__(self, model: Any) -> None:
        self.pg = model.process_group
        self.rank, self.world = self.pg.rank(), self.pg.size()
        self.is_main = self.rank == 0
        self.model = model
        self.sampler: DistributedSampler | None = None
        self.restored_rng: Any = None  # this rank's generator state from the checkpoint

    def check(self, where: str, *, predictions: bool) -> None:
        if predictions:
            raise ValueError(f"{where}: predictions=True is not supported with a "
                             f"DistributedDataParallel model (each rank sees only its share)")

    def train_loader(self, train_set: Any, batch_size: int, shuffle: bool,
                     seed: int | None) -> tuple[DataLoader, int]:
        if seed is None:  # one seed for all ranks: rank 0's draw from its global generator
            drawn: list[Any] = [int(random.default_generator.numpy.integers(2**62))
                                if self.is_main else None]
            broadcast_object_list(drawn, src=0, group=self.pg)
            seed = drawn[0]
        self.sampler = DistributedSampler(train_set, num_replicas=self.world, rank=self.rank,
                                          shuffle=shuffle, seed=int(seed))
        return (DataLoader(train_set, batch_size=batch_size, sampler=self.sampler),
                len(self.sampler))

    def val_part(self, val_set: Any) -> Any:
        """This rank's validation samples: every ``world``-th, no padding (exact metrics)."""
        return Subset(val_set, range(self.rank, len(val_set), self.world))

    def epoch_begin(self, epoch: int) -> None:
        assert self.sampler is not None, "train_loader() makes the sampler"
        self.sampler.set_epoch(epoch)

    def sync(self, end: int, logical: int, n: int) -> Any:
        """The context of a physical batch ending at sample ``end`` of the ``n`` of this rank's
        epoch: ``no_sync()`` unless it ends a logical batch."""
        if end % logical == 0 or end >= n:
            return contextlib.nullcontext()
        return self.model.no_sync()

    def reduce(self, acc: Accumulator) -> None:
        """Combine ``acc`` with the other ranks' (in place; the same result on every rank)."""
        every: list[Any] = [None] * self.world
        all_gather_object(every, acc.sums(), group=self.pg)
        acc.combine(every)

    def before_save(self, optimizer: Any) -> dict[str, Any]:
        """Called on every rank before rank 0 saves: consolidates a sharded optimizer; returns
        what the checkpoint's ``fit`` entry keeps of the ranks (world size, every rank's global
        generator state)."""
        consolidate = getattr(optimizer, "consolidate_state_dict", None)
        if callable(consolidate):
            consolidate(to=0)
        states: list[Any] = [None] * self.world
        all_gather_object(states, random.default_generator.get_state(), group=self.pg)
        return {"world_size": self.world, "rng_ranks": states}

    def save(self, optimizer: Any, write: Callable[[dict[str, Any] | None], None]) -> None:
        """On every rank: rank 0 writes, with what :meth:`before_save` gathered; then no rank
        goes on before the file is whole (no rank reads a half-written file)."""
        extra = self.before_save(optimizer)
        if self.is_main:
            write(extra)
        barrier(group=self.pg)

    def restore(self, path: str, batch_size: int, restore: Callable[[], Any]) -> Any:
        self.before_restore(load(path).get("fit"), path, batch_size)
        out = restore()
        self.after_restore()
        return out

    def before_restore(self, entry: Any, path: str, batch_size: int) -> None:
        """Check the checkpoint's ``fit`` entry before anything is restored, and say (on rank
        0) when the world size changed since it was written."""
        if not isinstance(entry, Mapping):
            return  # not a fit checkpoint: restore_fit says so
        states = entry.get("rng_ranks")
        if not isinstance(states, list) or not states:
            raise ValueError(f"fit: cannot resume from {path} under DistributedDataParallel: it "
                             f"holds no generator states of ranks (it was written by fit "
                             f"without DistributedDataParallel)")
        saved = entry.get("world_size", len(states))
        if saved != self.world and self.is_main:
            config = entry.get("config") or {}
            before = config.get("batch_size", 0) * saved
            now = batch_size * self.world
            batch = (f"the global batch stays {now}" if before == now else
                     f"the global batch changes from {before} to {now} samples (pass "
                     f"batch_size={before // self.world} to keep it)" if before % self.world == 0
                     else f"the global batch changes from {before} to {now} samples")
            fresh = ("" if self.world <= saved else
                     f"; rank {saved} starts a new random stream" if self.world == saved + 1
                     else f"; ranks {saved}..{self.world - 1} start new random streams")
            warnings.warn(f"fit: resuming {path}, written by {saved} ranks, on {self.world} "
                          f"ranks: {batch}, and gradients are summed in another order, so the "
                          f"run continues within float32 rounding of an uninterrupted one, not "
                          f"bit for bit{fresh}", stacklevel=4)
        self.restored_rng = _stream(states, self.rank)

    def after_restore(self) -> None:
        """Give this rank its global generator state from the checkpoint (once every object
        was restored)."""
        random.default_generator.set_state(self.restored_rng)


def _stream(states: list[Any], rank: int) -> Any:
    """Rank ``rank``'s generator state from the ``len(states)`` saved ones: its own, or (a rank
    the saved run did not have) saved rank ``rank % n``'s stream jumped ``rank // n`` times
    ahead (PCG64's jumps: streams that never overlap)."""
    n = len(states)
    if rank < n:
        return states[rank]
    bits = np.random.PCG64()
    bits.state = states[rank % n]
    return bits.jumped(rank // n).state
