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


class _LazyUfunc:
    """A numba ufunc built on first call, so importing a kernel module compiles nothing."""

    def __init__(self, fn, signatures: list[str]):
        self._fn = fn
        self._signatures = signatures
        self._ufunc = None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        if self._ufunc is None:
            self._ufunc = numba.vectorize(self._signatures, cache=True)(self._fn)
        return self._ufunc(*args, **kwargs)


def ufunc(*signatures: str):
    """Make a scalar function an elementwise kernel: a numpy ufunc (broadcasting, ``out=``) compiled
    by numba for the given signatures on first use, with ``cache=True``."""
    def wrap(fn):
        return _LazyUfunc(fn, list(signatures))
    return wrap
