"""Data sets, as in ``torch.utils.data``: map-style ``Dataset``, ``TensorDataset``, ``Subset``,
``ConcatDataset`` and ``random_split``; iterable-style ``IterableDataset`` and ``ChainDataset``.

A data set is anything with ``__len__`` and ``__getitem__(i)`` returning one sample::

    x = np.random.rand(1000, 784).astype(np.float32)
    y = np.random.randint(0, 10, size=1000)
    full = TensorDataset(x, y)                  # full[i] == (x[i], y[i])
    train, val = random_split(full, [0.9, 0.1])  # two Subsets, disjoint, covering ``full``

``DataLoader`` recognises ``TensorDataset`` (and ``Subset``s of one) and fetches whole batches by
indexing the arrays with the batch's indices, with no per-sample Python loop.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from tinyopt.engine import random
from tinyopt.engine.tensor import Parameter, Tensor


class Dataset:
    """A map-style data set: subclasses define ``__getitem__(index)`` and ``__len__()``.

    ``a + b`` concatenates two data sets (a ``ConcatDataset``), as in PyTorch.
    """

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """An iterable-style data set: subclasses define ``__iter__`` yielding samples (a stream).

    ``DataLoader`` batches what it yields, in order.  With ``num_workers=N`` each worker process
    iterates its own copy: split the stream with ``get_worker_info()`` or every worker yields all
    of it (as in PyTorch).  ``a + b`` chains two of them (a ``ChainDataset``).
    """

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other: Dataset) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """The samples of several iterable data sets, one after another."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = datasets

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)  # type: ignore[arg-type]
        return total


def _as_array(x: Any, position: int) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Parameter):
        return x.value
    if isinstance(x, Tensor):
        return x.numpy()
    raise TypeError(f"TensorDataset: argument {position} must be a numpy array or a tinyopt "
                    f"Tensor, got {type(x).__name__}")


class TensorDataset(Dataset):
    """Samples are tuples ``(a[i], b[i], ...)`` of rows of the given arrays.

    Arguments are numpy arrays or tinyopt Tensors (realized once, here); all must have the same
    size in the first dimension.  ``tensors`` holds the arrays (not copied).
    """

    tensors: tuple[np.ndarray, ...]

    def __init__(self, *tensors: np.ndarray | Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one array")
        arrays = tuple(_as_array(t, i) for i, t in enumerate(tensors))
        for i, a in enumerate(arrays):
            if a.ndim == 0:
                raise ValueError(f"TensorDataset: argument {i} is 0-dimensional; every array needs "
                                 f"a first (sample) dimension")
        sizes = [a.shape[0] for a in arrays]
        if any(s != sizes[0] for s in sizes):
            shapes = ", ".join(str(a.shape) for a in arrays)
            raise ValueError(f"Size mismatch between tensors: TensorDataset needs the same size in "
                             f"the first dimension, got shapes {shapes}")
        self.tensors = arrays

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return tuple(a[index] for a in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order: ``Subset(d, ix)[i] == d[ix[i]]``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: int | list[int]) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several data sets one after another."""

    def __init__(self, datasets: Sequence[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> Any:
        n = len(self)
        if idx < 0:
            if -idx > n:
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += n
        if idx >= n:
            raise IndexError(f"index {idx} is out of range for a ConcatDataset of length {n}")
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[d - 1] if d > 0 else 0
        return self.datasets[d][idx - start]


def _split_lengths(n: int, lengths: Sequence[int | float]) -> list[int]:
    """Integer split sizes; fractions summing to 1 are floored and the remainder dealt round-robin."""
    lengths = list(lengths)
    total = sum(lengths)
    if lengths and math.isclose(total, 1) and total <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty "
                              f"dataset.", stacklevel=3)
        return sizes
    for i, size in enumerate(lengths):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"random_split: lengths must be non-negative integers or fractions "
                             f"summing to 1, got {size!r} at index {i}")
    if total != n:
        raise ValueError(f"Sum of input lengths does not equal the length of the input dataset! "
                         f"({total} != {n})")
    return [int(s) for s in lengths]


def random_split(dataset: Dataset, lengths: Sequence[int | float],
                 generator: random.Generator | np.random.Generator | None = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random ``Subset``s of the given lengths.

    ``lengths`` are sample counts summing to ``len(dataset)``, or fractions summing to 1 (each
    split gets ``floor(n * frac)`` samples and the remainder is dealt one by one from the first
    split on, as in PyTorch 2.x).  The permutation is drawn from ``generator`` (a tinyopt or numpy
    Generator; default: tinyopt's global generator, so ``tinyopt.manual_seed`` makes the split
    reproducible).
    """
    if isinstance(generator, np.random.Generator):
        rng = generator
    elif generator is None or isinstance(generator, random.Generator):
        rng = (generator or random.default_generator).numpy
    else:
        raise TypeError(f"random_split: generator must be a tinyopt Generator or a numpy "
                        f"Generator, got {type(generator).__name__}")
    sizes = _split_lengths(len(dataset), lengths)
    perm = rng.permutation(sum(sizes)).tolist()
    return [Subset(dataset, perm[end - size:end]) for end, size in zip(accumulate(sizes), sizes)]


def _array_source(dataset: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray | None, bool] | None:
    """``(arrays, index_map, is_tuple)`` when batches of ``dataset`` can be fetched by indexing.

    Handles TensorDataset, a bare numpy array, and (nested) Subsets of those, as long as no
    subclass overrides ``__getitem__``.  ``index_map`` maps dataset indices to array rows (None:
    identity).  Returns None for any other data set.
    """
    index_map = None
    while type(dataset).__getitem__ is Subset.__getitem__ and isinstance(dataset, Subset):
        ix = np.asarray(dataset.indices, dtype=np.int64)
        if ix.ndim != 1:
            return None
        index_map = ix if index_map is None else ix[index_map]
        dataset = dataset.dataset
    if isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__:
        return dataset.tensors, index_map, True
    if type(dataset) is np.ndarray and dataset.ndim > 0:
        return (dataset,), index_map, False
    return None
