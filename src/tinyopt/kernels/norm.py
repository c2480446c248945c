"""Kernels of the neural-net ops in ``engine/ops/nn.py``: layer norm, batch norm, embedding.

Arrays are C-contiguous, float32 or float64 (indices int64); statistics accumulate in float64.
Layer norm works on rows ``x[m, :]`` of a 2-D view (M, D); batch norm on channels ``c`` of a 3-D
view ``x[n, c, s]`` (N, C, S).  Symbols: mean ``mu``, inverse standard deviation
``rstd = 1 / sqrt(var + eps)`` with the biased variance, normalised input
``xhat = (x - mu) * rstd``, output ``y = xhat * w + b``, incoming gradient ``g``.  Parallel loops
write only their own row, channel or plane.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.native import blas
from tinyopt.kernels.native.address import c_contiguous, carray
from tinyopt.kernels.native.instructions import select
from tinyopt.kernels.jit import c_callback, inline, kernel, parallel_kernel, prange, specialized


# ---- layer norm (Ba et al. 2016, https://arxiv.org/abs/1607.06450) -----------------------------
# A row's sums are float64 chains in element order; a lone chain waits on each add's latency, so
# the statistics take four rows at a time: four independent chains the CPU overlaps, each still
# summed in its own order (the same bits as one row at a time; the tiny GPT's 1024 x 128 rows:
# 206 -> 97 us a call on one core).  The input gradient's two sums per row gained nothing that
# way (154 -> 149 us: its loop is bound by the conversions and multiplies, not the latency).
# The statistics and the input gradient are loops over rows [lo, hi) (inlined ``_*_rows``), run
# by their kernel over blocks of ``_LN_BLOCK`` rows or by :func:`layer_norm_chunks` over chunks on
# the shared threads.
_LN_BLOCK = 64


@inline
def _stats_rows(x, stats, D, eps, lo, hi):
    """Rows [lo, hi) of :func:`layer_norm_stats`.  ``x`` (M D) and ``stats`` (M 2) are typed
    pointers to C-contiguous rows (see :func:`layer_norm_chunks` for why pointers)."""
    for m in range(lo, hi, 4):
        # (a last group of fewer than four rows takes its last row again in the missing places:
        # the same sums in the same order, the same values written again; one loop for every
        # row rather than a second one for the rest, 0.08 s less of a cold compile of the
        # statistics chunk: 0.41-0.43 -> 0.33-0.35 s of CPU, machine loaded)
        m1 = select(m + 1 < hi, m + 1, hi - 1)
        m2 = select(m + 2 < hi, m + 2, hi - 1)
        m3 = select(m + 3 < hi, m + 3, hi - 1)
        r0, r1, r2, r3 = m * D, m1 * D, m2 * D, m3 * D
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        for d in range(D):
            a0 += x[r0 + d]
            a1 += x[r1 + d]
            a2 += x[r2 + d]
            a3 += x[r3 + d]
        u0 = a0 / D
        u1 = a1 / D
        u2 = a2 / D
        u3 = a3 / D
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for d in range(D):
            e0 = x[r0 + d] - u0
            e1 = x[r1 + d] - u1
            e2 = x[r2 + d] - u2
            e3 = x[r3 + d] - u3
            s0 += e0 * e0
            s1 += e1 * e1
            s2 += e2 * e2
            s3 += e3 * e3
        stats[2 * m] = u0
        stats[2 * m + 1] = 1.0 / math.sqrt(s0 / D + eps)
        stats[2 * m1] = u1
        stats[2 * m1 + 1] = 1.0 / math.sqrt(s1 / D + eps)
        stats[2 * m2] = u2
        stats[2 * m2 + 1] = 1.0 / math.sqrt(s2 / D + eps)
        stats[2 * m3] = u3
        stats[2 * m3 + 1] = 1.0 / math.sqrt(s3 / D + eps)


LN_LANES = 16
"""The input gradient's two sums per row run in this many float64 lanes (element d in lane
d % LN_LANES, each lane in element order, then the lanes added in order: an order fixed by D
alone), in groups of LN_LANES elements around a loop over the lanes, which LLVM vectorizes when
the element's index is unsigned (a signed one, which numba wraps around for negative values,
sent it to gathers or to scalar code).  The small GPT's 2048 x 384 float32 rows: 1.02 ms a call
with one running sum each (a chain of dependent float64 adds, its conversions and multiplies
one element at a time) and 0.50 ms with the lanes, one core (PyTorch's: 0.38 ms)."""


@inline
def _grad_x_rows(g, x, stats, w, has_w, out, lo, hi, lanes):
    """Rows [lo, hi) of :func:`layer_norm_grad_x`; ``lanes`` (2, LN_LANES) float64 scratch."""
    D = x.shape[1]
    l1 = lanes[0]
    l2 = lanes[1]
    whole = D - D % LN_LANES
    for m in range(lo, hi):
        mu = stats[m, 0]
        r = stats[m, 1]
        gm = g[m]
        xm = x[m]
        for k in range(LN_LANES):
            l1[k] = 0.0
            l2[k] = 0.0
        for d0 in range(0, whole, LN_LANES):
            for k in range(LN_LANES):
                d = np.uint64(d0) + np.uint64(k)
                gw = gm[d] * w[d] if has_w else gm[d]
                l1[k] += gw
                l2[k] += gw * (xm[d] - mu) * r
        for d in range(whole, D):
            gw = gm[d] * w[d] if has_w else gm[d]
            l1[d - whole] += gw
            l2[d - whole] += gw * (xm[d] - mu) * r
        s1 = 0.0
        s2 = 0.0
        for k in range(LN_LANES):
            s1 += l1[k]
            s2 += l2[k]
        s1 /= D
        s2 /= D
        for d in range(D):
            gw = g[m, d] * w[d] if has_w else g[m, d]
            out[m, d] = r * (gw - s1 - (x[m, d] - mu) * r * s2)


@parallel_kernel
def layer_norm_stats(x, stats, eps):
    """stats[m] = (mu, rstd) of row x[m, :] (two passes, float64, each sum in element order)."""
    M, D = x.shape
    if not (x.flags.c_contiguous and stats.flags.c_contiguous):
        raise ValueError("layer_norm_stats: arrays must be C-contiguous")
    # (the rows as typed pointers, for the row loops: a reshape would compile numba's general
    # reshape, ~0.2 s more of the kernel's cold compile, and an inlined helper ~0.01-0.02 s)
    xf = blas.pointer(x.ctypes.data, x.dtype.type(0))
    sf = blas.pointer(stats.ctypes.data, stats.dtype.type(0))
    for q in prange((M + _LN_BLOCK - 1) // _LN_BLOCK):
        _stats_rows(xf, sf, D, eps, q * _LN_BLOCK, min(M, (q + 1) * _LN_BLOCK))


@parallel_kernel(serial_nrt=False)
def layer_norm_apply(x, stats, w, b, out):
    """out[m, d] = (x[m, d] - mu[m]) * rstd[m] * w[d] + b[d].  An absent weight or bias comes as
    float64 ones or negative zeros (D,), the identities of * and + to the bit (v * 1 = v and
    v + -0 = v, a zero's sign and a NaN kept), and its float64 makes the rest of the row's
    arithmetic float64 as it did when flags skipped it (numba typed the skipped product or sum
    all the same).  No flags: LLVM vectorized the loop once per flag combination (cold compile
    0.16 -> 0.105 s of CPU)."""
    M, D = x.shape
    for m in prange(M):
        mu = stats[m, 0]
        r = stats[m, 1]
        for d in range(D):
            out[m, d] = (x[m, d] - mu) * r * w[d] + b[d]


@parallel_kernel
def layer_norm_grad_x(g, x, stats, w, has_w, out):
    """dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per row, with gw = g * w (the
    means' sums in ``LN_LANES`` lanes)."""
    M = x.shape[0]
    for q in prange((M + _LN_BLOCK - 1) // _LN_BLOCK):
        _grad_x_rows(g, x, stats, w, has_w, out, q * _LN_BLOCK, min(M, (q + 1) * _LN_BLOCK),
                     np.empty((2, LN_LANES)))


LN_ARGS = 11
LN_STATS, LN_GRAD_X = 0, 1


@specialized
def layer_norm_chunks(single: bool, part: int, has_w: bool):
    """``layer_norm_chunks[single, part, has_w]``: a C function ``void chunk(int64 c, int64
    *args)`` (float32 if ``single``, else float64) that runs rows c R .. c R + R - 1 of
    :func:`layer_norm_stats` (``part`` ``LN_STATS``) or :func:`layer_norm_grad_x`
    (``LN_GRAD_X``), the same row loops with the same types (the same bits), for
    ``shared_threads.chunk_runner``.  args = [addresses of x (M, D), stats (M, 2), out (M, D),
    g (M, D), w (D,), then M, D, R, has_w, address of eps (a float64), address of float64
    scratch (chunks, 2, ``LN_LANES``) for ``LN_GRAD_X`` (from the host: numba's ``np.empty`` is
    a function of its own to compile, ~0.1 s of a cold first step where no other kernel of the
    process calls it first)]; an array the part does not read may be any address.  Without
    ``has_w``, ``w`` is typed float64 as the engine's stand-in for an absent weight is, and the
    flag is read at run time as the kernel's is, so that ``g * w if has_w else g`` types as in
    the kernel (float64 there: a constant False would leave it float32, other bits).
    The arguments, and the statistics part's rows, are typed pointers, not arrays (numba lowers
    an array access to ~30 lines of LLVM IR, a pointer's to two, and each costs numba's front
    end and LLVM: that chunk's IR before optimisation 2375 -> 992 lines, its cold compile in the
    GPT's first step 0.26-0.30 -> 0.20-0.22 s of CPU).  (The gradient part's rows as pointers: IR
    3600 -> 2160 lines, compile -0.03 s, but its warm run looked slower more often (0.64 or
    0.86 ms a 2048 x 384 float32 call, one core, fast in 6 of 20 runs against 13 of 21), and
    its kernel's serial build compiled 0.05-0.1 s longer: left as arrays.)
    (The apply pass, a light elementwise loop, gained nothing as chunks: 1024 x 128 float32
    18 -> 22 us, against stats 96 -> 59 and grad_x 153 -> 92.)"""
    zero = (np.float32 if single else np.float64)(0.0)
    wzero = zero if has_w else 0.0

    def layer_norm_chunk(c, argp):
        a = argp  # (a pointer: see the docstring)
        M, D, R = a[5], a[6], a[7]
        # (no min(): numba compiles it as a function of its own, ~0.03 s of a cold first step)
        lo, hi = c * R, select((c + 1) * R < M, (c + 1) * R, M)
        if part == LN_STATS:
            _stats_rows(blas.pointer(a[0], zero), blas.pointer(a[1], zero), D,
                        blas.pointer(a[9], 0.0)[0], lo, hi)
        else:
            w_given = True if has_w else a[8] != 0  # (a constant where it can be: less code)
            x = carray(blas.pointer(a[0], zero), (M, D))
            stats = carray(blas.pointer(a[1], zero), (M, 2))
            out = carray(blas.pointer(a[2], zero), (M, D))
            g = carray(blas.pointer(a[3], zero), (M, D))
            w = carray(blas.pointer(a[4], wzero), (D if has_w else 0,))
            lanes = carray(blas.pointer(a[10] + c * (16 * LN_LANES), 0.0), (2, LN_LANES))
            _grad_x_rows(g, x, stats, w, w_given, out, lo, hi, lanes)
    return c_callback(layer_norm_chunk, "void(int64, CPointer(int64))", nrt=False)


@kernel(nrt=False)
def layer_norm_grad_wb(g, x, stats, out):
    """out[0, d] = sum_m g[m, d] xhat[m, d] (dw) and out[1, d] = sum_m g[m, d] (db)."""
    M, D = x.shape
    for d in range(D):
        out[0, d] = 0
        out[1, d] = 0
    for m in range(M):
        mu = stats[m, 0]
        r = stats[m, 1]
        for d in range(D):
            out[0, d] += g[m, d] * (x[m, d] - mu) * r
            out[1, d] += g[m, d]


# ---- batch norm (Ioffe & Szegedy 2015, https://arxiv.org/abs/1502.03167) ------------------------
@parallel_kernel
def batch_norm_stats(x, stats, eps):
    """stats[:, c] = (mu, biased var, rstd) of channel c over x[:, c, :] (two passes, float64)."""
    N, C, S = x.shape
    cnt = N * S
    for c in prange(C):
        acc = 0.0
        for n in range(N):
            for s in range(S):
                acc += x[n, c, s]
        mu = acc / cnt
        ss = 0.0
        for n in range(N):
            for s in range(S):
                e = x[n, c, s] - mu
                ss += e * e
        var = ss / cnt
        stats[0, c] = mu
        stats[1, c] = var
        stats[2, c] = 1.0 / math.sqrt(var + eps)


@parallel_kernel
def batch_norm_eval_stats(running_mean, running_var, stats, eps):
    """stats[:, c] = (running_mean[c], running_var[c], 1 / sqrt(running_var[c] + eps))."""
    C = stats.shape[1]
    for c in prange(C):
        stats[0, c] = running_mean[c]
        stats[1, c] = running_var[c]
        stats[2, c] = 1.0 / math.sqrt(running_var[c] + eps)


@parallel_kernel
def batch_norm_apply(x, stats, w, b, has_w, has_b, out):
    """out[n, c, s] = (x[n, c, s] - mu[c]) * rstd[c] * w[c] + b[c] (w = 1, b = 0 when absent)."""
    N, C, S = x.shape
    for p in prange(N * C):
        n = p // C
        c = p - n * C
        scale = stats[2, c] * w[c] if has_w else stats[2, c]
        shift = b[c] if has_b else 0.0
        mu = stats[0, c]
        for s in range(S):
            out[n, c, s] = (x[n, c, s] - mu) * scale + shift


@parallel_kernel
def batch_norm_grad_wb(g, x, stats, out):
    """out[0, c] = sum_{n,s} g xhat (dw) and out[1, c] = sum_{n,s} g (db), per channel c."""
    N, C, S = x.shape
    for c in prange(C):
        mu = stats[0, c]
        r = stats[2, c]
        a = 0.0
        bb = 0.0
        for n in range(N):
            for s in range(S):
                a += g[n, c, s] * (x[n, c, s] - mu) * r
                bb += g[n, c, s]
        out[0, c] = a
        out[1, c] = bb


@parallel_kernel
def batch_norm_grad_x(g, x, stats, sums, w, has_w, training, out):
    """dx = w rstd (g - db / M - xhat dw / M) with batch statistics (M = N*S), or w rstd g with
    fixed (running) statistics; ``sums`` holds (dw, db) from :func:`batch_norm_grad_wb`."""
    N, C, S = x.shape
    M = N * S
    for p in prange(N * C):
        n = p // C
        c = p - n * C
        r = stats[2, c]
        k = r * w[c] if has_w else r
        if training:
            mu = stats[0, c]
            m1 = sums[1, c] / M
            m2 = sums[0, c] / M
            for s in range(S):
                out[n, c, s] = k * (g[n, c, s] - m1 - (x[n, c, s] - mu) * r * m2)
        else:
            for s in range(S):
                out[n, c, s] = k * g[n, c, s]


@kernel
def batch_norm_update(stats, running_mean, running_var, momentum, count):
    """The running statistics, as PyTorch: rm = (1 - m) rm + m mu and
    rv = (1 - m) rv + m var * count / (count - 1) (the unbiased batch variance)."""
    m = momentum
    C = running_mean.shape[0]
    for c in range(C):
        running_mean[c] = (1.0 - m) * running_mean[c] + m * stats[0, c]
        running_var[c] = (1.0 - m) * running_var[c] + m * stats[1, c] * count / (count - 1)


# ---- embedding -----------------------------------------------------------------------------------
# Indices are user data: each kernel checks every index where it reads it (one comparison per row)
# and reports the first outside [0, V) in ``err`` (int64 (1,)): err[0] = its position, or -1.  The
# kernel stops there; the caller raises.


@kernel(nrt=False)
def embedding_rows(w, idx, out, err):
    """out[k, :] = w[idx[k], :].  w (V, D) any layout, idx (K,) int64, out (K, D)."""
    V, D = w.shape
    err[0] = -1
    for k in range(idx.shape[0]):
        i = idx[k]
        if i < 0 or i >= V:
            err[0] = k
            return
        for d in range(D):
            out[k, d] = w[i, d]


@kernel(nrt=False)
def embedding_grad(g, idx, padding_idx, scale_by_freq, counts, out, err):
    """out[i, :] = sum over k with idx[k] == i of g[k, :] (divided by the count of i in ``idx``
    when ``scale_by_freq``); row ``padding_idx`` gets no gradient.  g (K, D), idx (K,),
    out (V, D), counts (V,) int64 scratch, all C-contiguous.

    One accumulation loop for both cases: each term is ``g[k, d] / c`` with c the count of i, or
    1 without ``scale_by_freq`` (an int64 divisor: the quotient is float64, and the float64 sum
    rounded to float32 is the float32 sum to the bit, as the float64 sum of two float32 values
    rounded once more is correctly rounded; a division by 1 is exact), and the arrays as typed
    pointers: numba compiled a loop per case and ~30 lines of IR per 2-D access (cold compile
    0.19-0.20 -> 0.17-0.18 s of CPU; warm the same or faster, 1024 x 128 float32 into 65 rows
    14 -> 12 us)."""
    K, D = g.shape
    V = out.shape[0]
    # (a constant of the build, not ``a.flags``, which needs numba's reference counting: see
    # ``c_contiguous``; without it the kernel's cold compile is ~0.015 s shorter)
    if not (c_contiguous(g) and c_contiguous(idx) and c_contiguous(counts)
            and c_contiguous(out)):
        raise ValueError("embedding_grad: arrays must be C-contiguous")
    gp = blas.pointer(g.ctypes.data, g.dtype.type(0))
    ip = blas.pointer(idx.ctypes.data, idx.dtype.type(0))
    cp = blas.pointer(counts.ctypes.data, counts.dtype.type(0))
    op = blas.pointer(out.ctypes.data, out.dtype.type(0))
    err[0] = -1
    for j in range(V * D):
        op[j] = 0
    for i in range(V):
        cp[i] = 0
    for k in range(K):
        i = ip[k]
        if i < 0 or i >= V:
            err[0] = k
            return
        cp[i] += 1
    for k in range(K):
        i = ip[k]
        if i == padding_idx:
            continue
        c = select(scale_by_freq, cp[i], 1)
        for d in range(D):
            op[i * D + d] += gp[k * D + d] / c


@kernel
def embedding_grad_add(base, g, idx, padding_idx, scale_by_freq, head, nxt, row, out, err):
    """out = base + embedding_grad(g, idx): out[i, :] = base[i, :] + s_i, where s_i is
    :func:`embedding_grad`'s row i (the sum over k with idx[k] == i of g[k, :], in k order from
    +0, each term divided by the count of i when ``scale_by_freq``; +0 for ``padding_idx`` and
    rows not looked up), so the same bits as the two-step sum without its (V, D) array.  base,
    out (V, D) of one float dtype (out may be base: element (i, d) is read before it is
    written); g (K, D), idx (K,) int64; head (V,), nxt (K,) int64 scratch (each row's
    chain of positions k, ascending); row (D,) scratch of g's dtype."""
    K, D = g.shape
    V = out.shape[0]
    err[0] = -1
    for k in range(K):
        i = idx[k]
        if i < 0 or i >= V:
            err[0] = k
            return
    for i in range(V):
        head[i] = -1
    for k in range(K - 1, -1, -1):  # prepend, from the last: each chain in ascending k
        i = idx[k]
        nxt[k] = head[i]
        head[i] = k
    for i in range(V):
        if head[i] < 0 or i == padding_idx:
            for d in range(D):
                out[i, d] = base[i, d] + 0.0  # (-0 + +0 is +0, as in the two-step sum)
            continue
        c = 0
        k = head[i]
        while k >= 0:
            c += 1
            k = nxt[k]
        for d in range(D):
            row[d] = 0
        k = head[i]
        while k >= 0:
            if scale_by_freq:
                for d in range(D):
                    row[d] += g[k, d] / c
            else:
                for d in range(D):
                    row[d] += g[k, d]
            k = nxt[k]
        for d in range(D):
            out[i, d] = base[i, d] + row[d]
