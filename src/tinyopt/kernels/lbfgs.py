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
"""

from __future__ import annotations

import numpy as np

from tinyopt.kernels import workers
from tinyopt.kernels.jit import inline, kernel

LANES = 32
"""Partial sums per chunk (the lane count of the summation order above)."""
CHUNK = 1 << 16
"""Elements per chunk of the summation order (a multiple of ``4 * LANES``)."""
_BLOCK = 2048
"""Elements updated, then folded into the dot, at a time (a multiple of ``4 * LANES``: the
update's results are still in L1 when the fold reads them; the order does not depend on it)."""
PARALLEL_CHUNKS = 4
"""From this many chunks on, the chunks are spread over ``kernels.workers``' threads."""


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
    """The lanes halved pairwise into ``acc[0]``, which is returned (``acc`` is then reset)."""
    h = LANES // 2
    while h >= 1:
        for k in range(h):
            acc[k] += acc[k + h]
        h //= 2
    s = acc[0]
    for k in range(LANES):
        acc[k] = 0.0
    return s


# Each kernel below does chunks ``c0 <= c < c1`` (of ``CHUNK`` elements) and writes chunk ``c``'s
# sum to ``part[c]``: the functions at the end run all chunks in one call, or split them over the
# worker threads, and add the parts in order -- the same numbers either way.

@kernel
def _dot(x, y, part, c0, c1):
    acc = np.zeros(LANES)
    for c in range(c0, c1):
        lo = c * CHUNK
        _fold(x[lo:lo + CHUNK], y[lo:lo + CHUNK], acc)
        part[c] = _lanes_sum(acc)


@kernel
def _axpy(y, a, x, part, c0, c1):
    lo, hi = c0 * CHUNK, min(y.shape[0], c1 * CHUNK)
    yc, xc = y[lo:hi], x[lo:hi]
    for i in range(hi - lo):
        yc[i] += a * xc[i]


@kernel
def _axpy_dot(y, a, x, z, part, c0, c1):
    n = y.shape[0]
    acc = np.zeros(LANES)
    for c in range(c0, c1):
        end = min(n, c * CHUNK + CHUNK)
        for b in range(c * CHUNK, end, _BLOCK):
            e = min(end, b + _BLOCK)
            yb, xb = y[b:e], x[b:e]
            for i in range(e - b):
                yb[i] += a * xb[i]
            _fold(z[b:e], yb, acc)
        part[c] = _lanes_sum(acc)


@kernel
def _scale_dot(y, a, z, part, c0, c1):
    n = y.shape[0]
    acc = np.zeros(LANES)
    for c in range(c0, c1):
        end = min(n, c * CHUNK + CHUNK)
        for b in range(c * CHUNK, end, _BLOCK):
            e = min(end, b + _BLOCK)
            yb = y[b:e]
            for i in range(e - b):
                yb[i] = yb[i] * a
            _fold(z[b:e], yb, acc)
        part[c] = _lanes_sum(acc)


@kernel
def _negate_dot(g, q, z, part, c0, c1):
    n = q.shape[0]
    acc = np.zeros(LANES)
    for c in range(c0, c1):
        end = min(n, c * CHUNK + CHUNK)
        for b in range(c * CHUNK, end, _BLOCK):
            e = min(end, b + _BLOCK)
            qb, gb = q[b:e], g[b:e]
            for i in range(e - b):
                qb[i] = -gb[i]
            _fold(z[b:e], qb, acc)
        part[c] = _lanes_sum(acc)


@kernel
def _curvature_pair(g, g_prev, d, t, y, s, part, c0, c1):
    n = g.shape[0]
    acc = np.zeros(LANES)
    acc2 = np.zeros(LANES)
    for c in range(c0, c1):
        end = min(n, c * CHUNK + CHUNK)
        for b in range(c * CHUNK, end, _BLOCK):
            e = min(end, b + _BLOCK)
            yb, sb, gb, pb, db = y[b:e], s[b:e], g[b:e], g_prev[b:e], d[b:e]
            for i in range(e - b):
                yb[i] = gb[i] - pb[i]
                sb[i] = db[i] * t
                pb[i] = gb[i]
            _fold(yb, sb, acc)
            _fold(yb, yb, acc2)
        part[c] = _lanes_sum(acc)
        part[part.shape[0] // 2 + c] = _lanes_sum(acc2)  # (y'y: the second half)


def _chunked(fn, n: int, *args, sums: int = 1) -> list[float]:
    """Run ``fn(*args, part, c0, c1)`` over the chunks of ``n`` elements (on the worker threads
    when there are several chunks) and return each of its ``sums`` sums, the parts added in
    chunk order."""
    chunks = -(-n // CHUNK)
    part = np.zeros(sums * chunks)
    if chunks < PARALLEL_CHUNKS or workers.num_threads() == 1:
        fn(*args, part, 0, chunks)
    else:
        workers.run_chunks(lambda c: fn(*args, part, c, c + 1), chunks)
    totals = []
    for k in range(sums):
        total = 0.0
        for v in part[k * chunks:(k + 1) * chunks].tolist():
            total += v
        totals.append(total)
    return totals


def dot(x: np.ndarray, y: np.ndarray) -> float:
    """``sum_i x_i y_i`` in the order of the module docstring (float64)."""
    return _chunked(_dot, x.shape[0], x, y)[0]


def axpy(y: np.ndarray, a, x: np.ndarray) -> None:
    """``y <- y + a x`` (as numpy's ``y += a * x``: two roundings per element)."""
    _chunked(_axpy, y.shape[0], y, a, x, sums=0)


def axpy_dot(y: np.ndarray, a, x: np.ndarray, z: np.ndarray) -> float:
    """``y <- y + a x``, then ``z . y`` (the new ``y``)."""
    return _chunked(_axpy_dot, y.shape[0], y, a, x, z)[0]


def scale_dot(y: np.ndarray, a, z: np.ndarray) -> float:
    """``y <- a y``, then ``z . y``."""
    return _chunked(_scale_dot, y.shape[0], y, a, z)[0]


def negate_dot(g: np.ndarray, q: np.ndarray, z: np.ndarray) -> float:
    """``q <- -g``, then ``z . q``."""
    return _chunked(_negate_dot, q.shape[0], g, q, z)[0]


def curvature_pair(g: np.ndarray, g_prev: np.ndarray, d: np.ndarray, t, y: np.ndarray,
                   s: np.ndarray) -> tuple[float, float]:
    """L-BFGS's new pair: ``y <- g - g_prev``, ``s <- t d``, ``g_prev <- g``; returns
    ``(y . s, y . y)``."""
    ys, yy = _chunked(_curvature_pair, g.shape[0], g, g_prev, d, t, y, s, sums=2)
    return ys, yy


@kernel
def abs_max(x):
    """``max_i |x_i|`` in ``x``'s dtype (0 for an empty ``x``; NaN if any element is NaN), as
    numpy's ``np.abs(x).max(initial=0)``."""
    m = np.zeros(LANES, x.dtype)
    n = x.shape[0]
    rows = n // LANES
    for r in range(rows):
        j = r * LANES
        for k in range(LANES):
            v = abs(x[j + k])
            m[k] = v if (v > m[k]) | (v != v) else m[k]  # a NaN, once taken, stays
    j = rows * LANES
    for k in range(n - j):
        v = abs(x[j + k])
        m[k] = v if (v > m[k]) | (v != v) else m[k]
    best = m[0]
    for k in range(1, LANES):
        best = m[k] if (m[k] > best) | (m[k] != m[k]) else best
    return best
