"""Resuming on another number of ranks: ``mpiexec -n W python mpi_resume.py DIR PHASE...``.

The phases run in order in one launch (process start-up is the cost) and leave their results
in DIR for ``tests/test_distributed.py`` to compare:

- ``save``: ZeRO-1 (Adam, two param groups) on W ranks for 8 steps of a global batch of 12
  samples (12/W per rank); after step 4 rank 0 saves the consolidated checkpoint
  ``zero-W.tinyopt``; the final parameters are ``final-W.npz`` (the uninterrupted run);
- ``resume:N``: fresh objects on W ranks load ``zero-N.tinyopt`` and take steps 5-8:
  ``resumed-N-on-W.npz``;
- ``plain:N``: one process, no DDP: the model and a plain Adam load ``zero-N.tinyopt`` and take
  steps 5-8 on the whole batches: ``plain-N.npz``;
- ``elastic-reference``: ``fit`` with ZeRO for 4 epochs of 6 steps, uninterrupted:
  ``elastic-reference.npz``;
- ``elastic-killed``: the same ``fit`` writing ``elastic.tinyopt`` after every epoch; rank 1
  SIGKILLs itself before step 15 (in the third epoch), which ends the whole job;
- ``elastic-restart``: ``fit(resume="elastic.tinyopt")`` on W ranks (another number than the
  killed job had) runs the last two epochs: ``elastic-restarted.npz``;
- ``grow-save``: the same ``fit`` for two epochs, writing ``grow.tinyopt``;
- ``grow-resume``: ``fit(resume="grow.tinyopt")`` on W ranks (more than wrote it) runs the
  last two epochs: ``grown.npz``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import tinyopt as to
import tinyopt.distributed as dist
from mpi_checks import assert_ranks_identical, mlp, params
from tinyopt import nn, optim
from tinyopt.distributed.optim import ZeroRedundancyOptimizer
from tinyopt.nn.parallel import DistributedDataParallel as DDP

GLOBAL, STEPS, SAVED = 12, 8, 4
EPOCHS, KILL_AT = 4, 14  # 0-based step 14: the third step of the third epoch
rng = np.random.default_rng(21)
X = rng.standard_normal((GLOBAL * 6, 20)).astype(np.float32)
Y = X[:, :5].argmax(1).astype(np.int64)


def rank() -> int:
    return dist.get_rank()


def world() -> int:
    return dist.get_world_size()


def groups(model: nn.Module) -> list[dict]:
    return [{"params": list(model[0].parameters())},
            {"params": list(model[2].parameters()), "lr": 3e-3}]


def zero(seed: int):
    ddp = DDP(mlp(seed))
    return ddp, ZeroRedundancyOptimizer(groups(ddp.module), optimizer_class=optim.Adam, lr=1e-2)


def train(model, opt, steps: range, share: bool = True) -> None:
    """Global batch t is samples [12t, 12t + 12); each rank takes its contiguous share."""
    k = GLOBAL // world() if share else GLOBAL
    at = rank() * k if share else 0
    for t in steps:
        x, y = X[GLOBAL * t:GLOBAL * (t + 1)], Y[GLOBAL * t:GLOBAL * (t + 1)]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[at:at + k]), y[at:at + k]).backward()
        opt.step()


def keep(folder: Path, name: str, model: nn.Module) -> None:
    if rank() == 0:
        np.savez(folder / name, *params(model))


def save(folder: Path) -> None:
    ddp, opt = zero(0)
    train(ddp, opt, range(SAVED))
    opt.consolidate_state_dict(to=0)
    if rank() == 0:
        to.save(folder / f"zero-{world()}.tinyopt", model=ddp, optimizer=opt)
    dist.barrier()
    train(ddp, opt, range(SAVED, STEPS))
    keep(folder, f"final-{world()}.npz", ddp)


def resume(folder: Path, n: int) -> None:
    ddp, opt = zero(100 + rank())  # other values everywhere: the checkpoint must set them all
    to.load_into(folder / f"zero-{n}.tinyopt", model=ddp, optimizer=opt)
    train(ddp, opt, range(SAVED, STEPS))
    assert_ranks_identical(ddp)
    keep(folder, f"resumed-{n}-on-{world()}.npz", ddp)


def plain(folder: Path, n: int) -> None:
    """The ZeRO checkpoint in one process, without DDP: a plain model and a plain Adam."""
    if rank() != 0:
        return
    saved = to.load(folder / f"zero-{n}.tinyopt")
    model = mlp(7)
    model.load_state_dict({k.removeprefix("module."): v for k, v in saved["model"].items()})
    opt = optim.Adam(groups(model), lr=1.0)
    opt.load_state_dict(saved["optimizer"])
    train(model, opt, range(SAVED, STEPS), share=False)
    np.savez(folder / f"plain-{n}.npz", *params(model))


class KillRankOne:
    """SIGKILL on rank 1 before optimizer step ``KILL_AT``: no handler, no goodbye."""

    def on_before_step(self, step: int) -> None:
        if step == KILL_AT and rank() == 1:
            print(f"KILLING AT {time.time()!r}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def elastic(folder: Path, epochs: int = EPOCHS, **kw):
    ddp, opt = zero(0)
    return ddp, to.fit(ddp, (X, Y), nn.CrossEntropyLoss(), opt, epochs=epochs,
                       batch_size=GLOBAL // world(), seed=5, progress=False, **kw)


def restart(folder: Path, checkpoint: str, result: str) -> None:
    """Resume ``fit`` from ``checkpoint`` to the end; print the warnings it gave."""
    path = folder / checkpoint
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp, history = elastic(folder, checkpoint=path, resume=path)
    for w in caught:
        print(f"WARNING on rank {rank()}: {w.message}", flush=True)
    assert len(history) == EPOCHS
    keep(folder, result, ddp)


def main(folder: Path, phases: list[str]) -> None:
    dist.init_process_group("mpi")
    for phase in phases:
        name, _, n = phase.partition(":")
        if name == "save":
            save(folder)
        elif name == "resume":
            resume(folder, int(n))
        elif name == "plain":
            plain(folder, int(n))
        elif name == "elastic-reference":
            ddp, _ = elastic(folder)
            keep(folder, "elastic-reference.npz", ddp)
        elif name == "elastic-killed":
            elastic(folder, checkpoint=folder / "elastic.tinyopt", callbacks=[KillRankOne()])
        elif name == "elastic-restart":
            restart(folder, "elastic.tinyopt", "elastic-restarted.npz")
        elif name == "grow-save":
            elastic(folder, epochs=EPOCHS // 2, checkpoint=folder / "grow.tinyopt")
        elif name == "grow-resume":
            restart(folder, "grow.tinyopt", "grown.npz")
        else:
            raise ValueError(f"unknown phase {phase!r}")
        print(f"PHASE {phase} done on rank {rank()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
