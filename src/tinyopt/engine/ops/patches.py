"""Windows of an image: ``F.unfold`` and ``F.fold`` (sliding local blocks as columns, and back:
the convolution's ``im2col``/``col2im`` ops of ``engine/ops/conv.py``, each the other's
gradient).

    cols = F.unfold(x, kernel_size=3, padding=1)          # (N, C*3*3, L), L = OH*OW
    y = F.fold(cols, output_size=(H, W), kernel_size=3, padding=1)   # overlaps added up
"""

from __future__ import annotations

import math

from tinyopt.engine.op import node, own_reshape
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.movement import contiguous

from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["fold", "unfold"]


def _pair(v, name: str) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(t) != 2:
        raise TypeError(f"{name} must be an int or a pair, got {v!r}")
    return int(t[0]), int(t[1])


def _geometry(kernel_size, dilation, padding, stride):
    k, d = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    p, s = _pair(padding, "padding"), _pair(stride, "stride")
    if min(k) <= 0 or min(d) <= 0 or min(s) <= 0 or min(p) < 0:
        raise RuntimeError(f"kernel_size {k}, dilation {d} and stride {s} must be positive and "
                           f"padding {p} non-negative")
    return k, d, p, s


def _blocks(size: tuple[int, int], k, d, p, s) -> tuple[int, int]:
    return tuple((n + 2 * pp - dd * (kk - 1) - 1) // ss + 1
                 for n, kk, dd, pp, ss in zip(size, k, d, p, s))  # type: ignore[return-value]


def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """(N, C, H, W) -> (N, C * kH * kW, L): every block the kernel visits, as a column (rows in
    channel, kernel row, kernel column order), as ``torch.nn.functional.unfold``."""
    x = as_tensor(input)
    require_float("unfold", x)
    unbatched = x.ndim == 3
    if unbatched:
        x = x.reshape((1,) + x.shape)
    if x.ndim != 4:
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got "
                                  f"{x.ndim}D)")
    k, d, p, s = _geometry(kernel_size, dilation, padding, stride)
    N, C, H, W = x.shape
    OH, OW = _blocks((H, W), k, d, p, s)
    if OH <= 0 or OW <= 0:
        raise RuntimeError(f"Given input with spatial size ({H}, {W}), kernel_size={k}, "
                           f"dilation={d}, padding={p}, calculated shape of the array of sliding "
                           f"blocks as ({OH}, {OW}), but its components must be at least one.")
    col = node("im2col", (x,), (C * k[0] * k[1], N, OH, OW), x.dtype,
               (k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]))
    CK, L = C * k[0] * k[1], OH * OW
    if N == 1:  # ((CK, 1, L) is (1, CK, L): the result is col's memory, as a tensor of its own)
        return own_reshape(col, (CK, L) if unbatched else (1, CK, L))
    out = col.reshape(CK, N, L).permute(1, 0, 2)
    return contiguous(out)  # (a copy: torch's is a new tensor)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """(N, C * kH * kW, L) -> (N, C, H, W): ``unfold``'s adjoint (overlapping blocks add up), as
    ``torch.nn.functional.fold``."""
    cols = as_tensor(input)
    require_float("fold", cols)
    unbatched = cols.ndim == 2
    if unbatched:
        cols = cols.reshape((1,) + cols.shape)
    if cols.ndim != 3:
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {cols.ndim}D)")
    k, d, p, s = _geometry(kernel_size, dilation, padding, stride)
    H, W = _pair(output_size, "output_size")
    N, CK, L = cols.shape
    if CK % (k[0] * k[1]):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product "
                           f"of kernel_size, but got input.size(1)={CK} and "
                           f"kernel_size={k}")
    OH, OW = _blocks((H, W), k, d, p, s)
    if L != OH * OW:
        raise RuntimeError(f"Given output_size={(H, W)}, kernel_size={k}, dilation={d}, "
                           f"padding={p}, stride={s}, expected size of input's dimension 2 to "
                           f"match the calculated number of sliding blocks {OH} * {OW} = "
                           f"{OH * OW}, but got input.size(2)={L}.")
    col = cols.permute(1, 0, 2).reshape(CK, N, OH, OW)
    out = node("col2im", (col,), (N, CK // math.prod(k), H, W), cols.dtype,
               (k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]))
    return own_reshape(out, out.shape[1:]) if unbatched else out
