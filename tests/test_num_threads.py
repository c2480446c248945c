"""``set_num_threads``/``get_num_threads`` (``tinyopt.kernels.num_threads``)."""

from __future__ import annotations

import threading

import numba
import pytest

import tinyopt as to


def test_set_num_threads_sets_numba_and_blas_counts():
    from tinyopt.kernels.native import blas
    get_blas = blas._openblas_function("openblas_get_num_threads",
                                       "scipy_openblas_get_num_threads64_",
                                       "scipy_openblas_get_num_threads")
    before = to.get_num_threads()
    try:
        to.set_num_threads(1)
        assert to.get_num_threads() == 1 == numba.get_num_threads()
        if get_blas is not None:
            assert get_blas() == 1
        to.set_num_threads(10_000)  # more than the pool: all of it
        assert to.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        to.set_num_threads(before)


def test_errors_match_torch():
    with pytest.raises(RuntimeError, match="set_num_threads expects a positive integer"):
        to.set_num_threads(0)
    with pytest.raises(RuntimeError, match="set_num_threads expects an int, but got float"):
        to.set_num_threads(1.5)


def test_count_is_per_thread_for_numba():
    seen = []
    before = to.get_num_threads()
    t = threading.Thread(target=lambda: (to.set_num_threads(1), seen.append(to.get_num_threads()),
                                         to.set_num_threads(before)))  # (BLAS's is global)
    t.start()
    t.join()
    assert seen == [1] and to.get_num_threads() == before
