"""kernels/gemm_bf16.py: the bfloat16 GEMM (AVX512-BF16) against numpy.

Three references: a float64 product of the same bf16 values (within float32 summation's bound
and one bf16 rounding), a float32 emulation of the kernel's own summation order (bit for bit),
and numpy's float32 GEMM for where NaN and inf land.  Shapes include 1 x 1, odd sizes, K odd and
K across the K blocks, so the packing's padding is exercised.  Skipped where the CPU lacks
avx512bf16 (the instruction does not exist there).
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt.kernels import gemm_bf16, half

pytestmark = pytest.mark.skipif(not gemm_bf16.available(),
                                reason="the CPU has no AVX512-BF16")

SHAPES = [(1, 1, 1), (3, 5, 7), (17, 33, 19), (14, 2, 32), (29, 301, 65), (5, 0, 4)]


def bits(x) -> np.ndarray:
    """float32 -> bf16 patterns (uint16), to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, np.uint16)
    half.round_bf16(x.reshape(-1), out.reshape(-1))
    return out


def widen(b: np.ndarray) -> np.ndarray:
    out = np.empty(b.shape, np.float32)
    half.widen_bf16(np.ascontiguousarray(b).reshape(-1), out.reshape(-1))
    return out


def _operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return (bits(rng.standard_normal((m, k))), bits(rng.standard_normal((k, n))),
            bits(rng.standard_normal((m, n))))


def _run(a, b, c, alpha, beta, transposed=False, symmetric=False, work=None):
    out = np.full((a.shape[0], b.shape[1]), 0x7FC0, np.uint16)  # NaN: unwritten shows
    gemm_bf16.matmul(a, np.ascontiguousarray(b.T) if transposed else b, out,
                     b_transposed=transposed, alpha=alpha, beta=beta, c=c,
                     symmetric=symmetric, work=work)
    return out


def _same_order(a, b, c, alpha, beta):
    """The kernel's arithmetic in float32 numpy: per pair p of K (zero-padded to even), the
    odd product is added first, then the even one; then fl(fl(alpha acc) + fl(beta c))."""
    A, B = widen(a), widen(b)
    if A.shape[1] % 2:
        A = np.pad(A, ((0, 0), (0, 1)))
        B = np.pad(B, ((0, 1), (0, 0)))
    acc = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for p in range(A.shape[1] // 2):
        acc = acc + np.outer(A[:, 2 * p + 1], B[2 * p + 1])
        acc = acc + np.outer(A[:, 2 * p], B[2 * p])
    v = np.float32(alpha) * acc
    if c is not None:
        v = v + np.float32(beta) * widen(c)
    return bits(v)


@pytest.mark.parametrize("m,k,n", SHAPES + [(40, 513, 70), (0, 3, 4), (3, 4, 0)])
@pytest.mark.parametrize("transposed", [False, True], ids=["b", "bT"])
def test_against_float64_product(m, k, n, transposed):
    a, b, c = _operands(m, k, n)
    out = widen(_run(a, b, c, 0.75, -1.5, transposed))
    A, B, C = (widen(x).astype(np.float64) for x in (a, b, c))
    exact = 0.75 * (A @ B) - 1.5 * C
    scale = 0.75 * (np.abs(A) @ np.abs(B)) + 1.5 * np.abs(C)
    # float32 summation of k + 2 terms, then one rounding to bfloat16 (u = 2^-8)
    tol = (k + 3) * 2.0 ** -24 * scale + 2.0 ** -8 * np.abs(exact)
    assert np.all(np.abs(out - exact) <= tol)


@pytest.mark.parametrize("m,k,n", SHAPES + [(30, 600, 33)])
def test_bit_for_bit_its_summation_order(m, k, n):
    a, b, c = _operands(m, k, n, seed=1)
    np.testing.assert_array_equal(_run(a, b, c, 2.0315, -4.775), _same_order(a, b, c, 2.0315,
                                                                               -4.775))
    np.testing.assert_array_equal(_run(a, b, None, 1.0, 0.0, transposed=True),
                                  _same_order(a, b, None, 1.0, 0.0))


def test_large_odd_shape():
    a, b, c = _operands(1000, 999, 1000)
    got = widen(_run(a, b, c, 1.0, 3.4445))
    A, B, C = (widen(x).astype(np.float64) for x in (a, b, c))
    exact = A @ B + 3.4445 * C
    scale = np.abs(A) @ np.abs(B) + 3.4445 * np.abs(C)
    assert np.all(np.abs(got - exact) <= 1002 * 2.0 ** -24 * scale + 2.0 ** -8 * np.abs(exact))


@pytest.mark.parametrize("m,k", [(1, 1), (3, 5), (33, 17), (70, 301)])
def test_symmetric_is_the_full_product(m, k):
    x, _, _ = _operands(m, k, 1, seed=2)
    full = _run(x, x.T.copy(), None, 1.0, 0.0, transposed=False)
    np.testing.assert_array_equal(_run(x, x.T.copy(), None, 1.0, 0.0, symmetric=True), full)
    np.testing.assert_array_equal(full, full.T)
    # s @ s.T + beta s for a symmetric s: the Newton-Schulz update
    s = full
    ref = _run(s, s, s, 2.0, -4.775, transposed=True)
    np.testing.assert_array_equal(_run(s, s, s, 2.0, -4.775, transposed=True, symmetric=True),
                                  ref)


def test_nan_and_inf_land_where_a_float32_gemm_puts_them():
    a, b, c = _operands(9, 6, 35, seed=3)
    A, B = widen(a), widen(b)
    A[2, 3], A[5, 0], B[4, 7], B[1, 30] = np.nan, np.inf, -np.inf, np.inf
    B[0, 11] = 0.0  # inf * 0 = NaN
    with np.errstate(invalid="ignore"):
        ref = A @ B
    got = widen(_run(bits(A), bits(B), None, 1.0, 0.0))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    assert np.isnan(got).any() and np.isinf(got).any()


def test_work_buffers_are_reused_across_shapes():
    work: dict = {}
    for m, k, n in [(29, 301, 65), (3, 5, 7), (40, 64, 33)]:
        a, b, c = _operands(m, k, n, seed=m)
        np.testing.assert_array_equal(_run(a, b, c, 1.0, 0.5, work=work),
                                      _same_order(a, b, c, 1.0, 0.5))


def test_shape_errors():
    a = np.zeros((3, 4), np.uint16)
    with pytest.raises(ValueError, match="do not match"):
        gemm_bf16.matmul(a, np.zeros((5, 2), np.uint16), np.zeros((3, 2), np.uint16))
    with pytest.raises(ValueError, match="symmetric product is square"):
        gemm_bf16.matmul(a, np.zeros((4, 2), np.uint16), np.zeros((3, 2), np.uint16),
                         symmetric=True)
    with pytest.raises(ValueError, match="C-contiguous uint16"):
        gemm_bf16.matmul(a, np.zeros((4, 2), np.float32), np.zeros((3, 2), np.uint16))
    with pytest.raises(ValueError, match="C-contiguous uint16"):
        gemm_bf16.matmul(a, np.zeros((2, 4), np.uint16).T, np.zeros((3, 2), np.uint16))
