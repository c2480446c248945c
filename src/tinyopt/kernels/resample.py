"""Resampling kernels: separable gathers (padding, nearest-neighbour interpolation), linear
interpolation, and adaptive average pooling.

Arrays are C-contiguous; values float32/float64 (the gathers take any dtype), index maps int64.
Every parallel loop runs over the leading (batch x channel) axis: iteration ``b`` writes only
``out[b]``.

- ``gather3(x, md, mh, mw, fill, out)``: out[b, i, j, k] = x[b, md[i], mh[j], mw[k]], or ``fill``
  where any map is -1.  Padding (constant, reflect, replicate, circular) and nearest interpolation
  are such gathers with maps made on the host; ``scatter3`` is its adjoint (the gradient).
- ``lerp2(x, h0, h1, lh, w0, w1, lw, out)``: out[p, i, j] = (1 - lh[i]) ((1 - lw[j]) x[p, h0, w0]
  + lw[j] x[p, h0, w1]) + lh[i] ((1 - lw[j]) x[p, h1, w0] + lw[j] x[p, h1, w1]) with h0 = h0[i]
  etc. (bilinear interpolation; linear is the case H = OH = 1); ``lerp2_grad`` its adjoint.
- ``adaptive_avg2(x, out)``: out[p, i, j] = mean of x[p, h0(i):h1(i), w0(j):w1(j)] with
  h0(i) = floor(i H / OH), h1(i) = ceil((i + 1) H / OH) (windows may overlap);
  ``adaptive_avg2_grad`` spreads each output gradient evenly over its window.
"""

from __future__ import annotations

from tinyopt.kernels.jit import parallel_kernel, prange


@parallel_kernel
def gather3(x, md, mh, mw, fill, out):
    B = out.shape[0]
    D, H, W = md.size, mh.size, mw.size
    for b in prange(B):
        for i in range(D):
            si = md[i]
            for j in range(H):
                sj = mh[j]
                for k in range(W):
                    sk = mw[k]
                    if si < 0 or sj < 0 or sk < 0:
                        out[b, i, j, k] = fill
                    else:
                        out[b, i, j, k] = x[b, si, sj, sk]


@parallel_kernel
def scatter3(g, md, mh, mw, out):
    """out[b, md[i], mh[j], mw[k]] += g[b, i, j, k] over the entries whose maps are all >= 0;
    ``out`` is overwritten (zeroed first)."""
    B = out.shape[0]
    D, H, W = md.size, mh.size, mw.size
    for b in prange(B):
        out[b] = 0
        for i in range(D):
            si = md[i]
            if si < 0:
                continue
            for j in range(H):
                sj = mh[j]
                if sj < 0:
                    continue
                for k in range(W):
                    sk = mw[k]
                    if sk >= 0:
                        out[b, si, sj, sk] += g[b, i, j, k]


@parallel_kernel
def lerp2(x, h0, h1, lh, w0, w1, lw, out):
    P, OH, OW = out.shape
    for p in prange(P):
        for i in range(OH):
            a0, a1 = h0[i], h1[i]
            lb = lh[i]
            la = 1 - lb
            for j in range(OW):
                b0, b1 = w0[j], w1[j]
                lr = lw[j]
                ll = 1 - lr
                out[p, i, j] = (la * (ll * x[p, a0, b0] + lr * x[p, a0, b1])
                                + lb * (ll * x[p, a1, b0] + lr * x[p, a1, b1]))


@parallel_kernel
def lerp2_grad(g, h0, h1, lh, w0, w1, lw, out):
    """The adjoint of ``lerp2``: ``out`` (P, H, W) is overwritten with the gradient of x."""
    P, OH, OW = g.shape
    for p in prange(P):
        out[p] = 0
        for i in range(OH):
            a0, a1 = h0[i], h1[i]
            lb = lh[i]
            la = 1 - lb
            for j in range(OW):
                b0, b1 = w0[j], w1[j]
                lr = lw[j]
                ll = 1 - lr
                v = g[p, i, j]
                out[p, a0, b0] += la * ll * v
                out[p, a0, b1] += la * lr * v
                out[p, a1, b0] += lb * ll * v
                out[p, a1, b1] += lb * lr * v


@parallel_kernel
def adaptive_avg2(x, out):
    P, H, W = x.shape
    OH, OW = out.shape[1], out.shape[2]
    for p in prange(P):
        for i in range(OH):
            hs = (i * H) // OH
            he = ((i + 1) * H + OH - 1) // OH
            for j in range(OW):
                ws = (j * W) // OW
                we = ((j + 1) * W + OW - 1) // OW
                acc = 0.0
                for h in range(hs, he):
                    for w in range(ws, we):
                        acc += x[p, h, w]
                out[p, i, j] = acc / ((he - hs) * (we - ws))


@parallel_kernel
def adaptive_avg2_grad(g, out):
    P, OH, OW = g.shape
    H, W = out.shape[1], out.shape[2]
    for p in prange(P):
        out[p] = 0
        for i in range(OH):
            hs = (i * H) // OH
            he = ((i + 1) * H + OH - 1) // OH
            for j in range(OW):
                ws = (j * W) // OW
                we = ((j + 1) * W + OW - 1) // OW
                v = g[p, i, j] / ((he - hs) * (we - ws))
                for h in range(hs, he):
                    for w in range(ws, we):
                        out[p, h, w] += v
