"""``DataLoader(num_workers=N)``: the worker processes and the pool that feeds and reads them.

Each worker has a task queue (the parent's feeder thread writes to it, so the parent never blocks
on a busy worker) and a result pipe (the worker pickles and sends synchronously, so a batch that
cannot be pickled becomes an error the parent re-raises, not a silent hang).  A task is
``(epoch, task_id, indices)`` for a map-style data set, or ``(epoch, task_id, None)`` for "your
next batch" of an iterable one; a result is ``(epoch, task_id, batch | _Failure | _Exhausted)``.
The parent gives task ``k`` of an epoch to worker ``k mod N`` (skipping exhausted iterable
workers) and yields results in task order, so the batches come in the order ``num_workers=0``
gives.  Results of an abandoned epoch (a ``break``, with persistent workers) are dropped by their
epoch tag.

Seeding: worker ``i`` runs ``tinyopt.manual_seed(base_seed + i)``, ``random.seed(base_seed + i)``
and seeds numpy's legacy global generator from ``(base_seed, i)``, then ``worker_init_fn(i)``.
``base_seed`` derives from the global generator's state without drawing from it, so starting
workers changes no random stream of the main process (num_workers never changes a result).
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import random as _pyrandom
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyopt.engine import random

__all__ = ["WorkerInfo", "get_worker_info"]

_POLL = 5.0  # seconds between liveness checks while waiting (PyTorch's MP_STATUS_CHECK_INTERVAL)


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker: its ``id`` (0..num_workers-1),
    ``num_workers``, the ``seed`` it was seeded with and its own copy of the ``dataset``."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its ``WorkerInfo``; in the main process, None."""
    return _worker_info


@dataclass(frozen=True)
class _Exhausted:
    """An iterable data set's worker has no more batches."""


@dataclass(frozen=True)
class _Failure:
    """An exception raised in a worker, carried to the parent as its type and formatted traceback
    (as PyTorch's ExceptionWrapper)."""

    exc_type: type
    message: str

    def reraise(self) -> None:
        if self.exc_type is KeyError:  # KeyError repr()s its argument: keep the text readable
            raise KeyError(_KeyErrorMessage(self.message))
        try:
            error = self.exc_type(self.message)
        except Exception:  # noqa: BLE001 - a type that takes other arguments
            raise RuntimeError(self.message) from None
        raise error


class _KeyErrorMessage(str):
    def __repr__(self) -> str:
        return str(self)


def _failure(where: str) -> _Failure:
    exc_type, exc, tb = sys.exc_info()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    return _Failure(exc_type, f"Caught {exc_type.__name__} {where}.\nOriginal {text}")


def _worker_loop(worker_id: int, num_workers: int, dataset: Any, fetch: Callable[[Any], Any],
                 iterable_batch: Callable[[Iterator], Any] | None, tasks: Any, results: Any,
                 done: Any, base_seed: int, init_fn: Callable[[int], None] | None,
                 parent: int) -> None:
    """The body of worker ``worker_id``: seed, run ``init_fn``, then answer tasks until ``None``."""
    global _worker_info
    where = f"in DataLoader worker process {worker_id}"
    try:
        seed = base_seed + worker_id
        random.manual_seed(seed)
        _pyrandom.seed(seed)
        np.random.seed(np.random.SeedSequence([base_seed, worker_id]).generate_state(4))
        _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
        pending = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
        except Exception:  # noqa: BLE001 - reported with the first task
            pending = _failure(where)
        epoch, stream = None, None
        while True:
            try:
                task = tasks.get(timeout=_POLL)
            except queue.Empty:
                if os.getppid() != parent:  # the main process died: do not linger
                    return
                continue
            if task is None:
                return
            if done.is_set():  # shutting down: skip what is still queued
                continue
            task_epoch, task_id, indices = task
            if pending is not None:
                out, pending = pending, None
            else:
                try:
                    if iterable_batch is None:
                        out = fetch(indices)
                    else:
                        if task_epoch != epoch:
                            epoch, stream = task_epoch, iter(dataset)
                        out = _Exhausted() if stream is None else iterable_batch(stream)
                        if isinstance(out, _Exhausted):
                            stream = None
                except Exception:  # noqa: BLE001 - every error goes to the parent
                    out = _failure(where)
            try:
                data = pickle.dumps((task_epoch, task_id, out), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001
                data = pickle.dumps((task_epoch, task_id, _failure(
                    f"{where} while sending a batch to the main process (batches must be "
                    f"picklable)")))
            results.send_bytes(data)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent handles it
        pass


_pools = itertools.count()


def _base_seed() -> int:
    """A seed for a new pool's workers from the global generator's state, without drawing."""
    state = random.default_generator.get_state()["state"]
    words = [int(state["state"]) & (2**64 - 1), int(state["state"]) >> 64,
             int(state["inc"]) & (2**64 - 1), next(_pools)]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> 1)


