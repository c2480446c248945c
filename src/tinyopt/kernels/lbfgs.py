"""L-BFGS's vector algebra (``optim/lbfgs.py``): in-place ``y <- y + a x`` fused with the dot
product the two-loop recursion takes next, so each step of the recursion is one pass over its
vectors with no temporary.

Arrays: 1-d, C-contiguous, all of one float dtype (float32 or float64); scalars ``a`` of that
dtype (a numpy scalar, so the products round as numpy's ``y += a * x``: numba does not contract
``y + a x`` into a fused multiply-add, so every element is rounded twice, as numpy's are).

Dot products (:func:`dot` and the ``*_dot`` kernels) have one fixed summation order, whatever the
machine's threads, so their results are reproducible bit for bit (``tests/test_lbfgs.py`` has a
numpy replica): the products ``x_i y_i`` are formed in float64 (exact for float32 inputs) and
summed in float64 over chunks of ``CHUNK`` elements.  In a chunk, 32 lanes: lane ``k`` adds, for
every group of four consecutive rows of 32 elements, ``(p_{r,k} + p_{r+1,k}) + (p_{r+2,k} +
p_{r+3,k})``, then the remaining full rows one at a time, then the chunk's partial last row (into
its first lanes); the lanes are then halved pairwise (``k += k + 16``, ``8``, ``4``, ``2``, ``1``);
the chunks' sums are added in order, from 0.  The kernels return that float64 sum (the caller
rounds it to the vectors' dtype, as a BLAS dot of that dtype returns).  Why not BLAS's dot:
its order changes with its kernels and threads, and with it ``y += a x`` costs a second pass
over ``y`` and a temporary (numpy) — L-BFGS over 1e6 float32 spent 22 of 26 ms a step there.

Every kernel is one walker (:func:`_walker`) around its element update: per chunk, per block of
``_BLOCK`` elements, the update, then the block folded into the chunk's sums.  The chunks run in
parallel (numba ``prange``: chunk ``c`` writes only its own elements and ``part[c]``) from
``PARALLEL_CHUNKS`` chunks on; the parts are added in chunk order on the host.  (A parallel
region per call, not a hand-off to ``kernels.chunk_threads``' Python threads: numba's threads stay
awake between the recursion's back-to-back calls, a worker is woken each time -- at 1e6 float32
0.71 against 0.93 ms per ``axpy_dot``, torch's ``add_`` plus ``dot`` 0.72 ms.)
"""

from __future__ import annotations

import numba
import numpy as np

from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized

LANES = 32
"""Partial sums per chunk (the lane count of the summation order above)."""
CHUNK = 1 << 16
"""Elements per chunk of the summation order (a multiple of ``4 * LANES``)."""
_BLOCK = 2048
"""Elements updated, then folded into the dot, at a time (a multiple of ``4 * LANES``: the
update's results are still in L1 when the fold reads them; the order does not depend on it)."""
PARALLEL_CHUNKS = 4
"""From this many chunks on, the chunks run in parallel (when there are several threads)."""


@inline
def _fold(x, y, acc):
    """``acc[k] += ...``: the products ``x * y`` added into the lanes in the order of the module
    docstring (``x``, ``y``: views starting at a row boundary of their chunk; only the chunk's
    last call may end with a partial row or group).  (Views, not offsets: numba's index
    wraparound check cannot be proven away for ``lo + k`` and keeps the loop scalar.)"""
    n = x.shape[0]
    groups = n // (4 * LANES)
    for r in range(groups):
        j = r * (4 * LANES)
        for k in range(LANES):
            acc[k] += ((np.float64(x[j + k]) * np.float64(y[j + k])
                        + np.float64(x[j + LANES + k]) * np.float64(y[j + LANES + k]))
                       + (np.float64(x[j + 2 * LANES + k]) * np.float64(y[j + 2 * LANES + k])
                          + np.float64(x[j + 3 * LANES + k]) * np.float64(y[j + 3 * LANES + k])))
    rows = n // LANES
    for r in range(groups * 4, rows):
        j = r * LANES
        for k in range(LANES):
            acc[k] += np.float64(x[j + k]) * np.float64(y[j + k])
    j = rows * LANES
    for k in range(n - j):
        acc[k] += np.float64(x[j + k]) * np.float64(y[j + k])


