"""Samplers, as in ``torch.utils.data``: which samples a ``DataLoader`` visits, and in what order.

    loader = DataLoader(ds, batch_size=64, sampler=WeightedRandomSampler(w, num_samples=len(ds)))
    loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 64, drop_last=True))

A sampler is any iterable of indices (a batch sampler: of lists of indices), preferably with
``__len__``.  The random samplers draw from ``generator`` (a ``tinyopt.Generator`` or a numpy
``Generator``); without one, each ``iter`` seeds a fresh generator from tinyopt's global one, as
PyTorch's ``RandomSampler`` does, so ``tinyopt.manual_seed`` makes the order reproducible.

The built-in samplers also give a whole epoch's indices as one int64 array (``_indices()``), which
``DataLoader`` uses instead of iterating index by index.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, Generic, TypeVar

import numpy as np

from tinyopt.engine import random

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler",
           "SubsetRandomSampler", "WeightedRandomSampler"]

T_co = TypeVar("T_co", covariant=True)

GeneratorLike = random.Generator | np.random.Generator


class _NumpyGenerator(random.Generator):
    """A user's numpy ``Generator`` seen as a tinyopt one: draws advance the user's object, and
    ``get_state``/``set_state`` read and write its bit generator's state in place."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self._seed = None

    def get_state(self) -> dict:
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        probe = type(self._rng.bit_generator)()
        probe.state = state  # validates before anything changes
        self._rng.bit_generator.state = state


def as_generator(generator: Any, where: str) -> random.Generator | None:
    """``generator`` (None, a tinyopt ``Generator`` or a numpy ``Generator``) as a tinyopt one."""
    if generator is None or isinstance(generator, random.Generator):
        return generator
    if isinstance(generator, np.random.Generator):
        return _NumpyGenerator(generator)
    raise TypeError(f"{where}: generator must be a tinyopt Generator or a numpy Generator, got "
                    f"{type(generator).__name__}")


def _epoch_rng(generator: random.Generator | None) -> np.random.Generator:
    """The generator one epoch draws from: the sampler's, else one seeded from the global one."""
    if generator is not None:
        return generator.numpy
    seed = int(random.default_generator.numpy.integers(2**63, dtype=np.int64))
    return np.random.Generator(np.random.PCG64(seed))


def _positive_int(name: str, v: Any, error: type[Exception] = ValueError) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
        raise error(f"{name} should be a positive integer value, but got {name}={v}")
    return int(v)


class Sampler(Generic[T_co]):
    """Base class of samplers: subclasses define ``__iter__`` (indices, or lists of indices for a
    batch sampler) and usually ``__len__``."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1, in order, every epoch."""

    def __init__(self, data_source: Sized):
        self.data_source = data_source

    def _indices(self) -> np.ndarray:
        return np.arange(len(self.data_source), dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A random order of the samples: a new permutation every epoch, or with ``replacement``
    ``num_samples`` independent uniform draws.  Without replacement, ``num_samples`` larger than
    the data set chains permutations (as PyTorch does)."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: GeneratorLike | None = None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = as_generator(generator, "RandomSampler")
        if num_samples is not None:
            _positive_int("num_samples", num_samples)
        elif len(data_source) <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={len(data_source)}")

    @property
    def num_samples(self) -> int:
        """How many indices an epoch draws: ``num_samples`` if given, else the data set's
        length."""
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def _indices(self) -> np.ndarray:
        n, k = len(self.data_source), self.num_samples
        rng = _epoch_rng(self.generator)
        if self.replacement:
            return rng.integers(0, n, size=k, dtype=np.int64)
        perms = [rng.permutation(n) for _ in range(-(-k // n))]
        return np.concatenate(perms)[:k].astype(np.int64, copy=False)

    def __iter__(self) -> Iterator[int]:
        yield from self._indices().tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a new random order every epoch (without replacement)."""

    def __init__(self, indices: Sequence[int], generator: GeneratorLike | None = None):
        self.indices = indices
        self.generator = as_generator(generator, "SubsetRandomSampler")

    def _indices(self) -> np.ndarray:
        perm = _epoch_rng(self.generator).permutation(len(self.indices))
        ix = np.asarray(self.indices)
        if ix.dtype.kind in "iu" and ix.ndim == 1:
            return ix[perm].astype(np.int64, copy=False)
        return np.asarray([self.indices[i] for i in perm.tolist()], dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        for i in _epoch_rng(self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices in ``[0, len(weights))`` drawn with probability proportional to
    ``weights`` (with or without ``replacement``), as ``torch.multinomial`` draws them."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: GeneratorLike | None = None):
        _positive_int("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(w.shape)}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry "
                               "< 0, inf or nan)")
        if w.sum() <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement:
            if num_samples > w.size:
                raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                                   "replacement")
            if num_samples > np.count_nonzero(w):
                raise RuntimeError("invalid multinomial distribution (with replacement=False, not "
                                   "enough non-negative category to sample)")
        self.weights = w
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self.generator = as_generator(generator, "WeightedRandomSampler")

    def _indices(self) -> np.ndarray:
        rng = _epoch_rng(self.generator)
        return rng.choice(self.weights.size, size=self.num_samples, replace=self.replacement,
                          p=self.weights / self.weights.sum()).astype(np.int64, copy=False)

    def __iter__(self) -> Iterator[int]:
        yield from self._indices().tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Groups the indices of ``sampler`` (any iterable) into lists of ``batch_size``; the last
    shorter list is dropped when ``drop_last``."""

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool):
        _positive_int("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
