"""The masked softmax of scaled-dot-product attention and its backward, fused (``engine/ops/
attention.py`` does the batched GEMMs around them).

Scores ``P[a, b, i, j] = q_i . k_j`` (A, B, L, S) C-contiguous, float32 or float64, are turned in
place into attention probabilities, one row (a, b, i) at a time:

    s_ij = scale * P_ij + M[a', b', i', j]    (M the additive mask, broadcast: a' = a or 0, ...)
    P_ij = exp(s_ij - max_j s_ij) / sum_j exp(s_ij - max_j s_ij),  j < i + 1 when causal

Entries past the causal limit are 0.  A row whose every entry is -inf (fully masked) becomes all 0
(PyTorch's ``scaled_dot_product_attention``) or all NaN with ``nan_rows`` (its
``MultiheadAttention`` when it returns the weights).  NaN scores make their row NaN.  Rows are
independent: the parallel build splits them between threads.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.native import blas
from tinyopt.kernels.native.instructions import select
from tinyopt.kernels.jit import (c_callback, callee, inline, parallel_kernel, prange,
                                 specialized)
from tinyopt.kernels import vecmath as _V

_BLOCK = 64  # rows per parallel iteration (each has its own scratch row)


LANES = 16
"""A float32 row's max and sums run in this many lanes (element j in lane j % LANES, the lanes
then combined in order, as the cross-entropy's rows, ``kernels/loss.py``): loops that
vectorize, in an order fixed by the row's length alone."""


@specialized
def _softmax_row(fast: bool, has_mask: bool, causal: bool, nan_rows: bool):
    """``softmax_row(row, mrow, S, i, scale, e64)``: query row ``i`` of the scores in place (the
    module docstring): ``row`` its S scores, ``mrow`` its mask row, ``e64`` float64 scratch of
    max(S, 2 LANES) elements.

    float32 (``fast``): scores, exponentials and the normalisation in float32 arithmetic
    (``vecmath.exp_f32``), the max and the sum of the exponentials (in float64) in lanes: the
    loops vectorize (the small GPT's 48 x 256 x 256 causal scores, batched: 6.8 -> 4.6 ms, one
    core; with the lane loops in groups of LANES and an unsigned index, the max loop 1.4 -> 1.2
    ms and the sum 1.1 -> 0.8 ms of it).
    float64: libm's exp, one chain.

    ``row``, ``mrow`` and ``e64`` are indexed only: arrays (:func:`masked_softmax`) or typed
    pointers (the chunks, where compile time counts: the forward chunk, which inlines this
    function, was the costliest C function of the small GPT's cold first step).  numba lowers
    an array access to ~30 lines of LLVM IR (the array's structure copied, a negative index
    wrapped), a pointer's to two, and every line costs numba's front end and LLVM; and numba
    copies an inlined function block by block, each time with its whole scope, so the cost
    grows with blocks times variables: ``select`` rather than conditional expressions (four
    blocks each), the exponentials in the pass of their lane sums.  The forward chunk's IR
    before optimisation 5200 -> 2700 lines, its cold compile 0.86-1.0 -> 0.61-0.74 s of CPU
    (with ``_pair_gemm``; fresh processes, loaded machine), the same bits."""
    if fast:
        @inline
        def softmax_row(row, mrow, S, i, scale, e64):
            # (no min() in the chunks' code: numba compiles it as a function of its own, ~0.03
            # s of a cold first step in each process)
            n = select(i + 1 < S, i + 1, S) if causal else S
            sc = np.float32(scale)
            # the lanes: the sums in e64[:LANES], the maxima in e64[LANES:2 LANES]
            for k in range(LANES):
                e64[k] = 0.0
                e64[LANES + k] = -math.inf
            # (in groups of LANES, the last one short, around a loop over the lanes, the
            # element's index unsigned: so LLVM vectorizes the loop; the same order as one loop
            # over j with lane j % LANES.  No separate tail loop: LLVM vectorized that one too,
            # 0.1 s more compile of the attention chunk, and no faster)
            for j0 in range(0, n, LANES):
                for k in range(np.uint64(select(LANES < n - j0, LANES, n - j0))):
                    j = np.uint64(j0) + k
                    v = row[j] * sc + mrow[j] if has_mask else row[j] * sc
                    row[j] = v
                    w = e64[LANES + k]
                    e64[LANES + k] = select((v > w) | (v != v), v, w)
            m = e64[LANES]
            for k in range(LANES + 1, 2 * LANES):
                v = e64[k]
                m = select((v > m) | (v != v), v, m)
            if m == -math.inf:  # a fully masked row
                if nan_rows:
                    for j in range(n):
                        row[j] = math.nan
                else:
                    n = 0  # (all zeros: the loop after the next)
            else:
                m32 = np.float32(m)
                # the exponentials, and their sums in the lanes in the same pass
                for j0 in range(0, n, LANES):
                    for k in range(np.uint64(select(LANES < n - j0, LANES, n - j0))):
                        j = np.uint64(j0) + k
                        e = _V.exp_f32(row[j] - m32)
                        row[j] = e
                        e64[k] += e
                acc = 0.0
                for k in range(LANES):
                    acc += e64[k]
                inv = np.float32(1.0 / acc)
                for j in range(n):
                    row[j] = row[j] * inv
            for j in range(n, S):
                row[j] = 0.0
        return softmax_row

    @inline
    def softmax_row(row, mrow, S, i, scale, e64):
        n = select(i + 1 < S, i + 1, S) if causal else S
        m = -math.inf
        for j in range(n):
            v = row[j] * scale + mrow[j] if has_mask else row[j] * scale
            row[j] = v
            m = select((v > m) | (v != v), v, m)
        if m == -math.inf:
            if nan_rows:
                for j in range(n):
                    row[j] = math.nan
            else:
                n = 0
        else:
            # the exponentials in a loop of their own, which LLVM vectorizes (with the sum in
            # it, it did not: 2x the time for the tiny GPT's scores)
            for j in range(n):
                e = math.exp(row[j] - m)
                e64[j] = e
                row[j] = e
            acc = 0.0
            for j in range(n):
                acc += e64[j]
            inv = 1.0 / acc
            for j in range(n):
                row[j] = row[j] * inv
        for j in range(n, S):
            row[j] = 0.0
    return softmax_row


