"""1-d convolution and pooling over (N, C, L) tensors, as the 2-d ops over (N, C, 1, L).

A 1-d window is a 2-d window of height 1, so ``conv1d`` is ``conv2d`` with a (OC, C/g, 1, k)
weight and ``max_pool1d``/``avg_pool1d`` are the 2-d pools with (1, k) windows: the same kernels,
the same arithmetic (hence exact), and the reshapes copy nothing (a result is a view of the 2-d
op's exactly where torch's is).  ``max_pool1d``'s indices are the 2-d ones, h * W + w with h = 0,
which are PyTorch's 1-d indices.  (``adaptive_avg_pool1d`` wraps ``adaptive_avg_pool2d`` the same
way, in ``nn.functional``.)
"""

from __future__ import annotations

from tinyopt.engine import grad_mode
from tinyopt.engine.op import own_reshape
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d
from tinyopt.engine.tensor import Tensor, as_tensor


def _single(name: str, v) -> int:
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise ValueError(f"{name} must be an int or a tuple of 1 int, got {v!r}")
        v = v[0]
    return int(v)


def _as_2d(op: str, x: Tensor) -> Tensor:
    """(N, C, L) -> (N, C, 1, L) and (C, L) -> (C, 1, L)."""
    if x.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to {op}, but got "
                           f"input of size: {list(x.shape)}")
    return x.unsqueeze(-2)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """1-d cross-correlation, as ``torch.nn.functional.conv1d``: input (N, C, L) or (C, L),
    weight (OC, C/groups, k), bias (OC,); ``padding`` an int or 'valid'/'same'."""
    x, w = as_tensor(input), as_tensor(weight)
    if w.ndim != 3:
        raise RuntimeError(f"Expected {w.ndim}-dimensional input for {w.ndim}-dimensional weight "
                           f"{list(w.shape)}, but got {x.ndim}-dimensional input of size "
                           f"{list(x.shape)} instead")
    x2 = _as_2d("conv1d", x)
    groups = int(groups)
    C = x.shape[-2]
    if groups > 0 and w.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                           f"dimension 0, but got weight of size {list(w.shape)} instead")
    if groups > 0 and C != w.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(w.shape)}, expected "
                           f"input{list(x.shape)} to have {w.shape[1] * groups} channels, but "
                           f"got {C} channels instead")
    pad = padding if isinstance(padding, str) else (0, _single("padding", padding))
    y = conv2d(x2, w.unsqueeze(2), bias, (1, _single("stride", stride)), pad,
               (1, _single("dilation", dilation)), groups)
    return _as_1d(y, x.ndim == 2)


def _as_1d(y: Tensor, view: bool) -> Tensor:
    """A 2-d op's (N, C, 1, L) or (C, 1, L) result as (N, C, L) or (C, L): a view of it where
    torch's result is a view of its inner op's (``view``), else a tensor of its own."""
    return y.squeeze(-2) if view else own_reshape(y, y.shape[:-2] + y.shape[-1:])


def _check_pool(op: str, x: Tensor, k: int, s: int, p: int, d: int, ceil_mode: bool) -> None:
    if x.ndim not in (2, 3):
        raise RuntimeError(f"{op}: Expected 2D or 3D (batch mode) tensor with optional 0 dim "
                           f"batch size for input, but got:{list(x.shape)}")
    if k <= 0 or s <= 0 or d <= 0:
        raise RuntimeError(f"{op}: kernel_size, stride and dilation must be greater than zero, "
                           f"but got kernel_size={k}, stride={s} and dilation={d}")
    if p < 0 or p > k // 2:
        raise RuntimeError(f"{op}() padding should be at most half of kernel size, but got "
                           f"padding={p} and kernel_size={k}")
    L = x.shape[-1]
    out = (L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    if out < 1:
        raise RuntimeError(f"{op}() Invalid computed output size: {out}")


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """1-d max pooling, as ``torch.nn.functional.max_pool1d``; with ``return_indices`` also the
    position of each maximum along L."""
    x = as_tensor(input)
    k = _single("kernel_size", kernel_size)
    s = k if stride is None or stride == () or stride == [] else _single("stride", stride)
    p, d = _single("padding", padding), _single("dilation", dilation)
    _check_pool("max_pool1d", x, k, s, p, d, ceil_mode)
    r = max_pool2d(x.unsqueeze(-2), (1, k), (1, s), (0, p), (1, d), ceil_mode, return_indices)
    if return_indices:
        return _as_1d(r[0], True), _as_1d(r[1], True)
    # (torch's own kernel, unless a gradient is recorded: then max_pool2d's, squeezed)
    return _as_1d(r, x.requires_grad and grad_mode.current.enabled)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """1-d average pooling, as ``torch.nn.functional.avg_pool1d``."""
    x = as_tensor(input)
    k = _single("kernel_size", kernel_size)
    s = k if stride is None or stride == () or stride == [] else _single("stride", stride)
    p = _single("padding", padding)
    _check_pool("avg_pool1d", x, k, s, p, 1, ceil_mode)
    return _as_1d(avg_pool2d(x.unsqueeze(-2), (1, k), (1, s), (0, p), ceil_mode,
                             count_include_pad), True)  # (torch's: avg_pool2d's, squeezed)
