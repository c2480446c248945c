"""The one configured numba decorator every kernel uses.

``kernel`` compiles lazily on first call and caches the machine code on disk (``cache=True``), so
``import tinyopt`` compiles nothing.  ``parallel_kernel`` adds ``parallel=True`` for kernels whose
``prange`` iteration ``i`` writes only element ``i``.  No ``fastmath``: NaN and inf must propagate
exactly as in PyTorch.  ``specialized`` makes one kernel per combination of compile-time options.

A parallel kernel uses numba's threads only when one of its arrays has at least
``PARALLEL_MIN_ELEMENTS`` elements (environment variable ``TINYOPT_PARALLEL_MIN``, default 2**22)
and otherwise runs a serial build on the calling thread.  Why: after a parallel region numba's OpenMP threads spin
for a while, and in a training step the next BLAS call (numpy's own thread pool) then fights them
for the cores.  Measured on 2 cores, one SGD-momentum training step of the 784-500-10 MLP at batch
32 took 8.5 ms with the 400k-parameter optimizer step parallel and 0.75 ms with it serial; the
CNN at batch 256, 54 ms against 33 ms with its 1.8M-element im2col serial.
"""

from __future__ import annotations

import functools
import os
import types

import numba
import numpy as np

# error_model="numpy": a float division by zero gives inf or NaN, as in numpy and PyTorch, instead
# of raising ZeroDivisionError, and the check it would need in every loop does not stop LLVM from
# vectorizing (Adam over 1e6 float32 in a serial build: 3.4 ms with the check, 0.45 ms without).
_OPTIONS = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")

PARALLEL_MIN_ELEMENTS = int(os.environ.get("TINYOPT_PARALLEL_MIN", 1 << 22))


def kernel(fn):
    """Compile ``fn`` with numba on first use (serial)."""
    return numba.njit(**_OPTIONS)(fn)


class _ParallelKernel:
    """A numba kernel compiled twice, on demand: with ``parallel=True`` for large work and without
    it (``prange`` runs as ``range``) for small work (see the module docstring).  Calling the serial
    build skips numba's thread pool altogether, which costs about 25 us a call when it is told to
    use one thread."""

    def __init__(self, fn, sized_by: int | None = None):
        self._sized_by = sized_by
        self._parallel = numba.njit(parallel=True, **_OPTIONS)(fn)
        # numba's disk cache keys a function by its qualified name and signature, not by the
        # parallel flag: the serial build must be a function of another name, or the two builds
        # overwrite each other's cache entries and load each other's code
        serial = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                    fn.__closure__)
        serial.__qualname__ = fn.__qualname__ + "_serial"
        self._serial = numba.njit(**_OPTIONS)(serial)
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        if self._sized_by is not None:
            if args[self._sized_by].size >= PARALLEL_MIN_ELEMENTS:
                return self._parallel(*args)
            return self._serial(*args)
        for a in args:
            if type(a) is np.ndarray and a.size >= PARALLEL_MIN_ELEMENTS:
                return self._parallel(*args)
        return self._serial(*args)


def parallel_kernel(fn=None, *, sized_by: int | None = None):
    """Compile ``fn`` with numba on first use, with ``prange`` loops run in parallel.

    ``sized_by=k``: argument ``k`` alone decides between the builds (the largest array; checking
    one argument instead of all of a dozen saves about 1 us a call).
    """
    if fn is None:
        return functools.partial(_ParallelKernel, sized_by=sized_by)
    return _ParallelKernel(fn, sized_by)


class _Specialized:
    def __init__(self, factory):
        self._make = functools.cache(factory)
        functools.update_wrapper(self, factory)

    def __getitem__(self, options):
        return self._make(*(options if isinstance(options, tuple) else (options,)))


def specialized(factory):
    """Turn ``factory(*options) -> kernel`` into ``kernels[options]``: one kernel per combination
    of compile-time options, made on first use and kept.

    The kernel reads the options as closure variables, which numba freezes as constants, so each
    combination compiles to loops without those branches.  Why: LLVM does not unswitch an inner loop
    on a runtime flag, and a load or store under such a flag keeps the loop from vectorizing
    (RMSprop over 1e7 float32 took 4.8-5.8 ms with runtime flags, 3.2-3.5 ms specialized).
    ``cache=True`` still applies: numba keys its on-disk cache on the closure values too.
    """
    return _Specialized(factory)


prange = numba.prange


def inline(fn):
    """Make ``fn`` callable from kernels, compiled into each caller at numba's IR level (as if its
    body were written there), with the caller's options.

    For small per-element functions a walker calls in its inner loop (``kernels/optim.py``): the
    inlined body vectorizes exactly as the hand-written loop did (Adam over 1e6 float32: same
    time, same ``vsqrtps``).  ``fn`` stays a plain Python function, so a kernel that holds it in a
    closure still hits numba's disk cache (a closure over a numba dispatcher does not: the
    dispatcher pickles with a per-process id, and every process would recompile).
    """
    from numba.extending import register_jitable

    register_jitable(inline="always")(fn)
    return fn


def subroutine(fn):
    """Make ``fn`` callable from kernels as a function of its own (compiled once per caller
    signature, not inlined), with the same disk-cache property as :func:`inline`."""
    from numba.extending import register_jitable

    register_jitable(fn)
    return fn


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
            built = numba.vectorize(self._signatures, cache=True)(self._fn)
            # every loop is compiled up front, so call numpy's ufunc itself: numba's DUFunc
            # wrapper adds about 1 us a call, which small graphs pay on every op
            self._ufunc = getattr(built, "ufunc", built)
        return self._ufunc(*args, **kwargs)


def ufunc(*signatures: str):
    """Make a scalar function an elementwise kernel: a numpy ufunc (broadcasting, ``out=``) compiled
    by numba for the given signatures on first use, with ``cache=True``."""
    def wrap(fn):
        return _LazyUfunc(fn, list(signatures))
    return wrap
