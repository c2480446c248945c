"""``DataLoader``: batches of numpy arrays from a map-style data set, with a resumable position.

    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True)
    for epoch in range(3):
        for xb, yb in loader:        # one epoch per ``for``; a new permutation each epoch
            ...
    state = loader.state_dict()      # epoch, this epoch's order, how far into it, generator state
    loader.load_state_dict(state)    # the next ``for`` yields exactly the batches that were left

Shuffling draws from the loader's own generator: the ``generator`` argument, or one seeded from
tinyopt's global generator when the first shuffled epoch starts (as PyTorch draws its sampler seed
from the global generator), so ``tinyopt.manual_seed`` makes the order reproducible.

Batches of a ``TensorDataset`` (or a ``Subset`` of one, such as ``random_split`` returns) are
fetched by indexing its arrays with the batch's indices: one numpy gather per array per batch.
"""

from __future__ import annotations

import collections.abc
from typing import Any, Callable, Iterator

import numpy as np

from tinyopt.data.dataset import _array_source
from tinyopt.engine import random
from tinyopt.engine.tensor import Parameter, Tensor

_COLLATE_TYPES = "numpy arrays, numbers, strings, dicts, lists or tuples"


def default_collate(batch: list[Any]) -> Any:
    """Merge a list of samples into a batch, as ``torch.utils.data.default_collate`` but into numpy.

    numpy arrays, numpy scalars and tinyopt Tensors are stacked along a new first axis; Python
    ``float``/``int``/``bool`` become float64/int64/bool arrays; strings stay a list; dicts are
    collated per key; tuples and lists are collated per position (a tuple sample gives a list,
    as in PyTorch; a namedtuple gives the namedtuple).
    """
    if not batch:
        raise ValueError("default_collate: the batch is empty")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return np.stack([p.data if isinstance(p, Parameter) else p.numpy() for p in batch])
    if isinstance(elem, (np.ndarray, np.generic)):
        if elem.dtype.kind in "OUSV":
            if elem.dtype.kind in "US" and isinstance(elem, np.generic):
                return list(batch)
            raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found an "
                            f"array of dtype {elem.dtype}")
        return np.stack(batch)
    if isinstance(elem, bool):
        return np.array(batch, dtype=np.bool_)
    if isinstance(elem, int):
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, float):
        return np.array(batch, dtype=np.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(s) != size for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found "
                    f"{type(elem).__name__}")


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` samples.

    Each ``iter(loader)`` (each ``for`` loop) is one epoch.  With ``shuffle=True`` every epoch
    visits the samples in a new random order drawn from the loader's generator; ``drop_last=True``
    drops a last batch smaller than ``batch_size``.  ``collate_fn`` merges a list of samples into a
    batch (default: ``default_collate``, into numpy arrays).

    ``state_dict()`` reports the position (epochs begun, this epoch's order, samples consumed,
    generator state); after ``load_state_dict(state)`` the next ``iter(loader)`` continues that
    epoch with exactly the batches that were left, and the following epochs match an
    uninterrupted run.  Without a pending restored position, ``iter`` always starts a new epoch,
    as in PyTorch (breaking out of a loop abandons the rest of that epoch).
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, generator: random.Generator | None = None,
                 collate_fn: Callable[[list[Any]], Any] | None = None):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader: dataset must be a map-style data set (with __len__ and "
                            f"__getitem__), got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size!r}")
        if not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(f"shuffle should be a boolean value, but got shuffle={shuffle!r}")
        if not isinstance(drop_last, (bool, np.bool_)):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        if generator is not None and not isinstance(generator, random.Generator):
            raise TypeError(f"DataLoader: generator must be a tinyopt Generator, got "
                            f"{type(generator).__name__}")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got "
                            f"{type(collate_fn).__name__}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.generator = generator
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self._fast = collate_fn is None  # may index TensorDataset arrays directly
        self._shuffle_gen = generator  # created lazily from the global generator when None
        self._epoch = 0          # epochs begun
        self._order: np.ndarray | None = None  # this epoch's order (None: 0..n-1)
        self._length = 0         # samples in this epoch
        self._index = 0          # samples of this epoch consumed
        self._resume = False     # load_state_dict set a position the next iter continues from
        self._token = 0          # identifies the iterator whose progress the loader tracks

    # ---- sizes --------------------------------------------------------------------------------
    def _end(self, length: int) -> int:
        """Samples an epoch of ``length`` samples yields (``drop_last`` drops the tail)."""
        return length - length % self.batch_size if self.drop_last else length

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.drop_last:
            return n // self.batch_size
        return -(-n // self.batch_size)

    # ---- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> _DataLoaderIter:
        self._token += 1
        if self._resume:
            self._resume = False
        else:
            n = len(self.dataset)
            if self.shuffle:
                if self._shuffle_gen is None:
                    seed = int(random.default_generator.numpy.integers(2**63, dtype=np.int64))
                    self._shuffle_gen = random.Generator(seed)
                self._order = self._shuffle_gen.numpy.permutation(n).astype(np.int64, copy=False)
            else:
                self._order = None
            self._epoch += 1
            self._length = n
            self._index = 0
        return _DataLoaderIter(self, self._token, self._order, self._length, self._index)

    def _fetch(self, source, order: np.ndarray | None, start: int, stop: int) -> Any:
        if source is not None:
            arrays, index_map, is_tuple = source
            if order is None and index_map is None:
                batch = [a[start:stop].copy() for a in arrays]
            else:
                ix = np.arange(start, stop) if order is None else order[start:stop]
                if index_map is not None:
                    ix = index_map[ix]
                batch = [a[ix] for a in arrays]
            return batch if is_tuple else batch[0]
        indices = list(range(start, stop)) if order is None else order[start:stop].tolist()
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            samples = getitems(indices)
        else:
            samples = [self.dataset[i] for i in indices]
        return self.collate_fn(samples)

    # ---- position -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The position: JSON-able values plus the epoch order as an int64 array (or None).

        ``epoch`` is the number of epochs begun, ``index`` the samples of the latest one consumed,
        ``length`` its size, ``order`` its sample order (None when not shuffling) and
        ``generator`` the state of the shuffling generator (None before it exists).
        """
        gen = self._shuffle_gen
        return {
            "epoch": self._epoch,
            "index": self._index,
            "length": self._length,
            "order": None if self._order is None else self._order.copy(),
            "generator": None if gen is None else gen.get_state(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position from ``state_dict()``; checks everything before changing anything."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"DataLoader.load_state_dict: expected a dict, got "
                            f"{type(state_dict).__name__}")
        expected = {"epoch", "index", "length", "order", "generator"}
        missing, unexpected = expected - set(state_dict), set(state_dict) - expected
        if missing or unexpected:
            raise KeyError(f"DataLoader.load_state_dict: missing keys {sorted(missing)}, "
                           f"unexpected keys {sorted(map(str, unexpected))}")

        def count(name: str) -> int:
            v = state_dict[name]
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"DataLoader.load_state_dict: '{name}' must be a non-negative "
                                 f"integer, got {v!r}")
            return int(v)

        epoch, index, length = count("epoch"), count("index"), count("length")
        n = len(self.dataset)
        if epoch > 0 and length != n:
            raise ValueError(f"DataLoader.load_state_dict: the state is for a data set of {length} "
                             f"samples, but this loader's data set has {n}")
        if index > length:
            raise ValueError(f"DataLoader.load_state_dict: index {index} is past the end of an "
                             f"epoch of {length} samples")
        order = state_dict["order"]
        if order is not None:
            if not self.shuffle:
                raise ValueError("DataLoader.load_state_dict: the state has a shuffled order but "
                                 "this DataLoader has shuffle=False")
            order = np.asarray(order)
            if order.shape != (length,) or order.dtype.kind not in "iu" or not np.array_equal(
                    np.sort(order), np.arange(length)):
                raise ValueError(f"DataLoader.load_state_dict: 'order' must be a permutation of "
                                 f"0..{length - 1} (shape ({length},)), got an array of shape "
                                 f"{order.shape} and dtype {order.dtype}")
            order = order.astype(np.int64)
        elif self.shuffle and epoch > 0 and length > 0:
            raise ValueError("DataLoader.load_state_dict: the state has no shuffled order but this "
                             "DataLoader has shuffle=True")
        gen_state = state_dict["generator"]
        new_gen = None
        if gen_state is not None:
            new_gen = random.Generator()
            try:
                new_gen.set_state(gen_state)
            except (TypeError, ValueError, KeyError) as e:
                raise ValueError(f"DataLoader.load_state_dict: invalid generator state: {e}") from e

        if gen_state is not None:
            if self.generator is not None:
                self.generator.set_state(gen_state)
                self._shuffle_gen = self.generator
            else:
                self._shuffle_gen = new_gen
        elif self.generator is None:
            self._shuffle_gen = None
        self._epoch, self._index, self._length, self._order = epoch, index, length, order
        self._resume = epoch > 0 and index < self._end(length)
        self._token += 1  # iterators from before the restore no longer move the position

    def __repr__(self) -> str:
        return (f"DataLoader(dataset={type(self.dataset).__name__} of {len(self.dataset)}, "
                f"batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last})")


class _DataLoaderIter:
    """One epoch's iterator.  Moves its loader's position while it is the loader's latest one."""

    def __init__(self, loader: DataLoader, token: int, order: np.ndarray | None, length: int,
                 index: int):
        self._loader = loader
        self._token = token
        self._order = order
        self._index = index
        self._end = loader._end(length)
        self._source = _array_source(loader.dataset) if loader._fast else None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        start = self._index
        if start >= self._end:
            raise StopIteration
        stop = min(start + self._loader.batch_size, self._end)
        batch = self._loader._fetch(self._source, self._order, start, stop)
        self._index = stop
        if self._loader._token == self._token:
            self._loader._index = stop
        return batch
