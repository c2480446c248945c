"""Loss kernels over rows of logits: cross-entropy (with class weights and label smoothing) and
negative log-likelihood, and their gradients.

Shapes: logits ``x`` (N, C) C-contiguous float32/float64, targets ``y`` (N,) int64, class weights
``w`` (C,).  Rows whose target equals ``ignore_index`` give zero loss and zero gradient.

Targets are user data, so every kernel that indexes with them checks each one where it reads it
(one comparison per row) and reports the first out of ``[0, C)`` in ``err`` (int64 (1,)): ``err[0]``
is its row, or -1 when all are in range.  The kernel stops at that row (its output is then
incomplete); the caller raises.  No path reaches an index unchecked, whatever built the targets.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tinyopt.kernels import blas
from tinyopt.kernels.jit import c_callback, inline, kernel, parallel_kernel, prange, specialized


# Rows of a large cross-entropy (a language model's 700 x 5000 logits: libm's exp twice per
# element, ~20 ms each way on one core) run in parallel from this many elements, where numpy's
# BLAS shares numba's threads (``kernels/shared_threads.py``); each row is computed alone and
# the 'mean' summed in row order after all of them, so threads change no bit.
PARALLEL_ROWS_MIN = 1 << 20


# The 'mean' reduction is folded into the row kernels (an optional output forward, an optional
# scalar gradient backward) instead of kernels of its own: each numba kernel costs its own cold
# compile, and the three it took (mean, its gradient and the weight sum both call) were ~0.6 s of
# CPU of a first training step.
@inline
def _exp_row(x, e, i):
    C = x.shape[1]
    if C != 0:
        m = x[i, 0]
        for c in range(1, C):
            if x[i, c] > m or x[i, c] != x[i, c]:
                m = x[i, c]
        for c in range(C):
            e[i, c] = math.exp(x[i, c] - m)


EXP_ARGS = 5


@specialized
def ce_exp(single: bool):
    """``ce_exp[single]``: a C function ``void chunk(int64 c, int64 *args)`` (float32 if
    ``single``, else float64), args = [address of x (N, C), of e (N, C), N, C, rows per chunk
    R], that computes e[i, c] = exp(x[i, c] - max_c x[i, c]) in x's dtype for the rows i of
    chunk c (rows c R .. c R + R - 1): the shifted exponentials a large cross-entropy's loss and
    gradient both read (``ce_rows[True]``, ``ce_rows_grad[True]``), computed once instead of
    once each way (libm's exp is most of their time).  Each row alone: the chunks run on the
    shared threads (``shared_threads.chunk_runner``) or, R = N, as one call; a parallel build
    (numba parfor) cost ~0.6 s more of a cold first step."""
    dt = np.float32 if single else np.float64

    def ce_exp_chunk(c, argp):
        args = numba.carray(argp, (EXP_ARGS,))
        N, C, R = args[2], args[3], args[4]
        x = numba.carray(blas.pointer(args[0], dt(0.0)), (N, C))
        e = numba.carray(blas.pointer(args[1], dt(0.0)), (N, C))
        for i in range(c * R, min(N, (c + 1) * R)):
            _exp_row(x, e, i)
    return c_callback(ce_exp_chunk, "void(int64, CPointer(int64))")


@specialized
def ce_rows(from_exp: bool):
    """``ce_rows[from_exp](x, y, w, ignore_index, eps, out, total, err, e)``: out[i] =
    (1-eps) w[y_i] (-log p_i[y_i]) + (eps/C) sum_c w_c (-log p_i[c]), p_i = softmax(x_i) (the
    label-smoothed, class-weighted cross-entropy of row i), each row alone (rows in parallel for
    large ``x``); ``from_exp``: the shifted exponentials are read from ``e`` (:func:`ce_exp`,
    the same values), else computed (``e`` unused).

    ``total`` (1,) gets the 'mean' reduction, as PyTorch's: sum_i out[i] / sum_i w[y_i] over rows
    not ignored (0/0 = NaN when every row is); ``total`` of shape (0,): no reduction.  A target
    out of range: nothing is computed (``err[0]`` its row).

    With ``from_exp`` a serial kernel: what is left (a max and a sum per row) is light, and a
    parallel build costs ~1.6 s of a cold first step against ~0.8 s (as ``ce_rows_grad``)."""
    build = kernel if from_exp else parallel_kernel(sized_by=0, shared_min=PARALLEL_ROWS_MIN)

    @build
    def ce_rows_kernel(x, y, w, ignore_index, eps, out, total, err, e):
        N, C = x.shape
        err[0] = _first_bad_target(y, C, ignore_index)
        if err[0] >= 0:
            return
        for i in prange(N):
            t = y[i]
            if t == ignore_index:
                out[i] = 0.0
            else:
                m = x[i, 0]
                for c in range(1, C):
                    if x[i, c] > m or x[i, c] != x[i, c]:
                        m = x[i, c]
                acc = 0.0
                if from_exp:
                    for c in range(C):
                        acc += e[i, c]
                else:
                    for c in range(C):
                        acc += math.exp(x[i, c] - m)
                lse = m + math.log(acc)
                loss = (1.0 - eps) * w[t] * (lse - x[i, t])
                if eps != 0.0:
                    smooth = 0.0
                    for c in range(C):
                        smooth += w[c] * (lse - x[i, c])
                    loss += eps / C * smooth
                out[i] = loss
        if total.shape[0] != 0:
            total[0] = _mean(out, _weight_sum(y, w, ignore_index, err))
    return ce_rows_kernel


@inline
def _first_bad_target(y, C, ignore_index):
    """The first row whose target is neither ``ignore_index`` nor in [0, C), or -1."""
    for i in range(y.shape[0]):
        t = y[i]
        if t != ignore_index and (t < 0 or t >= C):
            return i
    return -1


@inline
def _weight_sum(y, w, ignore_index, err):
    """sum_i w[y_i] over rows not ignored, in order in float64; err[0] = the first row whose
    target is out of range (the sum is then partial)."""
    C = w.shape[0]
    ws = 0.0
    for i in range(y.shape[0]):
        t = y[i]
        if t != ignore_index:
            if t < 0 or t >= C:
                err[0] = i
                return ws
            ws += w[t]
    return ws


@inline
def _mean(rows, wsum):
    """sum_i rows_i / wsum, summed in order in float64."""
    acc = 0.0
    for i in range(rows.shape[0]):
        acc += rows[i]
    return acc / wsum


@inline
def _mean_share(g, y, w, ignore_index, share, err):
    """The gradient of the 'mean' reduction reaching each row, g[0] / sum_i w[y_i] over rows not
    ignored, stored in ``share[0]`` (so rounded to its dtype, as a gradient array would be);
    False (err[0] its row) on a target out of range."""
    ws = _weight_sum(y, w, ignore_index, err)
    if err[0] >= 0:
        return False
    share[0] = g[0] / ws
    return True


@specialized
def ce_rows_grad(from_exp: bool):
    """``ce_rows_grad[from_exp](g, x, y, w, ignore_index, eps, share, out, err, e)``: d/dx of
    ce_rows times g: out[i, k] = g_i ((1-eps) w[y_i] (p_k - [k = y_i]) + (eps/C) (p_k sum_c w_c
    - w_k)); on an ignored row 0 p_k, as PyTorch's log_softmax backward (0 - p_k 0): NaN where
    p_k is (a NaN or +inf in the row), else 0; each row alone (rows in parallel for large
    ``x``); ``from_exp`` as in :func:`ce_rows` (then ``x`` is not read).

    ``share`` of shape (0,): ``g`` (N,) holds each row's g_i.  ``share`` (1,): ``g`` (1,) is
    the gradient of the 'mean' reduction, and every g_i its share (see ``_mean_share``).  A
    target out of range: nothing is computed (``err[0]`` its row).  With ``from_exp`` a serial
    kernel (see :func:`ce_rows`)."""
    build = kernel if from_exp else parallel_kernel(sized_by=7, shared_min=PARALLEL_ROWS_MIN)

    @build
    def ce_rows_grad_kernel(g, x, y, w, ignore_index, eps, share, out, err, e):
        N, C = out.shape
        err[0] = _first_bad_target(y, C, ignore_index)
        if err[0] >= 0:
            return
        mean = share.shape[0] != 0
        if mean and not _mean_share(g, y, w, ignore_index, share, err):
            return
        wsum = 0.0
        for c in range(C):
            wsum += w[c]
        for i in prange(N):
            if C != 0:  # (else an ignored row of no classes)
                t = y[i]
                acc = 0.0
                if from_exp:
                    for c in range(C):
                        ex = e[i, c]
                        out[i, c] = ex
                        acc += ex
                else:
                    m = x[i, 0]
                    for c in range(1, C):
                        if x[i, c] > m or x[i, c] != x[i, c]:
                            m = x[i, c]
                    for c in range(C):
                        ex = math.exp(x[i, c] - m)
                        out[i, c] = ex
                        acc += ex
                inv = 1.0 / acc
                if t == ignore_index:
                    for c in range(C):
                        out[i, c] = 0.0 * (out[i, c] * inv)
                else:
                    gi = share[0] if mean else g[i]
                    a = gi * (1.0 - eps) * w[t]
                    b = gi * eps / C
                    for c in range(C):
                        p = out[i, c] * inv
                        out[i, c] = a * p + b * (p * wsum - w[c])
                    out[i, t] -= a
    return ce_rows_grad_kernel


@kernel
def nll_rows(logp, y, w, ignore_index, out, total, err):
    """out[i] = -w[y_i] logp[i, y_i] (0 for ignored rows); ``total`` as in :func:`ce_rows`."""
    C = logp.shape[1]
    err[0] = -1
    wsum = 0.0
    for i in range(logp.shape[0]):
        t = y[i]
        if t == ignore_index:
            out[i] = 0.0
        elif t < 0 or t >= C:
            err[0] = i
            return
        else:
            wsum += w[t]
            out[i] = -w[t] * logp[i, t]
    if total.shape[0] != 0:
        total[0] = _mean(out, wsum)


@kernel
def nll_rows_grad(g, y, w, ignore_index, share, out, err):
    """out[i, c] = -g_i w[y_i] where c = y_i, else 0; ``share`` as in :func:`ce_rows_grad`."""
    N, C = out.shape
    err[0] = -1
    mean = share.shape[0] != 0
    if mean and not _mean_share(g, y, w, ignore_index, share, err):
        return
    for i in range(N):
        for c in range(C):
            out[i, c] = 0.0
        t = y[i]
        if t == ignore_index:
            continue
        if t < 0 or t >= C:
            err[0] = i
            return
        gi = share[0] if mean else g[i]
        out[i, t] = -gi * w[t]


@kernel
def one_hot(y, out, err):
    """out[i, c] = 1 where c = y_i, else 0 (int64)."""
    N, C = out.shape
    err[0] = -1
    for i in range(N):
        for c in range(C):
            out[i, c] = 0
        t = y[i]
        if t < 0 or t >= C:
            err[0] = i
            return
        out[i, t] = 1
