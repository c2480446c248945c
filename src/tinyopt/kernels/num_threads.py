"""``torch.set_num_threads``/``get_num_threads``: how many threads the parallel kernels and
numpy's BLAS use.

``set_num_threads(n)`` sets numba's count (``numba.set_num_threads``: the ``prange`` kernels) and
the count of the OpenBLAS numpy loaded (``openblas_set_num_threads``: every matmul), as PyTorch's
sets its one intra-op pool.  numba's pool is made once, at ``NUMBA_NUM_THREADS`` threads (the core
count unless that environment variable says otherwise), so ``n`` above it means all of them, for
both (more threads than cores only wait for each other).  numba keeps its count per Python thread;
the BLAS count is the whole process's.  ``get_num_threads()`` is numba's count for the calling
thread.
"""

from __future__ import annotations

import builtins
import ctypes
import numbers

from tinyopt.kernels.native import blas

_BLAS_SET: list = []  # [openblas_set_num_threads or None], looked up on first use


def set_num_threads(int: int) -> None:  # noqa: A002 - torch's parameter name
    """Use ``int`` threads for the parallel kernels and BLAS (see the module docstring)."""
    if isinstance(int, bool) or not isinstance(int, numbers.Integral):
        raise RuntimeError(f"set_num_threads expects an int, but got {type(int).__name__}")
    if int <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    import numba
    n = min(builtins.int(int), numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(n)
    if not _BLAS_SET:
        fn = blas._openblas_function("openblas_set_num_threads",
                                     "scipy_openblas_set_num_threads64_",
                                     "scipy_openblas_set_num_threads")
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], None
        _BLAS_SET.append(fn)
    if _BLAS_SET[0] is not None:
        _BLAS_SET[0](n)


def get_num_threads() -> int:
    """The number of threads the parallel kernels of the calling thread use."""
    import numba
    return numba.get_num_threads()

