"""``conv_transpose2d``: the adjoint of ``conv2d`` with respect to its input, built from the
convolution's own ops (``engine/ops/conv.py``) so it shares their kernels and gradients::

    xt  = x.permute(1, 0, 2, 3)                    (C_in, N, H, W)      a copy
    col = conv_gemm(xt, W^T)                       (C_out*kh*kw, N, H, W)   one GEMM per group
    y   = col2im(col) + b                          (N, C_out, OH, OW)   numba, parallel over planes

with OH = (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1.  Backward is conv2d's forward, the way autodiff
composes it: im2col of the output gradient, then the GEMMs of ``conv_gemm``'s backward.
"""

from __future__ import annotations

import numbers

from tinyopt.engine import autocast
from tinyopt.engine.op import node
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.elementwise import promoted_operands
from tinyopt.engine.tensor import Tensor, as_tensor


def _pair(name: str, v) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(t) == 1:
        t = (t[0], t[0])
    if len(t) != 2 or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                              for i in t):
        raise ValueError(f"conv_transpose2d: {name} must be an int or a tuple of 2 ints, got "
                         f"{v!r}")
    return int(t[0]), int(t[1])


def output_size(shape: tuple[int, int], kernel: tuple[int, int], stride, padding, dilation,
                output_padding) -> tuple[int, int]:
    """(OH, OW) = (H - 1) s - 2 p + d (k - 1) + output_padding + 1 per dimension."""
    return tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1
                 for n, k, s, p, d, op in zip(shape, kernel, stride, padding, dilation,
                                              output_padding))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """2-D transposed convolution, as ``torch.nn.functional.conv_transpose2d``: ``input``
    (N, C_in, H, W) or (C_in, H, W), ``weight`` (C_in, C_out / groups, kH, kW), ``bias`` (C_out,).
    y[n, o, i*sh - ph + p*dh, j*sw - pw + q*dw] += x[n, c, i, j] W[c, o, p, q] summed over the
    input channels c of o's group."""
    input, weight, bias = autocast.lower(input, weight, bias)
    x, w = promoted_operands("conv_transpose2d", as_tensor(input), as_tensor(weight))
    require_float("conv_transpose2d", x, w)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, "
                           f"but got input of size: {list(x.shape)}")
    unbatched = x.ndim == 3
    if unbatched:
        x = x.reshape((1,) + x.shape)
    if w.ndim != 4:
        raise RuntimeError(f"conv_transpose2d: weight must be 4-D (in_channels, out_channels / "
                           f"groups, kH, kW), got shape {list(w.shape)}")
    G = int(groups)
    if G <= 0:
        raise RuntimeError("non-positive groups is not supported")
    N, C, H, W = x.shape
    Cw, OCg, kh, kw = w.shape
    if Cw != C:
        raise RuntimeError(f"Given transposed=1, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {Cw} channels, but got {C} channels "
                           f"instead")
    if C % G:
        raise RuntimeError(f"Given groups={G}, expected weight to be divisible by {G} at "
                           f"dimension 0, but got weight of size {list(w.shape)} instead")
    s, p = _pair("stride", stride), _pair("padding", padding)
    d, op = _pair("dilation", dilation), _pair("output_padding", output_padding)
    if min(s) <= 0:
        raise RuntimeError(f"non-positive stride is not supported, got {s}")
    if min(d) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, got {d}")
    if min(p) < 0:
        raise RuntimeError(f"negative padding is not supported, got {p}")
    if min(op) < 0 or op[0] >= max(s[0], d[0]) or op[1] >= max(s[1], d[1]):
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but "
                           f"got output_padding_height: {op[0]} output_padding_width: {op[1]} "
                           f"stride_height: {s[0]} stride_width: {s[1]} dilation_height: {d[0]} "
                           f"dilation_width: {d[1]}")
    OH, OW = output_size((H, W), (kh, kw), s, p, d, op)
    if OH <= 0 or OW <= 0:
        raise RuntimeError(f"conv_transpose2d: the output size ({OH} x {OW}) is too small "
                           f"(input {H} x {W}, kernel {kh} x {kw}, padding {p})")
    OC = OCg * G
    Cg = C // G
    # W^T per group: rows (o, p, q) of the group's C_out/G * kh * kw, columns its C_in/G channels
    wt = w.reshape(G, Cg, OCg * kh * kw).permute(0, 2, 1).contiguous().reshape(
        G * OCg * kh * kw, Cg)
    xt = x.permute(1, 0, 2, 3).contiguous() if N > 1 else x.reshape(C, 1, H, W)
    col = node("conv_gemm", (xt, wt), (OC * kh * kw, N, H, W), x.dtype,
               (G, OCg * kh * kw, Cg, N * H * W))
    y = node("col2im", (col,), (N, OC, OH, OW), x.dtype, (kh, kw) + s + p + d)
    if bias is not None:
        b = as_tensor(bias)
        if b.shape != (OC,):
            raise RuntimeError(f"conv_transpose2d: bias has shape {list(b.shape)}, expected "
                               f"({OC},) for weight of shape {list(w.shape)}")
        y = y + b.to(x.dtype).reshape(1, OC, 1, 1)
    return y.reshape(OC, OH, OW) if unbatched else y
