"""``Conv2d``: 2-D cross-correlation over NCHW inputs, as ``torch.nn.Conv2d``.

``y[n, o] = b[o] + sum_{c in group(o)} sum_{i,j} W[o, c, i, j] x[n, c, s_h h + d_h i - p_h,
s_w w + d_w j - p_w]`` with stride s, dilation d and padding p; the output size per spatial
dimension is ``floor((H + 2p - d (k - 1) - 1) / s) + 1`` (Dumoulin & Visin 2016,
https://arxiv.org/abs/1603.07285).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.ops.movement import permute
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import functional as F
from tinyopt.nn import init
from tinyopt.nn.layers._factory import pair, param_dtype
from tinyopt.nn.module import Module

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_PADDING_STRINGS = ("same", "valid")
_NUMPY_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


class Conv2d(Module):
    """2-D convolution layer over (N, C_in, H, W) or (C_in, H, W) inputs.

    ``weight`` has shape (out_channels, in_channels / groups, kH, kW) and starts as PyTorch's:
    ``kaiming_uniform_(W, a=sqrt(5))``; ``bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with
    ``fan_in = in_channels / groups * kH * kW``.  ``padding`` is an int, a pair, ``'valid'`` (0)
    or ``'same'`` (output as large as the input; stride 1 only).  ``padding_mode`` other than
    ``'zeros'`` pads the input explicitly (reflect, replicate or circular) before the op.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: str | int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        _check_groups(in_channels, out_channels, groups)
        kernel_size_, stride_ = pair(kernel_size, "kernel_size"), pair(stride, "stride")
        dilation_ = pair(dilation, "dilation")
        if min(kernel_size_) <= 0 or min(stride_) <= 0 or min(dilation_) <= 0:
            raise ValueError(f"Conv2d: kernel_size {kernel_size_}, stride {stride_} and dilation "
                             f"{dilation_} must be positive")
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{set(_PADDING_STRINGS)}")
            if padding == "same" and any(s != 1 for s in stride_):
                raise ValueError("padding='same' is not supported for strided convolutions")
            padding_ = padding
        else:
            padding_ = pair(padding, "padding")
            if min(padding_) < 0:
                raise ValueError(f"Conv2d: padding {padding_} must be non-negative")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size_
        self.stride = stride_
        self.padding = padding_
        self.dilation = dilation_
        self.groups = groups
        self.padding_mode = padding_mode
        self.output_padding = (0, 0)
        self.transposed = False
        # (top, bottom, left, right) for the non-zero padding modes, which pad explicitly.
        if padding_ == "valid":
            self._pad4 = (0, 0, 0, 0)
        elif padding_ == "same":
            pads = []
            for d, k in zip(dilation_, kernel_size_):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            self._pad4 = tuple(pads)
        else:
            self._pad4 = (padding_[0], padding_[0], padding_[1], padding_[1])
        self.weight = Parameter(np.empty((out_channels, in_channels // groups) + kernel_size_,
                                         dtype=dt))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weight and bias again from their initial distributions (see the class
        docstring)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input) -> Tensor:
        x = as_tensor(input)
        if x.ndim not in (3, 4):
            raise RuntimeError(f"Conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                               f"shape {x.shape}")
        if self.padding_mode != "zeros":
            x = _pad(x, self._pad4, self.padding_mode)
            return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        n = len(self.kernel_size)
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


def _pad(x: Tensor, pad4: tuple[int, int, int, int], mode: str) -> Tensor:
    """Pad the last two dimensions by (top, bottom, left, right).

    Each dimension is moved to the front and gathered with an index array (``np.pad`` of
    ``arange(n)`` in the matching numpy mode), so the backward pass is the engine's scatter-add.
    """
    nd = x.ndim
    for axis, (lo, hi) in ((nd - 2, pad4[:2]), (nd - 1, pad4[2:])):
        if lo == 0 and hi == 0:
            continue
        n = x.shape[axis]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ValueError(f"Conv2d: reflect padding ({lo}, {hi}) must be smaller than the "
                             f"input dimension {n}")
        if mode == "circular" and (lo > n or hi > n):
            raise ValueError(f"Conv2d: circular padding ({lo}, {hi}) may wrap around at most "
                             f"once (input dimension {n})")
        idx = np.pad(np.arange(n, dtype=np.int64), (lo, hi), mode=_NUMPY_PAD_MODE[mode])
        perm = (axis,) + tuple(i for i in range(nd) if i != axis)
        inv = tuple(int(i) for i in np.argsort(perm))
        x = permute(permute(x, perm)[idx], inv)
    return x


class Conv1d(Module):
    """1-D convolution layer over (N, C_in, L) or (C_in, L) inputs, as ``torch.nn.Conv1d``.

    ``weight`` (out_channels, in_channels / groups, k) and ``bias`` (out_channels,) start as
    Conv2d's (fan_in = in_channels / groups * k).  ``padding`` is an int, ``'valid'`` or
    ``'same'``; ``padding_mode`` other than ``'zeros'`` pads the input explicitly.  It runs as the
    2-d convolution of height 1 (``engine/ops/conv1d.py``).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int],
                 stride: int | tuple[int] = 1, padding: str | int | tuple[int] = 0,
                 dilation: int | tuple[int] = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        _check_groups(in_channels, out_channels, groups)
        k, s, d = (_single(v, name) for v, name in ((kernel_size, "kernel_size"),
                                                     (stride, "stride"), (dilation, "dilation")))
        if min(k, s, d) <= 0:
            raise ValueError(f"Conv1d: kernel_size {k}, stride {s} and dilation {d} must be "
                             f"positive")
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{set(_PADDING_STRINGS)}")
            if padding == "same" and s != 1:
                raise ValueError("padding='same' is not supported for strided convolutions")
            padding_ = padding
        else:
            padding_ = (_single(padding, "padding"),)
            if padding_[0] < 0:
                raise ValueError(f"Conv1d: padding {padding_} must be non-negative")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = (k,)
        self.stride = (s,)
        self.padding = padding_
        self.dilation = (d,)
        self.groups = groups
        self.padding_mode = padding_mode
        self.output_padding = (0,)
        self.transposed = False
        if padding_ == "valid":
            self._pad2 = (0, 0)
        elif padding_ == "same":
            total = d * (k - 1)
            self._pad2 = (total // 2, total - total // 2)
        else:
            self._pad2 = (padding_[0], padding_[0])
        self.weight = Parameter(np.empty((out_channels, in_channels // groups, k), dtype=dt))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters

    def forward(self, input) -> Tensor:
        x = as_tensor(input)
        if x.ndim not in (2, 3):
            raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to conv1d, but "
                               f"got input of size: {list(x.shape)}")
        if self.padding_mode != "zeros":
            x = _pad(x.unsqueeze(-2), (0, 0) + self._pad2, self.padding_mode).squeeze(-2)
            return F.conv1d(x, self.weight, self.bias, self.stride, 0, self.dilation,
                            self.groups)
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    extra_repr = Conv2d.extra_repr


def _check_groups(in_channels: int, out_channels: int, groups: int) -> None:
    if not isinstance(groups, int) or groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")


def _single(v, name: str) -> int:
    """An int or a 1-sequence of ints as an int (``_single`` in PyTorch), validated."""
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(t) != 1 or not isinstance(t[0], (int, np.integer)) or isinstance(t[0], bool):
        raise TypeError(f"{name} must be an int or a tuple of 1 int, got {v!r}")
    return int(t[0])
