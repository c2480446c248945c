"""Group normalization kernels (Wu & He 2018, https://arxiv.org/abs/1803.08494); instance norm is
the case of one channel per group.

``x`` is seen as (N, G, Cg, S): batch, groups, channels per group, spatial size; C-contiguous
float32/float64, statistics in float64.  Each (n, g) is a row of Cg*S values with mean ``mu``,
biased variance ``var`` and ``rstd = 1 / sqrt(var + eps)``; ``xhat = (x - mu) rstd``; the affine
weight ``w`` and bias ``b`` are per channel c = g*Cg + k.  Parallel loops write only their own row
(or, for the parameter gradients, their own channel).
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import parallel_kernel, prange


@parallel_kernel
def group_norm_stats(x, eps, stats):
    """stats[n*G + g] = (mu, rstd, var) of row (n, g) (two passes)."""
    N, G, Cg, S = x.shape
    D = Cg * S
    for r in prange(N * G):
        n, g = r // G, r % G
        acc = 0.0
        for k in range(Cg):
            for s in range(S):
                acc += x[n, g, k, s]
        mu = acc / D
        ss = 0.0
        for k in range(Cg):
            for s in range(S):
                e = x[n, g, k, s] - mu
                ss += e * e
        var = ss / D
        stats[r, 0] = mu
        stats[r, 1] = 1.0 / math.sqrt(var + eps)
        stats[r, 2] = var


@parallel_kernel
def group_norm_apply(x, stats, w, b, has_w, has_b, out):
    """out = xhat * w[c] + b[c] (w = 1, b = 0 when absent)."""
    N, G, Cg, S = x.shape
    for r in prange(N * G):
        n, g = r // G, r % G
        mu, rs = stats[r, 0], stats[r, 1]
        for k in range(Cg):
            c = g * Cg + k
            scale = rs * w[c] if has_w else rs
            shift = b[c] if has_b else 0.0
            for s in range(S):
                out[n, g, k, s] = (x[n, g, k, s] - mu) * scale + shift


@parallel_kernel
def group_norm_grad_x(gy, x, stats, w, has_w, out):
    """dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) over each row, gw = gy * w[c]."""
    N, G, Cg, S = x.shape
    D = Cg * S
    for r in prange(N * G):
        n, g = r // G, r % G
        mu, rs = stats[r, 0], stats[r, 1]
        s1 = 0.0
        s2 = 0.0
        for k in range(Cg):
            wc = w[g * Cg + k] if has_w else 1.0
            for s in range(S):
                gw = gy[n, g, k, s] * wc
                s1 += gw
                s2 += gw * (x[n, g, k, s] - mu) * rs
        s1 /= D
        s2 /= D
        for k in range(Cg):
            wc = w[g * Cg + k] if has_w else 1.0
            for s in range(S):
                xh = (x[n, g, k, s] - mu) * rs
                out[n, g, k, s] = rs * (gy[n, g, k, s] * wc - s1 - xh * s2)


@parallel_kernel
def group_norm_grad_wb(gy, x, stats, out):
    """out[0, c] = sum over n, s of gy xhat (dw) and out[1, c] = sum of gy (db)."""
    N, G, Cg, S = x.shape
    for c in prange(G * Cg):
        g, k = c // Cg, c % Cg
        dw = 0.0
        db = 0.0
        for n in range(N):
            r = n * G + g
            mu, rs = stats[r, 0], stats[r, 1]
            for s in range(S):
                v = gy[n, g, k, s]
                dw += v * (x[n, g, k, s] - mu) * rs
                db += v
        out[0, c] = dw
        out[1, c] = db


@parallel_kernel
def instance_running_stats(stats, N, out):
    """out[:, c] = (mean over n of mu, mean over n of var, 0) from instance stats (N*C, 3), for the
    running-statistics update (the batch-norm rule applied to every instance, then averaged)."""
    C = out.shape[1]
    for c in prange(C):
        m = 0.0
        v = 0.0
        for n in range(N):
            m += stats[n * C + c, 0]
            v += stats[n * C + c, 2]
        out[0, c] = m / N
        out[1, c] = v / N
        out[2, c] = 0.0
