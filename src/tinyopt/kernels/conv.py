"""Convolution and pooling kernels over NCHW arrays: im2col/col2im, direct stride-1 convolution
(forward, input and parameter gradients, with a ReLU and a max-pool fused), max and average
pooling.

All arrays are C-contiguous, float32 or float64 (indices int64).  Geometry follows PyTorch: an
output position ``(y, z)`` of a window with kernel ``(kh, kw)``, stride ``(sh, sw)``, padding
``(ph, pw)`` (top/left) and dilation ``(dh, dw)`` reads input rows ``y*sh - ph + i*dh`` and columns
``z*sw - pw + j*dw``, for ``i < kh, j < kw``; positions outside the input are zero (convolution) or
skipped (pooling).  Every parallel loop runs over the ``N*C`` planes: iteration ``p`` writes only
plane ``p`` of its output.
"""

from __future__ import annotations

import math

import numpy as np
from numba import uint64

from tinyopt.kernels.jit import (c_callback, inline, kernel, parallel_kernel, prange, specialized,
                                 subroutine)
from tinyopt.kernels.native import blas
from tinyopt.kernels.native.address import carray


@specialized
def im2col(kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int):
    """Unfold windows into columns: ``im2col[kh, kw, sh, sw, ph, pw, dh, dw](x, col)`` sets
    col[(c*kh + i)*kw + j, n, y, z] = x[n, c, y*sh - ph + i*dh, z*sw - pw + j*dw], 0 outside the
    input.

    x (N, C, H, W); col (C*kh*kw, N, OH, OW) is overwritten.  With this layout a convolution is one
    GEMM over the whole batch: (OC, C*kh*kw) @ (C*kh*kw, N*OH*OW).  The geometry is compiled in
    (measured on the CNN's 3x3 pad-1 layers: 25% faster than with runtime sizes)."""
    @parallel_kernel
    def im2col_kernel(x, col):
        N, C, H, W = x.shape
        oh, ow = col.shape[2], col.shape[3]
        for p in prange(N * C):
            n = p // C
            c = p - n * C
            for i in range(kh):
                for j in range(kw):
                    r = (c * kh + i) * kw + j
                    for y in range(oh):
                        hy = y * sh - ph + i * dh
                        if hy < 0 or hy >= H:
                            for z in range(ow):
                                col[r, n, y, z] = 0
                            continue
                        for z in range(ow):
                            wx = z * sw - pw + j * dw
                            if 0 <= wx < W:
                                col[r, n, y, z] = x[n, c, hy, wx]
                            else:
                                col[r, n, y, z] = 0
    return im2col_kernel


@specialized
def col2im(kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int):
    """The adjoint of :func:`im2col`: ``col2im[geometry](col, x)`` sets x[n, c, h, w] = the sum of
    the column entries that im2col read from (h, w).  col (C*kh*kw, N, OH, OW); x (N, C, H, W) is
    overwritten."""
    @parallel_kernel
    def col2im_kernel(col, x):
        N, C, H, W = x.shape
        oh, ow = col.shape[2], col.shape[3]
        for p in prange(N * C):
            n = p // C
            c = p - n * C
            for h in range(H):
                for w in range(W):
                    x[n, c, h, w] = 0
            for i in range(kh):
                for j in range(kw):
                    r = (c * kh + i) * kw + j
                    for y in range(oh):
                        hy = y * sh - ph + i * dh
                        if hy < 0 or hy >= H:
                            continue
                        for z in range(ow):
                            wx = z * sw - pw + j * dw
                            if 0 <= wx < W:
                                x[n, c, hy, wx] += col[r, n, y, z]
    return col2im_kernel


@parallel_kernel
def max_pool2d_indices(x, idx, kh, kw, sh, sw, ph, pw, dh, dw):
    """idx[p, y, z] = h*W + w of the maximum of plane p's window at (y, z) (the first on ties);
    the last NaN in the window wins, as in PyTorch.  x (P, H, W) planes, idx (P, OH, OW) int64."""
    P, H, W = x.shape
    oh, ow = idx.shape[1], idx.shape[2]
    for p in prange(P):
        for y in range(oh):
            h0 = y * sh - ph
            for z in range(ow):
                w0 = z * sw - pw
                best = -math.inf
                k = -1
                for i in range(kh):
                    h = h0 + i * dh
                    if h < 0 or h >= H:
                        continue
                    for j in range(kw):
                        w = w0 + j * dw
                        if w < 0 or w >= W:
                            continue
                        v = x[p, h, w]
                        if k < 0 or v > best or v != v:
                            best = v
                            k = h * W + w
                idx[p, y, z] = k


