"""NaN and inf compute silently, as in PyTorch: no numpy RuntimeWarning from eager ops or plan
runs, the values are torch's, and the caller's numpy error state is left as it was."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to
import tinyopt.nn.functional as F

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

SPECIAL = [float("nan"), 1.0, -1.0, 0.0, float("inf"), -float("inf")]
OPS = {
    "relu": lambda L, x: L.relu(x), "abs": lambda L, x: x.abs(), "sin": lambda L, x: x.sin(),
    "log1p": lambda L, x: x.log1p(), "log": lambda L, x: x.log(), "sqrt": lambda L, x: x.sqrt(),
    "clamp": lambda L, x: x.clamp(0, 1), "div": lambda L, x: x / x,
    "reciprocal": lambda L, x: 1 / x, "mul": lambda L, x: x * 0.0,
    "softplus": lambda L, x: L.nn.functional.softplus(x),
}


@pytest.mark.parametrize("name", list(OPS))
def test_eager_ops_on_nan_and_inf_are_silent_and_match_torch(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = OPS[name](to, to.tensor(SPECIAL)).numpy()
    if torch is not None:
        want = OPS[name](torch, torch.tensor(SPECIAL)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)  # NaN where torch has NaN


def test_a_training_step_on_nan_input_is_silent():
    model = to.nn.Sequential(to.nn.Linear(3, 4), to.nn.ReLU(), to.nn.Linear(4, 1))
    x = to.tensor([[float("nan"), 1.0, -1.0], [float("inf"), 0.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = F.mse_loss(model(x), to.zeros(2, 1))
        loss.backward()
    assert np.isnan(loss.item())
    assert np.isnan(model[0].weight.grad.numpy()).any()


def test_the_callers_numpy_error_state_is_restored():
    x = to.tensor([-1.0, 1.0], requires_grad=True)
    with np.errstate(divide="raise"):
        x.detach().log1p()
        (x * 2).log1p().sum().backward()
        with pytest.raises(FloatingPointError):
            np.log1p(np.array([-1.0]))
    assert np.geterr()["divide"] == "warn"
