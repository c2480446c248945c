"""Kernels of row-sparse gradients (``nn.Embedding(sparse=True)``, ``optim.SparseAdam``).

A row-sparse gradient is a dense (V, D) gradient plus a (V,) uint8 mask of the rows looked up
(``engine/row_sparse.py``).  ``mark_rows`` sets the mask from the lookup's indices;
``dense_rows`` finds a row outside the mask with a nonzero gradient (then the gradient is not
row-sparse); ``sparse_adam`` is Adam's update restricted to the marked rows, in PyTorch's order of operations
(https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html).
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import kernel, parallel_kernel, prange


@kernel
def mark_rows(mask, idx, padding_idx):
    """mask[r] = 1 for every index r of ``idx`` (int64, 1-D) but ``padding_idx`` (-1: none).
    Indices outside [0, V) are skipped (the lookup that read them has raised)."""
    V = mask.shape[0]
    for i in range(idx.shape[0]):
        r = idx[i]
        if 0 <= r < V and r != padding_idx:
            mask[r] = 1


ROWS_PER_CHUNK = 256
"""Rows per chunk of :func:`dense_rows`' parallel check."""


@parallel_kernel(sized_by=1)
def dense_rows(mask, bits, magnitude, bad):
    """``bad[c]`` = the first row ``r`` of chunk ``c`` (rows ``[c R, (c + 1) R)``, ``R =
    ROWS_PER_CHUNK``; ``bad`` has one entry per chunk) with ``mask[r] == 0`` and a nonzero (or
    NaN) gradient -- a gradient that is not row-sparse, e.g. a weight shared with a Linear --
    else -1.  ``bits``: the (V, D) C-contiguous gradient viewed as unsigned integers of its
    width (uint32 for float32, uint64 for float64); ``magnitude``: all bits but the sign
    (a value is nonzero iff ``bits & magnitude != 0``: -0.0 is zero).  An OR over the row's
    bits vectorizes where a float comparison with an early exit does not.  Parallel over chunks
    (iteration ``c`` writes only ``bad[c]``)."""
    V, D = bits.shape
    for c in prange(bad.shape[0]):
        bad[c] = -1
        for r in range(c * ROWS_PER_CHUNK, min(V, (c + 1) * ROWS_PER_CHUNK)):
            if mask[r] == 0:
                br = bits[r]
                any_bits = magnitude ^ magnitude  # 0 of the bits' type
                for j in range(D):
                    any_bits |= br[j]
                if any_bits & magnitude:
                    bad[c] = r
                    break


@kernel
def sparse_adam(p, g, m, v, rows, c1, c2, eps, step_size, maximize):
    """SparseAdam over the rows ``rows`` (int64, distinct, in [0, V)) of p, g, m, v (V, D),
    C-contiguous, all of one float dtype; the scalars in that dtype: c1 = 1 - b1, c2 = 1 - b2,
    step_size = lr sqrt(1 - b2^t) / (1 - b1^t).  Per element of such a row (g negated if
    maximize)::

        u1 = (g - m) c1;  m += u1          # m <- b1 m + (1 - b1) g
        u2 = (g^2 - v) c2;  v += u2        # v <- b2 v + (1 - b2) g^2
        p += -step_size ((u1 + m_old) / (sqrt(u2 + v_old) + eps))
    """
    D = p.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        pr, gr, mr, vr = p[r], g[r], m[r], v[r]
        for j in range(D):
            gj = -gr[j] if maximize else gr[j]
            mo = mr[j]
            u1 = (gj - mo) * c1
            mr[j] = mo + u1
            vo = vr[j]
            u2 = (gj * gj - vo) * c2
            vr[j] = vo + u2
            pr[j] += -step_size * ((u1 + mo) / (math.sqrt(u2 + vo) + eps))