@specialized
def max_pool2d_indices_dense(kh: int, kw: int, sh: int, sw: int):
    """:func:`max_pool2d_indices` for windows that lie inside the plane (no padding, no
    dilation): ``max_pool2d_indices_dense[kh, kw, sh, sw](x, idx)`` gives the same indices with
    the window geometry compiled in (the window loops unroll), unsigned indices and no branch
    but a rare one: ``seen`` (a NaN was taken) freezes the index, ``best`` follows the maximum
    through ``max``, which keeps a NaN it holds, and a window that held a NaN is scanned again
    for its last one (torch's index).  2x2 windows of (2048, 28, 28) planes: 1.66 ms, against
    4.9 ms with signed indices and the NaN rule in the comparison; the last-NaN rule in the
    comparison cost 15-20 % more."""
    @parallel_kernel
    def max_pool_dense(x, idx):
        P, H, W = x.shape
        oh, ow = idx.shape[1], idx.shape[2]
        uW = uint64(W)
        for p in prange(P):
            plane = x[p].ravel()
            out = idx[p].ravel()
            for y in range(uint64(oh)):
                r0 = y * uint64(sh) * uW
                orow = out[y * uint64(ow):]
                for z in range(uint64(ow)):
                    k0 = r0 + z * uint64(sw)
                    best = plane[k0]
                    seen = best != best  # the first NaN freezes k
                    k = k0
                    for i in range(uint64(kh)):
                        for j in range(uint64(kw)):
                            if i + j > 0:
                                kk = k0 + i * uW + j
                                v = plane[kk]
                                isnan = v != v
                                k = kk if ((v > best) | isnan) & (not seen) else k
                                best = max(best, v)
                                seen |= isnan
                    if seen:  # (rare) torch's index is the window's last NaN
                        for i in range(uint64(kh)):
                            for j in range(uint64(kw)):
                                kk = k0 + i * uW + j
                                k = kk if plane[kk] != plane[kk] else k
                    orow[z] = k
    return max_pool_dense


@parallel_kernel
def gather_planes(x, idx, out):
    """out[p, k] = x[p, idx[p, k]]: x (P, H*W), idx and out (P, L)."""
    P, L = idx.shape
    for p in prange(P):
        for k in range(L):
            out[p, k] = x[p, idx[p, k]]


@parallel_kernel
def scatter_add_planes(g, idx, out):
    """The adjoint of :func:`gather_planes`: out[p, :] = 0, then out[p, idx[p, k]] += g[p, k]."""
    P, L = idx.shape
    HW = out.shape[1]
    for p in prange(P):
        for k in range(HW):
            out[p, k] = 0
        for k in range(L):
            out[p, idx[p, k]] += g[p, k]


@kernel
def _avg_window(y, z, H, W, kh, kw, sh, sw, ph, pw, count_include_pad, divisor):
    """Rows [h0, h1) and columns [w0, w1) of output (y, z)'s window inside the input, and
    PyTorch's divisor d: ``divisor`` if > 0, else the window clipped to the padded input
    (count_include_pad) or to the input."""
    h0 = y * sh - ph
    w0 = z * sw - pw
    h1 = min(h0 + kh, H + ph)
    w1 = min(w0 + kw, W + pw)
    size = (h1 - h0) * (w1 - w0)
    h0 = max(h0, 0)
    w0 = max(w0, 0)
    h1 = min(h1, H)
    w1 = min(w1, W)
    if divisor > 0:
        d = divisor
    elif count_include_pad:
        d = size
    else:
        d = (h1 - h0) * (w1 - w0)
    return h0, h1, w0, w1, d


@parallel_kernel
def avg_pool2d(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, divisor):
    """out[p, y, z] = (sum of the window at (y, z) inside the input) / d, with PyTorch's divisor d:
    ``divisor`` if > 0, else the window size clipped to the padded input (count_include_pad) or to
    the input.  x (P, H, W), out (P, OH, OW)."""
    P, H, W = x.shape
    oh, ow = out.shape[1], out.shape[2]
    for p in prange(P):
        for y in range(oh):
            for z in range(ow):
                h0, h1, w0, w1, d = _avg_window(y, z, H, W, kh, kw, sh, sw, ph, pw,
                                                count_include_pad, divisor)
                if h0 >= h1 or w0 >= w1:
                    out[p, y, z] = 0
                    continue
                acc = 0.0
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        acc += x[p, h, w]
                out[p, y, z] = acc / d


