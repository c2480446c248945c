"""End-to-end training: the issue's PyTorch-style loop runs from the plan cache after its first
step, and the examples' MLP and CNN learn Fashion-MNIST in short seeded runs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.engine import cache_info

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mnist_cnn  # noqa: E402
import mnist_fc  # noqa: E402


@pytest.fixture(scope="module")
def data():
    d = to.data.fashion_mnist()
    return (mnist_fc.images(d.x_train), d.y_train, mnist_fc.images(d.x_test), d.y_test)


def _batches(x: np.ndarray, y: np.ndarray, batch_size: int, steps: int):
    for i in range(steps):
        s = slice(i * batch_size, (i + 1) * batch_size)
        yield x[s], y[s]


def _issue_loop(model: nn.Module, batches, lr: float = 0.1) -> list[int]:
    """The loop from the issue, verbatim; returns the plan-cache misses after each step."""
    misses = []
    for x, y in batches:                     # x: numpy float32 (B, 1, 28, 28), y: numpy int64 (B,)
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)   # numpy arrays are accepted as inputs
        loss.backward()
        for p in model.parameters():         # the optimizers come in their own issue
            p.data -= lr * p.grad
        misses.append(cache_info().misses)
    return misses


@pytest.mark.parametrize("build", [
    lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10)),
    mnist_cnn.build_model], ids=["mlp", "cnn"])
def test_issue_loop_runs_from_the_plan_cache_after_the_second_step(data, build):
    x, y = data[0], data[1]
    assert x.dtype == np.float32 and x.shape[1:] == (1, 28, 28) and y.dtype == np.int64
    to.manual_seed(0)
    model = build()
    before = [p.data.numpy().copy() for p in model.parameters()]
    misses = _issue_loop(model, _batches(x, y, 32, 6))
    # (the first step runs eagerly and the second compiles: engine/eager.py)
    assert misses[2:] == [misses[1]] * 4, f"plan cache misses per step: {misses}"
    assert all(not np.array_equal(b, p.data) for b, p in zip(before, model.parameters()))
    assert all(p.grad is not None and p.grad.dtype == np.float32 for p in model.parameters())


def test_batchnorm_and_dropout_model_reuses_its_plan(data):
    """Dropout masks and BatchNorm's running arrays and momentum (cumulative with momentum=None)
    are bound per step, so they never force a new plan."""
    x, y = data[0], data[1]
    to.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4, momentum=None),
                          nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(), nn.Dropout(0.2),
                          nn.Linear(4 * 7 * 7, 10))
    misses = _issue_loop(model, _batches(x, y, 16, 4))
    assert misses[2:] == [misses[1]] * 2, f"plan cache misses per step: {misses}"
    bn = model[1]
    assert int(bn.num_batches_tracked) == 4
    assert (bn.running_var != 1.0).all()


def test_issue_loop_gradients_are_reset_each_step(data):
    """zero_grad() + backward() gives this batch's gradient, not a sum over steps."""
    x, y = data[0][:16], data[1][:16]
    to.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 20), nn.ReLU(), nn.Linear(20, 10))
    grads = []
    for _ in range(2):
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


def test_mlp_learns_with_the_plain_sgd_loop(data):
    """mnist_fc's 784-500-10 model, the issue's loop (p.data -= lr * p.grad), 2 epochs on 4000
    images: about 0.77 test accuracy on the bundled 2000 test images."""
    x_train, y_train, x_test, y_test = data
    to.manual_seed(0)
    model = mnist_fc.build_model()
    loader = to.data.DataLoader(to.data.TensorDataset(x_train[:4000], y_train[:4000]),
                                batch_size=16, shuffle=True)
    for _ in range(2):
        _issue_loop(model, loader, lr=0.05)
    acc = mnist_fc.accuracy(model, x_test, y_test)
    print(f"MLP test accuracy {acc:.4f}")
    assert acc >= 0.72, acc
    assert model.training


def test_cnn_learns_with_adam(data):
    """mnist_cnn's model with tinyopt.optim.Adam, 1 epoch on 3000 images: about 0.78 test
    accuracy on the bundled 2000 test images."""
    x_train, y_train, x_test, y_test = data
    to.manual_seed(0)
    model = mnist_cnn.build_model()
    opt = optim.Adam(model.parameters(), lr=5e-3)
    loader = to.data.DataLoader(to.data.TensorDataset(x_train[:3000], y_train[:3000]),
                                batch_size=32, shuffle=True, drop_last=True)
    losses = []
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10])
    acc = mnist_fc.accuracy(model, x_test, y_test)
    print(f"CNN test accuracy {acc:.4f}")
    assert acc >= 0.70, acc


def test_mnist_fc_example_main_runs(capsys, monkeypatch, tmp_path):
    """The example's command line and loop run end to end (one epoch on the bundled data)."""
    mnist_fc.main(["--epochs", "1", "--batch-size", "500", "--lr", "2e-3", "--seed", "3",
                   "--checkpoint", str(tmp_path / "fc.tinyopt")])
    out = capsys.readouterr().out
    assert "Linear(in_features=784, out_features=500, bias=True)" in out
    line = next(s for s in out.splitlines() if s.startswith("epoch"))
    acc = float(line.split("test accuracy")[1].split()[0])
    assert acc >= 0.65, line