@inline
def _lanes_sum(acc):
    """The lanes halved pairwise into ``acc[0]``, which is returned."""
    h = LANES // 2
    while h >= 1:
        for k in range(h):
            acc[k] += acc[k + h]
        h //= 2
    return acc[0]


DOT, AXPY, AXPY_DOT, SCALE_DOT, NEGATE_DOT, PAIR = range(6)
"""The walker's operations (see :func:`_walker`)."""


@inline
def _add_scaled(i, v0, v1, v2, v3, v4, a):  # y += a x  (y: v1, x: v2)
    v1[i] += a * v2[i]


@inline
def _scale(i, v0, v1, v2, v3, v4, a):  # y <- a y
    v1[i] = v1[i] * a


@inline
def _negated(i, v0, v1, v2, v3, v4, a):  # q <- -g  (q: v1, g: v2)
    v1[i] = -v2[i]


@inline
def _pair(i, v0, v1, v2, v3, v4, a):  # y <- g - g_prev, s <- d t, g_prev <- g
    v1[i] = v2[i] - v3[i]
    v0[i] = v4[i] * a
    v3[i] = v2[i]


@parallel_kernel
def _walker(op, v0, v1, v2, v3, v4, a, part):
    """Operation ``op`` over the ``n = len(v1)`` elements: per chunk, per block, the element
    update (none for ``DOT``; ``_add_scaled`` for ``AXPY`` and ``AXPY_DOT``; ``_scale``,
    ``_negated``, ``_pair``), then, except for ``AXPY``, the block's products ``v0 v1`` (after
    the update) folded into chunk ``c``'s sum, ``part[c]``, and for ``PAIR`` also ``v1 v1``
    into ``part[chunks + c]``.  Slots an operation does not use may be any array of the dtype
    (never read).  One kernel for all (the branch is taken per block, outside the vectorized
    loops): six of them took three times as long to compile cold."""
    n = v1.shape[0]
    chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(chunks):
        acc = np.zeros(LANES)
        acc2 = np.zeros(LANES)
        end = min(n, c * CHUNK + CHUNK)
        for b in range(c * CHUNK, end, _BLOCK):
            e = min(end, b + _BLOCK)
            b0, b1, b2, b3, b4 = v0[b:e], v1[b:e], v2[b:e], v3[b:e], v4[b:e]
            if op == AXPY or op == AXPY_DOT:
                for i in range(e - b):
                    _add_scaled(i, b0, b1, b2, b3, b4, a)
            elif op == SCALE_DOT:
                for i in range(e - b):
                    _scale(i, b0, b1, b2, b3, b4, a)
            elif op == NEGATE_DOT:
                for i in range(e - b):
                    _negated(i, b0, b1, b2, b3, b4, a)
            elif op == PAIR:
                for i in range(e - b):
                    _pair(i, b0, b1, b2, b3, b4, a)
            if op != AXPY:
                _fold(b0, b1, acc)
            if op == PAIR:
                _fold(b1, b1, acc2)
        if op != AXPY:
            part[c] = _lanes_sum(acc)
        if op == PAIR:
            part[chunks + c] = _lanes_sum(acc2)


def _threads() -> int:
    """numba's threads (``NUMBA_NUM_THREADS``), as for every parallel kernel: with one, the
    serial build (a parallel region on one thread costs ~25 us more)."""
    return numba.config.NUMBA_NUM_THREADS


