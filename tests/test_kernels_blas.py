"""kernels/native/blas.py: single_threaded() sets OpenBLAS's thread count to 1 and restores it, also
when the block raises and when threads enter and leave it in any order; GEMMs inside give the
same results."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tinyopt.kernels.native import blas


def _local():
    with blas.single_threaded():
        pass
    if blas._SET_LOCAL is None:
        pytest.skip("numpy's BLAS has no openblas_set_num_threads_local: single_threaded is a "
                    "no-op")
    return blas._SET_LOCAL


def _read(f) -> int:
    current = f(1)
    f(current)
    return current


def test_sets_one_thread_and_restores():
    f = _local()
    before = _read(f)
    with blas.single_threaded():
        assert _read(f) == 1
    assert _read(f) == before
    with pytest.raises(ZeroDivisionError):
        with blas.single_threaded():
            1 / 0
    assert _read(f) == before


def test_threads_entering_and_leaving_in_any_order_restore_the_count():
    # numpy's OpenBLAS sets the count of the whole process (its "local" setter calls the global
    # one): A enters, B enters (and would save A's 1), A leaves, B leaves.
    f = _local()
    before = _read(f)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with blas.single_threaded():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with blas.single_threaded():
            b_in.set()
            a_out.wait(10)
            seen["inside after A left"] = _read(f)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen["inside after A left"] == 1
    assert _read(f) == before


def test_results_are_unchanged():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((20, 200)), rng.standard_normal((200, 800))
    want = a @ b
    with blas.single_threaded():
        np.testing.assert_allclose(a @ b, want, rtol=1e-13)


def _call(dtype, args, x, y, out):
    """Run the cblas call ``matmul_args`` described, through ctypes, for each matrix of the stack."""
    import ctypes
    address = blas.gemm_address(dtype)
    if address is None:
        pytest.skip("numpy's BLAS is not a 64-bit-integer OpenBLAS")
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, real,
                            ptr, i64, ptr, i64, real, ptr, i64)(address)
    t1, t2, m, n, k, lda, ldb, ldc, _, _ = args
    for i in np.ndindex(*out.shape[:-2]):
        gemm(101, t1, t2, m, n, k, 1.0, x[i].ctypes.data, lda, y[i].ctypes.data, ldb, 0.0,
             out[i].ctypes.data, ldc)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_args_are_the_gemm_calls_numpy_makes(dtype):
    """The call ``matmul_args`` describes gives np.matmul's bits, for operands plain, transposed
    and read out of wider rows; None where numpy takes another path (syrk, a dimension of 1)."""
    rng = np.random.default_rng(0)
    wide = rng.standard_normal((2, 9, 40)).astype(dtype)
    a = wide[:, :, 3:10]                       # (2, 9, 7), rows 40 apart
    b = rng.standard_normal((2, 5, 7)).astype(dtype).swapaxes(-1, -2)   # (2, 7, 5) transposed
    c = rng.standard_normal((2, 7, 5)).astype(dtype)
    for x, y in [(a, b), (a, c), (b.swapaxes(-1, -2), a.swapaxes(-1, -2)[:, :, :5]),
                 (wide[:, :, :7], wide[:, :, 20:27].swapaxes(-1, -2))]:
        want = np.matmul(x, y)
        out = np.full_like(want, np.nan)
        args = blas.matmul_args(x, y, out)
        assert args is not None
        _call(dtype, args, x, y, out)
        assert out.tobytes() == want.tobytes()
    sq = wide[:, :, :7]
    assert blas.matmul_args(sq, sq.swapaxes(-1, -2), np.empty((2, 9, 9), dtype)) is None  # syrk
    assert blas.matmul_args(a[:, :1], c, np.empty((2, 1, 5), dtype)) is None