class WorkerPool:
    """``num_workers`` processes running ``_worker_loop``; see the module docstring."""

    def __init__(self, *, num_workers: int, dataset: Any, fetch: Callable[[Any], Any],
                 iterable_batch: Callable | None, init_fn: Callable[[int], None] | None,
                 context: Any, timeout: float, prefetch_factor: int):
        ctx = context if context is not None else multiprocessing.get_context()
        self.num_workers = num_workers
        self.timeout = float(timeout)
        self.outstanding = max(1, prefetch_factor * num_workers)
        self.iterable = iterable_batch is not None
        self.tasks = [ctx.Queue() for _ in range(num_workers)]
        self.done = ctx.Event()
        self.results: list[multiprocessing.connection.Connection] = []
        self.workers = []
        base_seed = _base_seed()
        self.epochs = itertools.count()
        self.closed = False
        try:
            for i in range(num_workers):
                reader, writer = ctx.Pipe(duplex=False)
                w = ctx.Process(target=_worker_loop, daemon=True, args=(
                    i, num_workers, dataset, fetch, iterable_batch, self.tasks[i], writer,
                    self.done, base_seed, init_fn, os.getpid()))
                w.start()
                writer.close()  # the worker holds the writing end
                self.results.append(reader)
                self.workers.append(w)
        except BaseException:
            self.shutdown()
            raise

    def run(self, tasks: Iterator[Any]) -> Iterator[Any]:
        """Yield the results of ``tasks`` (payloads; ``None`` for iterable data sets), in order."""
        if self.closed:
            raise RuntimeError("DataLoader: the worker pool was shut down")
        epoch = next(self.epochs)
        active = [True] * self.num_workers
        owner: dict[int, int] = {}
        done: dict[int, Any] = {}
        next_task, next_yield, cursor = 0, 0, 0

        def dispatch() -> bool:
            nonlocal next_task, cursor
            if not any(active):
                return False
            try:
                payload = next(tasks)
            except StopIteration:
                return False
            while not active[cursor]:
                cursor = (cursor + 1) % self.num_workers
            self.tasks[cursor].put((epoch, next_task, payload))
            owner[next_task] = cursor
            cursor = (cursor + 1) % self.num_workers
            next_task += 1
            return True

        while len(owner) < self.outstanding and dispatch():
            pass
        while next_yield < next_task:
            deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
            while next_yield not in done:
                self._receive(epoch, done, deadline)
            out = done.pop(next_yield)
            worker = owner.pop(next_yield)
            next_yield += 1
            if isinstance(out, _Failure):
                out.reraise()
            if isinstance(out, _Exhausted):
                active[worker] = False
            else:
                yield out
            while len(owner) < self.outstanding and dispatch():
                pass

    def _receive(self, epoch: int, done: dict[int, Any], deadline: float | None) -> None:
        """Wait until a result of ``epoch`` arrives (dropping stale ones), watching that the
        workers live and that ``deadline`` (``timeout``) has not passed."""
        before = len(done)
        while len(done) == before:
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
            ready = multiprocessing.connection.wait(self.results, timeout=wait)
            for conn in ready:
                try:
                    data = conn.recv_bytes()
                except (EOFError, OSError):
                    continue  # a dead worker: reported below
                task_epoch, task_id, out = pickle.loads(data)
                if task_epoch == epoch:
                    done[task_id] = out
            if len(done) > before:
                return
            dead = [w.pid for w in self.workers if not w.is_alive()]
            if dead:
                self.shutdown()
                raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(map(str, dead))}) "
                                   f"exited unexpectedly")
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"DataLoader timed out after {self.timeout:g} seconds")

    def shutdown(self) -> None:
        """Stop every worker (politely, then by force) and release the queues and pipes."""
        if self.closed:
            return
        self.closed = True
        self.done.set()
        for q, w in zip(self.tasks, self.workers):
            if w.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + _POLL
        for w in self.workers:
            w.join(max(0.0, deadline - time.monotonic()))
            if w.is_alive():
                w.terminate()
                w.join(1.0)
        for q in self.tasks:
            q.cancel_join_thread()
            q.close()
        for conn in self.results:
            conn.close()

