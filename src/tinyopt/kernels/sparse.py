"""Sparse COO (coordinate) matrix products: ``A @ X`` for a sparse A of ``nnz`` entries
(``rows[e]``, ``cols[e]``, ``vals[e]``) and a dense X, and the gradient of the entries' values.

Arrays are C-contiguous; ``rows``/``cols`` int64 (nnz,), ``vals`` (nnz,), ``x`` (K, M),
``out``/``g`` (N, M), float32 or float64.  Entries may repeat (they add up, as in an uncoalesced
torch tensor).  An entry whose row is not in [0, N) or column not in [0, K) is skipped, so no
index makes a kernel read or write outside its arrays (the constructor refuses such indices
before a kernel ever sees them).  Serial: entries of one row would race.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def coo_mm(rows, cols, vals, x, out):
    """out[r, :] = sum over entries e with rows[e] = r of vals[e] * x[cols[e], :]."""
    N, M = out.shape
    K = x.shape[0]
    for r in range(N):
        for m in range(M):
            out[r, m] = 0.0
    for e in range(rows.size):
        r, c = rows[e], cols[e]
        if r < 0 or r >= N or c < 0 or c >= K:
            continue
        v = vals[e]
        for m in range(M):
            out[r, m] += v * x[c, m]


@kernel
def coo_mm_grad_values(rows, cols, g, x, out):
    """out[e] = sum_m g[rows[e], m] * x[cols[e], m]: dL/dvals of ``coo_mm`` (0 for a skipped
    entry)."""
    N, M = g.shape
    K = x.shape[0]
    for e in range(rows.size):
        r, c = rows[e], cols[e]
        acc = 0.0
        if 0 <= r < N and 0 <= c < K:
            for m in range(M):
                acc += g[r, m] * x[c, m]
        out[e] = acc
