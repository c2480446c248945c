"""kernels/native/half.py: exact float16/bfloat16 conversions, exhaustively over the 16-bit patterns.

Widening is checked on all 65,536 patterns; rounding on every value a 16-bit float can hold, on
each midpoint between neighbours (ties go to even) and one float32 ulp either side of it, and
on 10^6 random float32 patterns.  ``TINYOPT_EXHAUSTIVE=1`` also rounds all 2^32 float32 patterns.
"""

from __future__ import annotations

import os
import warnings

import numba
import numpy as np
import pytest

from tinyopt.kernels.native import half

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
QUIET32 = np.uint32(0x00400000)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _widen(kernel, h: np.ndarray) -> np.ndarray:
    out = np.empty(h.shape, np.float32)
    kernel(h, out)
    return out


def _round(kernel, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, np.uint16)
    kernel(x, out)
    return out


def _numpy_f16(x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on NaN casts
        return x.astype(np.float16).view(np.uint16)


def _ieee_f16(x: np.ndarray) -> np.ndarray:
    """numpy's float32 -> float16, except that a NaN becomes quiet keeping the top of its
    payload, as IEEE 754 has it (numpy keeps a signaling NaN signaling)."""
    f = _bits(x)
    quiet = ((f >> 16) & 0x8000) | 0x7E00 | ((f >> 13) & 0x03FF)
    return np.where(np.isnan(x), quiet, _numpy_f16(x)).astype(np.uint16)


def _near_each(values: np.ndarray, step: int) -> np.ndarray:
    """Float32 patterns at and around each value and each midpoint towards the next 16-bit
    neighbour (``step`` = that neighbour's distance in float32 patterns)."""
    b = _bits(values).astype(np.int64)
    finite = np.isfinite(values)
    b = b[finite]
    around = [b + d for d in (-2, -1, 0, 1, 2)]
    around += [b + step // 2 + d for d in (-1, 0, 1)]
    return (np.concatenate(around) % (1 << 32)).astype(np.uint32).view(np.float32)


# ---- float16 ------------------------------------------------------------------------------------
def test_float16_widening_is_exact_on_every_pattern():
    got = _bits(_widen(half.widen_f16, ALL16))
    want = _bits(ALL16.view(np.float16).astype(np.float32))
    nan = np.isnan(ALL16.view(np.float16))
    assert np.array_equal(got[~nan], want[~nan])  # zeros, subnormals, normals, infinities
    assert np.array_equal(got[nan], want[nan] | QUIET32)  # NaNs keep sign and payload, quiet


def test_float16_rounding_is_to_nearest_even_around_every_value():
    values = ALL16.view(np.float16).astype(np.float32)
    x = _near_each(values[(ALL16 & 0x7FFF) < 0x7C00], 1 << 13)
    assert np.array_equal(_round(half.round_f16, x), _ieee_f16(x))
    # ties: 65520 (between 65504 and 2^16) overflows, the smallest subnormal's half flushes to 0
    edge = np.array([65519.996, 65520.0, 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-24 * 1.5,
                     -65520.0, 1e-45, -0.0, np.inf, -np.inf], np.float32)
    assert _round(half.round_f16, edge).tolist() == [0x7BFF, 0x7C00, 0x0000, 0x0001, 0x0002,
                                             0xFC00, 0x0000, 0x8000, 0x7C00, 0xFC00]


def test_float16_rounding_of_random_patterns_and_nans():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1 << 32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    assert np.array_equal(_round(half.round_f16, x), _ieee_f16(x))
    nans = np.array([0x7F800001, 0x7FC00000, 0xFFA00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    assert _round(half.round_f16, nans).tolist() == [0x7E00, 0x7E00, 0xFF00, 0x7FFF]


# ---- bfloat16 -----------------------------------------------------------------------------------
ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_bfloat16_widening_is_exact_on_every_pattern():
    assert np.array_equal(_bits(_widen(half.widen_bf16, ALL16)),
                          _bits(ALL16.view(BF16).astype(np.float32)))


def test_bfloat16_rounding_matches_ml_dtypes_around_every_value():
    values = ALL16.view(BF16).astype(np.float32)
    x = _near_each(values, 1 << 16)
    assert np.array_equal(_round(half.round_bf16, x), x.astype(BF16).view(np.uint16))
    edge = np.array([0x3F808000, 0x3F818000, 0x7F7F8000, 0x00008000, 0x7F800001, 0xFFC12345],
                    np.uint32).view(np.float32)  # ties to even, overflow to inf, tiny, NaNs
    assert _round(half.round_bf16, edge).tolist() == [0x3F80, 0x3F82, 0x7F80, 0x0000, 0x7FC0,
                                                      0xFFC0]


def test_bfloat16_rounding_of_random_patterns():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1 << 32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.array_equal(_round(half.round_bf16, x), x.astype(BF16).view(np.uint16))


@pytest.mark.skipif(not os.environ.get("TINYOPT_EXHAUSTIVE"), reason="TINYOPT_EXHAUSTIVE=1: all "
                    "2^32 float32 patterns (about a minute)")
def test_rounding_of_every_float32_pattern():
    step = 1 << 26
    for lo in range(0, 1 << 32, step):
        x = np.arange(lo, lo + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = x.astype(BF16).view(np.uint16)
            assert np.array_equal(_round(half.round_bf16, x), want), hex(lo)
        assert np.array_equal(_round(half.round_f16, x), _ieee_f16(x)), hex(lo)


# ---- stochastic rounding ------------------------------------------------------------------------
@numba.njit(cache=True)
def _sr(x, i):
    out = np.empty(x.shape[0], np.uint16)
    for k in range(x.shape[0]):
        out[k] = half.f32_to_bf16_sr(x[k], i[k])
    return out


def test_stochastic_rounding_picks_a_neighbour_unbiasedly():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(2000).astype(np.float32)
    n = 4000  # roundings of each value, at different positions
    xs = np.repeat(x, n)
    q = _sr(xs, np.arange(xs.size, dtype=np.int64)).reshape(x.size, n)
    down = (_bits(x) >> 16).astype(np.uint16)
    assert np.all((q == down[:, None]) | (q == down[:, None] + 1))  # truncation or next away
    # P(up) is the distance to the bfloat16 below, in ulps: the mean equals x within 4 sigma
    frac = (_bits(x) & 0xFFFF) / 65536.0
    up = (q != down[:, None]).mean(axis=1)
    assert np.all(np.abs(up - frac) <= 4 * np.sqrt(frac * (1 - frac) / n) + 1e-9)
    assert abs((up - frac).mean()) < 4 * 0.5 / np.sqrt(n * x.size)  # no bias overall


def test_stochastic_rounding_is_reproducible_exact_and_keeps_specials():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000).astype(np.float32)
    i = np.arange(1000, dtype=np.int64)
    assert np.array_equal(_sr(x, i), _sr(x.copy(), i.copy()))
    assert not np.array_equal(_sr(x, i), _sr(x, i + 1))  # the position takes part
    exact = ALL16.view(BF16).astype(np.float32)
    exact = exact[~np.isnan(exact)]
    assert np.array_equal(_sr(exact, np.arange(exact.size)), exact.astype(BF16).view(np.uint16))
    nan = np.array([0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert _sr(nan, np.zeros(2, np.int64)).tolist() == [0x7FC0, 0xFFC0]
