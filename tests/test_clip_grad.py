"""clip_grad_norm_ / clip_grad_value_ against PyTorch's rules (and torch itself when installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyopt import Parameter, optim
from tinyopt.nn.utils import clip_grad_norm_, clip_grad_value_


def _params(grads):
    ps = []
    for g in grads:
        p = Parameter(np.zeros(np.shape(g), np.float32))
        p.grad = None if g is None else np.asarray(g, np.float32)
        ps.append(p)
    return ps


def test_clip_grad_norm_scales_and_returns_total_norm():
    ps = _params([[3.0, 0.0], [4.0], None])
    total = clip_grad_norm_(ps, max_norm=1.0)
    assert total.shape == () and total.dtype == np.float32
    np.testing.assert_allclose(total, 5.0)
    coef = 1.0 / (5.0 + 1e-6)
    np.testing.assert_allclose(ps[0].grad, [3 * coef, 0], rtol=1e-6)
    np.testing.assert_allclose(ps[1].grad, [4 * coef], rtol=1e-6)
    assert ps[2].grad is None


def test_no_clipping_below_max_norm_and_other_norms():
    ps = _params([[0.3, -0.4]])
    np.testing.assert_allclose(clip_grad_norm_(ps, 10.0), 0.5, rtol=1e-6)
    np.testing.assert_allclose(ps[0].grad, [0.3, -0.4], rtol=1e-6)
    ps = _params([[1.0, -7.0], [2.0]])
    np.testing.assert_allclose(clip_grad_norm_(ps, 100.0, norm_type=math.inf), 7.0)
    np.testing.assert_allclose(clip_grad_norm_(ps, 100.0, norm_type=1), 10.0)
    assert float(clip_grad_norm_(_params([None]), 1.0)) == 0.0


def test_nonfinite_norm():
    ps = _params([[np.nan, 1.0]])
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(ps[0].grad, [np.nan, 1.0])  # unchanged on error
    assert np.isnan(clip_grad_norm_(ps, 1.0))


def test_clip_grad_value_():
    ps = _params([[-3.0, 0.5, 2.0, np.nan], None])
    clip_grad_value_(ps, 1.0)
    np.testing.assert_array_equal(ps[0].grad, [-1.0, 0.5, 1.0, np.nan])


def test_clipping_packed_grads_keeps_optimizer_storage():
    ps = _params([[3.0, 4.0]])
    opt = optim.SGD(ps, lr=1.0)
    clip_grad_norm_(ps[0], 1.0)
    opt.step()
    np.testing.assert_allclose(ps[0].data, [-0.6, -0.8], rtol=1e-5)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_matches_torch(norm_type):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,), (2, 2)]]
    ps = _params(grads)
    tps = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for tp, g in zip(tps, grads):
        tp.grad = torch.from_numpy(g.copy())
    t1 = clip_grad_norm_(ps, 0.5, norm_type=norm_type)
    t2 = torch.nn.utils.clip_grad_norm_(tps, 0.5, norm_type=norm_type)
    np.testing.assert_allclose(t1, t2.numpy(), rtol=1e-5)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-5, atol=1e-7)
