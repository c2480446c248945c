"""The 3-d layers over (N, C, D, H, W) inputs, as ``torch.nn``: ``Conv3d``, ``ConvTranspose3d``,
``MaxPool3d``, ``AvgPool3d``, ``AdaptiveAvgPool3d`` (``engine/ops/volume.py``; ``BatchNorm3d``
lives with the other norms)."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.layers.conv import Conv2d
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module


def _triple(v, name: str) -> tuple[int, int, int]:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,) * 3
    if len(t) != 3 or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                              for i in t):
        raise TypeError(f"{name} must be an int or a tuple of 3 ints, got {v!r}")
    return int(t[0]), int(t[1]), int(t[2])


class _ConvNd3(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride, padding,
                 dilation, groups: int, bias: bool, transposed: bool, output_padding,
                 padding_mode: str, device, dtype) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{type(self).__name__}: padding_mode={padding_mode!r} is "
                                      f"not supported by tinyopt (only 'zeros')")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _triple(kernel_size, "kernel_size")
        self.stride = _triple(stride, "stride")
        self.padding = padding if isinstance(padding, str) else _triple(padding, "padding")
        self.dilation = _triple(dilation, "dilation")
        self.groups = groups
        self.transposed = transposed
        self.output_padding = _triple(output_padding, "output_padding")
        self.padding_mode = padding_mode
        shape = (in_channels, out_channels // groups) if transposed else \
            (out_channels, in_channels // groups)
        self.weight = Parameter(np.empty(shape + self.kernel_size, dtype=dt))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters  # (PyTorch's initialisation, for every rank)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1, 1):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0, 0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv3d(_ConvNd3):
    """3-D convolution: ``weight`` (out_channels, in_channels / groups, kD, kH, kW)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, False, 0, padding_mode, device, dtype)

    def forward(self, input) -> Tensor:
        return F.conv3d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose3d(_ConvNd3):
    """3-D transposed convolution: ``weight`` (in_channels, out_channels / groups, kD, kH, kW);
    ``output_size`` in ``forward`` picks the output padding, as in PyTorch."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, True, output_padding, padding_mode, device, dtype)

    def forward(self, input, output_size=None) -> Tensor:
        out_pad = self.output_padding
        if output_size is not None:
            x_shape = input.shape
            wanted = tuple(output_size)[-3:]
            base = [(n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in zip(
                x_shape[-3:], self.stride, self.padding, self.dilation, self.kernel_size)]
            out_pad = tuple(w - b for w, b in zip(wanted, base))
            top = [b + max(s, d) - 1 for b, s, d in zip(base, self.stride, self.dilation)]
            if any(not b <= w <= t for b, w, t in zip(base, wanted, top)):
                raise ValueError(f"requested an output size of {list(wanted)}, but valid sizes "
                                 f"range from {base} to {top} (for an input of "
                                 f"{list(x_shape[-3:])})")
        return F.conv_transpose3d(input, self.weight, self.bias, self.stride, self.padding,
                                  out_pad, self.groups, self.dilation)


class MaxPool3d(Module):
    """Max over ``kernel_size`` windows moved by ``stride`` (default: ``kernel_size``)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool3d(Module):
    """Mean over ``kernel_size`` windows moved by ``stride`` (default: ``kernel_size``)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input) -> Tensor:
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool3d(Module):
    """Average pooling to a fixed output size (an int, or a triple whose None entries keep the
    input's size)."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input) -> Tensor:
        return F.adaptive_avg_pool3d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
