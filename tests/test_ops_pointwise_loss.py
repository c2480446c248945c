"""binary_cross_entropy, smooth_l1/huber, kl_div (``engine/ops/pointwise_loss.py``) and the losses
nn.functional composes (triplet margin, cosine embedding, margin ranking): values and gradients
against PyTorch 2.13 and finite differences, reductions, and PyTorch's errors and warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt
import tinyopt.nn.functional as F
from gradcheck import gradcheck
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(3)
A = rng.normal(size=(6, 4))
B = rng.normal(size=(6, 4))
P = 1 / (1 + np.exp(-A))
Y = (rng.random(A.shape) > 0.5).astype(np.float64)
REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction):
    torch = torch_or_skip()
    tf = torch.nn.functional
    against_torch(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction),
                  lambda p, y: tf.binary_cross_entropy(p, y, reduction=reduction), P, Y)
    w = rng.uniform(0.5, 2, size=4)
    against_torch(lambda p, y: F.binary_cross_entropy(p, y, weight=w, reduction=reduction),
                  lambda p, y: tf.binary_cross_entropy(p, y, weight=torch.from_numpy(w),
                                                       reduction=reduction), P, Y)
    soft = rng.random(A.shape)  # soft targets get a gradient too
    against_torch(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction),
                  lambda p, y: tf.binary_cross_entropy(p, y, reduction=reduction), P, soft)
    edge = np.array([0.0, 1.0, 1e-50, 1 - 1e-16])
    against_torch(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction),
                  lambda p, y: tf.binary_cross_entropy(p, y, reduction=reduction),
                  edge, np.array([1.0, 0.0, 0.0, 1.0]), grad=False)


def test_binary_cross_entropy_gradient_at_0_and_1_uses_pytorchs_float32_eps():
    # found by tests/test_fuzz_api.py: at x = 0 or 1 the gradient is (x - y) / eps, and ATen's
    # eps is the float 1e-12 (9.9999999600e-13), also for float64 inputs
    x = tinyopt.tensor(np.array([0.0, 1.0, 1e-14]), requires_grad=True)
    F.binary_cross_entropy(x, np.array([1.0, 0.0, 0.5]), reduction="sum").backward()
    eps = float(np.float32(1e-12))
    np.testing.assert_allclose(x.grad.numpy(), [-1 / eps, 1 / eps, (1e-14 - 0.5) / eps],
                               rtol=1e-15)


def test_binary_cross_entropy_gradcheck_and_errors():
    gradcheck(lambda p, y: F.binary_cross_entropy(p, y, reduction="none"), P, rng.random(A.shape))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(A, Y).item()
    with pytest.raises(ValueError, match="that is different to the input size"):
        F.binary_cross_entropy(P, Y[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.3, 0.0])
def test_smooth_l1(reduction, beta):
    torch = torch_or_skip()
    against_torch(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta),
                  lambda a, b: torch.nn.functional.smooth_l1_loss(a, b, reduction=reduction,
                                                                  beta=beta), A, B)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.4, 3.0])
def test_huber(reduction, delta):
    torch = torch_or_skip()
    against_torch(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta),
                  lambda a, b: torch.nn.functional.huber_loss(a, b, reduction=reduction,
                                                              delta=delta), A, B)
    w = rng.uniform(0.5, 2, size=A.shape)
    against_torch(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta, weight=w),
                  lambda a, b: torch.nn.functional.huber_loss(a, b, reduction=reduction,
                                                              delta=delta,
                                                              weight=torch.from_numpy(w)), A, B)


def test_regression_losses_gradcheck_and_broadcast_warning():
    gradcheck(lambda a, b: F.smooth_l1_loss(a, b, beta=0.5, reduction="none"), A, B)
    gradcheck(lambda a, b: F.huber_loss(a, b, delta=0.5, reduction="none"), A, B)
    torch = torch_or_skip()
    with pytest.warns(UserWarning, match="different to the input size"):
        ours = F.smooth_l1_loss(A, B[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.nn.functional.smooth_l1_loss(torch.from_numpy(A), torch.from_numpy(B[:1]))
    np.testing.assert_allclose(ours.item(), ref.item())


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    torch = torch_or_skip()
    logp = A - np.log(np.exp(A).sum(1, keepdims=True))
    q = np.exp(B) / np.exp(B).sum(1, keepdims=True)
    q[0, 0] = 0.0  # a zero target contributes 0
    t = np.log(q + 1e-3) if log_target else q
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        against_torch(lambda x, y: F.kl_div(x, y, reduction=reduction, log_target=log_target),
                      lambda x, y: torch.nn.functional.kl_div(x, y, reduction=reduction,
                                                              log_target=log_target),
                      logp, t, grad=False)
        against_torch(lambda x: F.kl_div(x, t, reduction=reduction, log_target=log_target),
                      lambda x: torch.nn.functional.kl_div(x, torch.from_numpy(t),
                                                           reduction=reduction,
                                                           log_target=log_target), logp)
    if log_target:
        against_torch(lambda x, y: F.kl_div(x, y, reduction="sum", log_target=True),
                      lambda x, y: torch.nn.functional.kl_div(x, y, reduction="sum",
                                                              log_target=True), logp, t)
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(logp, q)


def test_kl_div_gradcheck():
    q = np.exp(B) / np.exp(B).sum(1, keepdims=True)
    gradcheck(lambda x, y: F.kl_div(x, y, reduction="none"), A, q)
    gradcheck(lambda x, y: F.kl_div(x, y, reduction="none", log_target=True), A, B)


@pytest.mark.parametrize("kwargs", [dict(), dict(margin=0.5, p=1), dict(swap=True),
                                    dict(p=3, reduction="none"), dict(reduction="sum")])
def test_triplet_margin_loss(kwargs):
    torch = torch_or_skip()
    C = rng.normal(size=A.shape)
    against_torch(lambda a, b, c: F.triplet_margin_loss(a, b, c, **kwargs),
                  lambda a, b, c: torch.nn.functional.triplet_margin_loss(a, b, c, **kwargs),
                  A, B, C)
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        F.triplet_margin_loss(A, B, C, margin=0)


@pytest.mark.parametrize("margin, reduction", [(0.0, "mean"), (0.3, "sum"), (-0.2, "none")])
def test_cosine_embedding_loss(margin, reduction):
    torch = torch_or_skip()
    y = np.array([1, -1, 1, -1, -1, 1], dtype=np.int64)
    against_torch(lambda a, b: F.cosine_embedding_loss(a, b, y, margin, reduction=reduction),
                  lambda a, b: torch.nn.functional.cosine_embedding_loss(
                      a, b, torch.from_numpy(y), margin, reduction=reduction), A, B)
    against_torch(lambda a, b: F.cosine_embedding_loss(a, b, np.array(-1.0), margin),
                  lambda a, b: torch.nn.functional.cosine_embedding_loss(
                      a, b, torch.tensor(-1.0), margin), A[0], B[0])
    with pytest.raises(RuntimeError, match="1D target tensor expects 2D input"):
        F.cosine_embedding_loss(A[0], B[0], y)


def test_cosine_embedding_loss_of_a_zero_vector_uses_pytorchs_float32_eps():
    # found by tests/test_fuzz_api.py: with x1 = 0 the gradient is y x2 / sqrt(eps |x2|^2), and
    # ATen's eps is the float 1e-12 (9.9999999600e-13), also for float64 inputs
    x = tinyopt.tensor(np.zeros((1, 3)), requires_grad=True)
    F.cosine_embedding_loss(x, np.ones((1, 3)), np.array([-1])).backward()
    eps = float(np.float32(1e-12))
    np.testing.assert_allclose(x.grad.numpy(), np.full((1, 3), 1 / np.sqrt(eps * (3 + eps))),
                               rtol=1e-15)


def test_margin_ranking_loss():
    torch = torch_or_skip()
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, 1.0])
    for margin in (0.0, 0.5):
        against_torch(lambda a, b: F.margin_ranking_loss(a, b, y, margin),
                      lambda a, b: torch.nn.functional.margin_ranking_loss(
                          a, b, torch.from_numpy(y), margin), A[:, 0], B[:, 0])
    with pytest.raises(RuntimeError, match="should have same dimension"):
        F.margin_ranking_loss(A, B, y)


def test_reduction_errors():
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.huber_loss(A, B, reduction="avg")
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.kl_div(A, B, reduction="avg")
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        assert F.smooth_l1_loss(A, B, size_average=False).shape == ()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_at_nan_inf_and_the_ends_of_0_1_are_pytorchs(dtype):
    """PyTorch's values: smooth_l1's gradient is NaN at a NaN difference; binary cross-entropy's
    d/dtarget is -logit(x), unclamped (inf at x = 0, -inf at x = 1); kl_div's d/dtarget is NaN at
    t = inf (its xlogy(t, t) gradient has t / t)."""
    nan, inf = np.nan, np.inf

    def grads(f, a, b):
        x, y = tinyopt.tensor(np.array(a, dtype), requires_grad=True), \
            tinyopt.tensor(np.array(b, dtype), requires_grad=True)
        f(x, y).backward()
        return x.grad.numpy(), y.grad.numpy()

    gx, gy = grads(lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.5),
                   [nan, 1.0, 0.2, -3.0], [0.0, nan, 0.0, 0.0])
    np.testing.assert_array_equal(gx, np.array([nan, nan, 0.4, -1.0], dtype))
    np.testing.assert_array_equal(gy, np.array([nan, nan, -0.4, 1.0], dtype))
    _, gy = grads(lambda x, y: F.binary_cross_entropy(x, y, reduction="sum"),
                  [0.0, 1.0, 0.5], [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(gy, np.array([inf, -inf, 0.0], dtype))
    _, gy = grads(lambda x, t: F.kl_div(x, t, reduction="sum"), [0.0, 0.0, 0.0], [inf, 0.0, 1.0])
    assert np.isnan(gy[0]) and np.isnan(gy[1]) and gy[2] == 1.0
    torch = torch_or_skip()
    for f, tf, a, b in [
            (lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.5),
             lambda x, y: torch.nn.functional.smooth_l1_loss(x, y, reduction="sum", beta=0.5),
             [nan, 1.0, 0.2, -3.0], [0.0, nan, 0.0, 0.0]),
            (lambda x, y: F.binary_cross_entropy(x, y, reduction="sum"),
             lambda x, y: torch.nn.functional.binary_cross_entropy(x, y, reduction="sum"),
             [0.0, 1.0, 0.5], [0.5, 0.5, 0.5]),
            (lambda x, t: F.kl_div(x, t, reduction="sum"),
             lambda x, t: torch.nn.functional.kl_div(x, t, reduction="sum"),
             [0.0, 0.0, 0.0], [inf, 0.0, 1.0])]:
        tx, ty = (torch.tensor(np.array(v, dtype), requires_grad=True) for v in (a, b))
        tf(tx, ty).backward()
        ours = grads(f, a, b)
        np.testing.assert_array_equal(ours[0], tx.grad.numpy())
        np.testing.assert_array_equal(ours[1], ty.grad.numpy())
