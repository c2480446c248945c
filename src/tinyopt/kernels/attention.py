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

from tinyopt.kernels.jit import parallel_kernel, prange, specialized
from tinyopt.kernels.vecmath import exp as _exp

_BLOCK = 64  # rows per parallel iteration (each has its own scratch row)


@specialized
def masked_softmax(fast: bool, has_mask: bool, causal: bool, nan_rows: bool):
    """``masked_softmax[fast, has_mask, causal, nan_rows](P, scale, mask)``: see the module
    docstring; ``mask`` (Am, Bm, Lm, S) with each of Am, Bm, Lm either 1 or P's (ignored when
    not ``has_mask``)."""
    @parallel_kernel
    def masked_softmax_kernel(P, scale, mask):
        A, B, L, S = P.shape
        Am, Bm, Lm = mask.shape[0], mask.shape[1], mask.shape[2]
        R = A * B * L
        for blk in prange((R + _BLOCK - 1) // _BLOCK):
            e64 = np.empty(S)  # a row's exponentials before rounding, summed in order
            for r in range(blk * _BLOCK, min(R, (blk + 1) * _BLOCK)):
                a = r // (B * L)
                b = (r // L) % B
                i = r % L
                row = P[a, b, i]
                n = min(i + 1, S) if causal else S
                m = -math.inf
                if has_mask:
                    mrow = mask[min(a, Am - 1), min(b, Bm - 1), min(i, Lm - 1)]
                    for j in range(n):
                        v = row[j] * scale + mrow[j]
                        row[j] = v
                        m = v if v > m or v != v else m
                else:
                    for j in range(n):
                        v = row[j] * scale
                        row[j] = v
                        m = v if v > m or v != v else m
                if m == -math.inf:
                    for j in range(n):
                        row[j] = math.nan if nan_rows else 0.0
                else:
                    # the exponentials in a loop of their own, which LLVM vectorizes (with the
                    # sum in it, it did not: 2x the time for the tiny GPT's scores)
                    for j in range(n):
                        e = _exp(row[j] - m, fast)
                        e64[j] = e
                        row[j] = e
                    acc = 0.0
                    for j in range(n):
                        acc += e64[j]
                    inv = 1.0 / acc
                    for j in range(n):
                        row[j] *= inv
                for j in range(n, S):
                    row[j] = 0.0
    return masked_softmax_kernel


@specialized
def masked_softmax_grad(has_dropout: bool):
    """``masked_softmax_grad[has_dropout](G, P, keep, scale)``: G (A, B, L, S) holds dL/dW on
    entry, with W = P * keep (the dropout keep mask scaled by 1 / (1 - p), or W = P), and
    dL/d(q.k) = scale * P * (dP - sum_j dP_j P_j), dP = G * keep, on return."""
    @parallel_kernel
    def masked_softmax_grad_kernel(G, P, keep, scale):
        A, B, L, S = P.shape
        for r in prange(A * B * L):
            a = r // (B * L)
            b = (r // L) % B
            i = r % L
            g, p = G[a, b, i], P[a, b, i]
            if has_dropout:
                k = keep[a, b, i]
                for j in range(S):
                    g[j] *= k[j]
            acc = 0.0
            for j in range(S):
                acc += g[j] * p[j]
            for j in range(S):
                g[j] = scale * p[j] * (g[j] - acc)
    return masked_softmax_grad_kernel
