"""engine/ops/conv1d.py and the 1-d layers: conv1d, max_pool1d, avg_pool1d (as the 2-d ops on
(N, C, 1, L)) and nn.Conv1d, MaxPool1d, AvgPool1d, AdaptiveAvgPool1d, BatchNorm1d over (N, C, L): values and gradients against torch 2.13 for each option, finite
differences in float64, repr, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F
from tinyopt import nn

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 4, 11))


def _compare(om, tm, x):
    """Forward and backward of the same module in both libraries (weights copied from torch)."""
    torch = pytest.importorskip("torch")
    if list(om.state_dict()):
        om.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    xo, xt = to.Parameter(x), torch.tensor(x, requires_grad=True)
    oo, ot = om(xo), tm(xt)
    if isinstance(oo, tuple):
        np.testing.assert_array_equal(oo[1].numpy(), ot[1].numpy())
        oo, ot = oo[0], ot[0]
    np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(ot.shape)
    (oo * to.tensor(g)).sum().backward()
    (ot * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xo.grad, xt.grad.numpy(), atol=1e-12)
    for p, pt in zip(om.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad, pt.grad.numpy(), atol=1e-12)


CONV = [dict(), dict(stride=2, padding=1), dict(dilation=2, padding="same"),
        dict(groups=2, bias=False), dict(padding="same", padding_mode="reflect"),
        dict(padding=2, padding_mode="circular"), dict(padding=1, padding_mode="replicate")]


@pytest.mark.parametrize("kw", CONV, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_conv1d_matches_torch(kw):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    _compare(nn.Conv1d(4, 6, 3, **kw, dtype=np.float64), torch.nn.Conv1d(4, 6, 3, **kw).double(),
             X)


def test_conv1d_unbatched_gradients_and_repr():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    _compare(nn.Conv1d(4, 6, 3, dtype=np.float64), torch.nn.Conv1d(4, 6, 3).double(), X[0])
    w, b = rng.standard_normal((6, 2, 3)), rng.standard_normal(6)
    gradcheck(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, groups=2), X, w, b)
    for kw in (dict(), dict(padding="same", padding_mode="reflect", bias=False)):
        assert repr(nn.Conv1d(3, 4, 3, **kw)) == repr(torch.nn.Conv1d(3, 4, 3, **kw))
    assert nn.Conv1d(3, 4, 3).weight.shape == (4, 3, 3)


POOLS = [("MaxPool1d", dict()), ("MaxPool1d", dict(stride=1, padding=1)),
         ("MaxPool1d", dict(dilation=2)), ("MaxPool1d", dict(ceil_mode=True, stride=2)),
         ("MaxPool1d", dict(return_indices=True)), ("AvgPool1d", dict()),
         ("AvgPool1d", dict(stride=1, padding=1)),
         ("AvgPool1d", dict(padding=1, count_include_pad=False)),
         ("AvgPool1d", dict(ceil_mode=True, stride=2))]


@pytest.mark.parametrize("cls, kw", POOLS)
def test_pools_match_torch(cls, kw):
    torch = pytest.importorskip("torch")
    _compare(getattr(nn, cls)(3, **kw), getattr(torch.nn, cls)(3, **kw), X)
    assert repr(getattr(nn, cls)(3, **kw)) == repr(getattr(torch.nn, cls)(3, **kw))


@pytest.mark.parametrize("size", [1, 3, 4, 5, 11])
def test_adaptive_avg_pool1d_matches_torch(size):
    torch = pytest.importorskip("torch")
    _compare(nn.AdaptiveAvgPool1d(size), torch.nn.AdaptiveAvgPool1d(size), X)
    _compare(nn.AdaptiveAvgPool1d(size), torch.nn.AdaptiveAvgPool1d(size), X[0])


def test_batchnorm1d_over_ncl_matches_torch():
    torch = pytest.importorskip("torch")
    tm, om = torch.nn.BatchNorm1d(4).double(), nn.BatchNorm1d(4, dtype=np.float64)
    _compare(om, tm, X)
    np.testing.assert_allclose(om.running_mean, tm.running_mean.numpy(), atol=1e-15)
    np.testing.assert_allclose(om.running_var, tm.running_var.numpy(), atol=1e-15)
    om.eval()
    tm.eval()
    _compare(om, tm, X)


def test_errors_follow_torch():
    with pytest.raises(RuntimeError, match="Expected 2D \\(unbatched\\) or 3D \\(batched\\) input "
                                           "to conv1d"):
        F.conv1d(np.zeros((2, 3, 4, 5)), np.zeros((4, 3, 3)))
    with pytest.raises(RuntimeError, match="Given groups=1, weight of size \\[4, 2, 3\\], expected "
                                           "input\\[2, 3, 10\\] to have 2 channels"):
        F.conv1d(np.zeros((2, 3, 10)), np.zeros((4, 2, 3)))
    with pytest.raises(RuntimeError, match="padding should be at most half of kernel size"):
        F.max_pool1d(np.zeros((2, 3, 10)), 2, padding=2)
    with pytest.raises(RuntimeError, match="Invalid computed output size: 0"):
        F.max_pool1d(np.zeros((2, 3, 10)), 20)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv1d(3, 4, 3, groups=2)
