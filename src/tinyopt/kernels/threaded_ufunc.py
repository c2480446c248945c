"""Elementwise kernels whose large calls run in chunks on the shared threads.

``threaded_ufunc(*signatures)`` makes a scalar function an elementwise kernel as
``kernels.jit.ufunc`` does, and more: a call (or a plan's bound call, ``.bound``) whose operands
are all C-contiguous arrays of ``out``'s shape and dtype (float32 or float64) with at least
``MIN_ELEMENTS`` elements runs the scalar function over chunks of ``CHUNK`` elements on the
OpenMP threads that numpy's BLAS shares (``native/shared_threads.chunk_runner``), or as one
chunk where those threads are not shared (one thread, a forked child).  A chunk writes only its
own elements, with the same scalar function on the same types as the ufunc's loops, so the
values are those of the ufunc whatever the threads do.  Other calls are the ufunc's.

In place (``out`` one of the inputs, as a plan makes a gradient over its incoming gradient's
buffer) the chunk function reads that input through ``out`` itself: with two pointers to the
same memory, LLVM's runtime overlap check sent the loop to its scalar version (the tiny GPT's
GELU gradient, 393k float32: 3.4 ms instead of 0.5).

For kernels that are worth it: transcendental ones (GELU), whose arithmetic, not memory, bounds
them.  (A plain add is bound by memory, and its chunk function would be one more cold compile.)
"""

from __future__ import annotations

import functools

import numpy as np

from tinyopt.kernels.jit import c_callback, inline, specialized, ufunc
from tinyopt.kernels.native import blas, shared_threads
from tinyopt.kernels.native.address import carray

CHUNK = 1 << 14
"""Elements a chunk on the threads (64 KiB of float32: tens of us of a transcendental
function)."""

MIN_ELEMENTS = 1 << 15
"""Calls with fewer elements are the ufunc's (a parallel region costs a few us)."""


@specialized
def _chunks(fn, arity: int, single: bool, alias: int):
    """A C function ``void chunk(int64 c, int64 *args)``: out[i] = fn(in_0[i], ...) for the
    elements i of chunk c, args = [n, elements a chunk, address of out, addresses of the
    ``arity`` inputs], all 1-d C-contiguous of n elements (float32 if ``single``, else
    float64); input ``alias`` (0 or 1; -1: none) is ``out`` itself and read through it."""
    f = inline(fn)
    dt = np.float32 if single else np.float64
    size = np.dtype(dt).itemsize

    # (the chunk's own arrays, indexed from 0: a loop from c * chunk over whole arrays indexes
    # with values numba cannot prove non-negative, and its wraparound made LLVM gather and
    # scatter: 4 ms instead of 0.45 for 393k GELUs)
    @inline
    def part(a, k, lo, m):
        return carray(blas.pointer(a[k] + lo * size, dt(0.0)), (m,))

    if arity == 1:
        def chunk1(c, argp):
            a = carray(argp, (4,))
            lo = c * a[1]
            m = min(a[0] - lo, a[1])
            out = part(a, 2, lo, m)
            x = out if alias == 0 else part(a, 3, lo, m)
            for i in range(m):
                out[i] = f(x[i])
        return c_callback(chunk1, "void(int64, CPointer(int64))")

    def chunk2(c, argp):
        a = carray(argp, (5,))
        lo = c * a[1]
        m = min(a[0] - lo, a[1])
        out = part(a, 2, lo, m)
        x = out if alias == 0 else part(a, 3, lo, m)
        y = out if alias == 1 else part(a, 4, lo, m)
        for i in range(m):
            out[i] = f(x[i], y[i])
    return c_callback(chunk2, "void(int64, CPointer(int64))")


class _ThreadedUfunc:
    """A ``kernels.jit.ufunc`` whose large contiguous calls run in chunks (module docstring)."""

    def __init__(self, fn, signatures: tuple[str, ...]):
        self._fn = fn
        self._ufunc = ufunc(*signatures)(fn)
        self._arity = fn.__code__.co_argcount
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def _call(self, out: np.ndarray, ins: tuple) -> tuple | None:
        """``(run, chunk function address, chunks, argument block)`` for these arrays, or None
        where the call is the ufunc's."""
        if (type(out) is not np.ndarray or out.size < MIN_ELEMENTS or len(ins) != self._arity
                or out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous):
            return None
        alias = -1
        for k, a in enumerate(ins):
            if (type(a) is not np.ndarray or a.dtype != out.dtype or a.shape != out.shape
                    or not a.flags.c_contiguous):
                return None
            if a.ctypes.data == out.ctypes.data:
                alias = k
            elif np.may_share_memory(a, out):  # (contiguous, of one size: a shifted view)
                return None
        run = shared_threads.chunk_runner()
        chunk = CHUNK if run.parallel else out.size
        fn = _chunks[self._fn, self._arity, out.dtype == np.float32, alias]
        block = np.array([out.size, chunk, out.ctypes.data] + [a.ctypes.data for a in ins],
                         np.int64)
        return run, fn.address, -(-out.size // chunk), block

    def __call__(self, *args, out=None):
        if out is not None:
            call = self._call(out, args)
            if call is not None:
                _run_chunks(*call, ())
                return out
        return self._ufunc(*args, out=out)

    def bound(self, out: np.ndarray, *ins: np.ndarray):
        """``self(*ins, out=out)`` for these very arrays as a call made once (a plan binds its
        fixed arrays so), or None where the ufunc's ``bound`` gives None."""
        call = self._call(out, ins)
        if call is None:
            return self._ufunc.bound(out, *ins)
        return functools.partial(_run_chunks, *call, (out, *ins))


def _run_chunks(run, address: int, chunks: int, block: np.ndarray, keep: tuple) -> None:
    """The chunks of the call whose argument block is ``block``; ``keep``: the arrays whose
    addresses it holds, kept alive with a bound call."""
    run(address, chunks, block.ctypes.data)


def threaded_ufunc(*signatures: str):
    """Make a scalar function of one or two arguments an elementwise kernel whose large calls run
    on the shared threads (module docstring)."""
    def wrap(fn):
        return _ThreadedUfunc(fn, signatures)
    return wrap
