"""``torch.multiprocessing``: Python's ``multiprocessing``, sending shared tensors by handle.

Everything of ``multiprocessing`` is here under its own name (``Process``, ``Queue``,
``get_context``, ``set_start_method``, ``Pool``...), and importing this module makes its pickler
send a tensor whose storage is in shared memory (``t.share_memory_()``,
``model.share_memory()``) by handle: the receiving process maps the same memory, as torch's
reductions do (a descriptor is passed, ``multiprocessing.reduction.DupFd``: torch's
``file_descriptor`` strategy, the only one here).  Other tensors are pickled by value.
Parameters pickle as torch's (their data, ``requires_grad``; not the gradient), so a spawned
worker gets a model whose shared parameters are the parent's.

The pytorch/examples ``mnist_hogwild`` pattern::

    import tinyopt.multiprocessing as mp
    model.share_memory()                       # the storage moves to shared memory
    workers = [mp.Process(target=train, args=(rank, model)) for rank in range(4)]
    for w in workers: w.start()                # each builds its own optimizer over model
    for w in workers: w.join()
    test(model)                                # the workers' updates are here

``spawn(fn, args, nprocs)`` runs ``fn(i, *args)`` in ``nprocs`` new processes and re-raises
(``ProcessRaisedException``) a worker's exception in the caller, as torch's.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from multiprocessing import *  # noqa: F403  (torch.multiprocessing re-exports them all)
from typing import Any

from tinyopt.engine.shared_memory import register_reductions

register_reductions()

_STRATEGIES = {"file_descriptor"}
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set[str]:
    """The ways shared tensors travel between processes: ``{"file_descriptor"}``."""
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    return _strategy


def set_sharing_strategy(new_strategy: str) -> None:
    """Only ``"file_descriptor"`` (torch's default on Linux) is available."""
    if new_strategy not in _STRATEGIES:
        raise AssertionError(f"sharing strategy {new_strategy!r} is not available: tinyopt "
                             f"has {sorted(_STRATEGIES)}")


class ProcessException(Exception):
    def __init__(self, msg: str, error_index: int, pid: int) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A worker of :func:`spawn` raised; ``msg`` holds its traceback."""


class ProcessExitedException(ProcessException):
    """A worker of :func:`spawn` exited with a non-zero code (or a signal)."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int,
                 signal_name: str | None = None) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code,
                            self.signal_name)


def _wrap(fn: Callable, i: int, args: tuple, error_queue: Any) -> None:
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:  # noqa: BLE001 - sent to the parent, which raises it
        error_queue.put(traceback.format_exc())
        raise SystemExit(1)


class ProcessContext:
    """The processes :func:`spawn` started (``join=False``); ``join()`` until all end."""

    def __init__(self, processes: list, error_queues: list) -> None:
        self.processes = processes
        self.error_queues = error_queues

    def pids(self) -> list[int]:
        return [int(p.pid) for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the processes; True when all ended well, False on timeout; raises the
        first failure (the others are terminated)."""
        for p in self.processes:
            p.join(timeout)
        if any(p.is_alive() for p in self.processes):
            return False
        for i, (p, q) in enumerate(zip(self.processes, self.error_queues)):
            if p.exitcode != 0:
                for other in self.processes:
                    if other.is_alive():
                        other.terminate()
                if not q.empty():
                    raise ProcessRaisedException(
                        f"\n\n-- Process {i} terminated with the following error:\n{q.get()}",
                        i, p.pid)
                raise ProcessExitedException(f"process {i} terminated with exit code "
                                             f"{p.exitcode}", i, p.pid, p.exitcode)
        return True


def start_processes(fn: Callable, args: tuple = (), nprocs: int = 1, join: bool = True,
                    daemon: bool = False, start_method: str = "spawn") -> ProcessContext | None:
    """Run ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, each in a new process."""
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(q)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn: Callable, args: tuple = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: str = "spawn") -> ProcessContext | None:
    """``torch.multiprocessing.spawn``: :func:`start_processes` with the ``spawn`` method."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)


__all__ = list(multiprocessing.__all__) + [
    "ProcessContext", "ProcessExitedException", "ProcessRaisedException",
    "get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy", "spawn",
    "start_processes"]
