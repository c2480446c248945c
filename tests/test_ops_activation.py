"""elu/selu/celu, hardtanh/relu6, logsigmoid, mish, prelu (``engine/ops/activation.py``): values
and gradients against PyTorch 2.13 and finite differences, NaN/inf and boundary behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
import tinyopt.nn.functional as F
from gradcheck import gradcheck
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(1)
X = rng.normal(scale=3.0, size=(4, 3, 5))
EDGES = np.array([-np.inf, -50.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 6.0, 50.0, np.inf, np.nan])

CASES = [("elu", dict(alpha=0.7)), ("selu", {}), ("celu", dict(alpha=1.3)),
         ("hardtanh", dict(min_val=-0.5, max_val=2.0)), ("relu6", {}), ("logsigmoid", {}),
         ("mish", {}), ("softsign", {}), ("tanhshrink", {}),
         ("threshold", dict(threshold=0.5, value=-2.0)), ("hardshrink", dict(lambd=0.7)),
         ("softshrink", dict(lambd=0.7))]


@pytest.mark.parametrize("name, kwargs", CASES)
def test_against_torch(name, kwargs):
    torch = torch_or_skip()
    for dtype in (np.float64, np.float32):
        against_torch(lambda a: getattr(F, name)(a, **kwargs),
                      lambda a: getattr(torch.nn.functional, name)(a, **kwargs), X.astype(dtype),
                      rtol=1e-5 if dtype == np.float64 else 3e-6, atol=1e-6)


@pytest.mark.parametrize("name, kwargs", CASES)
def test_edges_against_torch(name, kwargs):
    torch = torch_or_skip()
    x = to.Parameter(EDGES.copy())
    y = getattr(F, name)(x, **kwargs)
    y.sum().backward()
    t = torch.tensor(EDGES, requires_grad=True)
    ty = getattr(torch.nn.functional, name)(t, **kwargs)
    ty.sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, equal_nan=True)
    # PyTorch's celu backward rounds 1/alpha to float32 (its forward does not): up to 2e-6 apart
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=2e-6 if name == "celu" else 1e-12,
                               equal_nan=True)


@pytest.mark.parametrize("name, kwargs", CASES)
def test_gradcheck(name, kwargs):
    x = X[0] + 0.05  # away from the kinks
    gradcheck(lambda a: getattr(F, name)(a, **kwargs), x)


def test_hardtanh_gradient_is_zero_on_the_bounds():
    x = to.Parameter(np.array([-1.0, -0.5, 1.0, 0.999]))
    F.hardtanh(x).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 1.0, 0.0, 1.0])


def test_hardtanh_with_min_above_max_raises_as_pytorch():
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(to.randn(3), 1.0, -1.0)
    with pytest.raises(AssertionError, match=r"max_val \(-1.0\) must be greater than min_val"):
        to.nn.Hardtanh(1.0, -1.0)
    np.testing.assert_array_equal(F.hardtanh(to.tensor([-3.0, 3.0]), 1.0, 1.0).numpy(), [1.0, 1.0])


@pytest.mark.parametrize("shape, n", [((4, 3, 5), 3), ((4, 3, 5), 1), ((6,), 1), ((2, 3), 3),
                                      ((), 1)])
def test_prelu_against_torch(shape, n):
    torch = torch_or_skip()
    x = rng.normal(size=shape)
    w = rng.uniform(0.1, 0.5, size=n)
    against_torch(F.prelu, torch.nn.functional.prelu, x, w)
    if x.ndim:
        gradcheck(F.prelu, x + 0.01, w)


def test_prelu_errors():
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        F.prelu(np.zeros((2, 3)), np.ones(2))
    with pytest.raises(RuntimeError, match="channel size = 1"):  # a 1-D input has one channel
        F.prelu(np.zeros(6), np.ones(6))
    with pytest.raises(RuntimeError, match="scalar or 1D tensor"):
        F.prelu(np.zeros((2, 3)), np.ones((3, 1)))


def test_integer_inputs_are_refused():
    for f, kernel in ((F.elu, "elu_cpu"), (F.mish, "mish_cpu"), (F.logsigmoid, "log_sigmoid_cpu")):
        with pytest.raises(NotImplementedError, match=f"^\"{kernel}\" not implemented for 'Long'$"):
            f(np.arange(3))  # (torch's error)
    with pytest.raises(TypeError, match="floating point"):  # (torch computes it; tinyopt does not)
        F.hardtanh(np.arange(3))


def test_shrink_and_threshold_modules_as_torch():
    torch = torch_or_skip()
    x = X.astype(np.float32)
    for make in (lambda n: n.Softsign(), lambda n: n.Tanhshrink(), lambda n: n.Hardshrink(1.0),
                 lambda n: n.Threshold(0.1, 20.0), lambda n: n.Softshrink(0.3),
                 lambda n: n.Softmax2d()):
        ours, theirs = make(to.nn), make(torch.nn)
        assert repr(ours) == repr(theirs)
        np.testing.assert_allclose(ours(to.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(),
                                   rtol=1e-6, atol=1e-7)
    t = to.tensor(x)
    F.threshold_(t, 0.0, -1.0)
    assert t.min().item() == -1.0 and (t.numpy() > 0).sum() == (x > 0).sum()
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D"):
        to.nn.Softmax2d()(to.ones(2, 2))
    with pytest.raises(RuntimeError, match="lambda must be greater or equal to 0"):
        F.softshrink(to.ones(2), -1.0)
