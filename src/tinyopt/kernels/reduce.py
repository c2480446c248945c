"""Reductions along one axis, written over a 3-D view ``x[a, r, b]`` of a C-contiguous array.

Any reduction over a run of consecutive dimensions of a contiguous array is one of these: ``a``
spans the dimensions before the run, ``r`` the run, ``b`` the dimensions after it.  Outputs are
``out[a, b]`` (or ``out[a, r, b]`` for softmax).  float32 and float64; reductions over a contiguous
run (``b == 1``) accumulate in float64.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.jit import kernel


@kernel(nrt=False)
def sum_axis(x, out):
    """out[a, b] = sum_r x[a, r, b] for B > 1 (in r order from 0, in out's dtype).  A sum over
    a contiguous run (B == 1) is :func:`sum_rows`'s, and raises here: pick the kernel with
    :func:`sum_kernel`.  Two kernels, not two branches of one: numba compiled both loop nests
    into every caller's first step, which uses one (cold compile 0.17-0.19 -> ~0.11 s of CPU;
    every sum of the GPT's, LSTM's and MLP's first steps has B > 1)."""
    A, R, B = x.shape
    if B == 1:
        raise ValueError("sum_axis: a sum over a contiguous run (B == 1) is sum_rows's")
    for a in range(A):
        for b in range(B):
            out[a, b] = 0
        for r in range(R):
            for b in range(B):
                out[a, b] += x[a, r, b]


@kernel(nrt=False)
def sum_rows(x, out):
    """out[a, 0] = sum_r x[a, r, 0] (B == 1), in float64: four partial sums over r = 0, 1, 2, 3
    (mod 4), the last R % 4 elements into the first, combined as (s0 + s1) + (s2 + s3)
    (independent add chains run four times faster than one)."""
    A, R, B = x.shape
    if B != 1:
        raise ValueError("sum_rows: x must be (A, R, 1)")
    for a in range(A):
        a0 = a1 = a2 = a3 = 0.0
        r4 = R - R % 4
        for r in range(0, r4, 4):
            a0 += x[a, r, 0]
            a1 += x[a, r + 1, 0]
            a2 += x[a, r + 2, 0]
            a3 += x[a, r + 3, 0]
        for r in range(r4, R):
            a0 += x[a, r, 0]
        out[a, 0] = (a0 + a1) + (a2 + a3)


def sum_kernel(B: int):
    """The kernel summing x[a, r, b] over r into out[a, b] (C-contiguous views): :func:`sum_rows`
    for B == 1, else :func:`sum_axis`."""
    return sum_rows if B == 1 else sum_axis


@kernel
def extreme_axis(x, out, idx, largest):
    """out[a, b] = max_r x[a, r, b] (min_r when not ``largest``) and idx[a, b] its first
    arg r; NaN wins, as in PyTorch."""
    A, R, B = x.shape
    for a in range(A):
        for b in range(B):
            best = x[a, 0, b]
            k = 0
            if best == best:
                for r in range(1, R):
                    v = x[a, r, b]
                    if v != v:
                        best = v
                        k = r
                        break
                    if (v > best) if largest else (v < best):
                        best = v
                        k = r
            out[a, b] = best
            idx[a, b] = k


@kernel
def scatter_axis(g, idx, out):
    """The gradient of a max/min along r: out[a, r, b] = g[a, b] where r == idx[a, b], else 0."""
    A, R, B = out.shape
    for a in range(A):
        for r in range(R):
            for b in range(B):
                out[a, r, b] = 0
        for b in range(B):
            out[a, idx[a, b], b] = g[a, b]


@kernel
def _column_max(x, a, b):
    """max_r x[a, r, b], NaN if any element is NaN."""
    m = -np.inf
    for r in range(x.shape[1]):
        v = x[a, r, b]
        if v > m or v != v:
            m = v
    return m


@kernel
def _column_logsumexp(x, a, b):
    """m + log sum_r exp(x[a, r, b] - m), m = max_r x (stable; +-inf and NaN maxima returned as
    they are)."""
    m = _column_max(x, a, b)
    if m == -np.inf or m == np.inf or m != m:
        return m
    acc = 0.0
    for r in range(x.shape[1]):
        acc += math.exp(x[a, r, b] - m)
    return m + math.log(acc)


@kernel
def logsumexp_axis(x, out):
    """out[a, b] = logsumexp_r x[a, r, b]."""
    A, R, B = x.shape
    for a in range(A):
        for b in range(B):
            out[a, b] = _column_logsumexp(x, a, b)


@kernel
def softmax_axis(x, out):
    """out[a, r, b] = exp(x[a, r, b] - m) / sum_r' exp(x[a, r', b] - m), m = max_r x."""
    A, R, B = x.shape
    for a in range(A):
        for b in range(B):
            m = _column_max(x, a, b)
            acc = 0.0
            for r in range(R):
                e = math.exp(x[a, r, b] - m)
                out[a, r, b] = e
                acc += e
            inv = 1.0 / acc
            for r in range(R):
                out[a, r, b] *= inv


@kernel
def log_softmax_axis(x, out):
    """out[a, r, b] = x[a, r, b] - logsumexp_r x[a, :, b]."""
    A, R, B = x.shape
    for a in range(A):
        for b in range(B):
            # not _column_logsumexp: PyTorch's log_softmax of a row holding +inf is all NaN
            m = _column_max(x, a, b)
            acc = 0.0
            for r in range(R):
                acc += math.exp(x[a, r, b] - m)
            lse = m + math.log(acc)
            for r in range(R):
                out[a, r, b] = x[a, r, b] - lse


@kernel
def softmax_axis_grad(g, y, out):
    """Backward of softmax along r: out = y * (g - sum_r g * y)."""
    A, R, B = y.shape
    for a in range(A):
        for b in range(B):
            acc = 0.0
            for r in range(R):
                acc += g[a, r, b] * y[a, r, b]
            for r in range(R):
                out[a, r, b] = y[a, r, b] * (g[a, r, b] - acc)


@kernel
def log_softmax_axis_grad(g, y, out):
    """Backward of log_softmax along r: out = g - exp(y) * sum_r g."""
    A, R, B = y.shape
    for a in range(A):
        for b in range(B):
            acc = 0.0
            for r in range(R):
                acc += g[a, r, b]
            for r in range(R):
                out[a, r, b] = g[a, r, b] - math.exp(y[a, r, b]) * acc