@parallel_kernel
def avg_pool2d_grad(g, gx, kh, kw, sh, sw, ph, pw, count_include_pad, divisor):
    """The adjoint of :func:`avg_pool2d`: each g[p, y, z] / d is added to its window.
    g (P, OH, OW), gx (P, H, W) is overwritten."""
    P, H, W = gx.shape
    oh, ow = g.shape[1], g.shape[2]
    for p in prange(P):
        for h in range(H):
            for w in range(W):
                gx[p, h, w] = 0
        for y in range(oh):
            for z in range(ow):
                h0, h1, w0, w1, d = _avg_window(y, z, H, W, kh, kw, sh, sw, ph, pw,
                                                count_include_pad, divisor)
                if h0 >= h1 or w0 >= w1:
                    continue
                v = g[p, y, z] / d
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        gx[p, h, w] += v


# ---- direct convolution, stride 1 ----------------------------------------------------------------
# A sample's input planes are copied into zero planes of Hp = OH + (kh-1)*dh rows of
# Wp = OW + (kw-1)*dw columns (the padding), so output position q = y*Wp + z reads the padded
# plane at q + i*dh*Wp + j*dw for tap (i, j): over q that is one contiguous run per tap, which
# vectorizes (the Wp - OW positions at the end of each row are computed and dropped).  Indices are
# unsigned: numba wraps negative indices, and where LLVM cannot prove an index non-negative that
# select keeps the loop from vectorizing (3x3 taps over 224 outputs: 536 ns signed, 98 ns unsigned).

@subroutine
def _pad_plane(src, dst, pt, pl, Hp, Wp):
    """dst[(h + pt)*Wp + w + pl] = src[h, w] where that lies inside the Hp x Wp plane (the rest of
    dst is left as it is: zero); whether every copied value is finite."""
    H, W = src.shape
    finite = True
    w0, w1 = max(0, -pl), min(W, Wp - pl)
    for h in range(max(0, -pt), min(H, Hp - pt)):
        s = src[h]
        d = dst[(h + pt) * Wp + pl + w0:]
        ok = True
        for w in range(uint64(w1 - w0)):
            v = s[w + uint64(w0)]
            ok &= v - v == 0
            d[w] = v
        finite &= ok
    return finite


@subroutine
def _relu_plane(g, y, dst, pt, pl, Hp, Wp):
    """:func:`_pad_plane` of g masked by the ReLU's output y: 0 where y <= 0, else g (as
    ``relu_grad``: a NaN output passes the gradient)."""
    H, W = g.shape
    w0, w1 = max(0, -pl), min(W, Wp - pl)
    for h in range(max(0, -pt), min(H, Hp - pt)):
        s, m = g[h], y[h]
        d = dst[(h + pt) * Wp + pl + w0:]
        for w in range(uint64(w1 - w0)):
            d[w] = 0 if m[w + uint64(w0)] <= 0 else s[w + uint64(w0)]


