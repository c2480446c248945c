"""Convolution and pooling over NCHW tensors: conv2d, max_pool2d, avg_pool2d.

conv2d runs one of two ways, chosen by shape (``_direct``, measured).  With stride 1, one group and
few channels -- the first layers of a CNN, where a GEMM with K = C*kh*kw = 9 or 72 rows is all
awkward shapes -- it is one node per direction over the NCHW arrays themselves::

    y  = conv2d(x, w, b)                   (N, OC, OH, OW)   numba, bias (and a ReLU) fused
    dx = conv2d_grad_input(g, w)           (N, C, H, W)      the same kernel over flipped weights
    dW, db = conv2d_grad_params(x, g)      one pass, no im2col; two views of one flat node

Otherwise it is im2col + one BLAS GEMM for the whole batch, recorded as graph nodes so autodiff
composes the gradients and the planner keeps the columns alive for the weight gradient::

    col  = im2col(x)                       (C*kh*kw, N, OH, OW)     numba, parallel over planes
    yt   = conv_gemm(col, w, b)            (OC, N, OH, OW)          W @ col + b, one np.dot
    y    = yt.permute(1, 0, 2, 3)          (N, OC, OH, OW)          a copy into NCHW

and backward: dcol = W^T @ dyt, dx = col2im(dcol), dW = dyt @ col^T, db = sum(dyt).  Groups split
the channel axes into G independent GEMMs (np.matmul over a leading G axis).  One GEMM over N*OH*OW
columns beats per-sample GEMMs (np.matmul over N) by about 2x on the 8->16 layer of issue 3.

Pooling reads each plane independently.  max_pool2d is an index node (the argmax of each window, a
flat ``h*W + w`` per plane as PyTorch's ``return_indices``) plus a gather, so backward scatters
through the same indices without recomputing the maxima.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.dtypes import int64
from tinyopt.engine.op_fusion import fusion_rule
from tinyopt.engine.op import OPS, defop, node, own_reshape
from tinyopt.engine.ops.family import c_contiguous, require_float
from tinyopt.engine.ops.elementwise import promoted_operands
from tinyopt.engine.tensor import LEAF_OPS, Tensor, make_node, as_tensor
from tinyopt.kernels import conv as K
from tinyopt.kernels import chunk_threads
from tinyopt.kernels.native import shared_threads


def _pair(op: str, name: str, v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = (v[0], v[0])
        if len(v) != 2:
            raise ValueError(f"{op}: {name} must be an int or a tuple of 2 ints, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _batched(op: str, x: Tensor) -> tuple[Tensor, bool]:
    if x.ndim not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to {op}, but got input "
                           f"of size: {list(x.shape)}")
    return (x.reshape((1,) + x.shape), True) if x.ndim == 3 else (x, False)


# ---- im2col / col2im ----------------------------------------------------------------------------
def _im2col_forward(t):
    im2col = K.im2col[t.attrs]
    return lambda out, x: im2col(c_contiguous(x), out)


def _col2im_forward(t):
    col2im = K.col2im[t.attrs]
    return lambda out, col: col2im(c_contiguous(col), out)


defop("im2col", forward=_im2col_forward,
      backward=lambda t, g: (node("col2im", (g,), t.srcs[0].shape, g.dtype, t.attrs),))
defop("col2im", forward=_col2im_forward,
      backward=lambda t, g: (node("im2col", (g,), t.srcs[0].shape, g.dtype, t.attrs),))


# ---- the GEMM: yt[o, n, y, z] = sum_k W[o, k] col[k, n, y, z] + b[o] ---------------------------
# Every GEMM node carries attrs (G, OC/G, C/G*kh*kw, N*OH*OW).
def _conv_gemm_forward(t):
    G, OCg, CgK, NL = t.attrs

    def fwd(out, col, w, b=None):
        o = out.reshape(G, OCg, NL)
        c = col.reshape(G, CgK, NL)
        wm = c_contiguous(w).reshape(G, OCg, CgK)
        if G == 1:
            np.dot(wm[0], c[0], out=o[0])
        else:
            np.matmul(wm, c, out=o)
        if b is not None:
            o2 = out.reshape(G * OCg, NL)
            np.add(o2, b.reshape(-1, 1), out=o2)
    return fwd


def _conv_grad_col_forward(t):
    G, OCg, CgK, NL = t.attrs

    def fwd(out, g, w):
        o = out.reshape(G, CgK, NL)
        gm = c_contiguous(g).reshape(G, OCg, NL)
        wm = c_contiguous(w).reshape(G, OCg, CgK)
        if G == 1:
            np.dot(wm[0].T, gm[0], out=o[0])
        else:
            np.matmul(wm.transpose(0, 2, 1), gm, out=o)
    return fwd


def _inner_blocks(n: int) -> int:
    """Into how many equal blocks to cut the inner size ``n`` of the weight-gradient GEMM.

    dW = dY @ col^T has a tiny output (OC x C*kh*kw) and an inner size of N*OH*OW, and OpenBLAS
    runs that shape several times slower than a batch of ~2048-long blocks whose products are
    then summed: on the CNN of issue 3, 8x9 over 200704 took 2.2 ms in one GEMM and 0.66 ms in
    blocks, 16x72 over 50176 2.7 ms and 1.85 ms."""
    if n <= 4096:
        return 1
    for b in range(-(-n // 2048), n // 256 + 1):  # blocks of 256 to 2048
        if n % b == 0:
            return b
    return 1


def _conv_grad_weight_forward(t):
    G, OCg, CgK, NL = t.attrs
    B = _inner_blocks(NL) if G == 1 else 1
    partial = np.empty((B, CgK, OCg), t.dtype) if B > 1 else None

    def fwd(out, g, col):
        o = out.reshape(G, OCg, CgK)
        gm = c_contiguous(g).reshape(G, OCg, NL)
        c = col.reshape(G, CgK, NL)
        if B > 1:  # partial[b] = col_b @ dY_b^T, then dW^T = sum over b
            np.matmul(c[0].reshape(CgK, B, NL // B).transpose(1, 0, 2),
                      gm[0].reshape(OCg, B, NL // B).transpose(1, 2, 0), out=partial)
            np.sum(partial, axis=0, out=o[0].T)
        elif G == 1:
            np.dot(gm[0], c[0].T, out=o[0])
        else:
            np.matmul(gm, c.transpose(0, 2, 1), out=o)
    return fwd


def _conv_gemm_backward(t, g):
    col, w = t.srcs[0], t.srcs[1]
    if g.op in LEAF_OPS or OPS[g.op].view is not None:   # the permute back from NCHW is a strided view
        g = node("contiguous", (g,), g.shape, g.dtype)
    gcol = node("conv_grad_col", (g, w), col.shape, g.dtype, t.attrs) if col.requires_grad \
        else None
    gw = node("conv_grad_weight", (g, col), w.shape, g.dtype, t.attrs) if w.requires_grad \
        else None
    if len(t.srcs) == 2:
        return gcol, gw
    gb = g.sum((1, 2, 3)) if t.srcs[2].requires_grad else None
    return gcol, gw, gb


defop("conv_gemm", forward=_conv_gemm_forward, backward=_conv_gemm_backward)
defop("conv_grad_col", forward=_conv_grad_col_forward)
defop("conv_grad_weight", forward=_conv_grad_weight_forward)


# ---- direct convolution (stride 1, one group) ----------------------------------------------------
# A "conv2d" node has attrs (kh, kw, ph, pw, dh, dw, relu, pool): the kernel size, the top/left
# padding (the output's shape gives the bottom/right), the dilation, whether a ReLU is fused into
# the output, and () or (pkh, pkw, psh, psw, OH, OW) when a max-pool is fused too (then the node
# is the pooled array of kernels/conv.py: conv2d_direct, (2, N, OC, PU, PV): the pooled values and
# each window's tap, and its (OH, OW) output is never written).  Fusion happens when a plan is
# compiled (engine/op_fusion.py; the rules are at the end of this section).
def _direct(C: int, OC: int, kh: int, kw: int, stride: tuple[int, int], groups: int) -> bool:
    """Whether conv2d runs as direct kernels (``kernels/conv.py: conv2d_direct``) rather than
    im2col + GEMM: stride 1, one group, and few channels, where a GEMM of K = C*kh*kw rows by OC
    has awkward shapes and the direct loops win.  Measured (``benchmarks/bench_conv.py --shapes``,
    forward + backward of one 3x3 layer at batch 32, one thread): direct/GEMM time 0.53-0.83 up to
    16 -> 32 channels, 0.97 at 32 -> 32, 1.11 at 32 -> 64, 1.3-3.0 beyond."""
    return stride == (1, 1) and groups == 1 and C * kh * kw <= 288 and C * kh * kw * OC <= 9216


def _grad_mode(relu: bool, pool: tuple) -> int:
    """How the backward kernels read the gradient of a conv2d node with these fusions (the modes
    of kernels/conv.py)."""
    if pool:
        return K.UNPOOL_IN
    return K.RELU_IN if relu else K.PLAIN


def _chunks(N: int, macs: int) -> int:
    """Into how many chunks of samples to cut a direct conv's work for the threads: one below
    about 2**20 multiply-adds (the hand-off costs tens of microseconds), else up to four per
    thread.  Only for work whose result does not depend on the cut (each sample's outputs)."""
    if macs < 1 << 20:
        return 1
    return min(N, 4 * chunk_threads.num_threads())


class _Direct:
    """A direct conv kernel of kernels/conv.py (a C function over chunks of samples) run for one
    float32 or float64 node (16-bit floats reach ops widened, engine/op.py): ``run(arrays,
    scalars, n)`` packs the arrays' addresses and shapes and the scalars into an argument block
    and runs chunks c < n on the threads numpy's BLAS shares (``shared_threads.chunk_runner``),
    or where it shares none, on ``chunk_threads``' workers."""

    def __init__(self, factory, dtype: np.dtype, options: tuple):
        self._chunk = factory[(dtype == np.float32,) + options]
        self._call = None

    def run(self, arrays: list, scalars: tuple, n: int) -> None:
        args = np.zeros(K.CONV_ARGS, np.int64)   # per call: a plan may run on several threads
        for k, a in enumerate(arrays):
            args[6 * k] = a.ctypes.data
            args[6 * k + 1:6 * k + 1 + a.ndim] = a.shape
        args[K.CONV_SCALARS:K.CONV_SCALARS + len(scalars)] = scalars
        address = args.ctypes.data
        run = shared_threads.chunk_runner()
        if run.parallel:
            run(self._chunk.address, n, address)
            return
        if self._call is None:   # (a ctypes call lets the GIL go)
            self._call = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
                self._chunk.address)
        chunk_threads.run_chunks(lambda c: self._call(c, address), n)


