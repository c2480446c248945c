"""``ConvTranspose2d``: the transposed 2-D convolution (the gradient of ``Conv2d`` with respect to
its input, used to upsample), as ``torch.nn.ConvTranspose2d``.

Output size per spatial dimension: ``(H - 1) s - 2 p + d (k - 1) + output_padding + 1``
(Dumoulin & Visin 2016, https://arxiv.org/abs/1603.07285); ``forward(x, output_size)`` picks the
``output_padding`` that gives ``output_size``.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.ops.conv_transpose import output_size as _output_size
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn import functional as F
from tinyopt.nn import init
from tinyopt.nn.layers._factory import pair, param_dtype
from tinyopt.nn.module import Module


class ConvTranspose2d(Module):
    """Transposed convolution over (N, C_in, H, W) or (C_in, H, W) inputs.

    ``weight`` has shape (in_channels, out_channels / groups, kH, kW) and starts as PyTorch's:
    ``kaiming_uniform_(W, a=sqrt(5))``, ``bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with
    ``fan_in = out_channels / groups * kH * kW`` (PyTorch's fan of this weight layout).  Only
    ``padding_mode='zeros'`` exists, as in PyTorch.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 output_padding: int | tuple[int, int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | tuple[int, int] = 1, padding_mode: str = "zeros", device=None,
                 dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise ValueError('Only "zeros" padding mode is supported for ConvTranspose2d')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = pair(stride, "stride")
        self.padding = pair(padding, "padding")
        self.output_padding = pair(output_padding, "output_padding")
        self.dilation = pair(dilation, "dilation")
        self.groups = groups
        self.padding_mode = padding_mode
        self.transposed = True
        self.weight = Parameter(np.empty((in_channels, out_channels // groups) + self.kernel_size,
                                         dtype=dt))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weight and bias again as PyTorch does: ``kaiming_uniform_(W, a=sqrt(5))`` and
        ``b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _output_padding(self, x: Tensor, output_size) -> tuple[int, int]:
        if output_size is None:
            return self.output_padding
        size = list(output_size)
        lead = 2 if x.ndim == 4 else 1
        if len(size) == lead + 2:
            size = size[lead:]
        if len(size) != 2:
            raise ValueError(f"ConvTranspose2D: for {x.ndim}D input, output_size must have 2 or "
                             f"{lead + 2} elements (got {len(output_size)})")
        lo = _output_size(x.shape[-2:], self.kernel_size, self.stride, self.padding,
                          self.dilation, (0, 0))
        hi = tuple(m + s - 1 for m, s in zip(lo, self.stride))
        if not all(a <= int(n) <= b for a, n, b in zip(lo, size, hi)):
            raise ValueError(f"requested an output size of {size}, but valid sizes range from "
                             f"{list(lo)} to {list(hi)} (for an input of {list(x.shape[-2:])})")
        return tuple(int(n) - m for n, m in zip(size, lo))

    def forward(self, input, output_size=None) -> Tensor:
        x = as_tensor(input)
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s