@subroutine
def _unpool_plane(g, pv, ptap, dst, pt, pl, Hp, Wp, H, W, pkh, pkw, psh, psw, relu):
    """:func:`_pad_plane` of the H x W plane that max-pooling's gradient g scatters to: each
    g[u, v] added at its window's tap ptap[u, v] (pooled value pv[u, v]; skipped when ``relu`` and
    pv <= 0, the ReLU's mask), in row-major order of (u, v), onto zeros: the values of
    ``scatter_add_planes`` then ``relu_grad``, bit for bit (0 + g, so a -0 gradient lands as +0)."""
    PU, PV = g.shape
    zero = g.dtype.type(0)
    if psh >= pkh and psw >= pkw and pt >= 0 and pl >= 0 and (PU - 1) * psh + pkh + pt <= Hp \
            and (PV - 1) * psw + pkw + pl <= Wp:
        # windows that do not overlap, inside the plane: zeros, then each gradient stored at
        # its tap's address (no branch on the data: random taps and masks would mispredict; and
        # a bare comparison, as ``not`` or ``|`` on booleans keep LLVM from making a select)
        for h in range(uint64(H)):
            row = dst[(h + uint64(pt)) * uint64(Wp) + uint64(pl):]
            for w in range(uint64(W)):
                row[w] = 0
        for u in range(uint64(PU)):
            gu, mu, tu = g[u], pv[u], ptap[u]
            d = dst[(u * uint64(psh) + uint64(pt)) * uint64(Wp) + uint64(pl):]
            for v in range(uint64(PV)):
                gv = zero + gu[v]
                if relu:
                    gv = zero if mu[v] <= 0 else gv
                tap = uint64(tu[v])
                d[(tap // uint64(pkw)) * uint64(Wp) + v * uint64(psw) + tap % uint64(pkw)] = gv
        return
    for h in range(max(0, -pt), min(H, Hp - pt)):
        for w in range(max(0, -pl), min(W, Wp - pl)):
            dst[(h + pt) * Wp + pl + w] = 0
    for u in range(PU):
        for v in range(PV):
            if relu and pv[u, v] <= 0:
                continue
            tap = int(ptap[u, v])
            r = u * psh + tap // pkw + pt
            c = v * psw + tap % pkw + pl
            if 0 <= r < Hp and 0 <= c < Wp:
                dst[r * Wp + c] += g[u, v]


@subroutine
def _window_max(row, k0, Wp, pkh, pkw):
    """(value, tap) of the maximum of the pkh x pkw window at row[k0] (rows Wp apart): the first
    maximum in window order, or the last NaN if there is one (as :func:`max_pool2d_indices`).
    Every index unsigned (uint64 arguments)."""
    val = row[k0]
    tap = uint64(0)
    if val == val:
        for i in range(pkh):
            for j in range(pkw):
                e = row[k0 + i * Wp + j]
                if e != e:
                    val = e
                    break
                if e > val:
                    val, tap = e, i * pkw + j
            if val != val:
                break
    if val != val:  # (rare) torch's tap is the window's last NaN
        for i in range(pkh):
            for j in range(pkw):
                if row[k0 + i * Wp + j] != row[k0 + i * Wp + j]:
                    tap = i * pkw + j
    return val, row.dtype.type(tap)


PLAIN, POOL_OUT, RELU_IN, UNPOOL_IN = 0, 1, 2, 3  # the modes of the direct conv kernels

# The direct convolutions are C functions ``void chunk(int64 c, int64 *args)`` run by
# ``shared_threads.chunk_runner`` on the threads numpy's BLAS shares (or one after the other):
# args holds ``CONV_SLOTS`` arrays, array k as its address at args[6k] and its shape from
# args[6k + 1], then the scalars from ``CONV_SCALARS`` on.  Python worker threads for these chunks
# found the cores taken by the OpenMP threads spinning after the step's GEMMs: the CNN's step at
# batch 256 took as long on 2 threads as on 1.
CONV_SLOTS = 6
CONV_SCALARS = 6 * CONV_SLOTS
CONV_ARGS = CONV_SCALARS + 8


@inline
def _array1(a, k, z):
    return carray(blas.pointer(a[6 * k], z), (a[6 * k + 1],))


@inline
def _array3(a, k, z):
    return carray(blas.pointer(a[6 * k], z), (a[6 * k + 1], a[6 * k + 2], a[6 * k + 3]))


@inline
def _array4(a, k, z):
    return carray(blas.pointer(a[6 * k], z),
                  (a[6 * k + 1], a[6 * k + 2], a[6 * k + 3], a[6 * k + 4]))


@inline
def _array5(a, k, z):
    return carray(blas.pointer(a[6 * k], z),
                  (a[6 * k + 1], a[6 * k + 2], a[6 * k + 3], a[6 * k + 4], a[6 * k + 5]))


@specialized
def conv2d_direct(single: bool, kh: int, kw: int, mode: int = PLAIN, pkh: int = 0, pkw: int = 0,
                  psh: int = 0, psw: int = 0):
    """``conv2d_direct[single, kh, kw, ...]``: the C function (above) whose chunk c of ``n``
    (args[CONV_SCALARS + 7]) computes samples [c N / n, (c + 1) N / n) of the stride-1 convolution

        y[n, o, r, s] = act(sum_{c, i, j} w[o, c, i, j] xp[n, c, r + i*dh, s + j*dw] + b[o]),

    where xp is x placed at row pt, column pl of zero planes of OH + (kh-1)*dh rows and
    OW + (kw-1)*dw columns (negative pt, pl crop), act is relu when ``relu`` (NaN and -0.0 stay),
    and b has OC elements or none (no bias).  Each output sums over c, then i, then j, and adds the
    bias last; pairs of output channels share each load of the input.  With a flipped and
    transposed w and the complementary padding this is also the input gradient.

    The input planes are H x W and the output y goes into ``out`` (N, OC, OH, OW); the mode
    (compiled in, with the pooling window pkh x pkw at strides psh, psw) says what x and m are:

    - ``PLAIN``: x (N, C, H, W) is the input (m is not read).
    - ``POOL_OUT``: x as in PLAIN, and y is max-pooled instead of written, over windows that lie
      inside the plane: ``pooled[0, n, o, u, v]`` is the window's maximum (the first in window
      order on ties, the last NaN if any, as :func:`max_pool2d_indices`) and
      ``pooled[1, n, o, u, v]`` its tap i*pkw + j; ``out`` only gives (OH, OW) (it may be empty).
    - ``RELU_IN``: the input is x masked by a ReLU's output m[0] (x (N, C, H, W), m (1, N, C, H,
      W)), as ``relu_grad(x, m[0])``: the input gradient of a conv with the ReLU fused.
    - ``UNPOOL_IN``: the input is the H x W planes that the max-pooling gradient x (N, C, PU, PV)
      scatters to through ``m`` = the pooled array of a POOL_OUT run (masked by the ReLU when
      ``relu``; then y gets no ReLU).

    The arrays x, m, w, b, out, pooled are args' slots 0-5, then the scalars H, W, pt, pl, dh,
    dw, relu, n; w (OC, C, kh, kw); C-contiguous, float32 if ``single`` else float64."""
    K = kh * kw
    dt = np.float32 if single else np.float64

    @inline
    def conv(x, m, w, b, out, pooled, H, W, pt, pl, dh, dw, relu):
        N, C = x.shape[0], x.shape[1]
        OC, OH, OW = w.shape[0], out.shape[2], out.shape[3]
        Hp = OH + (kh - 1) * dh
        Wp = OW + (kw - 1) * dw
        L = OH * Wp
        wf = w.reshape(OC, C * K)
        has_b = b.shape[0] > 0
        uL, ui, uj, ukw, uWp = uint64(L), uint64(dh * Wp), uint64(dw), uint64(kw), uint64(Wp)
        xp = np.zeros((C, Hp * Wp + (kw - 1) * dw), x.dtype)
        acc = np.empty((2, L), x.dtype)
        act = relu and mode != UNPOOL_IN and mode != RELU_IN
        zero = x.dtype.type(0)
        for n in range(N):
            for c in range(C):
                if mode == RELU_IN:
                    _relu_plane(x[n, c], m[0, n, c], xp[c], pt, pl, Hp, Wp)
                elif mode == UNPOOL_IN:
                    _unpool_plane(x[n, c], m[0, n, c], m[1, n, c], xp[c], pt, pl, Hp, Wp, H, W,
                                  pkh, pkw, psh, psw, relu)
                else:
                    _pad_plane(x[n, c], xp[c], pt, pl, Hp, Wp)
            for o0 in range(0, OC, 2):
                pair = o0 + 1 < OC
                acc[:] = 0
                a0, a1 = acc[0], acc[1]
                for c in range(C):
                    xc = xp[c]
                    w0 = wf[o0, c * K:(c + 1) * K]
                    if pair:
                        w1 = wf[o0 + 1, c * K:(c + 1) * K]
                        for q in range(uL):
                            s0 = a0[q]
                            s1 = a1[q]
                            for i in range(uint64(kh)):
                                for j in range(ukw):
                                    v = xc[q + i * ui + j * uj]
                                    s0 += w0[i * ukw + j] * v
                                    s1 += w1[i * ukw + j] * v
                            a0[q] = s0
                            a1[q] = s1
                    else:
                        for q in range(uL):
                            s0 = a0[q]
                            for i in range(uint64(kh)):
                                for j in range(ukw):
                                    s0 += w0[i * ukw + j] * xc[q + i * ui + j * uj]
                            a0[q] = s0
                for k in range(2 if pair else 1):
                    o = o0 + k
                    a = acc[k]
                    if has_b:
                        bo = b[o]
                        for q in range(uL):
                            a[q] += bo
                    if act:
                        for q in range(uL):
                            v = a[q]
                            a[q] = 0 if v < 0 else v
                    if mode != POOL_OUT:
                        for y in range(OH):
                            row = a[y * Wp:]
                            orow = out[n, o, y]
                            for z in range(uint64(OW)):
                                orow[z] = row[z]
                        continue
                    # the pooling: comparisons without the NaN rule (selects, every lane a
                    # float, the tap too; no branch in the row's loop), then the exact rule for
                    # the windows of a row that holds a NaN (or an inf, whose e - e is NaN too)
                    pv, pt_ = pooled[0, n, o], pooled[1, n, o]
                    for u in range(uint64(pv.shape[0])):
                        row = a[u * uint64(psh) * uWp:]
                        prow, trow = pv[u], pt_[u]
                        bad = False
                        for v_ in range(uint64(pv.shape[1])):
                            k0 = v_ * uint64(psw)
                            best = row[k0]
                            val = best
                            tap = zero
                            check = best - best
                            for i in range(uint64(pkh)):
                                for j in range(uint64(pkw)):
                                    if i + j > 0:
                                        e = row[k0 + i * uWp + j]
                                        take = e > best
                                        val = e if take else val
                                        tap = x.dtype.type(i * uint64(pkw) + j) if take else tap
                                        best = max(best, e)
                                        check += e - e
                            prow[v_] = val
                            trow[v_] = tap
                            bad |= check != check
                        if bad:
                            for v_ in range(uint64(pv.shape[1])):
                                k0 = v_ * uint64(psw)
                                check = zero
                                for i in range(uint64(pkh)):
                                    for j in range(uint64(pkw)):
                                        e = row[k0 + i * uWp + j]
                                        check += e - e
                                if check != check:
                                    prow[v_], trow[v_] = _window_max(row, k0, uWp, uint64(pkh),
                                                                     uint64(pkw))

    def conv2d_direct_chunk(c, argp):
        a = carray(argp, (CONV_ARGS,))
        z = dt(0.0)
        x = _array4(a, 0, z)
        N, n = x.shape[0], a[CONV_SCALARS + 7]
        lo, hi = c * N // n, (c + 1) * N // n
        w, b, out, pooled = _array4(a, 2, z), _array1(a, 3, z), _array4(a, 4, z), _array5(a, 5, z)
        s = CONV_SCALARS
        H, W, pt, pl = a[s], a[s + 1], a[s + 2], a[s + 3]
        dh, dw, relu = a[s + 4], a[s + 5], a[s + 6] != 0
        # (out is empty when pooling, pooled when not, m in PLAIN)
        conv(x[lo:hi], _array5(a, 1, z)[:, lo:hi], w, b, out[lo:hi], pooled[:, lo:hi], H, W, pt,
             pl, dh, dw, relu)
    return c_callback(conv2d_direct_chunk, "void(int64, CPointer(int64))")


@specialized
def conv2d_grad_params_direct(single: bool, kh: int, kw: int, mode: int = PLAIN, pkh: int = 0,
                              pkw: int = 0, psh: int = 0, psw: int = 0):
    """``conv2d_grad_params_direct[single, kh, kw, mode, pool]``: the C function (above) whose
    chunk k of B (``part``'s first axis) sums the weight and bias gradients of
    :func:`conv2d_direct` over the samples n of block k, [k N / B, (k + 1) N / B), without im2col,

        part[k, o, c*kh*kw + i*kw + j] = sum_{n, y, z} g[n, o, y, z] xp[n, c, y + i*dh, z + j*dw],
        part[k, o, C*kh*kw] = sum_{n, y, z} g[n, o, y, z]

    (xp as there).  The arrays x (N, C, H, W), g, m, part (B, OC, C*kh*kw + 1) are args' slots
    0-3, then the scalars OH, OW, pt, pl, dh, dw, relu; C-contiguous, float32 if ``single`` else
    float64.  g is the gradient of y (N, OC, OH, OW) in mode PLAIN, and as the input of
    :func:`conv2d_direct` in modes RELU_IN (masked by the fused ReLU's output m[0]) and UNPOOL_IN
    (the pooled gradient, scattered through m).  The sums may be reassociated (lane-wise partial
    sums, as a GEMM's).  A sample's sums run over its padded rows at once (g is 0 in the columns
    past OW); a sample whose input holds inf or NaN sums row by row over the real columns only, so
    no 0 * inf enters a sum (NaN and inf reach exactly the taps they reach in PyTorch).  The
    engine adds the chunks' parts in order: B is a function of N alone, so the result does not
    depend on the threads."""
    K = kh * kw
    dt = np.float32 if single else np.float64

    @inline
    def grad(x, g, m, part, OH, OW, pt, pl, dh, dw, relu):
        N, C = x.shape[0], x.shape[1]
        OC = g.shape[1]
        Hp = OH + (kh - 1) * dh
        Wp = OW + (kw - 1) * dw
        L = OH * Wp
        zero = x.dtype.type(0)
        part[:] = 0
        xp = np.zeros((C, Hp * Wp + (kw - 1) * dw), x.dtype)
        ge = np.zeros((OC, L), x.dtype)
        for n in range(N):
            finite = True
            for c in range(C):
                finite &= _pad_plane(x[n, c], xp[c], pt, pl, Hp, Wp)
            for o in range(OC):
                if mode == RELU_IN:
                    _relu_plane(g[n, o], m[0, n, o], ge[o], 0, 0, OH, Wp)
                elif mode == UNPOOL_IN:
                    _unpool_plane(g[n, o], m[0, n, o], m[1, n, o], ge[o], 0, 0, OH, Wp, OH, OW,
                                  pkh, pkw, psh, psw, relu)
                else:
                    _pad_plane(g[n, o], ge[o], 0, 0, OH, Wp)
            nseg = 1 if finite else OH
            seg = uint64(L if finite else OW)
            step = uint64(L if finite else Wp)
            for o in range(OC):
                go = ge[o]
                s = zero
                for q in range(uint64(L)):
                    s += go[q]
                part[o, C * K] += s
            for oa in range(0, OC, 2):
                # two output channels at once, sharing the loads of x (a last lone channel
                # reads its own g twice and writes once)
                ob = oa + 1 if oa + 1 < OC else oa
                ga, gb = ge[oa], ge[ob]
                for c in range(C):
                    xc = xp[c]
                    for i in range(kh):
                        for j0 in range(0, kw, 3):
                            # three taps of a row at once, sharing the loads of g
                            base = i * dh * Wp
                            o0 = uint64(base + j0 * dw)
                            o1 = uint64(base + (j0 + 1) * dw) if j0 + 1 < kw else o0
                            o2 = uint64(base + (j0 + 2) * dw) if j0 + 2 < kw else o0
                            s0 = s1 = s2 = r0 = r1 = r2 = zero
                            for sg in range(uint64(nseg)):
                                for q in range(sg * step, sg * step + seg):
                                    x0, x1, x2 = xc[q + o0], xc[q + o1], xc[q + o2]
                                    gq, hq = ga[q], gb[q]
                                    s0 += gq * x0
                                    s1 += gq * x1
                                    s2 += gq * x2
                                    r0 += hq * x0
                                    r1 += hq * x1
                                    r2 += hq * x2
                            t = c * K + i * kw + j0
                            part[oa, t] += s0
                            if ob != oa:
                                part[ob, t] += r0
                            if j0 + 1 < kw:
                                part[oa, t + 1] += s1
                                if ob != oa:
                                    part[ob, t + 1] += r1
                            if j0 + 2 < kw:
                                part[oa, t + 2] += s2
                                if ob != oa:
                                    part[ob, t + 2] += r2

    def conv2d_grad_params_chunk(c, argp):
        a = carray(argp, (CONV_ARGS,))
        z = dt(0.0)
        x, g, part = _array4(a, 0, z), _array4(a, 1, z), _array3(a, 3, z)
        N, B = x.shape[0], part.shape[0]
        lo, hi = c * N // B, (c + 1) * N // B
        s = CONV_SCALARS
        OH, OW, pt, pl = a[s], a[s + 1], a[s + 2], a[s + 3]
        dh, dw, relu = a[s + 4], a[s + 5], a[s + 6] != 0
        grad(x[lo:hi], g[lo:hi], _array5(a, 2, z)[:, lo:hi], part[c], OH, OW, pt, pl, dh, dw,
             relu)
    return c_callback(conv2d_grad_params_chunk, "void(int64, CPointer(int64))", reassoc=True)
