"""Train a fully connected 784-500-10 classifier on Fashion-MNIST, as ggml's ``mnist-fc`` example.

    python examples/mnist_fc.py                      # the bundled 10k/2k subset
    python examples/mnist_fc.py --root ~/data/fashion-mnist --epochs 20

The loop is PyTorch's: zero the gradients, forward, loss, backward, optimizer step.  The first step
compiles the graph into a plan; every later step of the same batch size replays it.
"""

from __future__ import annotations

import argparse
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


def train(model: nn.Module, args: argparse.Namespace) -> list[tuple[float, float]]:
    """The explicit training loop; returns (mean train loss, test accuracy) per epoch."""
    data = fashion_mnist(args.root)
    x_train, x_test = images(data.x_train), images(data.x_test)
    loader = DataLoader(TensorDataset(x_train, data.y_train), batch_size=args.batch_size,
                        shuffle=True)
    if args.optimizer == "adam":
        opt = optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    history = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        total, n = 0.0, 0
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
            n += len(y)
        acc = accuracy(model, x_test, data.y_test)
        history.append((total / n, acc))
        print(f"epoch {epoch:3d}  train loss {total / n:.4f}  test accuracy {acc:.4f}  "
              f"({time.perf_counter() - t0:.2f} s)", flush=True)
    return history


def parse_args(argv: list[str] | None = None, epochs: int = 5, lr: float = 1e-3,
               description: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    p.add_argument("--root", default=None,
                   help="directory with the full Fashion-MNIST IDX files (default: bundled subset)")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    to.manual_seed(args.seed)
    model = build_model()
    print(model)
    t0 = time.perf_counter()
    train(model, args)
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
