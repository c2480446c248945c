"""linalg.inv / torch.inverse and linalg.solve: values and gradients against finite differences
and PyTorch, vector and broadcast forms, left=False, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from gradcheck import gradcheck

RNG = np.random.default_rng(0)


def _well_conditioned(*shape):
    n = shape[-1]
    return RNG.standard_normal(shape) + 3 * np.eye(n)


def test_inverse_values_and_gradient():
    a = _well_conditioned(2, 3, 3)
    np.testing.assert_allclose(to.linalg.inv(to.tensor(a)).numpy(), np.linalg.inv(a), rtol=1e-12)
    gradcheck(lambda x: to.linalg.inv(x), a)
    gradcheck(lambda x: x.inverse() @ x.inverse(), a[0])


@pytest.mark.parametrize("a_shape, b_shape", [((3, 3), (3,)), ((2, 3, 3), (2, 3)),
                                              ((2, 3, 3), (3, 2)), ((3, 3), (4, 3, 1))])
def test_solve_shapes_and_gradients(a_shape, b_shape):
    a, b = _well_conditioned(*a_shape), RNG.standard_normal(b_shape)
    x = to.linalg.solve(to.tensor(a), to.tensor(b)).numpy()
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(x, torch.linalg.solve(torch.tensor(a), torch.tensor(b)).numpy(),
                               rtol=1e-10, atol=1e-12)
    gradcheck(lambda p, q: to.linalg.solve(p, q), a, b)


def test_solve_on_the_right_and_against_torch_gradients():
    a, b = _well_conditioned(3, 3), RNG.standard_normal((2, 3))
    gradcheck(lambda p, q: to.linalg.solve(p, q, left=False), a, b)
    torch = pytest.importorskip("torch")
    at, bt = (torch.tensor(v, requires_grad=True) for v in (a, b))
    ao, bo = (to.tensor(v, requires_grad=True) for v in (a, b))
    torch.linalg.solve(at, bt, left=False).pow(2).sum().backward()
    to.linalg.solve(ao, bo, left=False).pow(2).sum().backward()
    np.testing.assert_allclose(ao.grad.numpy(), at.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(bo.grad.numpy(), bt.grad.numpy(), rtol=1e-10)


def test_errors_are_torchs():
    with pytest.raises(to.linalg.LinAlgError, match="singular"):
        to.linalg.inv(to.zeros(2, 2))
    with pytest.raises(RuntimeError, match="singular"):
        to.linalg.solve(to.zeros(2, 2), to.ones(2))
    with pytest.raises(RuntimeError, match="2 by 3 matrices"):
        to.inverse(to.zeros(2, 3))
    with pytest.raises(RuntimeError, match="floating point or complex tensor as input. Got Long"):
        to.linalg.inv(to.zeros(2, 2, dtype=to.int64))
    with pytest.raises(RuntimeError, match="Low precision dtypes not supported. Got Half"):
        to.linalg.inv(to.zeros(2, 2, dtype=to.float16))
    with pytest.raises(RuntimeError, match=r"Incompatible shapes .* \(2x2 and 3x1\)"):
        to.linalg.solve(to.eye(2), to.zeros(3, 1))
    with pytest.raises(RuntimeError, match="A of type Float and B of type Double"):
        to.linalg.solve(to.eye(2), to.zeros(2, 1, dtype=to.float64))