@specialized
def masked_softmax(fast: bool, has_mask: bool, causal: bool, nan_rows: bool):
    """``masked_softmax[fast, has_mask, causal, nan_rows](P, scale, mask)``: see the module
    docstring; ``mask`` (Am, Bm, Lm, S) with each of Am, Bm, Lm either 1 or P's (ignored when
    not ``has_mask``)."""
    softmax_row = _softmax_row[fast, has_mask, causal, nan_rows]

    @parallel_kernel
    def masked_softmax_kernel(P, scale, mask):
        A, B, L, S = P.shape
        Am, Bm, Lm = mask.shape[0], mask.shape[1], mask.shape[2]
        R = A * B * L
        for blk in prange((R + _BLOCK - 1) // _BLOCK):
            e64 = np.empty(max(S, 2 * LANES))  # a row's scratch
            for r in range(blk * _BLOCK, min(R, (blk + 1) * _BLOCK)):
                a = r // (B * L)
                b = (r // L) % B
                i = r % L
                softmax_row(P[a, b, i], mask[min(a, Am - 1), min(b, Bm - 1), min(i, Lm - 1)], S,
                            i, scale, e64)
    return masked_softmax_kernel


@specialized
def _softmax_grad_row(has_dropout: bool):
    """``softmax_grad_row(g, p, k, scale, n, S)``: one row of :func:`masked_softmax_grad` over
    its first ``n`` entries (the causal limit, else the row's length); entries [n, S) of ``g``
    become 0.  The rows are arrays or typed pointers (see :func:`_softmax_row`)."""
    @inline
    def softmax_grad_row(g, p, k, scale, n, S):
        if has_dropout:
            for j in range(n):
                g[j] = g[j] * k[j]
        acc = 0.0
        for j in range(n):
            acc += g[j] * p[j]
        for j in range(n):
            g[j] = scale * p[j] * (g[j] - acc)
        for j in range(n, S):
            g[j] = 0.0
    return softmax_grad_row


@specialized
def masked_softmax_grad(has_dropout: bool, causal: bool):
    """``masked_softmax_grad[has_dropout, causal](G, P, keep, scale)``: G (A, B, L, S) holds
    dL/dW on entry, with W = P * keep (the dropout keep mask scaled by 1 / (1 - p), or W = P),
    and dL/d(q.k) = scale * P * (dP - sum_j dP_j P_j), dP = G * keep, on return; 0 past the
    causal limit (where P is the constant 0, whatever G holds: a NaN there stays out of the
    gradients of q and k, as in PyTorch's causal attention)."""
    softmax_grad_row = _softmax_grad_row[has_dropout]

    @parallel_kernel
    def masked_softmax_grad_kernel(G, P, keep, scale):
        A, B, L, S = P.shape
        for r in prange(A * B * L):
            a = r // (B * L)
            b = (r // L) % B
            i = r % L
            softmax_grad_row(G[a, b, i], P[a, b, i], keep[a, b, i], scale,
                             min(i + 1, S) if causal else S, S)
    return masked_softmax_grad_kernel


# ---- one (batch, head) pair a chunk: GEMMs and softmax on the shared threads -------------------
#
# ``attention_chunks[fast, has_mask, causal, nan_rows]`` and ``attention_grad_chunks[fast,
# causal]`` are serial C functions ``void chunk(int64 c, int64 *args)`` for ``shared_threads.
# chunk_runner``: chunk c is the pair (a, b) = divmod(c, B), and runs that pair's GEMMs (numpy's
# own ``cblas_?gemm`` with ``np.matmul``'s arguments, ``blas.matmul_args``) and softmax rows
# (the row functions above, as the kernels above run them).  ``args``: ``ARGS_HEAD`` int64
# [gemm address, A, B, L, S, scores (A, B, L, S), mask (Am, Bm, Lm, S) or, backward, the
# probabilities, Am, Bm, Lm, address of the scale (a float64), causal tile, forward: float64
# scratch (A B, ``scratch_width(S)``), a row for each pair], then per GEMM
# ``GEMM_FIELDS`` int64: (trans1, trans2, M, N, K, lda, ldb, ldc, then the three matrices'
# (address of pair (0, 0), byte stride over a, byte stride over b)).
#
# Causal: query i sees keys j <= i, so the scores above the diagonal are never computed.  The
# queries go in tiles of ``tile`` rows; tile [i0, i1) needs keys [0, min(i1, S)) only, and (with
# S <= L: every key seen by some query) the gradients of keys [j0, j1) the queries [j0, L) only
# (dS and P are 0 above the diagonal): every GEMM runs on the blocks that hold unmasked
# entries, (1 + 1 / tiles) / 2 of the full products' work for L = S (the small GPT's attention
# forward and backward, 256 x 256 x 64 per pair, tiles of 32: 36.5 -> 27.5 ms, one core).  Each
# entry is the sum of the same terms less exact zeros (trailing or leading); OpenBLAS may order
# a smaller product's sums differently (last-place differences; the same bits at the GPT's
# shapes), and masked probabilities are exact 0 as before.

GEMM_FIELDS = 17
ARGS_HEAD = 13


def scratch_width(S: int) -> int:
    """The float64 scratch row a forward pair's softmax rows share: max(S, 2 ``LANES``)."""
    return max(S, 2 * LANES)


@callee
def _pair_gemm(args, d, a, b, one, zero, size, m0, m1, n0, n1, k0, k1):
    """GEMM ``d`` of pair (a, b) restricted to its output's rows [m0, m1) and columns [n0, n1),
    summing over [k0, k1) of the inner dimension (``size`` the element's bytes; ``args`` the
    chunk's argument pointer).

    A function of its own, called (not inlined): each inlined copy of its address arithmetic
    cost numba's front end again, and the causal gradient chunk makes four calls; the small
    GPT's chunks took 0.58-0.61 s (gradient) and 0.92-0.93 s (forward) of CPU to compile with
    the copies, 0.18 + 0.09 (this function) and 0.77-0.82 without (numba's own pass timers,
    each in a fresh process, machine loaded).  A GEMM dwarfs the call.  (With ``args`` a
    pointer rather than an array, its IR before optimisation 782 -> 289 lines.)  A kernel of
    its own (``jit.callee``), cached on disk: the forward chunk, compiled by the training
    process, and the gradient chunk, by its compile-ahead helper, compiled it each (0.07-0.09
    s of CPU); the second now loads it (~0.002 s)."""
    lda, ldb, ldc = args[d + 5], args[d + 6], args[d + 7]
    x_at = m0 * lda + k0 if args[d] == blas.NO_TRANS else k0 * lda + m0
    y_at = k0 * ldb + n0 if args[d + 1] == blas.NO_TRANS else n0 * ldb + k0
    blas.gemm(args[0], args[d], args[d + 1], m1 - m0, n1 - n0, k1 - k0, one,
              args[d + 8] + a * args[d + 9] + b * args[d + 10] + x_at * size, lda,
              args[d + 11] + a * args[d + 12] + b * args[d + 13] + y_at * size, ldb, zero,
              args[d + 14] + a * args[d + 15] + b * args[d + 16] + (m0 * ldc + n0) * size, ldc)


@inline
def _full_gemm(args, d, a, b, one, zero, size):
    """GEMM ``d`` of pair (a, b), whole."""
    _pair_gemm(args, d, a, b, one, zero, size, 0, args[d + 2], 0, args[d + 3], 0, args[d + 4])


@specialized
def attention_chunks(fast: bool, has_mask: bool, causal: bool, nan_rows: bool):
    """Forward of pair c: scores = q k^T (GEMM 0), its softmax rows, out = P v (GEMM 1)."""
    softmax_row = _softmax_row[fast, has_mask, causal, nan_rows]
    dt = np.float32 if fast else np.float64
    size = 4 if fast else 8
    g1 = ARGS_HEAD + GEMM_FIELDS

    def attention_chunk(c, argp):
        args = argp  # (a pointer: see _softmax_row's docstring)
        B, L, S = args[2], args[3], args[4]
        a, b = c // B, c % B
        one, zero = dt(1.0), dt(0.0)
        Am, Bm, Lm = args[7], args[8], args[9]
        scale = blas.pointer(args[10], 0.0)[0]
        # the pair's scratch row, from the host: numba's np.empty (and max) are functions of
        # their own to compile, ~0.13 s of a cold first step where no other kernel of the
        # process calls them first
        width = S if S > 2 * LANES else 2 * LANES
        e64 = blas.pointer(args[12] + c * (8 * width), 0.0)
        m0 = ((a if a < Am else Am - 1) * Bm + (b if b < Bm else Bm - 1)) * Lm  # (no min())
        tile = args[11] if causal else L
        D, Dv = args[ARGS_HEAD + 4], args[g1 + 3]
        for i0 in range(0, L, tile):
            i1 = i0 + tile if i0 + tile < L else L
            keys = (i1 if i1 < S else S) if causal else S
            _pair_gemm(args, ARGS_HEAD, a, b, one, zero, size, i0, i1, 0, keys, 0, D)
            for i in range(i0, i1):
                mi = m0 + (i if i < Lm else Lm - 1)
                softmax_row(blas.pointer(args[5] + (c * L + i) * (S * size), zero),
                            blas.pointer(args[6] + mi * (S * size), zero), S, i, scale, e64)
            _pair_gemm(args, g1, a, b, one, zero, size, i0, i1, 0, Dv, 0, keys)
    return c_callback(attention_chunk, "void(int64, CPointer(int64))")


@specialized
def attention_grad_chunks(fast: bool, causal: bool):
    """Backward of pair c (no dropout): dW = dO v^T (GEMM 0, into the scores), its softmax
    backward rows, then dq = dS k, dk = dS^T q, dv = W^T dO (GEMMs 1, 2, 3).  ``causal``: the
    causal tiles, for S <= L only (a causal attention with more keys than queries takes the
    whole products, ``causal`` False, its rows' softmax backward over all S entries, where P is
    0 past the limit).  Each option compiles its own path alone (both paths in one function:
    0.8-1.0 s of the small GPT's cold step; the tiled path alone 0.57 s, CPU)."""
    softmax_grad_row = _softmax_grad_row[False]
    dt = np.float32 if fast else np.float64
    size = 4 if fast else 8
    g1, g2, g3 = (ARGS_HEAD + k * GEMM_FIELDS for k in range(1, 4))

    def attention_grad_chunk(c, argp):
        args = argp  # (a pointer, and the rows too: see _softmax_row's docstring)
        B, L, S = args[2], args[3], args[4]
        a, b = c // B, c % B
        one, zero = dt(1.0), dt(0.0)
        scale = blas.pointer(args[10], 0.0)[0]
        G, P = args[5] + c * L * (S * size), args[6] + c * L * (S * size)  # (the pair's rows)
        if causal:
            tile = args[11]
            Dv, D = args[ARGS_HEAD + 4], args[g1 + 3]
            for i0 in range(0, L, tile):  # the rows of dS, then dq, tile by tile
                i1 = i0 + tile if i0 + tile < L else L  # (no min(): see the forward)
                keys = i1 if i1 < S else S
                _pair_gemm(args, ARGS_HEAD, a, b, one, zero, size, i0, i1, 0, keys, 0, Dv)
                for i in range(i0, i1):
                    p = blas.pointer(P + i * (S * size), zero)
                    softmax_grad_row(blas.pointer(G + i * (S * size), zero), p, p, scale,
                                     i + 1 if i + 1 < S else S, keys)
                _pair_gemm(args, g1, a, b, one, zero, size, i0, i1, 0, D, 0, keys)
            for j0 in range(0, S, tile):  # dk and dv of keys [j0, j1): from queries [j0, L)
                j1 = j0 + tile if j0 + tile < S else S
                k0 = j0 if j0 < L else L  # (S <= L is the caller's; past L the sum would be empty)
                _pair_gemm(args, g2, a, b, one, zero, size, j0, j1, 0, D, k0, L)
                _pair_gemm(args, g3, a, b, one, zero, size, j0, j1, 0, Dv, k0, L)
            return
        _full_gemm(args, ARGS_HEAD, a, b, one, zero, size)
        for i in range(L):
            p = blas.pointer(P + i * (S * size), zero)
            softmax_grad_row(blas.pointer(G + i * (S * size), zero), p, p, scale, S, S)
        for d in (g1, g2, g3):
            _full_gemm(args, d, a, b, one, zero, size)
    return c_callback(attention_grad_chunk, "void(int64, CPointer(int64))")
