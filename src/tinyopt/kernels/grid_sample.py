"""Grid sampling (``F.grid_sample``, 2-D): read ``x`` at the points a grid of normalized
coordinates names, with bilinear or nearest interpolation, as PyTorch's CPU kernel does.

Arrays are C-contiguous float32/float64: ``x`` (N, C, H, W), ``grid`` (N, Ho, Wo, 2) holding
(x, y) in [-1, 1], ``out`` (N, C, Ho, Wo).  A grid coordinate g becomes a pixel coordinate

    align_corners:  ((g + 1) / 2) (size - 1)        (-1 and 1 are the corner pixels' centres)
    otherwise:      ((g + 1) size - 1) / 2          (-1 and 1 are the corner pixels' edges)

then ``padding`` 0 (zeros: points outside read 0), 1 (border: clipped to [0, size - 1]) or 2
(reflection: reflected about the border, then clipped); a NaN coordinate clips to 0.  Bilinear reads
the four neighbours ``floor`` and ``floor + 1`` with weights (1 - fx, fx) (1 - fy, fy); nearest
reads the neighbour at ``nearbyint`` (ties to even).  Every read is checked against the array's
bounds (a neighbour outside reads 0; with zeros padding a NaN or infinite coordinate gives NaN, as
PyTorch's bilinear kernel does), so no grid makes a kernel read or write outside ``x``.

``grid_sample_grad`` gives dL/dx (scattered to the neighbours read) and dL/dgrid (bilinear: the
weights' derivatives times the chain rule of the coordinate map; nearest: 0).  The parallel
loops run over the batch: iteration n writes only ``out[n]``, ``gx[n]`` and ``ggrid[n]``.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.jit import parallel_kernel, prange, subroutine


@subroutine
def _unnormalize(g, size, align):
    """(pixel coordinate, d coordinate / d g)."""
    if align:
        return (g + 1.0) / 2.0 * (size - 1), (size - 1) / 2.0
    return ((g + 1.0) * size - 1.0) / 2.0, size / 2.0


@subroutine
def _clip(c, size):
    """(c clipped to [0, size - 1], its derivative; NaN becomes 0, as in PyTorch)."""
    if not c > 0.0:
        return 0.0, 0.0
    hi = size - 1.0
    if c >= hi:
        return hi, 0.0
    return c, 1.0


@subroutine
def _reflect(c, twice_low, twice_high):
    """(c reflected into [low, high] with low = twice_low / 2..., its derivative: +1 or -1)."""
    if twice_low == twice_high:
        return 0.0, 0.0
    low = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    sign = 1.0
    c = c - low
    if c < 0.0:
        sign = -1.0
        c = -c
    extra = np.fmod(c, span)
    flips = math.floor(c / span)
    if flips % 2.0 == 0.0:
        return extra + low, sign
    return span - extra + low, -sign


@subroutine
def _source(g, size, padding, align):
    """(pixel coordinate to read, its derivative with respect to the grid value g)."""
    c, d = _unnormalize(g, size, align)
    if padding == 1:
        c, dc = _clip(c, size)
        d *= dc
    elif padding == 2:
        if align:
            c, dr = _reflect(c, 0.0, 2.0 * (size - 1))
        else:
            c, dr = _reflect(c, -1.0, 2.0 * size - 1.0)
        c2, dc = _clip(c, size)
        c = c2
        d *= dr * dc
    return c, d


@subroutine
def _inside(i, j, H, W):
    return 0 <= i < H and 0 <= j < W


@subroutine
def _floor_index(c, limit):
    """floor(c) as an int, or -2 when c is not finite or far outside (never read)."""
    if not (c > -2.0 and c < limit + 1.0):  # (False for NaN)
        return -2
    return int(math.floor(c))


@subroutine
def _nearest_index(c, limit):
    """c rounded half to even (C's nearbyint) as an int, or -2 as ``_floor_index``."""
    if not (c > -2.0 and c < limit + 1.0):
        return -2
    return int(round(c))


@subroutine
def _bilinear(ix, iy, H, W):
    """The top-left neighbour (x0, y0), the fractions (fx, fy), the four weights and which of the
    four neighbours lie inside (x0 = -2 when the point is far outside or not finite)."""
    x0 = _floor_index(ix, W)
    y0 = _floor_index(iy, H)
    fx = ix - x0
    fy = iy - y0
    return (x0, y0, fx, fy, (1.0 - fx) * (1.0 - fy), fx * (1.0 - fy), (1.0 - fx) * fy, fx * fy,
            _inside(y0, x0, H, W), _inside(y0, x0 + 1, H, W), _inside(y0 + 1, x0, H, W),
            _inside(y0 + 1, x0 + 1, H, W))


@parallel_kernel
def grid_sample(x, grid, mode, padding, align, out):
    N, C, H, W = x.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    for n in prange(N):
        for i in range(Ho):
            for j in range(Wo):
                ix, _ = _source(grid[n, i, j, 0], W, padding, align)
                iy, _ = _source(grid[n, i, j, 1], H, padding, align)
                if mode == 1:  # nearest
                    xi, yi = _nearest_index(ix, W), _nearest_index(iy, H)
                    ok = _inside(yi, xi, H, W)
                    for c in range(C):
                        out[n, c, i, j] = x[n, c, yi, xi] if ok else 0.0
                    continue
                (x0, y0, fx, fy, w00, w01, w10, w11, in00, in01, in10,
                 in11) = _bilinear(ix, iy, H, W)
                if x0 == -2 or y0 == -2:  # outside: 0; a NaN or infinite coordinate: NaN
                    v = 0.0 if math.isfinite(ix) and math.isfinite(iy) else math.nan
                    for c in range(C):
                        out[n, c, i, j] = v
                    continue
                for c in range(C):
                    v = 0.0
                    if in00:
                        v += x[n, c, y0, x0] * w00
                    if in01:
                        v += x[n, c, y0, x0 + 1] * w01
                    if in10:
                        v += x[n, c, y0 + 1, x0] * w10
                    if in11:
                        v += x[n, c, y0 + 1, x0 + 1] * w11
                    out[n, c, i, j] = v


@parallel_kernel
def grid_sample_grad(g, x, grid, mode, padding, align, gx, ggrid):
    N, C, H, W = x.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    for n in prange(N):
        for c in range(C):
            for y in range(H):
                for xx in range(W):
                    gx[n, c, y, xx] = 0.0
        for i in range(Ho):
            for j in range(Wo):
                ix, dix = _source(grid[n, i, j, 0], W, padding, align)
                iy, diy = _source(grid[n, i, j, 1], H, padding, align)
                ggrid[n, i, j, 0] = 0.0
                ggrid[n, i, j, 1] = 0.0
                if mode == 1:
                    xi, yi = _nearest_index(ix, W), _nearest_index(iy, H)
                    if _inside(yi, xi, H, W):
                        for c in range(C):
                            gx[n, c, yi, xi] += g[n, c, i, j]
                    continue
                (x0, y0, fx, fy, w00, w01, w10, w11, in00, in01, in10,
                 in11) = _bilinear(ix, iy, H, W)
                if x0 == -2 or y0 == -2:
                    if not (math.isfinite(ix) and math.isfinite(iy)):
                        ggrid[n, i, j, 0] = math.nan
                        ggrid[n, i, j, 1] = math.nan
                    continue
                gix = 0.0
                giy = 0.0
                for c in range(C):
                    go = g[n, c, i, j]
                    v00 = x[n, c, y0, x0] if in00 else 0.0
                    v01 = x[n, c, y0, x0 + 1] if in01 else 0.0
                    v10 = x[n, c, y0 + 1, x0] if in10 else 0.0
                    v11 = x[n, c, y0 + 1, x0 + 1] if in11 else 0.0
                    if in00:
                        gx[n, c, y0, x0] += w00 * go
                    if in01:
                        gx[n, c, y0, x0 + 1] += w01 * go
                    if in10:
                        gx[n, c, y0 + 1, x0] += w10 * go
                    if in11:
                        gx[n, c, y0 + 1, x0 + 1] += w11 * go
                    gix += go * ((v01 - v00) * (1.0 - fy) + (v11 - v10) * fy)
                    giy += go * ((v10 - v00) * (1.0 - fx) + (v11 - v01) * fx)
                ggrid[n, i, j, 0] = gix * dix
                ggrid[n, i, j, 1] = giy * diy
