"""kernels/native/gemm_bf16.py: the bfloat16 GEMM (AVX512-BF16) against numpy.

Three references: a float64 product of the same bf16 values (within float32 summation's bound
and one bf16 rounding), a float32 emulation of the kernel's own summation order (bit for bit),
and numpy's float32 GEMM for where NaN and inf land.  Shapes include 1 x 1, odd sizes, K odd and
K across the K blocks, so the packing's padding is exercised.  The products are skipped where
the CPU lacks avx512bf16 (the instruction does not exist there); the compile-only test and the
fallback test run on any x86 machine.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt.kernels.native import gemm_bf16, half

needs_bf16 = pytest.mark.skipif(not gemm_bf16.available(), reason="the CPU has no AVX512-BF16")

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


@needs_bf16
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


@needs_bf16
@pytest.mark.parametrize("m,k,n", SHAPES + [(30, 600, 33)])
def test_bit_for_bit_its_summation_order(m, k, n):
    a, b, c = _operands(m, k, n, seed=1)
    np.testing.assert_array_equal(_run(a, b, c, 2.0315, -4.775), _same_order(a, b, c, 2.0315,
                                                                               -4.775))
    np.testing.assert_array_equal(_run(a, b, None, 1.0, 0.0, transposed=True),
                                  _same_order(a, b, None, 1.0, 0.0))


@needs_bf16
def test_large_odd_shape():
    a, b, c = _operands(1000, 999, 1000)
    got = widen(_run(a, b, c, 1.0, 3.4445))
    A, B, C = (widen(x).astype(np.float64) for x in (a, b, c))
    exact = A @ B + 3.4445 * C
    scale = np.abs(A) @ np.abs(B) + 3.4445 * np.abs(C)
    assert np.all(np.abs(got - exact) <= 1002 * 2.0 ** -24 * scale + 2.0 ** -8 * np.abs(exact))


@needs_bf16
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


@needs_bf16
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


@needs_bf16
def test_work_buffers_are_reused_across_shapes():
    work: dict = {}
    for m, k, n in [(29, 301, 65), (3, 5, 7), (40, 64, 33)]:
        a, b, c = _operands(m, k, n, seed=m)
        np.testing.assert_array_equal(_run(a, b, c, 1.0, 0.5, work=work),
                                      _same_order(a, b, c, 1.0, 0.5))


@needs_bf16
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


COMPILE_FOR = r"""
import numba, numpy as np
from tinyopt.kernels.native import gemm_bf16 as G
m, n, k = 17, 33, 19
pm, pn, kp = G.panels(m, n, k)
args = (np.zeros(pm * G.MR * kp, np.uint32), kp, np.zeros((k, n), np.uint16), False,
        np.zeros(pn * G.NR * kp, np.uint32), np.float32(1), np.float32(0), G._NO_C,
        np.zeros((m, n), np.uint16), False, np.zeros(G.acc_size(m, n), np.float32))
sig = tuple(numba.typeof(a) for a in args)
G.gemm._serial.compile(sig)  # compiled, never run: this CPU may lack the instruction
print("vdpbf16ps" in G.gemm._serial.inspect_asm(sig))
"""


def test_the_micro_kernel_compiles_for_an_avx512_bf16_cpu(tmp_path):
    """Compile-only, on any x86 host: numba targeting Sapphire Rapids (AVX512-BF16) builds the
    GEMM with the dot-product instruction, so the tested numba/llvmlite can still emit it
    where no CI machine has the CPU to run it."""
    import os
    import platform
    import subprocess
    import sys
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("an x86 target")
    env = {**os.environ, "NUMBA_CPU_NAME": "sapphirerapids", "NUMBA_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", COMPILE_FOR], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "True"


def test_a_kernel_that_does_not_compile_leaves_muon_on_float32(monkeypatch):
    """Where the bf16 GEMM fails to build, ``usable`` says so once (a warning) and Muon's
    Newton-Schulz takes the float32 path, with its results."""
    from tinyopt.optim import muon

    def broken(*args):
        raise RuntimeError("LLVM ERROR: Cannot select: intrinsic %llvm.x86.avx512bf16.dpbf16ps.512")

    monkeypatch.setattr(gemm_bf16, "available", lambda: True)
    monkeypatch.setattr(gemm_bf16, "_USABLE", [])
    monkeypatch.setattr(gemm_bf16.pack_rows, "serial", broken)
    with pytest.warns(RuntimeWarning, match="not usable here"):
        assert not gemm_bf16.usable()
    assert not muon._bf16_pays((512, 512))
    monkeypatch.setattr(muon, "NS_PATH", "bf16")
    with pytest.raises(RuntimeError, match="does not compile"):
        muon._bf16_pays((512, 512))
