"""kernels/attention.py: the masked softmax, whose exponentials run in a loop of their own (so
LLVM vectorizes them), gives the bits of the one-loop form it replaced (kept here as the
reference), with masks, causal limits, fully masked rows and NaN scores, in both dtypes."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

from tinyopt.kernels import attention as K
from tinyopt.kernels import vecmath as V


@numba.njit(cache=True)
def _reference(P, scale, mask, has_mask, causal, nan_rows):
    """The float64 rows: one chain each, libm's exp."""
    A, B, L, S = P.shape
    Am, Bm, Lm = mask.shape[0], mask.shape[1], mask.shape[2]
    for r in range(A * B * L):
        a, b, i = r // (B * L), (r // L) % B, r % L
        row = P[a, b, i]
        n = min(i + 1, S) if causal else S
        m = -math.inf
        for j in range(n):
            v = row[j] * scale
            if has_mask:
                v = row[j] * scale + mask[min(a, Am - 1), min(b, Bm - 1), min(i, Lm - 1), j]
            row[j] = v
            m = v if v > m or v != v else m
        if m == -math.inf:
            for j in range(n):
                row[j] = math.nan if nan_rows else 0.0
        else:
            acc = 0.0
            for j in range(n):
                e = math.exp(row[j] - m)
                row[j] = e
                acc += e
            inv = 1.0 / acc
            for j in range(n):
                row[j] *= inv
        for j in range(n, S):
            row[j] = 0.0


@numba.njit(cache=True, error_model="numpy")
def _reference_f32(P, scale, mask, has_mask, causal, nan_rows):
    """The float32 rows in one loop per step: float32 arithmetic, the max over the row, the
    float64 sum of the exponentials with element j in lane j % LANES, the lanes in order."""
    A, B, L, S = P.shape
    Am, Bm, Lm = mask.shape[0], mask.shape[1], mask.shape[2]
    sc = np.float32(scale)
    lanes = np.zeros(K.LANES)
    for r in range(A * B * L):
        a, b, i = r // (B * L), (r // L) % B, r % L
        row = P[a, b, i]
        n = min(i + 1, S) if causal else S
        m = -math.inf
        for j in range(n):
            v = row[j] * sc
            if has_mask:
                v = v + mask[min(a, Am - 1), min(b, Bm - 1), min(i, Lm - 1), j]
            row[j] = v
            m = v if v > m or v != v else m
        if m == -math.inf:
            for j in range(n):
                row[j] = math.nan if nan_rows else 0.0
        else:
            lanes[:] = 0.0
            for j in range(n):
                e = V.exp_f32(row[j] - np.float32(m))
                row[j] = e
                lanes[j % K.LANES] += e
            acc = 0.0
            for k in range(K.LANES):
                acc += lanes[k]
            inv = np.float32(1.0 / acc)
            for j in range(n):
                row[j] = row[j] * inv
        for j in range(n, S):
            row[j] = 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("has_mask, causal, nan_rows", [(True, False, True), (False, True, False),
                                                        (True, True, False)])
def test_masked_softmax_gives_the_bits_of_the_one_loop_form(dtype, has_mask, causal, nan_rows):
    rng = np.random.default_rng(7)
    A, B, L, S = 3, 2, 70, 67  # more rows than a parallel block, rows longer than a vector
    P = (rng.standard_normal((A, B, L, S)) * 6).astype(dtype)
    P[1, 0, 5, 3] = np.nan
    mask = np.where(rng.random((A, 1, L, S)) < 0.2, -np.inf, rng.standard_normal((A, 1, L, S)))
    mask[2, 0, 9] = -np.inf  # a fully masked row
    mask = mask.astype(dtype)
    fast = dtype == np.float32
    want = P.copy()
    (_reference_f32 if fast else _reference)(want, 0.3, mask, has_mask, causal, nan_rows)
    got = P.copy()
    K.masked_softmax[fast, has_mask, causal, nan_rows](got, 0.3, mask)
    assert got.tobytes() == want.tobytes()
