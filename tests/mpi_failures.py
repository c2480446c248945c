"""Jobs that fail on purpose: ``mpiexec -n 2 python mpi_failures.py SCENARIO``.

Each scenario breaks one rank the way an operator meets it; ``tests/test_distributed.py``
checks that the whole job ends within seconds, non-zero, with the failing rank's error on stderr.
The failing rank prints ``FAILING AT <time.time()>`` just before it fails, so the test can tell
how long the job took to notice.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta

import numpy as np

import tinyopt.distributed as dist


def failing(what: str) -> None:
    print(f"FAILING AT {time.time()!r} ({what})", flush=True)


def ddp_model():
    import tinyopt as to
    from tinyopt import nn
    from tinyopt.nn.parallel import DistributedDataParallel as DDP
    to.manual_seed(0)
    return DDP(nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2)))


def train(model, opt, steps: int, no_sync_first: bool = False) -> None:
    import contextlib
    from tinyopt import nn
    x = np.ones((4, 8), np.float32)
    y = np.array([0, 1, 0, 1])
    for i in range(steps):
        opt.zero_grad()
        context = model.no_sync() if no_sync_first and i == 0 else contextlib.nullcontext()
        with context:
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


def sys_exit() -> None:
    """Rank 1 calls sys.exit(1) while rank 0 waits for it in a collective."""
    if dist.get_rank() == 1:
        time.sleep(0.5)
        failing("sys.exit(1)")
        sys.exit(1)
    dist.all_reduce(np.ones(3))


def thread_raises() -> None:
    """A thread of rank 1 raises; its main thread then waits for that thread's work for ever."""
    if dist.get_rank() == 1:
        def work() -> None:
            time.sleep(0.5)
            failing("thread raises")
            raise ValueError("the loader thread of rank 1 failed")
        threading.Thread(target=work, name="loader").start()
        time.sleep(3600)
    dist.all_reduce(np.ones(3))


def hangs() -> None:
    """Rank 1 never reaches the collective (a deadlock, a stuck file system...)."""
    if dist.get_rank() == 0:
        failing("rank 1 hangs; rank 0 waits in all_reduce")
        dist.all_reduce(np.ones(3))
    time.sleep(3600)


def extra_step() -> None:
    """Rank 0 takes one more DDP step than rank 1, which then destroys the group."""
    from tinyopt import optim
    model = ddp_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    train(model, opt, 3 if dist.get_rank() == 0 else 2)
    failing("rank 0 takes a third step, rank 1 destroys the group")
    dist.destroy_process_group()


def extra_zero_step() -> None:
    """Rank 0 takes one more ZeRO step than rank 1, whose script then ends."""
    from tinyopt import optim
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    model = ddp_model()
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=0.1)
    train(model, opt, 3 if dist.get_rank() == 0 else 2)
    failing("rank 0 takes a third ZeRO step, rank 1 exits")


def no_sync_alone() -> None:
    """Rank 0 runs its first backward under no_sync(), rank 1 does not."""
    from tinyopt import optim
    model = ddp_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    failing("no_sync() on rank 0 only")
    train(model, opt, 3, no_sync_first=dist.get_rank() == 0)


SCENARIOS = {f.__name__: f for f in (sys_exit, thread_raises, hangs, extra_step,
                                     extra_zero_step, no_sync_alone)}

if __name__ == "__main__":
    dist.init_process_group("mpi", timeout=timedelta(seconds=float(sys.argv[2])))
    SCENARIOS[sys.argv[1]]()
    print(f"rank {dist.get_rank()} finished", flush=True)
