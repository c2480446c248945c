"""Train a small convolutional classifier on Fashion-MNIST, as ggml's ``mnist-cnn`` example.

    conv 3x3 1->8 (pad 1), ReLU, max-pool 2, conv 3x3 8->16 (pad 1), ReLU, max-pool 2,
    flatten (16*7*7 = 784), linear 784->10

    python examples/mnist_cnn.py                      # fit() on the bundled 10k/2k subset
    python examples/mnist_cnn.py --loop               # the explicit PyTorch-style loop
    python examples/mnist_cnn.py --root ~/data/fashion-mnist --epochs 10
    python examples/mnist_cnn.py --epochs 5 --checkpoint cnn.tinyopt --resume cnn.tinyopt

Data handling, training (``tinyopt.fit`` by default, the explicit loop with ``--loop``),
checkpoints after every epoch (``--checkpoint PATH``, default ``mnist_cnn.tinyopt`` in a new
temporary folder) and exact resume (``--resume PATH``) are those of ``mnist_fc.py``.
"""

from __future__ import annotations

from tinyopt import nn

from mnist_fc import parse_args, run


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


def main(argv: list[str] | None = None) -> None:
    run(parse_args(argv, epochs=3, lr=1e-3, description=__doc__.split("\n")[0],
                   name="mnist_cnn"), build_model)


if __name__ == "__main__":
    main()
