"""``DistributedSampler``: each rank's share of a data set (``torch.utils.data.DistributedSampler``).

    sampler = DistributedSampler(train_set, shuffle=True, seed=0)   # rank and world size from
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)  # tinyopt.distributed
    for epoch in range(epochs):
        sampler.set_epoch(epoch)     # a new order every epoch, the same on every rank
        for x, y in loader: ...

Every epoch all ranks draw the same permutation of the ``n`` samples (seeded with
``seed + epoch``), pad it by repeating its first samples up to ``num_samples * num_replicas`` (or
cut it down with ``drop_last=True``), and rank ``r`` takes every ``num_replicas``-th sample from
position ``r``: the ranks' shares are disjoint (up to the padding) and together cover the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import numpy as np

from tinyopt.data.sampler import Sampler
from tinyopt.engine import random


def _replicas_and_rank(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """The defaults PyTorch takes from the default process group."""
    if num_replicas is None or rank is None:
        from tinyopt import distributed as dist  # the driver layer, only when asked for
        if not dist.is_available():
            raise RuntimeError(f"Requires distributed package to be available ({dist.INSTALL})")
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
    for name, v in (("num_replicas", num_replicas), ("rank", rank)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"DistributedSampler: {name} must be an integer, got {v!r}")
    if num_replicas <= 0:
        raise ValueError(f"DistributedSampler: num_replicas must be positive, got {num_replicas}")
    if rank >= num_replicas or rank < 0:
        raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                         f"[0, {num_replicas - 1}]")
    return int(num_replicas), int(rank)


class DistributedSampler(Sampler[int]):
    """The indices of ``dataset`` that rank ``rank`` of ``num_replicas`` visits each epoch.

    Args:
        dataset: a sized data set.
        num_replicas: number of ranks (default: the default process group's world size).
        rank: this rank (default: the default process group's rank).
        shuffle: draw a new permutation every epoch (seeded with ``seed + epoch``, the same on
            every rank); else the data-set order.
        seed: the shuffling seed; must be the same on every rank.
        drop_last: drop the tail so every rank gets ``floor(n / num_replicas)`` distinct samples;
            else pad by repeating samples up to ``ceil(n / num_replicas)`` per rank.

    Call ``set_epoch(epoch)`` before each epoch, or every epoch repeats the same order.
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if not hasattr(dataset, "__len__"):
            raise TypeError(f"DistributedSampler: dataset must have a length, got "
                            f"{type(dataset).__name__}")
        self.num_replicas, self.rank = _replicas_and_rank(num_replicas, rank)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"DistributedSampler: seed must be an integer, got {seed!r}")
        self.dataset = dataset
        self.epoch = 0
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        n = len(dataset)
        if self.drop_last and n % self.num_replicas != 0:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def _indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, as one int64 array."""
        n = len(self.dataset)
        if self.shuffle:
            order = random.Generator(self.seed + self.epoch).numpy.permutation(n)
        else:
            order = np.arange(n)
        order = order.astype(np.int64, copy=False)
        if self.total_size > n:  # pad with the first samples, repeated as often as needed
            order = np.resize(order, self.total_size)
        else:
            order = order[:self.total_size]
        return order[self.rank:self.total_size:self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, so shuffling draws that epoch's order (the same on every rank)."""
        self.epoch = int(epoch)

    def __repr__(self) -> str:
        return (f"DistributedSampler(num_replicas={self.num_replicas}, rank={self.rank}, "
                f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
                f"num_samples={self.num_samples})")
