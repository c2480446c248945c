"""kernels/blas.py: single_threaded() sets this thread's OpenBLAS thread count to 1 and restores
it, also when the block raises; GEMMs inside give the same results."""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt.kernels import blas


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


def test_results_are_unchanged():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((20, 200)), rng.standard_normal((200, 800))
    want = a @ b
    with blas.single_threaded():
        np.testing.assert_allclose(a @ b, want, rtol=1e-13)
