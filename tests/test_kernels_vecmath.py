"""kernels/vecmath.py: the vectorizable exp, sigmoid and tanh are within 1 float32 ulp of the exact
values over the float32 range, and keep NaN and the limits at +-inf."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from tinyopt.kernels import vecmath as V


@numba.njit(cache=True)
def _apply(x, which, out):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = V.exp_fast(v) if which == 0 else V.sigmoid_fast(v) if which == 1 \
            else V.tanh_fast(v)


def _fast(x: np.ndarray, which: int) -> np.ndarray:
    out = np.empty_like(x)
    _apply(x, which, out)
    return out


def _grid() -> np.ndarray:
    lin = np.linspace(-110, 110, 200_001)
    tiny = np.logspace(-30, 2, 20_000)
    return np.concatenate([lin, tiny, -tiny, [0.0, -0.0]])


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # values beyond float32 become inf on both sides
        ia = a.astype(np.float32).view(np.int32).astype(np.int64)
        ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    # map the sign-magnitude float bits onto a monotonic integer line
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


@pytest.mark.parametrize("which, ref", [(0, np.exp), (1, lambda x: 1 / (1 + np.exp(-x))),
                                        (2, np.tanh)], ids=["exp", "sigmoid", "tanh"])
def test_within_one_float32_ulp_of_the_exact_value(which, ref):
    x = _grid()
    with np.errstate(over="ignore"):
        exact = ref(x)
    assert _ulps(_fast(x, which), exact).max() <= 1


@pytest.mark.parametrize("which, at_inf, at_minus_inf", [(0, np.inf, 0.0), (1, 1.0, 0.0),
                                                         (2, 1.0, -1.0)])
def test_nan_and_infinities(which, at_inf, at_minus_inf):
    out = _fast(np.array([np.nan, np.inf, -np.inf]), which)
    assert np.isnan(out[0])
    assert out[1] == at_inf and out[2] == at_minus_inf


def test_relative_accuracy_in_float64_arithmetic():
    x = np.concatenate([np.linspace(-80, 80, 10_001), [1e-30, 1e-12, 1e-5, -1e-7]])
    np.testing.assert_allclose(_fast(x, 0), np.exp(x), rtol=2e-12)
    np.testing.assert_allclose(_fast(x, 1), 1 / (1 + np.exp(-x)), rtol=2e-12)
    # tanh: relative to its value, also for tiny arguments (no 1 - 2 / (e^2x + 1) cancellation)
    np.testing.assert_allclose(_fast(x, 2), np.tanh(x), rtol=3e-11)


# ---- float32 arithmetic ---------------------------------------------------------------------
@numba.njit(cache=True, error_model="numpy")
def _apply_f32(x, which, out):
    for i in range(x.shape[0]):
        v = x[i]
        e = V.exp_f32(np.float32(-0.5) * v * v)
        out[i] = V.exp_f32(v) if which == 0 else V.normal_cdf_f32(v, e)


def _f32(x: np.ndarray, which: int) -> np.ndarray:
    x = x.astype(np.float32)
    out = np.empty_like(x)
    _apply_f32(x, which, out)
    return out


def test_exp_f32_within_one_ulp_where_normal_and_right_at_the_ends():
    x = _grid().astype(np.float32)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
    got = _f32(x, 0)
    normal = (exact >= np.finfo(np.float32).tiny) & (exact <= np.finfo(np.float32).max)
    assert _ulps(got[normal], exact[normal]).max() <= 1
    # subnormal results: the right value to within one subnormal step; beyond the range: 0, inf
    sub = (exact < np.finfo(np.float32).tiny) & (x > -104)
    assert np.abs(got[sub] - exact[sub]).max() <= 2.0 ** -149
    assert (got[x <= -104] == 0).all() and (got[exact > np.finfo(np.float32).max] == np.inf).all()
    out = _f32(np.array([np.nan, np.inf, -np.inf]), 0)
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == 0.0


def test_normal_cdf_f32_keeps_relative_accuracy_in_the_lower_tail():
    import math
    x = np.concatenate([np.linspace(-13, 13, 100_001), np.logspace(-30, 0, 2000),
                        -np.logspace(-30, 0, 2000)]).astype(np.float32)
    exact = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    got = _f32(x, 1)
    # within 4e-7 relative (a few ulps) where |x| <= 2; beyond, the rounding of x^2 / 2 adds
    # ~x^2 6e-8 in the lower tail (where 1 + erf would have lost every digit)
    rel = np.abs(got - exact) / exact
    assert rel[np.abs(x) <= 2].max() < 4e-7
    assert (rel / (1 + x.astype(np.float64) ** 2 / 2) < 4e-7).all()
    out = _f32(np.array([np.nan, np.inf, -np.inf]), 1)
    assert np.isnan(out[0]) and out[1] == 1.0 and out[2] == 0.0
