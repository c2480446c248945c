"""What ``tinyopt.fit`` does differently when the model is a ``DistributedDataParallel``.

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
  consolidated on rank 0 first, and the checkpoint also keeps every rank's global generator
  state, so ``resume`` continues bit for bit on the same number of ranks (every rank reads the
  file: on several machines, put it on a shared file system).
"""

from __future__ import annotations

import contextlib
from typing import Any


from tinyopt.data import DataLoader, DistributedSampler, Subset
from tinyopt.distributed.process_group import (all_gather_object, barrier,
                                               broadcast_object_list)
from tinyopt.engine import random
from tinyopt.train.results import Accumulator


class DataParallelFit:
    """The hooks ``fit`` calls under DDP (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        self.pg = model.process_group
        self.rank, self.world = self.pg.rank(), self.pg.size()
        self.is_main = self.rank == 0
        self.model = model
        self.sampler: DistributedSampler | None = None

    def train_loader(self, train_set: Any, batch_size: int, shuffle: bool,
                     seed: int | None) -> DataLoader:
        if seed is None:  # one seed for all ranks: rank 0's draw from its global generator
            drawn: list[Any] = [int(random.default_generator.numpy.integers(2**62))
                                if self.is_main else None]
            broadcast_object_list(drawn, src=0, group=self.pg)
            seed = drawn[0]
        self.sampler = DistributedSampler(train_set, num_replicas=self.world, rank=self.rank,
                                          shuffle=shuffle, seed=int(seed))
        return DataLoader(train_set, batch_size=batch_size, sampler=self.sampler)

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
        mine = (acc.n, acc.batches, acc._mean, acc._m2, acc.correct, acc.counted,
                acc.classification)
        every: list[Any] = [None] * self.world
        all_gather_object(every, mine, group=self.pg)
        n, batches, mean, m2, correct, counted, classification = every[0]
        for n_b, b_b, mean_b, m2_b, c_b, k_b, cls_b in every[1:]:  # Chan et al.'s update
            total = n + n_b
            if total:
                delta = mean_b - mean
                mean += delta * n_b / total
                m2 += m2_b + delta * delta * n * n_b / total
            n, batches = total, batches + b_b
            correct, counted = correct + c_b, counted + k_b
            classification = classification or cls_b
        acc.n, acc.batches, acc._mean, acc._m2 = n, batches, mean, m2
        acc.correct, acc.counted, acc.classification = correct, counted, classification

    def before_save(self, optimizer: Any) -> list[Any]:
        """Called on every rank before rank 0 saves: consolidates a sharded optimizer; returns
        every rank's global generator state (for the checkpoint)."""
        consolidate = getattr(optimizer, "consolidate_state_dict", None)
        if callable(consolidate):
            consolidate(to=0)
        states: list[Any] = [None] * self.world
        all_gather_object(states, random.default_generator.get_state(), group=self.pg)
        return states

    def saved(self) -> None:
        """Called on every rank after rank 0 saved: no rank reads a half-written file."""
        barrier(group=self.pg)

    def after_restore(self, states: Any) -> None:
        """Give this rank back its own global generator state from the checkpoint."""
        if not isinstance(states, list) or len(states) != self.world:
            have = len(states) if isinstance(states, list) else "no"
            raise ValueError(f"fit: cannot resume: the checkpoint holds the generator states of "
                             f"{have} ranks, this run has {self.world} (resume on the same "
                             f"number of ranks)")
        random.default_generator.set_state(states[self.rank])
