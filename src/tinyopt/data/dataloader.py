"""``DataLoader``: batches from a data set, in the main process or in worker processes, with a
resumable position.

    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, num_workers=2)
    for epoch in range(3):
        for xb, yb in loader:        # one epoch per ``for``; a new permutation each epoch
            ...
    state = loader.state_dict()      # epoch, this epoch's order, how far into it, generator state
    loader.load_state_dict(state)    # the next ``for`` yields exactly the batches that were left

The order of an epoch comes from the ``sampler`` (default: ``SequentialSampler``, or with
``shuffle=True`` a ``RandomSampler`` drawing from the loader's own generator: the ``generator``
argument, or one seeded from tinyopt's global generator when the first shuffled epoch starts, so
``tinyopt.manual_seed`` makes the order reproducible).  ``batch_sampler`` gives whole batches of
indices instead.  An epoch's indices are drawn when it starts, which is what makes the position
saveable (a sampler without ``__len__`` is iterated lazily, and has no saveable mid-epoch
position).  ``IterableDataset``s are batched as their iterator yields.

Batches of a ``TensorDataset`` (or a ``Subset`` of one, such as ``random_split`` returns) are
fetched by indexing its arrays with the batch's indices: one numpy gather per array per batch.
With ``num_workers=N`` the batches are made in N processes (see ``tinyopt.data.worker``), in the
same order as with ``num_workers=0``.
"""

from __future__ import annotations

import collections.abc
import itertools
import multiprocessing
import os
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tinyopt.data.collate import as_tensors, collate_arrays, default_collate, default_convert
from tinyopt.data.dataset import IterableDataset, _array_source
from tinyopt.data.sampler import BatchSampler, RandomSampler, SequentialSampler, as_generator
from tinyopt.data.worker import WorkerPool, _Exhausted
from tinyopt.engine import random

__all__ = ["DataLoader", "default_collate", "default_convert"]

_FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


class _Fetch:
    """Makes one batch of a map-style data set from its indices: a ``slice`` (a contiguous run),
    an int64 array or a list; a single index when automatic batching is off."""

    def __init__(self, dataset: Any, collate_fn: Callable, auto_collation: bool, fast: bool):
        self.dataset = dataset
        self.collate_fn = collate_fn
        self.auto_collation = auto_collation
        self.source = _array_source(dataset) if fast and auto_collation else None

    def __call__(self, ix: Any) -> Any:
        if not self.auto_collation:
            return self.collate_fn(self.dataset[ix])
        if self.source is not None and not isinstance(ix, list):
            arrays, index_map, is_tuple = self.source
            if isinstance(ix, slice) and index_map is None:
                batch = [a[ix].copy() for a in arrays]
            else:
                if isinstance(ix, slice):
                    ix = np.arange(ix.start, ix.stop)
                if index_map is not None:
                    ix = index_map[ix]
                batch = [a[ix] for a in arrays]
            return batch if is_tuple else batch[0]
        if isinstance(ix, slice):
            indices = list(range(ix.start, ix.stop))
        else:
            indices = ix.tolist() if isinstance(ix, np.ndarray) else list(ix)
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            samples = getitems(indices)
        else:
            samples = [self.dataset[i] for i in indices]
        return self.collate_fn(samples)


class _IterableBatch:
    """The next batch of an iterable data set's stream, or ``_Exhausted()``."""

    def __init__(self, batch_size: int | None, drop_last: bool, collate_fn: Callable):
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn

    def __call__(self, stream: Iterator[Any]) -> Any:
        if self.batch_size is None:
            try:
                return self.collate_fn(next(stream))
            except StopIteration:
                return _Exhausted()
        batch = list(itertools.islice(stream, self.batch_size))
        if not batch or (self.drop_last and len(batch) < self.batch_size):
            return _Exhausted()
        return self.collate_fn(batch)


def _materialize(indices: Any) -> np.ndarray | list:
    """A sampler's epoch as an int64 array (a list when the indices are not integers)."""
    if isinstance(indices, np.ndarray):
        return indices.astype(np.int64, copy=False)
    items = list(indices)
    arr = np.asarray(items) if items else np.empty(0, np.int64)
    if arr.ndim == 1 and arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    return items