def _conv2d_forward(t):
    kh, kw, ph, pw, dh, dw, relu, pool = t.attrs
    x_shape, OC = t.srcs[0].shape, t.srcs[1].shape[0]
    N, C, H, W = x_shape
    OH, OW = pool[4:] if pool else t.shape[2:]
    conv = _Direct(K.conv2d_direct, t.dtype, (kh, kw, K.POOL_OUT if pool else K.PLAIN)
                   + (pool[:4] or (0, 0, 0, 0)))
    none = np.empty(0, t.dtype)
    unused5 = np.empty((0,) * 5, t.dtype)
    dims = np.empty((0, 0, OH, OW), t.dtype)   # POOL_OUT reads (OH, OW) from ``out``'s shape
    chunks = _chunks(N, N * OC * OH * OW * C * kh * kw)
    scalars = (H, W, ph, pw, dh, dw, relu, chunks)

    def fwd(out, x, w, b=none):
        x, w, b = c_contiguous(x), c_contiguous(w), c_contiguous(b)
        if pool:
            conv.run([x, unused5, w, b, dims, out], scalars, chunks)
        else:
            conv.run([x, unused5, w, b, out, unused5], scalars, chunks)
    return fwd


def _conv2d_grad_input_forward(t):
    """dx = the stride-1 convolution of dy with w flipped in both spatial axes and its channel
    axes swapped, over the complementary padding (kh-1)*dh - ph rows, (kw-1)*dw - pw columns; dy
    read from the node's gradient through the fused ReLU's mask or the fused pooling."""
    kh, kw, ph, pw, dh, dw, relu, pool = t.attrs
    mode = _grad_mode(relu, pool)
    conv = _Direct(K.conv2d_direct, t.dtype, (kh, kw, mode) + (pool[:4] or (0, 0, 0, 0)))
    OC, C = t.srcs[1].shape[:2]
    N = t.shape[0]
    OH, OW = pool[4:] if pool else t.srcs[0].shape[2:]
    flipped = np.empty((C, OC, kh, kw), t.dtype)
    none = np.empty(0, t.dtype)
    unused5 = np.empty((0,) * 5, t.dtype)
    pt, pl = (kh - 1) * dh - ph, (kw - 1) * dw - pw
    chunks = _chunks(N, t.numel() * OC * kh * kw)
    scalars = (OH, OW, pt, pl, dh, dw, relu, chunks)

    def fwd(out, g, w, m=None):
        np.copyto(flipped, w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        g = c_contiguous(g)
        if mode == K.UNPOOL_IN:
            g = g[0]
        # the kernels read m 5-d: the pooled array (2, N, ...) or a ReLU's output as (1, N, ...)
        m = unused5 if m is None else c_contiguous(m).reshape((-1,) + g.shape)
        conv.run([g, m, flipped, none, out, unused5], scalars, chunks)
    return fwd


def conv_blocks(n: int) -> int:
    """Into how many blocks of samples the direct weight gradient cuts a batch of ``n``, each summed
    on one thread, the blocks' sums then added in order: a function of ``n`` only, so the result
    does not depend on the number of threads."""
    return max(1, min(n // 16, 16))


def _conv2d_grad_params_forward(t):
    """[dW.ravel(), db] in one pass over the input and the gradient (db only with a bias)."""
    kh, kw, ph, pw, dh, dw, relu, pool, has_b = t.attrs
    mode = _grad_mode(relu, pool)
    grad = _Direct(K.conv2d_grad_params_direct, t.dtype, (kh, kw, mode)
                   + (pool[:4] or (0, 0, 0, 0)))
    N, C = t.srcs[0].shape[:2]
    OH, OW = pool[4:] if pool else t.srcs[1].shape[2:]
    OC = t.srcs[1].shape[-3]
    nw = OC * C * kh * kw
    blocks = conv_blocks(N)
    part = np.empty((blocks, OC, C * kh * kw + 1), t.dtype)
    unused5 = np.empty((0,) * 5, t.dtype)
    scalars = (OH, OW, ph, pw, dh, dw, relu)

    def fwd(out, x, g, m=None):
        x, g = c_contiguous(x), c_contiguous(g)
        if mode == K.UNPOOL_IN:
            g = g[0]
        # the kernels read m 5-d: the pooled array (2, N, ...) or a ReLU's output as (1, N, ...)
        m = unused5 if m is None else c_contiguous(m).reshape((-1,) + g.shape)
        grad.run([x, g, m, part], scalars, blocks)
        total = part[0]
        for k in range(1, blocks):
            total += part[k]
        out[:nw].reshape(OC, -1)[:] = total[:, :-1]
        if has_b:
            out[nw:] = total[:, -1]
    return fwd


def _conv2d_backward(t, g):
    x, w = t.srcs[0], t.srcs[1]
    has_b = len(t.srcs) == 3
    mask = (t,) if t.attrs[6] or t.attrs[7] else ()  # the fused ReLU's output or the pooled array
    gx = node("conv2d_grad_input", (g, w) + mask, x.shape, g.dtype, t.attrs) if x.requires_grad \
        else None
    if not (w.requires_grad or has_b and t.srcs[2].requires_grad):
        return (gx, None, None)[:len(t.srcs)]
    nw = w.numel()
    flat = node("conv2d_grad_params", (x, g) + mask, (nw + (w.shape[0] if has_b else 0),),
                g.dtype, t.attrs + (has_b,))
    gw = node("conv2d_params_part", (flat,), w.shape, g.dtype, (0, nw))
    if not has_b:
        return gx, gw
    return gx, gw, node("conv2d_params_part", (flat,), t.srcs[2].shape, g.dtype, (nw, flat.shape[0]))


def _params_part_view(t):
    start, stop = t.attrs
    shape = t.shape
    return lambda flat: flat[start:stop].reshape(shape)


def _pool_values_grad_forward(t):
    def fwd(out, g):
        out[0] = g   # out[1], the taps' half, is never read
    return fwd


defop("conv2d", forward=_conv2d_forward, backward=_conv2d_backward)
defop("conv2d_grad_input", forward=_conv2d_grad_input_forward)
defop("conv2d_grad_params", forward=_conv2d_grad_params_forward)
defop("conv2d_params_part", view=_params_part_view)
# The pooled values of a conv2d node with a fused max-pool; their gradient is the pooled array's
# gradient (its taps' half unwritten: nothing reads it).
defop("conv2d_pool_values", view=lambda t: (lambda pooled: pooled[0]),
      backward=lambda t, g: (node("conv2d_pool_values_grad", (g,), t.srcs[0].shape, g.dtype),))
defop("conv2d_pool_values_grad", forward=_pool_values_grad_forward)


@fusion_rule("relu")
def _relu_into_conv(t: Tensor, uses) -> Tensor | None:
    """relu(conv2d(...)) as one conv2d node with the ReLU fused, when nothing else reads the
    convolution's output: the same values (the kernel applies the same max(v, 0) to the same v),
    and the same gradient (the backward kernels apply relu_grad's mask as they read it)."""
    c = t.srcs[0]
    if c.op == "conv2d" and not c.attrs[6] and not c.attrs[7] and uses(c) == 1:
        return make_node("conv2d", c.srcs, c.attrs[:6] + (True, ()), c.shape, c.dtype,
                     t.requires_grad)
    return None


@fusion_rule("pool_gather")
def _max_pool_into_conv(t: Tensor, uses) -> Tensor | None:
    """max_pool2d(conv2d(...)) (the ReLU fused or not) as one conv2d node that pools in its
    kernel and never writes the convolution's output, when nothing else reads that output or the
    pooling's indices, and the windows lie inside the plane (no padding, no dilation)."""
    c, idx = t.srcs
    if not (c.op == "conv2d" and not c.attrs[7] and idx.op == "max_pool2d_indices"
            and idx.srcs[0] is c and uses(c) == 2 and uses(idx) == 1):
        return None
    pkh, pkw, psh, psw, pph, ppw, pdh, pdw = idx.attrs
    N, OC, OH, OW = c.shape
    PU, PV = t.shape[2:]
    if pph or ppw or pdh != 1 or pdw != 1 or (PU - 1) * psh + pkh > OH \
            or (PV - 1) * psw + pkw > OW:
        return None
    pooled = make_node("conv2d", c.srcs, c.attrs[:7] + ((pkh, pkw, psh, psw, OH, OW),),
                   (2,) + t.shape, t.dtype, t.requires_grad)
    return make_node("conv2d_pool_values", (pooled,), (), t.shape, t.dtype, t.requires_grad)


def _padding(op: str, padding, kernel: tuple[int, int], dilation: tuple[int, int],
             stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, total_h, total_w) padding; 'same' may pad one more at the bottom/right."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
            th, tw = dilation[0] * (kernel[0] - 1), dilation[1] * (kernel[1] - 1)
            return th // 2, tw // 2, th, tw
        raise ValueError(f"{op}: invalid padding string {padding!r}, should be one of "
                         f"{{'valid', 'same'}}")
    ph, pw = _pair(op, "padding", padding)
    if ph < 0 or pw < 0:
        raise RuntimeError(f"{op}: negative padding is not supported, got {(ph, pw)}")
    return ph, pw, 2 * ph, 2 * pw


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``:

    y[n, o, i, j] = b[o] + sum_{c, p, q} W[o, c, p, q] x[n, g*C/G + c, i*sh - ph + p*dh,
    j*sw - pw + q*dw], for o in group g.  ``input`` (N, C, H, W) or (C, H, W), ``weight``
    (OC, C/groups, kh, kw), ``bias`` (OC,); ``padding`` may also be 'valid' or 'same'.
    """
    input, weight, bias = autocast.lower(input, weight, bias)
    x, w = promoted_operands("conv2d", as_tensor(input), as_tensor(weight))
    require_float("conv2d", x, w)
    x, unbatched = _batched("conv2d", x)
    if w.ndim != 4:
        raise RuntimeError(f"conv2d: weight must be 4-D (out_channels, in_channels/groups, kH, kW),"
                           f" got shape {w.shape}")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("conv2d: non-positive groups is not supported")
    N, C, H, W = x.shape
    OC, Cg, kh, kw = w.shape
    if OC % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                           f"dimension 0, but got weight of size {list(w.shape)} instead")
    if C != Cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {Cg * groups} channels, but got {C} "
                           f"channels instead")
    sh, sw = _pair("conv2d", "stride", stride)
    dh, dw = _pair("conv2d", "dilation", dilation)
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"conv2d: non-positive stride is not supported, got {(sh, sw)}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"conv2d: dilation should be greater than zero, got {(dh, dw)}")
    ph, pw, tph, tpw = _padding("conv2d", padding, (kh, kw), (dh, dw), (sh, sw))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if H + tph < eh or W + tpw < ew:
        raise RuntimeError(f"conv2d: calculated padded input size per channel: ({H + tph} x "
                           f"{W + tpw}). Kernel size: ({eh} x {ew}). Kernel size can't be greater "
                           f"than actual input size")
    OH, OW = (H + tph - eh) // sh + 1, (W + tpw - ew) // sw + 1
    srcs = (x, w)
    if bias is not None:
        b = as_tensor(bias)
        if b.shape != (OC,):
            raise RuntimeError(f"conv2d: bias has shape {b.shape}, expected ({OC},) for weight of "
                               f"shape {w.shape}")
        srcs = (x, w, b.to(x.dtype))
    if _direct(C, OC, kh, kw, (sh, sw), groups):
        y = node("conv2d", srcs, (N, OC, OH, OW), x.dtype, (kh, kw, ph, pw, dh, dw, False, ()))
        return y.reshape(OC, OH, OW) if unbatched else y  # (torch's: a view, as here)
    col = node("im2col", (x,), (C * kh * kw, N, OH, OW), x.dtype, (kh, kw, sh, sw, ph, pw, dh, dw))
    attrs = (groups, OC // groups, Cg * kh * kw, N * OH * OW)
    yt = node("conv_gemm", (col,) + srcs[1:], (OC, N, OH, OW), x.dtype, attrs)
    # (OC, N, ...) -> (N, OC, ...): the same memory when N == 1, else a copy.
    y = own_reshape(yt, (N, OC, OH, OW)) if N == 1 else yt.permute(1, 0, 2, 3).contiguous()
    return y.reshape(OC, OH, OW) if unbatched else y


# ---- pooling ------------------------------------------------------------------------------------
def _pool_args(op: str, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool):
    k = _pair(op, "kernel_size", kernel_size)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) \
        else _pair(op, "stride", stride)
    p = _pair(op, "padding", padding)
    d = _pair(op, "dilation", dilation)
    if min(k) <= 0:
        raise RuntimeError(f"{op}: kernel_size must be greater than zero, but got {k}")
    if min(s) <= 0:
        raise RuntimeError(f"{op}: stride must be greater than zero, but got {s}")
    if min(d) <= 0:
        raise RuntimeError(f"{op}: dilation must be greater than zero, but got {d}")
    if min(p) < 0:
        raise RuntimeError(f"{op}: pad must be non-negative, but got {p}")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, but got "
                           f"pad={p}, kernel_size={k} and dilation={d}")
    N, C, H, W = x.shape
    out = []
    for size, kk, ss, pp, dd in zip((H, W), k, s, p, d):
        o = (size + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (o - 1) * ss >= size + pp:
            o -= 1
        out.append(o)
    if out[0] < 1 or out[1] < 1:
        raise RuntimeError(f"{op}: given input size: ({C}x{H}x{W}). Calculated output size: "
                           f"({C}x{out[0]}x{out[1]}). Output size is too small")
    return k, s, p, d, tuple(out)


def _planes(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return shape[0] * shape[1], shape[2], shape[3]


def _max_indices_forward(t):
    kh, kw, sh, sw, ph, pw, dh, dw = t.attrs
    P, H, W = _planes(t.srcs[0].shape)
    oshape = _planes(t.shape)
    if ph == pw == 0 and dh == dw == 1 and (oshape[1] - 1) * sh + kh <= H \
            and (oshape[2] - 1) * sw + kw <= W:  # every window inside the plane
        dense = K.max_pool2d_indices_dense[kh, kw, sh, sw]
        return lambda out, x: dense(c_contiguous(x).reshape(P, H, W), out.reshape(oshape))
    return lambda out, x: K.max_pool2d_indices(c_contiguous(x).reshape(P, H, W),
                                               out.reshape(oshape),
                                               kh, kw, sh, sw, ph, pw, dh, dw)


# (the windows per plane given, not -1: numpy cannot infer it for an empty batch, P = 0)
def _gather_forward(t):
    P, H, W = _planes(t.srcs[0].shape)
    L = math.prod(_planes(t.shape)[1:])
    return lambda out, x, idx: K.gather_planes(c_contiguous(x).reshape(P, H * W),
                                               c_contiguous(idx).reshape(P, L),
                                               out.reshape(P, L))


def _scatter_forward(t):
    P, H, W = _planes(t.shape)
    L = math.prod(_planes(t.srcs[0].shape)[1:])
    return lambda out, g, idx: K.scatter_add_planes(c_contiguous(g).reshape(P, L),
                                                    c_contiguous(idx).reshape(P, L),
                                                    out.reshape(P, H * W))


defop("max_pool2d_indices", forward=_max_indices_forward)
defop("pool_gather", forward=_gather_forward, backward=lambda t, g: (
    node("pool_scatter", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))
defop("pool_scatter", forward=_scatter_forward, backward=lambda t, g: (
    node("pool_gather", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``: y[n, c, i, j] = max over the window
    x[n, c, i*sh - ph + p*dh, j*sw - pw + q*dw] (padding never wins; NaN does).  With
    ``return_indices`` also the flat ``h*W + w`` index of each maximum within its plane."""
    x = as_tensor(input)
    require_float("max_pool2d", x)
    x, unbatched = _batched("max_pool2d", x)
    k, s, p, d, (OH, OW) = _pool_args("max_pool2d", x, kernel_size, stride, padding, dilation,
                                      ceil_mode)
    shape = x.shape[:2] + (OH, OW)
    idx = node("max_pool2d_indices", (x,), shape, int64, k + s + p + d)
    y = node("pool_gather", (x, idx), shape, x.dtype)
    if unbatched:
        y, idx = own_reshape(y, shape[1:]), own_reshape(idx, shape[1:])
    return (y, idx) if return_indices else y


def _avg_forward(t):
    attrs = t.attrs
    P, H, W = _planes(t.srcs[0].shape)
    return lambda out, x: K.avg_pool2d(c_contiguous(x).reshape(P, H, W),
                                       out.reshape(_planes(t.shape)),
                                       *attrs)


def _avg_grad_forward(t):
    attrs = t.attrs
    P, H, W = _planes(t.shape)
    return lambda out, g: K.avg_pool2d_grad(c_contiguous(g).reshape(_planes(t.srcs[0].shape)),
                                            out.reshape(P, H, W), *attrs)


defop("avg_pool2d", forward=_avg_forward, backward=lambda t, g: (
    node("avg_pool2d_grad", (g,), t.srcs[0].shape, g.dtype, t.attrs),))
defop("avg_pool2d_grad", forward=_avg_grad_forward, backward=lambda t, g: (
    node("avg_pool2d", (g,), t.srcs[0].shape, g.dtype, t.attrs),))


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``: the window sum divided by
    ``divisor_override``, else by the window size (count_include_pad, clipped to the padded input)
    or by the number of input elements in the window."""
    x = as_tensor(input)
    require_float("avg_pool2d", x)
    x, unbatched = _batched("avg_pool2d", x)
    k, s, p, _, (OH, OW) = _pool_args("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and int(divisor_override) <= 0:
        raise RuntimeError(f"avg_pool2d: divisor must be not zero, got {divisor_override}")
    attrs = k + s + p + (bool(count_include_pad), int(divisor_override or 0))
    y = node("avg_pool2d", (x,), x.shape[:2] + (OH, OW), x.dtype, attrs)
    return own_reshape(y, y.shape[1:]) if unbatched else y
