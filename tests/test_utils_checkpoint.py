"""``torch.utils.checkpoint`` (``tinyopt.utils.checkpoint``): values and gradients of the plain
call, PyTorch's warning and argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.utils.checkpoint import checkpoint, checkpoint_sequential


def _grads(model, run):
    x = to.tensor(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    model.zero_grad()
    y = run(model, x)
    y.pow(2).sum().backward()
    return [y.numpy()] + [p.grad.numpy().copy() for p in model.parameters()]


def test_values_and_gradients_are_those_of_the_plain_call():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    plain = _grads(model, lambda m, x: m(x))
    ckpt = _grads(model, lambda m, x: m[2:](checkpoint(m[:2], x, use_reentrant=False)))
    seq = _grads(model, lambda m, x: checkpoint_sequential(m, 2, x, use_reentrant=False))
    for a, b, c in zip(plain, ckpt, seq):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert to.utils.checkpoint.checkpoint is checkpoint  # (torch.utils.checkpoint's path)


def test_warning_and_errors_as_torch():
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
        checkpoint(lambda x: x * 2, to.ones(2))
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda x, scale: x * scale, to.ones(2), use_reentrant=True, scale=2)
    assert checkpoint(lambda x, scale: x * scale, to.ones(2), use_reentrant=False,
                      scale=3).tolist() == [3.0, 3.0]
