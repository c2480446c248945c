"""The kernel decorators: parallel kernels give the same bits on one thread and on several."""

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.kernels import jit


def _train(threshold, monkeypatch):
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", threshold)
    to.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    x = rng.random((8, 1, 16, 16), dtype=np.float32)
    y = rng.integers(0, 3, 8)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.data.numpy().copy() for p in model.parameters()]


def test_parallel_and_serial_runs_agree_bit_for_bit(monkeypatch):
    serial = _train(1 << 62, monkeypatch)
    parallel = _train(0, monkeypatch)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)


def test_parallel_kernel_keeps_the_callers_thread_count(monkeypatch):
    numba = pytest.importorskip("numba")
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", 1 << 62)
    before = numba.get_num_threads()
    _train(1 << 62, monkeypatch)
    assert numba.get_num_threads() == before


def test_specialized_makes_one_kernel_per_option_combination():
    @jit.specialized
    def scale(negate: bool):
        """y <- -x or x, decided when the kernel is compiled."""
        @jit.kernel
        def k(x, y):
            for i in range(x.shape[0]):
                y[i] = -x[i] if negate else x[i]
        return k

    x = np.arange(3.0)
    y = np.empty(3)
    scale[True](x, y)
    np.testing.assert_array_equal(y, -x)
    scale[False](x, y)
    np.testing.assert_array_equal(y, x)
    assert scale[True] is scale[True] and scale[True] is not scale[False]
    assert scale.__doc__.startswith("y <- -x")
