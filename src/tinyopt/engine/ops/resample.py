"""Resampling ops: ``pad``, ``interpolate`` (nearest, nearest-exact, linear, bilinear, area),
``adaptive_avg_pool2d``, ``pixel_shuffle`` / ``pixel_unshuffle``.

Padding and nearest-neighbour interpolation are one op, ``gather3``: each output position of the
last (up to three) dimensions reads one input position, given per dimension by an index map made
on the host when the plan is compiled (-1: the constant fill).  Its gradient, ``scatter3``, adds
each output gradient back at the position it was read from.  Linear/bilinear interpolation is one
op (``lerp2``) whose per-axis (index, index + 1, weight) tables follow PyTorch's
``area_pixel_compute_source_index``, computed in the input's dtype as PyTorch's CPU kernels do.
The maps depend only on shapes and attributes, so they are part of the plan, not of each run.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.dtypes import FLOATS, scalar_type_name
from tinyopt.engine.op import defop, node, own_reshape
from tinyopt.engine.ops.family import c_contiguous, require_float
from tinyopt.engine.ops.movement import contiguous
from tinyopt.engine.ops.pool_empty import checked_sizes, empty_pool

from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import resample as K


def view4(shape: tuple[int, ...], k: int) -> tuple[int, int, int, int]:
    """``shape`` as (batch, D, H, W) with its last ``k`` dimensions spatial (1s fill in)."""
    spatial = (1,) * (3 - k) + tuple(shape[len(shape) - k:])
    return (math.prod(shape[:len(shape) - k]),) + spatial


# ---- index maps ----------------------------------------------------------------------------------
def _pad_map(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    out = n + lo + hi
    if mode == "constant":
        src = np.arange(out, dtype=np.int64) - lo
        src[(src < 0) | (src >= n)] = -1
        return src
    numpy_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    return np.pad(np.arange(n, dtype=np.int64), (lo, hi), mode=numpy_mode)


def _nearest_map(n: int, out: int, scale: float | None, exact: bool) -> np.ndarray:
    """PyTorch's ``nearest_idx`` / ``nearest_neighbor_exact_compute_source_index``, in float32."""
    if out == n and not exact:
        return np.arange(out, dtype=np.int64)
    s = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
        np.float32(n) / np.float32(out)
    dst = np.arange(out, dtype=np.float32)
    if exact:
        dst = dst + np.float32(0.5)
    return np.minimum(np.floor(dst * s).astype(np.int64), n - 1)


def index_maps(attrs: tuple, in4: tuple[int, ...], out4: tuple[int, ...]) -> list[np.ndarray]:
    kind, k = attrs[0], attrs[1]
    maps = []
    for axis in range(3):
        n, out = in4[axis + 1], out4[axis + 1]
        spatial = axis - (3 - k)
        if spatial < 0:
            maps.append(np.zeros(1, np.int64))
        elif kind == "pad":
            lo, hi = attrs[3 + 2 * spatial], attrs[4 + 2 * spatial]
            maps.append(_pad_map(n, lo, hi, attrs[2]))
        else:
            maps.append(_nearest_map(n, out, attrs[3 + spatial], attrs[2]))
    return maps


# ---- gather / scatter ops ------------------------------------------------------------------------
def _gather_forward(t):
    attrs, fill = t.attrs[:-1], t.attrs[-1]
    k = attrs[1]
    in4, out4 = view4(t.srcs[0].shape, k), view4(t.shape, k)
    md, mh, mw = index_maps(attrs, in4, out4)
    value = t.dtype.type(fill)
    return lambda out, x: K.gather3(c_contiguous(x).reshape(in4), md, mh, mw, value,
                                    out.reshape(out4))


def _scatter_forward(t):
    attrs = t.attrs[:-1]
    k = attrs[1]
    in4, out4 = view4(t.shape, k), view4(t.srcs[0].shape, k)
    md, mh, mw = index_maps(attrs, in4, out4)
    return lambda out, g: K.scatter3(c_contiguous(g).reshape(out4), md, mh, mw, out.reshape(in4))


defop("gather3", forward=_gather_forward, backward=lambda t, g: (
    node("scatter3", (g,), t.srcs[0].shape, g.dtype, t.attrs),))
defop("scatter3", forward=_scatter_forward, backward=lambda t, g: (
    node("gather3", (g,), t.srcs[0].shape, g.dtype, t.attrs),))