def _chunked(op, v0, v1, v2, v3, v4, a, sums: int = 1) -> list[float]:
    """Run ``op`` over ``v1``'s chunks (in parallel from ``PARALLEL_CHUNKS`` chunks on, with
    several threads) and return each of its ``sums`` sums, the parts added in chunk order."""
    chunks = -(-v1.shape[0] // CHUNK)
    part = np.zeros(sums * chunks)
    if chunks < PARALLEL_CHUNKS or _threads() == 1:
        _walker.serial(op, v0, v1, v2, v3, v4, a, part)
    else:
        _walker.parallel(op, v0, v1, v2, v3, v4, a, part)
    totals = []
    for k in range(sums):
        total = 0.0
        for v in part[k * chunks:(k + 1) * chunks].tolist():
            total += v
        totals.append(total)
    return totals


def dot(x: np.ndarray, y: np.ndarray) -> float:
    """``sum_i x_i y_i`` in the order of the module docstring (float64)."""
    return _chunked(DOT, x, y, y, y, y, y.dtype.type(0))[0]


def axpy(y: np.ndarray, a, x: np.ndarray) -> None:
    """``y <- y + a x`` (as numpy's ``y += a * x``: two roundings per element)."""
    _chunked(AXPY, y, y, x, y, y, a, sums=0)


def axpy_dot(y: np.ndarray, a, x: np.ndarray, z: np.ndarray) -> float:
    """``y <- y + a x``, then ``z . y`` (the new ``y``)."""
    return _chunked(AXPY_DOT, z, y, x, y, y, a)[0]


def scale_dot(y: np.ndarray, a, z: np.ndarray) -> float:
    """``y <- a y``, then ``z . y``."""
    return _chunked(SCALE_DOT, z, y, y, y, y, a)[0]


def negate_dot(g: np.ndarray, q: np.ndarray, z: np.ndarray) -> float:
    """``q <- -g``, then ``z . q``."""
    return _chunked(NEGATE_DOT, z, q, g, q, q, q.dtype.type(0))[0]


def curvature_pair(g: np.ndarray, g_prev: np.ndarray, d: np.ndarray, t, y: np.ndarray,
                   s: np.ndarray) -> tuple[float, float]:
    """L-BFGS's new pair: ``y <- g - g_prev``, ``s <- t d``, ``g_prev <- g``; returns
    ``(y . s, y . y)`` (``s y`` is ``y s`` exactly: a product rounds the same both ways)."""
    ys, yy = _chunked(PAIR, s, y, g, g_prev, d, t, sums=2)
    return ys, yy


_UNSIGNED = {4: np.uint32, 8: np.uint64}


@specialized
def _abs_max_bits(width: int):
    """``kernel(bits, part)``: ``part[c]``, the largest ``bits & mask`` (the sign bit cleared)
    of chunk ``c`` of the ``width``-byte patterns ``bits`` (the mask and 0 are constants of the
    pattern type, so the max stays in it and vectorizes)."""
    u = _UNSIGNED[width]
    mask, zero = u(np.iinfo(u).max >> 1), u(0)

    def kernel(bits, part):
        n = bits.shape[0]
        chunks = (n + CHUNK - 1) // CHUNK
        for c in prange(chunks):
            xs = bits[c * CHUNK:min(n, c * CHUNK + CHUNK)]
            best = zero
            for i in range(xs.shape[0]):
                best = max(best, xs[i] & mask)
            part[c] = best

    kernel.__name__ = kernel.__qualname__ = f"lbfgs_abs_max_bits{width}"
    return parallel_kernel(kernel)


def abs_max(x: np.ndarray):
    """``max_i |x_i|`` in ``x``'s dtype (0 for an empty ``x``; NaN if any element is NaN), as
    numpy's ``np.abs(x).max(initial=0)``: the largest bit pattern with the sign bit cleared
    (IEEE floats of one sign order as their bit patterns, and every NaN's lies above inf's)."""
    u = _UNSIGNED[x.dtype.itemsize]
    chunks = -(-x.shape[0] // CHUNK)
    part = np.zeros(chunks, u)
    kernel = _abs_max_bits[x.dtype.itemsize]
    if chunks < PARALLEL_CHUNKS or _threads() == 1:
        kernel.serial(x.view(u), part)
    else:
        kernel.parallel(x.view(u), part)
    return np.array(part.max(initial=0), u).view(x.dtype)[()]