class DataLoader:
    """Iterate over ``dataset`` in batches, as ``torch.utils.data.DataLoader``.

    Each ``iter(loader)`` (each ``for`` loop) is one epoch.  ``shuffle=True`` visits the samples in
    a new random order every epoch; ``sampler`` (any iterable of indices) or ``batch_sampler``
    (of lists of indices) choose the order instead; ``drop_last=True`` drops a last batch smaller
    than ``batch_size``; ``batch_size=None`` yields single samples unbatched.  ``collate_fn`` merges
    a list of samples into a batch (default: ``default_collate``, into Tensors sharing the
    stacked numpy arrays).

    ``num_workers=N`` loads batches in N worker processes (``multiprocessing_context``, default
    the platform's; ``prefetch_factor`` batches in flight per worker; ``worker_init_fn(id)`` runs
    in each; ``persistent_workers`` keeps them between epochs), with the batch order of
    ``num_workers=0``; an exception in a worker is raised in the main process with the worker's
    traceback.  ``timeout`` bounds the wait for one batch.  ``pin_memory``, ``pin_memory_device``
    and ``in_order`` are accepted (there is only the CPU, and batches always come in order).

    ``state_dict()`` reports the position (epochs begun, this epoch's order, samples consumed,
    generator state); after ``load_state_dict(state)`` the next ``iter(loader)`` continues that
    epoch with exactly the batches that were left, and the following epochs match an
    uninterrupted run.  Without a pending restored position, ``iter`` always starts a new epoch,
    as in PyTorch (breaking out of a loop abandons the rest of that epoch).
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[Any], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None,
                 generator: random.Generator | np.random.Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        iterable = isinstance(dataset, IterableDataset)
        if not iterable and not hasattr(dataset, "__getitem__"):
            raise TypeError(f"DataLoader: dataset must be a map-style data set (with __getitem__ "
                            f"and __len__) or an IterableDataset, got {type(dataset).__name__}")
        if not iterable and sampler is None and batch_sampler is None \
                and not hasattr(dataset, "__len__"):
            raise TypeError(f"DataLoader: a map-style data set needs __len__ (or pass a sampler),"
                            f" got {type(dataset).__name__}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
            raise TypeError(f"num_workers should be an integer, got {num_workers!r}")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set "
                             "prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None:
            if num_workers == 0:
                raise ValueError(f"multiprocessing_context can only be used with multi-process "
                                 f"loading (num_workers > 0), but got num_workers={num_workers}")
            if isinstance(multiprocessing_context, str):
                methods = multiprocessing.get_all_start_methods()
                if multiprocessing_context not in methods:
                    raise ValueError(f"multiprocessing_context option should specify a valid start "
                                     f"method in {methods!r}, but got "
                                     f"multiprocessing_context={multiprocessing_context!r}")
                multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
            if not isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
                raise TypeError(f"multiprocessing_context option should be a valid context object "
                                f"or a string specifying the start method, but got "
                                f"multiprocessing_context={multiprocessing_context}")
        if shuffle is not None and not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(f"shuffle should be a boolean value, but got shuffle={shuffle!r}")
        if not isinstance(drop_last, (bool, np.bool_)):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
                batch_size, (int, np.integer)) or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size!r}")
        own_generator = as_generator(generator, "DataLoader")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got "
                            f"{type(collate_fn).__name__}")
        if iterable:
            if shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")

        # what an epoch's order comes from
        if iterable:
            self._kind = "iterable"
        elif batch_sampler is not None:
            self._kind = "batch_sampler" if hasattr(batch_sampler, "__len__") else "lazy"
        elif sampler is not None:
            self._kind = "sampler" if hasattr(sampler, "__len__") else "lazy"
        else:
            self._kind = "shuffle" if shuffle else "sequential"
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=own_generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, int(batch_size), bool(drop_last))

        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = bool(drop_last)
        self.generator = generator
        self.num_workers = int(num_workers)
        self.prefetch_factor = prefetch_factor
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = bool(persistent_workers)
        self.in_order = in_order
        self._auto_collation = self.batch_sampler is not None or \
            (iterable and self.batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
            self._fast = True  # may index TensorDataset arrays directly
        else:
            self._fast = False
        self.collate_fn = collate_fn
        self._generator = own_generator
        self._shuffle_gen = own_generator  # created lazily from the global generator when None
        self._epoch = 0          # epochs begun
        self._order: np.ndarray | list | None = None  # this epoch's order (None: 0..n-1)
        self._sizes: np.ndarray | None = None  # its batch sizes, when a batch_sampler gave them
        self._length = 0         # samples in this epoch
        self._index = 0          # samples of this epoch consumed
        self._resume = False     # load_state_dict set a position the next iter continues from
        self._token = 0          # identifies the iterator whose progress the loader tracks
        self._pool: WorkerPool | None = None  # the persistent workers
        self._initialized = True
        if self.num_workers > (os.cpu_count() or 1):
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in "
                          f"total. Our suggested max number of worker in current system is "
                          f"{os.cpu_count()}, which is smaller than what this DataLoader is going "
                          f"to create. Please be aware that excessive worker creation might get "
                          f"DataLoader running slow or even freeze, lower the worker number to "
                          f"avoid potential slowness/freeze if necessary.", stacklevel=2)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FROZEN and getattr(self, "_initialized", False):
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is "
                             f"initialized")
        super().__setattr__(name, value)

    # ---- sizes --------------------------------------------------------------------------------
    @property
    def _step(self) -> int:
        return self.batch_size or 1

    def _end(self, length: int) -> int:
        """Samples an epoch of ``length`` samples yields (``drop_last`` drops the tail)."""
        if self._sizes is not None or not self.drop_last:
            return length
        return length - length % self._step

    def __len__(self) -> int:
        if self._kind == "iterable":
            try:
                n = len(self.dataset)
            except (TypeError, NotImplementedError):
                raise TypeError(f"object of type {type(self.dataset).__name__} has no len() (a "
                                f"DataLoader over an IterableDataset has a length only when the "
                                f"data set has one)") from None
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    # ---- iteration ----------------------------------------------------------------------------
    def _new_epoch(self) -> None:
        """Draw the order of a new epoch from the sampler (see the module docstring)."""
        self._epoch += 1
        self._index = 0
        self._sizes = None
        if self._kind == "sequential":
            self._order, self._length = None, len(self.dataset)
        elif self._kind == "shuffle":
            if self._shuffle_gen is None:
                seed = int(random.default_generator.numpy.integers(2**63, dtype=np.int64))
                self._shuffle_gen = random.Generator(seed)
            self.sampler.generator = self._shuffle_gen
            self._order = self.sampler._indices()
            self._length = len(self._order)
        elif self._kind == "sampler":
            indices = getattr(self.sampler, "_indices", None)
            self._order = _materialize(indices() if callable(indices) else iter(self.sampler))
            self._length = len(self._order)
        elif self._kind == "batch_sampler":
            batches = [list(b) for b in self.batch_sampler]
            self._sizes = np.array([len(b) for b in batches], dtype=np.int64)
            self._order = _materialize(itertools.chain.from_iterable(batches))
            self._length = len(self._order)
        else:  # lazy or iterable: no order to keep
            self._order, self._length = None, 0

    def _tasks(self, order: np.ndarray | list | None, sizes: np.ndarray | None, start: int,
               end: int, stops: collections.deque) -> Iterator[Any]:
        """The index payload of each remaining batch of this epoch; its end goes into ``stops``."""
        if sizes is not None:
            bounds = np.cumsum(sizes)
            first = int(np.searchsorted(bounds, start, side="right"))
            edges = [start] + bounds[first:].tolist()
        else:
            edges = list(range(start, end, self._step)) + [end]
        for a, b in zip(edges, edges[1:]):
            stops.append(b)
            if not self._auto_collation:
                yield a if order is None else order[a]
            else:
                yield slice(a, b) if order is None else order[a:b]

    def _lazy_tasks(self, stops: collections.deque) -> Iterator[Any]:
        if self.batch_sampler is not None:
            for batch in self.batch_sampler:
                stops.append(0)
                yield list(batch)
        else:
            for i in self.sampler:
                stops.append(0)
                yield i

    def _workers(self, fetch: Callable | None, iterable_batch: Callable | None) -> WorkerPool:
        if self._pool is not None and not self._pool.closed:
            return self._pool
        pool = WorkerPool(num_workers=self.num_workers, dataset=self.dataset, fetch=fetch,
                          iterable_batch=iterable_batch, init_fn=self.worker_init_fn,
                          context=self.multiprocessing_context, timeout=self.timeout,
                          prefetch_factor=self.prefetch_factor or 1)
        if self.persistent_workers:
            object.__setattr__(self, "_pool", pool)
            weakref.finalize(self, pool.shutdown)
        return pool

    def __iter__(self) -> _DataLoaderIter:
        if self.pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then "
                          "device pinned memory won't be used.", stacklevel=2)
        self._token += 1
        if self._resume:
            self._resume = False
        else:
            self._new_epoch()
        return _DataLoaderIter(self)

    # ---- position -----------------------------------------------------------------------------
    def restore_point(self) -> Callable[[], None]:
        """A function that puts this loader back as it is now (the rollback protocol of
        ``tinyopt.load_into``, see ``tinyopt.checkpoint.restore``): its attributes as they are, so
        the epoch iterator in use stays attached to it, and its generators' states."""
        attrs = dict(vars(self))
        generators = [v.restore_point() for v in attrs.values() if isinstance(v, random.Generator)]

        def restore() -> None:
            for g in generators:
                g()
            d = vars(self)
            d.clear()
            d.update(attrs)
        return restore

    def state_dict(self) -> dict[str, Any]:
        """The position: JSON-able values plus the epoch order as an int64 array (or None).

        ``epoch`` is the number of epochs begun, ``index`` the samples of the latest one consumed,
        ``length`` its size, ``order`` its sample order (None when not shuffling and no sampler
        was given) and ``generator`` the state of the shuffling generator (None before it
        exists); with a ``batch_sampler``, also ``sizes``, the epoch's batch sizes.
        """
        if self._kind == "iterable":
            raise TypeError("DataLoader.state_dict: a DataLoader over an IterableDataset has no "
                            "resumable position")
        if self._kind == "lazy" and self._epoch > 0:
            raise TypeError("DataLoader.state_dict: the sampler has no __len__, so its epochs are "
                            "iterated lazily and have no saveable position")
        gen = self._shuffle_gen
        state = {
            "epoch": self._epoch,
            "index": self._index,
            "length": self._length,
            "order": None if self._order is None else self._order.copy(),
            "generator": None if gen is None else gen.get_state(),
        }
        if self._kind == "batch_sampler":
            state["sizes"] = None if self._sizes is None else self._sizes.copy()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position from ``state_dict()``; checks everything before changing anything."""
        where = "DataLoader.load_state_dict"
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"{where}: expected a dict, got {type(state_dict).__name__}")
        if self._kind in ("iterable", "lazy"):
            raise TypeError(f"{where}: this DataLoader has no resumable position (an "
                            f"IterableDataset, or a sampler without __len__)")
        expected = {"epoch", "index", "length", "order", "generator"}
        if self._kind == "batch_sampler":
            expected.add("sizes")
        missing, unexpected = expected - set(state_dict), set(state_dict) - expected
        if missing or unexpected:
            raise KeyError(f"{where}: missing keys {sorted(missing)}, unexpected keys "
                           f"{sorted(map(str, unexpected))}")

        def count(name: str) -> int:
            v = state_dict[name]
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{where}: '{name}' must be a non-negative integer, got {v!r}")
            return int(v)

        epoch, index, length = count("epoch"), count("index"), count("length")
        own = self._kind in ("sequential", "shuffle")
        if own and epoch > 0 and length != len(self.dataset):
            raise ValueError(f"{where}: the state is for a data set of {length} samples, but this "
                             f"loader's data set has {len(self.dataset)}")
        if index > length:
            raise ValueError(f"{where}: index {index} is past the end of an epoch of {length} "
                             f"samples")
        order = state_dict["order"]
        if order is not None:
            if self._kind == "sequential":
                raise ValueError(f"{where}: the state has a shuffled order but this DataLoader has "
                                 f"shuffle=False")
            if isinstance(order, list) and not all(isinstance(i, (int, np.integer))
                                                   for i in order):
                if len(order) != length:
                    raise ValueError(f"{where}: 'order' has {len(order)} indices, expected "
                                     f"{length}")
            else:
                order = np.asarray(order)
                if order.shape != (length,) or order.dtype.kind not in "iu" or (
                        self._kind == "shuffle" and not np.array_equal(np.sort(order),
                                                                       np.arange(length))):
                    what = f"a permutation of 0..{length - 1}" if self._kind == "shuffle" \
                        else "an integer array"
                    raise ValueError(f"{where}: 'order' must be {what} (shape ({length},)), got "
                                     f"an array of shape {order.shape} and dtype {order.dtype}")
                order = order.astype(np.int64)
        elif not own and epoch > 0:
            raise ValueError(f"{where}: the state has no order but this DataLoader's sampler "
                             f"needs one")
        elif self._kind == "shuffle" and epoch > 0 and length > 0:
            raise ValueError(f"{where}: the state has no shuffled order but this DataLoader has "
                             f"shuffle=True")
        sizes = state_dict.get("sizes")
        if self._kind == "batch_sampler" and epoch > 0:
            sizes = np.asarray(sizes) if sizes is not None else None
            if sizes is None or sizes.ndim != 1 or sizes.dtype.kind not in "iu" \
                    or (sizes < 0).any() or int(sizes.sum()) != length \
                    or index not in set(np.concatenate([[0], np.cumsum(sizes)]).tolist()):
                raise ValueError(f"{where}: 'sizes' must be the epoch's batch sizes, summing to "
                                 f"{length} with index {index} at a batch boundary")
            sizes = sizes.astype(np.int64)
        gen_state = state_dict["generator"]
        if gen_state is not None:
            probe = self._generator if self._generator is not None else random.Generator()
            try:
                if isinstance(probe, random.Generator) and type(probe) is not random.Generator:
                    type(probe.numpy.bit_generator)().state = gen_state
                else:
                    random.Generator().set_state(gen_state)
            except (TypeError, ValueError, KeyError) as e:
                raise ValueError(f"{where}: invalid generator state: {e}") from e

        if gen_state is not None:
            if self._generator is not None:
                self._generator.set_state(gen_state)
                self._shuffle_gen = self._generator
            else:
                self._shuffle_gen = random.Generator()
                self._shuffle_gen.set_state(gen_state)
        elif self._generator is None:
            self._shuffle_gen = None
        self._epoch, self._index, self._length, self._order = epoch, index, length, order
        self._sizes = sizes if self._kind == "batch_sampler" else None
        self._resume = epoch > 0 and index < self._end(length)
        self._token += 1  # iterators from before the restore no longer move the position

    def __repr__(self) -> str:
        size = len(self.dataset) if hasattr(self.dataset, "__len__") and \
            self._kind != "iterable" else "?"
        return (f"DataLoader(dataset={type(self.dataset).__name__} of {size}, "
                f"batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, num_workers={self.num_workers})")


class _DataLoaderIter:
    """One epoch's iterator.  Moves its loader's position while it is the loader's latest one."""

    def __init__(self, loader: DataLoader):
        self._loader = loader
        self._token = loader._token
        self._stops: collections.deque = collections.deque()
        self._pool: WorkerPool | None = None
        # The default collation runs into numpy where the batch is made (a worker sends arrays)
        # and the arrays become Tensors here, sharing memory; a user's collate_fn runs as it is.
        if loader._fast:
            collate = collate_arrays if loader._auto_collation else _unchanged
            finish = as_tensors if loader._auto_collation else default_convert
        else:
            collate, finish = loader.collate_fn, None
        if loader._kind == "iterable":
            batcher = _IterableBatch(loader.batch_size, loader.drop_last, collate)
            if loader.num_workers == 0:
                batches = _until_exhausted(batcher, iter(loader.dataset))
            else:
                self._pool = loader._workers(None, batcher)
                batches = self._pool.run(itertools.repeat(None))
        else:
            if loader._kind == "lazy":
                tasks = loader._lazy_tasks(self._stops)
            else:
                tasks = loader._tasks(loader._order, loader._sizes, loader._index,
                                      loader._end(loader._length), self._stops)
            fetch = _Fetch(loader.dataset, collate, loader._auto_collation, loader._fast)
            if loader.num_workers == 0:
                batches = map(fetch, tasks)
            else:
                self._pool = loader._workers(fetch, None)
                batches = self._pool.run(tasks)
        self._batches = batches if finish is None else map(finish, batches)
        if self._pool is not None and not loader.persistent_workers:
            self._finalizer = weakref.finalize(self, self._pool.shutdown)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        try:
            batch = next(self._batches)
        except BaseException:
            if self._pool is not None and not self._loader.persistent_workers:
                self._pool.shutdown()
            raise
        if self._stops:
            stop = self._stops.popleft()
            if self._loader._token == self._token and self._loader._kind != "lazy":
                self._loader._index = stop
        return batch


def _unchanged(sample: Any) -> Any:
    return sample


def _until_exhausted(batcher: _IterableBatch, stream: Iterator[Any]) -> Iterator[Any]:
    while not isinstance(batch := batcher(stream), _Exhausted):
        yield batch