# ---- pad -----------------------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions, as ``torch.nn.functional.pad``: ``pad`` is
    (left, right) for the last dimension, then (top, bottom) for the one before, and so on.

    ``'constant'`` fills with ``value`` (0) and takes negative pads (cropping); ``'reflect'``
    mirrors without repeating the edge (pads smaller than the dimension), ``'replicate'`` repeats
    the edge, ``'circular'`` wraps around (at most once).  At most the last 3 dimensions.
    """
    x = as_tensor(input)
    pads = tuple(pad)
    if any(isinstance(p, bool) or not isinstance(p, numbers.Integral) for p in pads):
        raise TypeError(f"pad: padding must be a sequence of ints, got {list(pad)}")
    pads = tuple(int(p) for p in pads)
    if len(pads) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(pads) // 2
    if k > x.ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input "
                           f"dimension but got padding length {len(pads)} and input of dimension "
                           f"{x.ndim}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant":
        if value is not None and value != 0:
            raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
        if not 1 <= k <= 3 or x.ndim not in (k + 1, k + 2):
            raise NotImplementedError(
                f"Padding size {len(pads)} is not supported for {x.ndim}D input tensor.\n"
                f"Supported combinations for non-constant padding:\n"
                f"  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
                f"  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
                f"  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if k == 0:
        return x
    if k > 3:
        raise NotImplementedError(f"pad: tinyopt pads at most the last 3 dimensions, got "
                                  f"{k} (padding {list(pads)})")
    spatial_pads = []  # (lo, hi) per spatial dimension, first to last
    for i in range(k):
        lo, hi = pads[2 * (k - 1 - i)], pads[2 * (k - 1 - i) + 1]
        n = x.shape[x.ndim - k + i]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                               f"input dimension, but got: padding ({lo}, {hi}) at dimension "
                               f"{x.ndim - k + i} of input {list(x.shape)}")
        if mode == "circular" and (lo > n or hi > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode != "constant" and (lo < 0 or hi < 0):
            raise RuntimeError(f"pad: negative padding is only supported in constant mode, got "
                               f"({lo}, {hi})")
        if mode == "replicate" and n == 0:
            raise RuntimeError("pad: replicate padding of an empty dimension")
        if n + lo + hi < 0:
            raise RuntimeError(f"The input size {n}, plus negative padding {lo} and {hi} resulted "
                               f"in a negative output size, which is invalid. Check dimension "
                               f"{x.ndim - k + i} of your input.")
        spatial_pads.append((lo, hi))
    if all(lo == hi == 0 for lo, hi in spatial_pads):
        return x
    shape = x.shape[:x.ndim - k] + tuple(
        x.shape[x.ndim - k + i] + lo + hi for i, (lo, hi) in enumerate(spatial_pads))
    flat = tuple(v for p in spatial_pads for v in p)
    fill = 0.0 if value is None else float(value)
    if x.dtype not in FLOATS and fill != int(fill):
        raise RuntimeError(f"pad: value {value} cannot fill an integer tensor of dtype {x.dtype}")
    return node("gather3", (x,), shape, x.dtype, ("pad", k, mode) + flat + (fill,))


# ---- interpolate ---------------------------------------------------------------------------------
def _linear_table(n: int, out: int, scale: float | None, align_corners: bool,
                  dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, lambda1) per output index, as PyTorch's ``compute_source_index_and_lambda``."""
    f = dtype.type
    i0 = np.arange(out, dtype=np.int64)
    if out == n:
        return i0, i0.copy(), np.zeros(out, dtype)
    if align_corners:
        ratio = f(n - 1) / f(out - 1) if out > 1 else f(0)
        src = ratio * np.arange(out, dtype=dtype)
    else:
        ratio = f(1.0 / scale) if scale is not None and scale > 0 else f(n) / f(out)
        src = ratio * (np.arange(out, dtype=dtype) + f(0.5)) - f(0.5)
        src = np.maximum(src, f(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    lam = np.clip(src - i0.astype(dtype), f(0), f(1)).astype(dtype)
    i1 = i0 + (i0 < n - 1)
    return i0, i1, lam


def lerp_tables(t_in_shape, t_out_shape, attrs, dtype):
    align, sh, sw = attrs
    H, W = t_in_shape[-2], t_in_shape[-1]
    OH, OW = t_out_shape[-2], t_out_shape[-1]
    return _linear_table(H, OH, sh, align, dtype) + _linear_table(W, OW, sw, align, dtype)


def planes3(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def _lerp_forward(t):
    tables = lerp_tables(t.srcs[0].shape, t.shape, t.attrs, t.dtype)
    in3, out3 = planes3(t.srcs[0].shape), planes3(t.shape)
    return lambda out, x: K.lerp2(c_contiguous(x).reshape(in3), *tables, out.reshape(out3))


def _lerp_grad_forward(t):
    tables = lerp_tables(t.shape, t.srcs[0].shape, t.attrs, t.dtype)
    in3, out3 = planes3(t.shape), planes3(t.srcs[0].shape)
    return lambda out, g: K.lerp2_grad(c_contiguous(g).reshape(out3), *tables, out.reshape(in3))


defop("lerp2", forward=_lerp_forward, backward=lambda t, g: (
    node("lerp2_grad", (g,), t.srcs[0].shape, g.dtype, t.attrs),))
defop("lerp2_grad", forward=_lerp_grad_forward, backward=lambda t, g: (
    node("lerp2", (g,), t.srcs[0].shape, g.dtype, t.attrs),))

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "area")


def _integer_kernel(mode: str, dim: int) -> str:
    """The torch kernel that refuses an integer or bool input to ``interpolate`` (its uint8
    input only the nearest modes and bilinear compute)."""
    if mode in ("nearest", "nearest-exact"):
        return "upsample_nearest2d_channels_last" if dim == 2 else "compute_indices_weights_nearest"
    if mode == "bilinear":
        return "upsample_bilinear2d_channels_last"
    if mode == "area":
        return "adaptive_avg_pool3d_cpu" if dim == 3 else "adaptive_avg_pool2d"
    return "compute_indices_weights_linear"


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dimensions of (N, C, *spatial) ``input``, as
    ``torch.nn.functional.interpolate``: to ``size`` or by ``scale_factor`` (output size
    floor(in * scale)), with ``mode`` 'nearest' (1-3 spatial dims), 'nearest-exact', 'linear' (3-D
    input), 'bilinear' (4-D) or 'area' (adaptive average pooling).  Sampling positions follow
    PyTorch exactly, including ``align_corners`` and a given ``scale_factor`` (used for the
    positions unless ``recompute_scale_factor``)."""
    x = as_tensor(input)
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = x.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scales: list[float | None] = [None] * dim
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial "
                                 f"dimensions, but got input with spatial dimensions of "
                                 f"{list(x.shape[2:])} and output size of {size}. Please provide "
                                 f"input tensor in (N, C, d1, d2, ...,dK) format and output size "
                                 f"in (o1, o2, ...,oK) format.")
            if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                       for s in size):
                raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, int] "
                                f"or Tuple[int, int, int], but got size with types "
                                f"{[type(s) for s in size]}")
            out_size = [int(s) for s in size]
        else:
            out_size = [int(size)] * dim
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial "
                                 f"dimensions, but got input with spatial dimensions of "
                                 f"{list(x.shape[2:])} and scale_factor of shape {scale_factor}. "
                                 f"Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                                 f"and scale_factor in (s1, s2, ...,sK) format.")
            scales = [float(s) for s in scale_factor]
        else:
            scales = [float(scale_factor)] * dim
        out_size = [int(math.floor(x.shape[i + 2] * scales[i])) for i in range(dim)]
        if recompute_scale_factor or mode == "area":
            scales = [None] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by tinyopt")
    if mode not in _MODES:
        if mode in ("bicubic", "trilinear", "lanczos"):
            raise NotImplementedError(f"interpolate: mode '{mode}' is not supported by tinyopt "
                                      f"(supported: {' | '.join(_MODES)})")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{x.ndim}D) for the modes: nearest | linear | bilinear | "
                                  f"bicubic | trilinear | lanczos | area | nearest-exact (got "
                                  f"{mode})")
    if x.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{x.ndim}D) for the modes: nearest | linear | bilinear | "
                                  f"bicubic | trilinear | lanczos | area | nearest-exact (got "
                                  f"{mode})")
    if any(s <= 0 for s in out_size):
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"({', '.join(map(str, x.shape[2:]))}) and output "
                           f"({', '.join(map(str, out_size))})")
    need = {"linear": 1, "bilinear": 2, "trilinear": 3}.get(mode, dim)  # (else: its own error)
    uint8_ok = x.dtype == np.uint8 and mode in ("nearest", "nearest-exact", "bilinear")
    if x.dtype.kind in "iub" and need == dim and not uint8_ok:
        raise NotImplementedError(f'"{_integer_kernel(mode, dim)}" not implemented for '
                                  f"'{scalar_type_name(x.dtype)}'")  # (torch's kernels)
    shape = x.shape[:2] + tuple(out_size)
    if mode in ("nearest", "nearest-exact"):
        return node("gather3", (x,), shape, x.dtype,
                    ("nearest", dim, mode == "nearest-exact") + tuple(scales) + (0.0,))
    if mode == "area":
        if dim == 1:
            return adaptive_avg_pool2d(x.unsqueeze(2), (1, out_size[0])).squeeze(2)
        if dim == 2:
            return adaptive_avg_pool2d(x, out_size)
        raise NotImplementedError("interpolate: mode 'area' of a 5-D input is not supported by "
                                  "tinyopt")
    expected = {"linear": 3, "bilinear": 4}[mode]
    if x.ndim != expected:
        raise NotImplementedError(f"Got {x.ndim}D input, but {mode} mode needs {expected}D input")
    require_float("interpolate", x)
    if mode == "linear":
        x4 = x.unsqueeze(2)
        y = node("lerp2", (x4,), x4.shape[:3] + (out_size[0],), x.dtype,
                 (bool(align_corners), None, scales[0]))
        return y.squeeze(2)
    return node("lerp2", (x,), shape, x.dtype, (bool(align_corners), scales[0], scales[1]))


# ---- adaptive average pooling --------------------------------------------------------------------
defop("adaptive_avg2", forward=lambda t: (lambda out, x: K.adaptive_avg2(
    c_contiguous(x).reshape(planes3(t.srcs[0].shape)), out.reshape(planes3(t.shape)))),
    backward=lambda t, g: (node("adaptive_avg2_grad", (g,), t.srcs[0].shape, g.dtype),))
defop("adaptive_avg2_grad", forward=lambda t: (lambda out, g: K.adaptive_avg2_grad(
    c_contiguous(g).reshape(planes3(t.srcs[0].shape)), out.reshape(planes3(t.shape)))),
    backward=lambda t, g: (node("adaptive_avg2", (g,), t.srcs[0].shape, g.dtype),))


def adaptive_avg_pool2d(input, output_size) -> Tensor:
    """Average pooling to a given output size, as ``torch.nn.functional.adaptive_avg_pool2d``:
    output (i, j) averages input rows floor(i H / OH) .. ceil((i + 1) H / OH) - 1 and the
    matching columns.  ``output_size`` is an int or a pair (None keeps that input size)."""
    x = as_tensor(input)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                           f"{list(x.shape)}")
    if any(s == 0 for s in x.shape[-3:]) or (x.ndim == 4 and x.shape[0] == 0):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected input to have non-zero size for "
                           f"non-batch dimensions, but input has sizes {list(x.shape)} with "
                           f"dimension {x.shape.index(0)} being empty")
    require_float("adaptive_avg_pool2d", x)
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) \
        else (output_size, output_size)
    if len(sizes) != 2:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got "
                         f"{output_size!r}")
    oh = x.shape[-2] if sizes[0] is None else int(sizes[0])
    ow = x.shape[-1] if sizes[1] is None else int(sizes[1])
    checked_sizes("adaptive_avg_pool2d", (oh, ow), x.shape[:-2] + (oh, ow))
    if oh == 0 or ow == 0:  # (an empty result, as torch's: its gradient raises, as torch's)
        return empty_pool("adaptive_avg_pool2d", x, x.shape[:-2] + (oh, ow))
    if (oh, ow) == x.shape[-2:]:  # (a copy: torch's result is never its input)
        return contiguous(x)  # (``movement.contiguous``: always a copy)
    return node("adaptive_avg2", (x,), x.shape[:-2] + (oh, ow), x.dtype)


# ---- pixel shuffle -------------------------------------------------------------------------------
def pixel_shuffle(input, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r): out[..., c, h r + i, w r + j] =
    in[..., c r^2 + i r + j, h, w] (Shi et al. 2016, https://arxiv.org/abs/1609.05158).
    A reshape, a permute and one copy."""
    x = as_tensor(input)
    r = int(upscale_factor)
    if x.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got "
                           f"input with {x.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *lead, C, H, W = x.shape
    if C % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible "
                           f"by the square of upscale_factor, but input.size(-3)={C} is not "
                           f"divisible by {r * r}")
    n = len(lead)
    y = x.reshape(tuple(lead) + (C // (r * r), r, r, H, W))
    perm = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)
    return own_reshape(contiguous(y.permute(perm)), tuple(lead) + (C // (r * r), H * r, W * r))


def pixel_unshuffle(input, downscale_factor: int) -> Tensor:
    """The inverse of ``pixel_shuffle``: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    x = as_tensor(input)
    r = int(downscale_factor)
    if x.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got "
                           f"input with {x.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, C, H, W = x.shape
    if H % r or W % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by "
                           f"downscale_factor, but input.size(-2)={H} and input.size(-1)={W} "
                           f"are not divisible by {r}")
    n = len(lead)
    y = x.reshape(tuple(lead) + (C, H // r, r, W // r, r))
    perm = tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3)
    return own_reshape(contiguous(y.permute(perm)), tuple(lead) + (C * r * r, H // r, W // r))
