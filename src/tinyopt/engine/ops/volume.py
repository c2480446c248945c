"""The 3-d family over (N, C, D, H, W) inputs (or unbatched (C, D, H, W)): ``conv3d``,
``conv_transpose3d``, ``max_pool3d``, ``avg_pool3d`` and ``adaptive_avg_pool3d``, each an op
with its gradient (``kernels/volume.py``), with ``torch.nn.functional``'s arguments and errors.

A transposed convolution is the adjoint of a convolution: its forward is ``conv3d_grad_input``,
its input gradient ``conv3d`` and its weight gradient ``conv3d_grad_weight`` with the roles of
input and output gradient swapped.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import int64
from tinyopt.engine.op import defop, node, own_reshape
from tinyopt.engine.ops.family import c_contiguous, require_float
from tinyopt.engine.ops.elementwise import promoted_operands
from tinyopt.engine.ops.pool_empty import checked_sizes, empty_pool
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import volume as K

_EMPTY = {np.dtype(np.float32): np.zeros(0, np.float32), np.dtype(np.float64): np.zeros(0)}


def _triple(op: str, name: str, v) -> tuple[int, int, int]:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,) * 3
    if len(t) == 1:
        t = t * 3
    if len(t) != 3 or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                              for i in t):
        raise TypeError(f"{op}: {name} must be an int or a tuple of 3 ints, got {v!r}")
    return int(t[0]), int(t[1]), int(t[2])


def _batched(op: str, x: Tensor) -> tuple[Tensor, bool]:
    if x.ndim not in (4, 5):
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to {op}, but got "
                           f"input of size: {list(x.shape)}")
    return (x.reshape((1,) + x.shape), True) if x.ndim == 4 else (x, False)


def _done(y: Tensor, unbatched: bool, view: bool = False) -> Tensor:
    """The batched result ``y`` of an unbatched input without its batch dimension: a view of it
    where torch's is (the convolutions'), else a tensor of its own (the pools')."""
    if not unbatched:
        return y
    return y.reshape(y.shape[1:]) if view else own_reshape(y, y.shape[1:])


# ---- convolution ---------------------------------------------------------------------------------
def _geometry(t):
    return t.attrs[:4]  # s, p, d, groups


def _conv_forward(t):
    s, p, d, groups = _geometry(t)

    def fwd(out, x, w, *b):
        K.conv3d(c_contiguous(x), c_contiguous(w), c_contiguous(b[0]) if b else _EMPTY[out.dtype],
                 s, p, d, groups, out)
    return fwd


def _conv_backward(t, g):
    x, w = t.srcs[:2]
    gx = node("conv3d_grad_input", (g, w), x.shape, g.dtype, t.attrs) if x.requires_grad \
        else None
    gw = node("conv3d_grad_weight", (g, x), w.shape, g.dtype, t.attrs) if w.requires_grad \
        else None
    gb = (g.sum((0, 2, 3, 4)),) if len(t.srcs) > 2 else ()
    return (gx, gw) + gb


def _grad_input_forward(t):
    s, p, d, groups = _geometry(t)
    return lambda out, g, w: K.conv3d_grad_input(c_contiguous(g), c_contiguous(w), s, p, d, groups,
                                                 out)


def _grad_weight_forward(t):
    s, p, d, groups = _geometry(t)
    return lambda out, g, x: K.conv3d_grad_weight(c_contiguous(g), c_contiguous(x), s, p, d,
                                                  groups, out)


def _transposed_forward(t):
    s, p, d, groups = _geometry(t)

    def fwd(out, x, w, *b):
        K.conv3d_grad_input(c_contiguous(x), c_contiguous(w), s, p, d, groups, out)
        if b:
            out += b[0].reshape(1, -1, 1, 1, 1)
    return fwd


def _transposed_backward(t, g):
    x, w = t.srcs[:2]
    gx = node("conv3d", (g, w), x.shape, g.dtype, t.attrs) if x.requires_grad else None
    gw = node("conv3d_grad_weight", (x, g), w.shape, g.dtype, t.attrs) if w.requires_grad \
        else None
    gb = (g.sum((0, 2, 3, 4)),) if len(t.srcs) > 2 else ()
    return (gx, gw) + gb


defop("conv3d", forward=_conv_forward, backward=_conv_backward)
defop("conv3d_grad_input", forward=_grad_input_forward, backward=lambda t, g: (
    node("conv3d", (g, t.srcs[1]), t.srcs[0].shape, g.dtype, t.attrs), None))
defop("conv3d_grad_weight", forward=_grad_weight_forward)
defop("conv_transpose3d", forward=_transposed_forward, backward=_transposed_backward)


def _conv_operands(op: str, input, weight, bias, groups: int):
    x, w = promoted_operands(op, as_tensor(input), as_tensor(weight))
    require_float(op, x, w)
    x, unbatched = _batched(op, x)
    if w.ndim != 5:
        raise RuntimeError(f"{op}: weight must be 5-D, got shape {list(w.shape)}")
    G = int(groups)
    if G <= 0:
        raise RuntimeError("non-positive groups is not supported")
    b = None
    if bias is not None:
        b = as_tensor(bias).to(x.dtype)
    return x, w, b, G, unbatched


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """3-D cross-correlation, as ``torch.nn.functional.conv3d``: ``weight`` (C_out, C_in /
    groups, kD, kH, kW); ``padding`` an int, a triple, ``'valid'`` or ``'same'`` (stride 1)."""
    x, w, b, G, unbatched = _conv_operands("conv3d", input, weight, bias, groups)
    N, C, D, H, W = x.shape
    OC, Cg = w.shape[:2]
    k = w.shape[2:]
    if OC % G:
        raise RuntimeError(f"Given groups={G}, expected weight to be divisible by {G} at "
                           f"dimension 0, but got weight of size {list(w.shape)} instead")
    if C != Cg * G:
        raise RuntimeError(f"Given groups={G}, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {Cg * G} channels, but got {C} channels "
                           f"instead")
    s, d = _triple("conv3d", "stride", stride), _triple("conv3d", "dilation", dilation)
    if min(s) <= 0 or min(d) <= 0:
        raise RuntimeError(f"conv3d: stride {s} and dilation {d} must be positive")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
        if padding == "same" and s != (1, 1, 1):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        if padding == "valid":
            p = (0, 0, 0)
        else:  # 'same': torch pads the odd extra at the end; pad it explicitly there
            totals = [dd * (kk - 1) for dd, kk in zip(d, k)]
            p = tuple(tt // 2 for tt in totals)
            extra = [tt - 2 * (tt // 2) for tt in totals]
            if any(extra):
                from tinyopt.engine.ops.resample import pad as _pad
                x = _pad(x, (0, extra[2], 0, extra[1], 0, extra[0]))
                D, H, W = x.shape[2:]
    else:
        p = _triple("conv3d", "padding", padding)
        if min(p) < 0:
            raise RuntimeError(f"conv3d: negative padding is not supported, got {p}")
    out = tuple((n + 2 * pp - dd * (kk - 1) - 1) // ss + 1
                for n, pp, dd, kk, ss in zip((D, H, W), p, d, k, s))
    if min(out) < 1:
        raise RuntimeError(f"conv3d: calculated padded input size per channel is smaller than the "
                           f"kernel size (input {(D, H, W)}, padding {p}, kernel {k})")
    if b is not None and b.shape != (OC,):
        raise RuntimeError(f"conv3d: bias has shape {b.shape}, expected ({OC},)")
    srcs = (x, w) if b is None else (x, w, b)
    return _done(node("conv3d", srcs, (N, OC) + out, x.dtype, (s, p, d, G)), unbatched, True)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """3-D transposed convolution, as ``torch.nn.functional.conv_transpose3d``: ``weight``
    (C_in, C_out / groups, kD, kH, kW); output size (n - 1) s - 2 p + d (k - 1) +
    output_padding + 1 per axis."""
    x, w, b, G, unbatched = _conv_operands("conv_transpose3d", input, weight, bias, groups)
    N, C, D, H, W = x.shape
    Cw, OCg = w.shape[:2]
    k = w.shape[2:]
    if Cw != C:
        raise RuntimeError(f"Given transposed=1, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {Cw} channels, but got {C} channels "
                           f"instead")
    if C % G:
        raise RuntimeError(f"Given groups={G}, expected weight to be divisible by {G} at "
                           f"dimension 0, but got weight of size {list(w.shape)} instead")
    s, p = _triple("conv_transpose3d", "stride", stride), \
        _triple("conv_transpose3d", "padding", padding)
    d = _triple("conv_transpose3d", "dilation", dilation)
    op_ = _triple("conv_transpose3d", "output_padding", output_padding)
    if min(s) <= 0 or min(d) <= 0 or min(p) < 0:
        raise RuntimeError("conv_transpose3d: stride and dilation must be positive, padding "
                           "non-negative")
    if any(o >= max(ss, dd) for o, ss, dd in zip(op_, s, d)):
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but "
                           f"got output_padding={op_}, stride={s}, dilation={d}")
    out = tuple((n - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
                for n, ss, pp, dd, kk, oo in zip((D, H, W), s, p, d, k, op_))
    if min(out) < 1:
        raise RuntimeError(f"conv_transpose3d: output size {out} is too small")
    OC = OCg * G
    if b is not None and b.shape != (OC,):
        raise RuntimeError(f"conv_transpose3d: bias has shape {b.shape}, expected ({OC},)")
    srcs = (x, w) if b is None else (x, w, b)
    return _done(node("conv_transpose3d", srcs, (N, OC) + out, x.dtype, (s, p, d, G)),
                 unbatched, True)


# ---- pooling -------------------------------------------------------------------------------------
def _pool_size(op: str, x: Tensor, k, s, p, d, ceil_mode: bool) -> tuple[int, int, int]:
    out = []
    for n, kk, ss, pp, dd in zip(x.shape[2:], k, s, p, d):
        o = (n + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (o - 1) * ss >= n + pp:
            o -= 1
        out.append(o)
    if min(out) < 1:
        raise RuntimeError(f"{op}: given input size: ({'x'.join(map(str, x.shape[1:]))}). "
                           f"Calculated output size: ({x.shape[1]}x{'x'.join(map(str, out))}). "
                           f"Output size is too small")
    return out[0], out[1], out[2]


def _pool_args(op: str, x: Tensor, kernel_size, stride, padding, dilation):
    k = _triple(op, "kernel_size", kernel_size)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else \
        _triple(op, "stride", stride)
    p, d = _triple(op, "padding", padding), _triple(op, "dilation", dilation)
    if min(k) <= 0 or min(s) <= 0 or min(d) <= 0:
        raise RuntimeError(f"{op}: kernel_size, stride and dilation must be greater than zero, "
                           f"but got {k}, {s} and {d}")
    if min(p) < 0 or any(pp > kk // 2 for pp, kk in zip(p, k)):
        raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, but got "
                           f"pad={p}, kernel_size={k} and dilation={d}")
    return k, s, p, d


defop("max_pool3d_indices", forward=lambda t: (
    lambda out, x: K.max_pool3d(c_contiguous(x), *t.attrs, np.empty(out.shape, x.dtype), out)))


def _max_values_forward(t):
    def fwd(out, x, idx):
        flat = c_contiguous(x).reshape(x.shape[0], x.shape[1], -1)
        i = idx.reshape(idx.shape[0], idx.shape[1], -1)  # (in range: max_pool3d wrote them)
        out[...] = np.take_along_axis(flat, i, axis=2).reshape(out.shape)
    return fwd


defop("max_pool3d_gather", forward=_max_values_forward, backward=lambda t, g: (
    node("max_pool3d_scatter", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))
defop("max_pool3d_scatter", forward=lambda t: (
    lambda out, g, idx: K.max_pool3d_grad(c_contiguous(g), c_contiguous(idx), out)))


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """3-D max pooling, as ``torch.nn.functional.max_pool3d`` (padding never wins; NaN does);
    with ``return_indices`` also the flat ``(z H + y) W + x`` index of each maximum."""
    x = as_tensor(input)
    require_float("max_pool3d", x)
    x, unbatched = _batched("max_pool3d", x)
    k, s, p, d = _pool_args("max_pool3d", x, kernel_size, stride, padding, dilation)
    shape = x.shape[:2] + _pool_size("max_pool3d", x, k, s, p, d, ceil_mode)
    idx = node("max_pool3d_indices", (x,), shape, int64, (k, s, p, d))
    y = node("max_pool3d_gather", (x, idx), shape, x.dtype)
    if return_indices:
        return _done(y, unbatched), _done(idx, unbatched)
    return _done(y, unbatched)


defop("avg_pool3d", forward=lambda t: (lambda out, x: K.avg_pool3d(c_contiguous(x), *t.attrs, out)),
      backward=lambda t, g: (node("avg_pool3d_grad", (g,), t.srcs[0].shape, g.dtype,
                                  t.attrs),))
defop("avg_pool3d_grad", forward=lambda t: (
    lambda out, g: K.avg_pool3d_grad(c_contiguous(g), *t.attrs, out)), backward=lambda t, g: (
    node("avg_pool3d", (g,), t.srcs[0].shape, g.dtype, t.attrs),))


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """3-D average pooling, as ``torch.nn.functional.avg_pool3d``."""
    x = as_tensor(input)
    require_float("avg_pool3d", x)
    x, unbatched = _batched("avg_pool3d", x)
    k, s, p, d = _pool_args("avg_pool3d", x, kernel_size, stride, padding, 1)
    if divisor_override is not None and divisor_override <= 0:
        raise RuntimeError("divisor must be not zero")
    shape = x.shape[:2] + _pool_size("avg_pool3d", x, k, s, p, d, ceil_mode)
    attrs = (k, s, p, bool(count_include_pad), int(divisor_override or 0))
    return _done(node("avg_pool3d", (x,), shape, x.dtype, attrs), unbatched)


defop("adaptive_avg3d", forward=lambda t: (lambda out, x: K.adaptive_avg3d(c_contiguous(x), out)),
      backward=lambda t, g: (node("adaptive_avg3d_grad", (g,), t.srcs[0].shape, g.dtype),))
defop("adaptive_avg3d_grad", forward=lambda t: (
    lambda out, g: K.adaptive_avg3d_grad(c_contiguous(g), out)))


def adaptive_avg_pool3d(input, output_size) -> Tensor:
    """Average pooling to ``output_size`` (an int or a triple; None keeps that size), as
    ``torch.nn.functional.adaptive_avg_pool3d``."""
    x = as_tensor(input)
    require_float("adaptive_avg_pool3d", x)
    source = x
    x, unbatched = _batched("adaptive_avg_pool3d", x)
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * 3
    if len(sizes) != 3:
        raise ValueError(f"adaptive_avg_pool3d: output_size must be an int or 3 values, got "
                         f"{output_size!r}")
    out = tuple(n if o is None else int(o) for n, o in zip(x.shape[2:], sizes))
    checked_sizes("adaptive_avg_pool3d", out, x.shape[:2] + out)
    if 0 in out:  # (an empty result, as torch's: its gradient raises, as torch's)
        return empty_pool("adaptive_avg_pool3d", source, source.shape[:-3] + out)
    return _done(node("adaptive_avg3d", (x,), x.shape[:2] + out, x.dtype), unbatched)
