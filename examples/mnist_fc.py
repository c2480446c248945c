"""Train a fully connected 784-500-10 classifier on Fashion-MNIST, as ggml's ``mnist-fc`` example.

    python examples/mnist_fc.py                      # fit() on the bundled 10k/2k subset
    python examples/mnist_fc.py --loop               # the same with the explicit PyTorch loop
    python examples/mnist_fc.py --root ~/data/fashion-mnist --epochs 20

A checkpoint is saved after every epoch (``--checkpoint PATH``, default ``mnist_fc.tinyopt`` in a
new temporary folder, printed at the end; ``--checkpoint ''`` saves none).  Stop the run at any time and continue it
with ``--resume PATH``: the resumed run prints exactly the numbers the uninterrupted one would
have printed (model, optimizer, learning-rate schedule, shuffling order and random generator are
all restored)::

    python examples/mnist_fc.py --epochs 2 --checkpoint run.tinyopt
    python examples/mnist_fc.py --epochs 5 --checkpoint run.tinyopt --resume run.tinyopt

By default training goes through ``tinyopt.fit`` (epochs, shuffling, validation on the test set,
checkpoints, a progress bar on a terminal).  ``--loop`` writes the loop out as in PyTorch: zero
the gradients, forward, loss, backward, optimizer step, and ``tinyopt.save`` / ``load_into`` for
the checkpoints.  The first step compiles the graph into a plan; every later step of the same
batch size replays it.  A checkpoint of one mode resumes only in that mode.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.data import DataLoader, TensorDataset, fashion_mnist


def build_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))


def images(x: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) pixels as float32 (N, 1, 28, 28) in [0, 1]."""
    return (x.astype(np.float32) / 255.0)[:, None, :, :]


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 1000) -> float:
    """Fraction of ``x`` whose arg-max logit is the label, in eval mode, without gradients."""
    model.eval()
    correct = 0
    with to.no_grad():
        for i in range(0, len(x), batch_size):
            logits = model(x[i:i + batch_size]).numpy()
            correct += int((logits.argmax(1) == y[i:i + batch_size]).sum())
    model.train()
    return correct / len(x)


def report(epoch: int, loss: float, acc: float, seconds: float) -> None:
    """One line per epoch (``epoch`` counted from 1)."""
    print(f"epoch {epoch:3d}  train loss {loss:.4f}  test accuracy {acc:.4f}  "
          f"({seconds:.2f} s)", flush=True)


def train(model: nn.Module, args: argparse.Namespace) -> list[tuple[float, float]]:
    """Train ``model`` as ``args`` say; returns (mean train loss, test accuracy) per epoch run."""
    data = fashion_mnist(args.root)
    x_train, y_train = images(data.x_train), data.y_train
    if args.limit is not None:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    x_test, y_test = images(data.x_test), data.y_test
    if args.optimizer == "adam":
        opt = optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # the learning rate is multiplied by --lr-decay after every epoch
    sched = optim.lr_scheduler.ExponentialLR(opt, gamma=args.lr_decay)
    run = train_loop if args.loop else train_fit
    return run(model, opt, sched, (x_train, y_train), (x_test, y_test), args)


def train_fit(model: nn.Module, opt: optim.Optimizer, sched: optim.lr_scheduler.LRScheduler,
              train_data: tuple, test_data: tuple,
              args: argparse.Namespace) -> list[tuple[float, float]]:
    """``tinyopt.fit``: it checkpoints after every epoch and resumes from ``--resume``."""
    if args.resume:
        print(f"resuming from {args.resume}")

    def on_epoch_end(epoch: int, record: to.train.EpochRecord) -> None:
        report(epoch + 1, record.train.loss, record.val.accuracy, record.seconds)

    history = to.fit(model, train_data, nn.CrossEntropyLoss(), opt, epochs=args.epochs,
                     batch_size=args.batch_size, val_data=test_data, scheduler=sched,
                     scheduler_interval="epoch", seed=args.seed, callbacks=[on_epoch_end],
                     progress=sys.stderr.isatty(), checkpoint=args.checkpoint or None,
                     resume=args.resume)
    return [(r.train.loss, r.val.accuracy) for r in history]


def train_loop(model: nn.Module, opt: optim.Optimizer, sched: optim.lr_scheduler.LRScheduler,
               train_data: tuple, test_data: tuple,
               args: argparse.Namespace) -> list[tuple[float, float]]:
    """The explicit loop, with ``tinyopt.save`` after every epoch and ``load_into`` to resume."""
    loader = DataLoader(TensorDataset(*train_data), batch_size=args.batch_size, shuffle=True)
    first = 0
    if args.resume:
        # restores the objects and the global generator (dropout, shuffling), all or nothing
        if "fit" in to.load(args.resume):
            sys.exit(f"{args.resume} was saved by tinyopt.fit: resume it without --loop")
        meta = to.load_into(args.resume, model=model, optimizer=opt, scheduler=sched,
                            loader=loader)
        first = meta["epoch"]
        print(f"resumed from {args.resume} after epoch {first}")
    history = []
    for epoch in range(first, args.epochs):
        t0 = time.perf_counter()
        total, n = 0.0, 0
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
            n += len(y)
        sched.step()
        acc = accuracy(model, *test_data)
        history.append((total / n, acc))
        report(epoch + 1, total / n, acc, time.perf_counter() - t0)
        if args.checkpoint:
            to.save(args.checkpoint, model=model, optimizer=opt, scheduler=sched, loader=loader,
                    epoch=epoch + 1)
    return history


def parse_args(argv: list[str] | None = None, epochs: int = 5, lr: float = 1e-3,
               description: str | None = None, name: str = "mnist_fc") -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    p.add_argument("--root", default=None,
                   help="directory with the full Fashion-MNIST IDX files (default: bundled subset)")
    p.add_argument("--epochs", type=int, default=epochs,
                   help="epochs in all (a resumed run continues up to this many)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--lr-decay", type=float, default=0.9,
                   help="multiply the learning rate by this after every epoch")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None,
                   help="train on the first LIMIT training images only")
    p.add_argument("--loop", action="store_true",
                   help="the explicit PyTorch-style loop instead of tinyopt.fit")
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help=f"save here after every epoch ('' to save nothing; default: "
                        f"{name}.tinyopt in a new temporary folder)")
    p.add_argument("--resume", default=None, metavar="PATH",
                   help="continue the run saved in this checkpoint")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < args.batch_size:
        p.error(f"--limit {args.limit} is smaller than one batch ({args.batch_size})")
    if args.checkpoint is None:  # a folder of this run's own: never a fixed name others can take
        args.checkpoint = os.path.join(tempfile.mkdtemp(prefix=f"{name}-"), f"{name}.tinyopt")
    return args


def run(args: argparse.Namespace, build=build_model) -> None:
    """Seed, build the model, train it as ``args`` say and report the total time."""
    to.manual_seed(args.seed)
    model = build()
    print(model)
    t0 = time.perf_counter()
    train(model, args)
    print(f"total {time.perf_counter() - t0:.1f} s" +
          (f"; checkpoint {args.checkpoint}" if args.checkpoint else ""))


def main(argv: list[str] | None = None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    main()
