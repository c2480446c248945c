"""The one configured numba decorator every kernel uses.

``kernel`` compiles lazily on first call and caches the machine code on disk (``cache=True``), so
``import tinyopt`` compiles nothing.  ``parallel_kernel`` adds ``parallel=True`` for kernels whose
``prange`` iteration ``i`` writes only element ``i``.  No ``fastmath``: NaN and inf must propagate
exactly as in PyTorch.
"""

from __future__ import annotations

import numba

_OPTIONS = dict(cache=True, nogil=True, fastmath=False)


def kernel(fn):
    """Compile ``fn`` with numba on first use (serial)."""
    return numba.njit(**_OPTIONS)(fn)


def parallel_kernel(fn):
    """Compile ``fn`` with numba on first use, with ``prange`` loops run in parallel."""
    return numba.njit(parallel=True, **_OPTIONS)(fn)


prange = numba.prange
