"""What the benchmarks that time tinyopt against PyTorch share: which libraries to time and how
many threads their worker processes get (each library runs in its own spawned worker, since the
OpenMP pools of two libraries in one process spoil each other)."""
from __future__ import annotations

import os


def pin_threads(n: int | None) -> None:
    """Give both libraries' thread pools (torch, numba, BLAS, tinyopt's workers) ``n`` threads;
    the workers inherit the environment and read it when they import numpy, numba and torch.
    ``None``: each library's own default."""
    if n:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "TINYOPT_NUM_THREADS"):
            os.environ[var] = str(n)


def libraries() -> list[str]:
    """``["tinyopt", "torch"]``, or ``["tinyopt"]`` (saying so) when PyTorch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch not installed: tinyopt times only")
        return ["tinyopt"]
    return ["tinyopt", "torch"]


def start_workers(worker, libs: list[str]) -> tuple[list, list]:
    """One spawned process per library running ``worker(conn, lib)``, and the parent's ends of
    their pipes: ``(pipes, processes)``."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for lib in libs:
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(b, lib), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    return pipes, procs


def timed_blocks(pipes: list, command: tuple, repeats: int, settle: float) -> list[list]:
    """Send ``command`` to every worker in turn, ``repeats`` times (A B A B ...), each after a
    pause of ``settle`` seconds; every worker's answers, in order."""
    import time
    times: list[list] = [[] for _ in pipes]
    for _ in range(repeats):
        for k, c in enumerate(pipes):
            time.sleep(settle)
            c.send(command)
            times[k].append(c.recv())
    return times


def stop_workers(pipes: list, procs: list) -> None:
    """Tell the workers ``start_workers`` made to stop (``("stop",)``) and wait for them."""
    for c in pipes:
        c.send(("stop",))
    for p in procs:
        p.join()


def seconds_per_step(step, n: int) -> float:
    """Wall seconds per call of ``step()`` over ``n`` calls (a worker's timed block)."""
    import time
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n
