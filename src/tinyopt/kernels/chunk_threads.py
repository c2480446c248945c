"""Worker threads for big kernels: a fixed number of chunks of the work (samples of a batch), run
by the calling thread and a few workers.

``run_chunks(fn, n)`` calls ``fn(0)``, ..., ``fn(n - 1)``, each exactly once, spread over the
threads, and returns when all are done.  The kernels ``fn`` calls are numba ``nogil`` functions,
so the chunks really run side by side.

Why not numba's ``prange`` (``kernels/jit.py``): numba's OpenMP threads spin for a while after a
parallel region, and on a small machine they then fight the next BLAS call's threads for the cores
(measured on 2 cores: a training step of the MLP took 8.5 ms that way against 0.75 ms without);
and OpenMP's static schedule waits for its slowest thread, so one core busy with another process
stalls every region.  (Where numpy's BLAS runs on numba's OpenMP threads, ``kernels/native/shared_threads.py``,
the first reason is gone, and kernels cut rows with ``prange`` instead: a hand-off to these Python
workers took ~190 us right after a GEMM, whose threads spin on the other core.)  Here workers sleep on a condition variable between calls, and each thread
takes the next chunk from a shared counter, so a busy core simply does fewer chunks.  What a chunk
computes is fixed by the work's size, never by the number of threads (``fn(k)`` writes only its own
part of the output, or its own partial sum that the caller adds in order), so results do not
depend on threads.

``TINYOPT_NUM_THREADS`` sets the number of threads (the caller included; default: the CPUs this
process may run on; 1 runs every chunk on the calling thread).  A second thread that calls
``run_chunks`` while the workers are busy runs its chunks itself.  After ``fork`` the child starts
a pool of its own on first use.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable


def _threads_wanted() -> int:
    env = os.environ.get("TINYOPT_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Job:
    """``n`` chunks of ``fn``, taken one at a time by whichever thread is free."""

    def __init__(self, fn: Callable[[int], None], n: int):
        self.fn = fn
        self.n = n
        self._next = itertools.count()   # next() is atomic under the GIL
        self._lock = threading.Lock()
        self._done = 0
        self._all_done = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        while (k := next(self._next)) < self.n:
            try:
                if self.error is None:
                    self.fn(k)
            except BaseException as e:  # re-raised by the caller of run_chunks
                self.error = e
            with self._lock:
                self._done += 1
                if self._done == self.n:
                    self._all_done.set()

    def wait(self) -> None:
        self._all_done.wait()


class _Pool:
    def __init__(self, workers: int):
        self._busy = threading.Lock()
        self._wake = threading.Condition()
        self._job: _Job | None = None
        self._generation = 0
        self.size = workers + 1
        for _ in range(workers):
            threading.Thread(target=self._serve, daemon=True, name="tinyopt-worker").start()

    def _serve(self) -> None:
        seen = 0
        while True:
            with self._wake:
                while self._generation == seen:
                    self._wake.wait()
                seen, job = self._generation, self._job
            if job is not None:
                job.work()

    def run(self, fn: Callable[[int], None], n: int) -> None:
        if self.size == 1 or n <= 1 or not self._busy.acquire(blocking=False):
            for k in range(n):
                fn(k)
            return
        job = _Job(fn, n)
        try:
            with self._wake:
                self._job = job
                self._generation += 1
                self._wake.notify_all()
            job.work()
            job.wait()
        finally:
            with self._wake:
                self._job = None
            self._busy.release()
        if job.error is not None:
            raise job.error


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)  # the workers did not come along


def num_threads() -> int:
    """How many threads ``run_chunks`` uses (the caller included)."""
    return _get_pool().size


def _get_pool() -> _Pool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _Pool(_threads_wanted() - 1)
    return _pool


def run_chunks(fn: Callable[[int], None], n: int) -> None:
    """Call ``fn(k)`` for every ``k < n``, on the calling thread and the workers (see above)."""
    _get_pool().run(fn, n)
