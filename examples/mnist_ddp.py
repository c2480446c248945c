"""Train mnist_fc's 784-500-10 classifier on Fashion-MNIST on several MPI ranks (data parallel).

    pip install -e ".[mpi]"                                   # mpi4py and the mpich wheel
    mpiexec -n 2 python examples/mnist_ddp.py                 # 2 ranks on this machine
    mpiexec -n 2 python examples/mnist_ddp.py --zero          # Adam's state sharded (ZeRO-1)
    mpiexec -f hosts -n 8 python examples/mnist_ddp.py        # across machines: docs/distributed.md

Every rank builds the same model (DistributedDataParallel broadcasts rank 0's weights), trains on
its DistributedSampler share of the data with ``--batch-size`` samples per step (the global batch
is ``world_size`` times that), and after every backward DDP averages the gradients over the ranks,
so every rank takes the same optimizer step and the replicas stay identical.  Losses are summed
over the ranks with ``all_reduce``; rank 0 alone evaluates, prints and writes the checkpoint
(``--checkpoint PATH``; with ``--zero`` the sharded optimizer state is consolidated on rank 0
first).  ``--resume PATH`` continues a run on the same number of ranks, bit for bit.

With fewer cores than ranks x threads, give each rank its share: NUMBA_NUM_THREADS=1 (2 ranks on
2 cores), else the ranks' thread pools fight over the cores.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tinyopt as to
import tinyopt.distributed as dist
from tinyopt import nn, optim
from tinyopt.data import DataLoader, DistributedSampler, TensorDataset, fashion_mnist
from tinyopt.distributed.optim import ZeroRedundancyOptimizer
from tinyopt.nn.parallel import DistributedDataParallel as DDP

from mnist_fc import accuracy, build_model, images


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=None,
                   help="directory with the full Fashion-MNIST IDX files (default: bundled subset)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=50, help="samples per step on each rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--zero", action="store_true",
                   help="ZeroRedundancyOptimizer: each rank keeps Adam's state for its shard only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None,
                   help="train on the first LIMIT training images only")
    p.add_argument("--checkpoint", default="", metavar="PATH",
                   help="rank 0 saves model and optimizer here after every epoch")
    p.add_argument("--resume", default=None, metavar="PATH", help="continue from this checkpoint")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    """Train as ``argv`` says; returns (mean training loss over all ranks, test accuracy) per
    epoch (the accuracy on rank 0 only, NaN elsewhere)."""
    args = parse_args(argv)
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = fashion_mnist(args.root)
    x_train, y_train = images(data.x_train), data.y_train
    if args.limit is not None:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    train_set = TensorDataset(x_train, y_train)

    to.manual_seed(args.seed)
    model = DDP(build_model())
    if args.zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=args.lr)
    else:
        opt = optim.Adam(model.parameters(), lr=args.lr)
    sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    first = 0
    if args.resume:
        first = to.load_into(args.resume, model=model, optimizer=opt)["epoch"]
    if rank == 0:
        print(f"{world} ranks, {len(sampler)} samples and {len(loader)} steps of "
              f"{args.batch_size} per rank and epoch", flush=True)
    history = []
    for epoch in range(first, args.epochs):
        t0 = time.perf_counter()
        sampler.set_epoch(epoch)  # a new order every epoch, the same on every rank
        total = np.zeros(2)       # loss * samples, samples
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()       # DDP averages the gradients over the ranks here
            opt.step()
            total += (loss.item() * len(y), len(y))
        dist.all_reduce(total)    # every rank's losses
        if args.checkpoint and args.zero:
            opt.consolidate_state_dict(to=0)  # a collective: every rank calls it
        acc = float("nan")
        if rank == 0:
            acc = accuracy(model.module, images(data.x_test), data.y_test)
            print(f"epoch {epoch + 1:3d}  train loss {total[0] / total[1]:.4f}  test accuracy "
                  f"{acc:.4f}  ({time.perf_counter() - t0:.2f} s)", flush=True)
            if args.checkpoint:
                to.save(args.checkpoint, model=model, optimizer=opt, epoch=epoch + 1)
        history.append((total[0] / total[1], acc))
    if own_group:
        dist.destroy_process_group()
    return history


if __name__ == "__main__":
    main()
