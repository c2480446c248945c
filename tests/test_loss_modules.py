"""Loss layers (nn.CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss) and the
functional losses' PyTorch-only arguments: values and input gradients against PyTorch, the legacy
size_average/reduce mapping, option validation, weights as buffers, repr."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.nn import functional as F

RNG = np.random.default_rng(99)
REDUCTIONS = ["mean", "sum", "none"]


def _torch():
    return pytest.importorskip("torch")


def _t(x):
    return _torch().from_numpy(np.ascontiguousarray(x))


def _check(loss_fn, tloss_fn, x: np.ndarray, target, ttarget=None, rtol: float = 1e-10) -> None:
    """Loss value and d loss / d input (weighted by a random cotangent) agree with torch."""
    xp, tx = to.Parameter(x), _t(x).requires_grad_()
    out = loss_fn(xp, target)
    tout = tloss_fn(tx, _t(target) if ttarget is None else ttarget)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=1e-12)
    w = RNG.normal(size=out.shape)
    (out * w).sum().backward()
    (tout * _t(w)).sum().backward()
    np.testing.assert_allclose(xp.grad, tx.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kw", [dict(), dict(ignore_index=2), dict(label_smoothing=0.2),
                                dict(weight=True), dict(weight=True, ignore_index=0,
                                                        label_smoothing=0.1)],
                         ids=["plain", "ignore", "smooth", "weight", "all"])
def test_cross_entropy_loss_matches_torch(reduction, kw):
    torch = _torch()
    kw = dict(kw)
    if kw.pop("weight", False):
        w = RNG.uniform(0.5, 2.0, size=5)
        kw["weight"], tkw = w, dict(kw, weight=_t(w))
    else:
        tkw = dict(kw)
    x, y = RNG.normal(size=(6, 5)), RNG.integers(0, 5, size=6)
    y[0] = 2
    _check(nn.CrossEntropyLoss(reduction=reduction, **kw),
           torch.nn.CrossEntropyLoss(reduction=reduction, **tkw), x, y)


def test_cross_entropy_loss_spatial_targets():
    torch = _torch()
    x, y = RNG.normal(size=(2, 4, 3, 3)), RNG.integers(0, 4, size=(2, 3, 3))
    for reduction in REDUCTIONS:
        _check(nn.CrossEntropyLoss(reduction=reduction),
               torch.nn.CrossEntropyLoss(reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_matches_torch(reduction):
    torch = _torch()
    w = RNG.uniform(0.5, 2.0, size=4)
    logp = np.log(RNG.dirichlet(np.ones(4), size=7))
    y = RNG.integers(0, 4, size=7)
    _check(nn.NLLLoss(weight=w, ignore_index=1, reduction=reduction),
           torch.nn.NLLLoss(weight=_t(w), ignore_index=1, reduction=reduction), logp, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss"])
def test_regression_losses_match_torch(name, reduction):
    torch = _torch()
    x, y = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    _check(getattr(nn, name)(reduction=reduction), getattr(torch.nn, name)(reduction=reduction),
           x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("fn", ["mse_loss", "l1_loss"])
def test_weighted_regression_functional_matches_torch(fn, reduction):
    torch = _torch()
    x, y = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    w = RNG.uniform(0.1, 2.0, size=(4, 3))
    tf = getattr(torch.nn.functional, fn)
    _check(lambda a, b: getattr(F, fn)(a, b, reduction=reduction, weight=w),
           lambda a, b: tf(a, b, reduction=reduction, weight=_t(w)), x, y)
    with pytest.raises(ValueError, match="same size"):
        getattr(F, fn)(x, y, weight=np.ones(3))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kw", [dict(), dict(weight=True), dict(pos_weight=True),
                                dict(weight=True, pos_weight=True)],
                         ids=["plain", "weight", "pos_weight", "both"])
def test_bce_with_logits_loss_matches_torch(reduction, kw):
    torch = _torch()
    args, targs = {}, {}
    if kw.get("weight"):
        args["weight"] = RNG.uniform(0.5, 2.0, size=(1, 3))
        targs["weight"] = _t(args["weight"])
    if kw.get("pos_weight"):
        args["pos_weight"] = RNG.uniform(0.5, 3.0, size=3)
        targs["pos_weight"] = _t(args["pos_weight"])
    x, y = RNG.normal(scale=4.0, size=(5, 3)), RNG.uniform(size=(5, 3))
    _check(nn.BCEWithLogitsLoss(reduction=reduction, **args),
           torch.nn.BCEWithLogitsLoss(reduction=reduction, **targs), x, y)


def test_cross_entropy_float32_numpy_reference():
    x = RNG.normal(size=(8, 10)).astype(np.float32)
    y = RNG.integers(0, 10, size=8)
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    loss = nn.CrossEntropyLoss()(x, y)
    assert loss.dtype == np.float32
    assert loss.item() == pytest.approx(-logp[np.arange(8), y].mean(), rel=1e-5)


# ---- options, legacy arguments, buffers, repr --------------------------------------------------
@pytest.mark.parametrize("size_average, reduce, expected", [
    (None, False, "none"), (False, None, "sum"), (True, True, "mean"), (False, False, "none"),
    (False, True, "sum")])
def test_legacy_size_average_and_reduce(size_average, reduce, expected):
    with pytest.warns(UserWarning, match=f"please use reduction='{expected}' instead"):
        loss = nn.MSELoss(size_average=size_average, reduce=reduce)
    assert loss.reduction == expected
    x, y = RNG.normal(size=(3, 2)), RNG.normal(size=(3, 2))
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        a = F.mse_loss(x, y, size_average=size_average, reduce=reduce).numpy()
    np.testing.assert_allclose(a, F.mse_loss(x, y, reduction=expected).numpy())


@pytest.mark.parametrize("name", ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss",
                                  "BCEWithLogitsLoss"])
def test_invalid_reduction_and_repr(name):
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        getattr(nn, name)(reduction="avg")
    assert repr(getattr(nn, name)()) == f"{name}()"


def test_class_weights_are_buffers_in_state_dict():
    torch = _torch()
    w = np.array([1.0, 2.0, 0.5])
    loss = nn.CrossEntropyLoss(weight=w)
    tloss = torch.nn.CrossEntropyLoss(weight=_t(w))
    assert list(loss.state_dict()) == list(tloss.state_dict()) == ["weight"]
    np.testing.assert_array_equal(loss.state_dict()["weight"], w)
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    assert list(nn.BCEWithLogitsLoss(pos_weight=np.ones(2)).state_dict()) == ["pos_weight"]
    with pytest.raises(TypeError, match="floating point"):
        nn.NLLLoss(weight=np.array([1, 2]))


def test_loss_errors_name_the_problem():
    ce = nn.CrossEntropyLoss()
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        ce(np.zeros((2, 3), np.float32), np.array([0, 3])).item()
    with pytest.raises(TypeError, match="int64"):
        ce(np.zeros((2, 3), np.float32), np.array([0.0, 1.0], np.float32))
    with pytest.raises(ValueError, match="must be the same as input size"):
        nn.MSELoss()(np.zeros((2, 3)), np.zeros((3, 2)))


def test_loss_module_in_training_step():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    loss_fn = nn.CrossEntropyLoss()
    x = RNG.normal(size=(16, 4)).astype(np.float32)
    y = RNG.integers(0, 3, size=16)
    losses = []
    for _ in range(20):
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data -= 0.5 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
