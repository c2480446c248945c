"""Volumetric (3-d) convolution and pooling over NCDHW arrays: direct loops, for the 3-d layers.

Arrays are C-contiguous float32/float64.  Geometry tuples ``s`` (stride), ``p`` (padding, at the
start of each axis), ``d`` (dilation) have three entries (D, H, W); an input position
``o * s + k * d - p`` outside the input is padding (read as 0 by convolution, skipped by max
pooling): every read and write is inside its array.

- ``conv3d(x, w, b, s, p, d, groups, out)``: out[n, o, z, y, x] = b[o] + sum over the channels c of
  o's group and kernel offsets k of w[o, c, k] x[n, g * Cg + c, z s + k d - p] (b of size 0: no
  bias).  ``conv3d_grad_input`` is its adjoint in x (also the transposed convolution's forward)
  and ``conv3d_grad_weight`` the gradient in w.
- ``max_pool3d(x, k, s, p, d, out, idx)``: the window maximum (a NaN wins) and its flat
  ``(z H + y) W + x`` index in the input plane; ``max_pool3d_grad`` adds g at those indices.
- ``avg_pool3d(x, k, s, p, count_pad, divisor, out)``: PyTorch's average pooling (the window
  clipped to the padded input for the count, to the input for the sum); ``avg_pool3d_grad``.
- ``adaptive_avg3d(x, out)``: output cell i averages input rows floor(i D / OD) .. ceil((i + 1) D /
  OD) - 1 per axis; ``adaptive_avg3d_grad``.

Parallel loops run over (n, channel) pairs or over the batch, writing only their own outputs.
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import parallel_kernel, prange, subroutine


@parallel_kernel
def conv3d(x, w, b, s, p, d, groups, out):
    N, C, D, H, W = x.shape
    OC, Cg, KD, KH, KW = w.shape
    _, _, OD, OH, OW = out.shape
    OCg = OC // groups
    for job in prange(N * OC):
        n, o = job // OC, job % OC
        g = o // OCg
        for oz in range(OD):
            for oy in range(OH):
                for ox in range(OW):
                    acc = b[o] if b.size else 0.0
                    for c in range(Cg):
                        ci = g * Cg + c
                        for kz in range(KD):
                            iz = oz * s[0] + kz * d[0] - p[0]
                            if iz < 0 or iz >= D:
                                continue
                            for ky in range(KH):
                                iy = oy * s[1] + ky * d[1] - p[1]
                                if iy < 0 or iy >= H:
                                    continue
                                for kx in range(KW):
                                    ix = ox * s[2] + kx * d[2] - p[2]
                                    if 0 <= ix < W:
                                        acc += w[o, c, kz, ky, kx] * x[n, ci, iz, iy, ix]
                    out[n, o, oz, oy, ox] = acc


@parallel_kernel
def conv3d_grad_input(g, w, s, p, d, groups, out):
    """out (N, C, D, H, W) = the adjoint of ``conv3d`` in x applied to g (N, OC, OD, OH, OW)."""
    N, C, D, H, W = out.shape
    OC, Cg, KD, KH, KW = w.shape
    _, _, OD, OH, OW = g.shape
    OCg = OC // groups
    for n in prange(N):
        for c in range(C):
            for z in range(D):
                for y in range(H):
                    for xx in range(W):
                        out[n, c, z, y, xx] = 0.0
        for o in range(OC):
            grp = o // OCg
            for oz in range(OD):
                for oy in range(OH):
                    for ox in range(OW):
                        go = g[n, o, oz, oy, ox]
                        for c in range(Cg):
                            ci = grp * Cg + c
                            for kz in range(KD):
                                iz = oz * s[0] + kz * d[0] - p[0]
                                if iz < 0 or iz >= D:
                                    continue
                                for ky in range(KH):
                                    iy = oy * s[1] + ky * d[1] - p[1]
                                    if iy < 0 or iy >= H:
                                        continue
                                    for kx in range(KW):
                                        ix = ox * s[2] + kx * d[2] - p[2]
                                        if 0 <= ix < W:
                                            out[n, ci, iz, iy, ix] += w[o, c, kz, ky, kx] * go


@parallel_kernel
def conv3d_grad_weight(g, x, s, p, d, groups, out):
    """out (OC, Cg, KD, KH, KW) = dL/dw of ``conv3d`` for output gradient g."""
    N, C, D, H, W = x.shape
    OC, Cg, KD, KH, KW = out.shape
    _, _, OD, OH, OW = g.shape
    OCg = OC // groups
    for o in prange(OC):
        grp = o // OCg
        for c in range(Cg):
            ci = grp * Cg + c
            for kz in range(KD):
                for ky in range(KH):
                    for kx in range(KW):
                        acc = 0.0
                        for n in range(N):
                            for oz in range(OD):
                                iz = oz * s[0] + kz * d[0] - p[0]
                                if iz < 0 or iz >= D:
                                    continue
                                for oy in range(OH):
                                    iy = oy * s[1] + ky * d[1] - p[1]
                                    if iy < 0 or iy >= H:
                                        continue
                                    for ox in range(OW):
                                        ix = ox * s[2] + kx * d[2] - p[2]
                                        if 0 <= ix < W:
                                            acc += g[n, o, oz, oy, ox] * x[n, ci, iz, iy, ix]
                        out[o, c, kz, ky, kx] = acc


@parallel_kernel
def max_pool3d(x, k, s, p, d, out, idx):
    N, C, D, H, W = x.shape
    _, _, OD, OH, OW = out.shape
    for job in prange(N * C):
        n, c = job // C, job % C
        for oz in range(OD):
            for oy in range(OH):
                for ox in range(OW):
                    best = -math.inf
                    at = -1
                    for kz in range(k[0]):
                        iz = oz * s[0] + kz * d[0] - p[0]
                        if iz < 0 or iz >= D:
                            continue
                        for ky in range(k[1]):
                            iy = oy * s[1] + ky * d[1] - p[1]
                            if iy < 0 or iy >= H:
                                continue
                            for kx in range(k[2]):
                                ix = ox * s[2] + kx * d[2] - p[2]
                                if ix < 0 or ix >= W:
                                    continue
                                v = x[n, c, iz, iy, ix]
                                if at < 0 or v > best or v != v:  # (PyTorch's test)
                                    best = v
                                    at = (iz * H + iy) * W + ix
                    out[n, c, oz, oy, ox] = best
                    idx[n, c, oz, oy, ox] = at


@parallel_kernel
def max_pool3d_grad(g, idx, out):
    """out (N, C, D, H, W): g added at each window's maximum (``idx`` from ``max_pool3d``)."""
    N, C, D, H, W = out.shape
    _, _, OD, OH, OW = g.shape
    plane = D * H * W
    for job in prange(N * C):
        n, c = job // C, job % C
        for iz in range(D):
            for iy in range(H):
                for ix in range(W):
                    out[n, c, iz, iy, ix] = 0.0
        for oz in range(OD):
            for oy in range(OH):
                for ox in range(OW):
                    i = idx[n, c, oz, oy, ox]
                    if 0 <= i < plane:
                        out[n, c, i // (H * W), (i // W) % H, i % W] += g[n, c, oz, oy, ox]


@subroutine
def _avg_window(o, s, p, k, n):
    """The window of output position ``o`` along one axis: (first, end) inside the input and
    its extent within the padded input (what ``count_include_pad`` divides by)."""
    lo = o * s - p
    hi = min(lo + k, n + p)
    return max(lo, 0), min(hi, n), hi - lo


@subroutine
def _avg_divisor(count_pad, divisor, padded, inside):
    if divisor > 0:
        return divisor
    return padded if count_pad else inside


@subroutine
def _adaptive_window(o, n, on):
    """Rows floor(o n / on) .. ceil((o + 1) n / on) - 1 of ``n`` for output cell ``o`` of ``on``."""
    return (o * n) // on, -((-(o + 1) * n) // on)


@parallel_kernel
def avg_pool3d(x, k, s, p, count_pad, divisor, out):
    N, C, D, H, W = x.shape
    _, _, OD, OH, OW = out.shape
    for job in prange(N * C):
        n, c = job // C, job % C
        for oz in range(OD):
            a0, a1, ez = _avg_window(oz, s[0], p[0], k[0], D)
            for oy in range(OH):
                b0, b1, ey = _avg_window(oy, s[1], p[1], k[1], H)
                for ox in range(OW):
                    c0, c1, ex = _avg_window(ox, s[2], p[2], k[2], W)
                    acc = 0.0
                    for iz in range(a0, a1):
                        for iy in range(b0, b1):
                            for ix in range(c0, c1):
                                acc += x[n, c, iz, iy, ix]
                    div = _avg_divisor(count_pad, divisor, ez * ey * ex,
                                       (a1 - a0) * (b1 - b0) * (c1 - c0))
                    out[n, c, oz, oy, ox] = acc / div if div > 0 else 0.0


@parallel_kernel
def avg_pool3d_grad(g, k, s, p, count_pad, divisor, out):
    N, C, D, H, W = out.shape
    _, _, OD, OH, OW = g.shape
    for job in prange(N * C):
        n, c = job // C, job % C
        for iz in range(D):
            for iy in range(H):
                for ix in range(W):
                    out[n, c, iz, iy, ix] = 0.0
        for oz in range(OD):
            a0, a1, ez = _avg_window(oz, s[0], p[0], k[0], D)
            for oy in range(OH):
                b0, b1, ey = _avg_window(oy, s[1], p[1], k[1], H)
                for ox in range(OW):
                    c0, c1, ex = _avg_window(ox, s[2], p[2], k[2], W)
                    div = _avg_divisor(count_pad, divisor, ez * ey * ex,
                                       (a1 - a0) * (b1 - b0) * (c1 - c0))
                    if div <= 0:
                        continue
                    share = g[n, c, oz, oy, ox] / div
                    for iz in range(a0, a1):
                        for iy in range(b0, b1):
                            for ix in range(c0, c1):
                                out[n, c, iz, iy, ix] += share


@parallel_kernel
def adaptive_avg3d(x, out):
    N, C, D, H, W = x.shape
    _, _, OD, OH, OW = out.shape
    for job in prange(N * C):
        n, c = job // C, job % C
        for oz in range(OD):
            z0, z1 = _adaptive_window(oz, D, OD)
            for oy in range(OH):
                y0, y1 = _adaptive_window(oy, H, OH)
                for ox in range(OW):
                    x0, x1 = _adaptive_window(ox, W, OW)
                    acc = 0.0
                    for iz in range(z0, z1):
                        for iy in range(y0, y1):
                            for ix in range(x0, x1):
                                acc += x[n, c, iz, iy, ix]
                    out[n, c, oz, oy, ox] = acc / ((z1 - z0) * (y1 - y0) * (x1 - x0))


@parallel_kernel
def adaptive_avg3d_grad(g, out):
    N, C, D, H, W = out.shape
    _, _, OD, OH, OW = g.shape
    for job in prange(N * C):
        n, c = job // C, job % C
        for iz in range(D):
            for iy in range(H):
                for ix in range(W):
                    out[n, c, iz, iy, ix] = 0.0
        for oz in range(OD):
            z0, z1 = _adaptive_window(oz, D, OD)
            for oy in range(OH):
                y0, y1 = _adaptive_window(oy, H, OH)
                for ox in range(OW):
                    x0, x1 = _adaptive_window(ox, W, OW)
                    share = g[n, c, oz, oy, ox] / ((z1 - z0) * (y1 - y0) * (x1 - x0))
                    for iz in range(z0, z1):
                        for iy in range(y0, y1):
                            for ix in range(x0, x1):
                                out[n, c, iz, iy, ix] += share
