"""Kernels of row-sparse gradients (``nn.Embedding(sparse=True)``, ``optim.SparseAdam``).

A row-sparse gradient is a dense (V, D) gradient plus a (V,) uint8 mask of the rows looked up
(``engine/row_sparse.py``).  ``mark_rows`` sets the mask from the lookup's indices;
``sparse_adam`` is Adam's update restricted to the marked rows, in PyTorch's order of operations
(https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html).
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import kernel


@kernel
def mark_rows(mask, idx, padding_idx):
    """mask[r] = 1 for every index r of ``idx`` (int64, 1-D) but ``padding_idx`` (-1: none).
    Indices outside [0, V) are skipped (the lookup that read them has raised)."""
    V = mask.shape[0]
    for i in range(idx.shape[0]):
        r = idx[i]
        if 0 <= r < V and r != padding_idx:
            mask[r] = 1


@kernel
def sparse_adam(p, g, m, v, mask, c1, c2, eps, step_size, maximize, err):
    """SparseAdam over the rows r with mask[r] != 0 of p, g, m, v (V, D), C-contiguous, all of
    one float dtype; the scalars in that dtype: c1 = 1 - b1, c2 = 1 - b2,
    step_size = lr sqrt(1 - b2^t) / (1 - b1^t).  Per element of such a row (g negated if
    maximize)::

        u1 = (g - m) c1;  m += u1          # m <- b1 m + (1 - b1) g
        u2 = (g^2 - v) c2;  v += u2        # v <- b2 v + (1 - b2) g^2
        p += -step_size ((u1 + m_old) / (sqrt(u2 + v_old) + eps))

    First checks that g is 0 in every row not marked (else the gradient is not row-sparse: a
    dense contribution, e.g. a weight shared with a Linear): then err[0] = that row and nothing
    is updated; err[0] = -1 otherwise."""
    V, D = p.shape
    err[0] = -1
    for r in range(V):
        if mask[r] == 0:
            gr = g[r]
            for j in range(D):
                if gr[j] != 0.0:
                    err[0] = r
                    return
    for r in range(V):
        if mask[r] == 0:
            continue
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
