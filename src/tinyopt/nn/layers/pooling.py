"""``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d`` over NCHW inputs, and ``MaxPool1d``,
``AvgPool1d``, ``AdaptiveAvgPool1d`` over (N, C, L), as ``torch.nn``; ``AdaptiveMaxPool1d/2d/3d``
and ``LPPool1d/2d/3d`` over 1, 2 or 3 spatial dims.

Max pooling takes the largest value of each (dilated) window; average pooling its mean, counting
the zero padding unless ``count_include_pad=False``, or dividing by ``divisor_override``.  The
output size is ``floor_or_ceil((H + 2p - d (k - 1) - 1) / s) + 1``.
"""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    """Max over ``kernel_size`` windows moved by ``stride`` (default: ``kernel_size``)."""

    def __init__(self, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        """The pooled tensor, and with ``return_indices`` the flat ``h * W + w`` index of each
        maximum within its plane."""
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows moved by ``stride`` (default: ``kernel_size``)."""

    def __init__(self, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input) -> Tensor:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size (an int, or a pair whose None entries keep the
    input's size): output (i, j) averages rows floor(i H / OH) .. ceil((i + 1) H / OH) - 1 and the
    matching columns."""

    def __init__(self, output_size: int | None | tuple[int | None, int | None]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(Module):
    """Average pooling of (N, C, L) inputs to a fixed length."""

    def __init__(self, output_size: int) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input) -> Tensor:
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool1d(_MaxPoolNd):
    """Max over ``kernel_size`` windows along L moved by ``stride`` (default: ``kernel_size``);
    with ``return_indices`` also each maximum's position along L."""

    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0,
                 dilation: int = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    """Mean over ``kernel_size`` windows along L moved by ``stride`` (default: ``kernel_size``)."""

    def __init__(self, kernel_size: int | tuple[int], stride: int | tuple[int] | None = None,
                 padding: int | tuple[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        one = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)  # noqa: E731
        self.kernel_size = one(kernel_size)
        self.stride = one(stride if stride is not None else kernel_size)
        self.padding = one(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input) -> Tensor:
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptiveMaxPoolNd(Module):
    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, L) or (C, L) to a fixed length, over the same windows as
    ``AdaptiveAvgPool1d``."""

    def __init__(self, output_size: int | tuple[int], return_indices: bool = False) -> None:
        super().__init__(output_size, return_indices)

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed output size (an int, or a pair whose None entries keep the input's
    size), over the same windows as ``AdaptiveAvgPool2d``."""

    def __init__(self, output_size: int | None | tuple[int | None, int | None],
                 return_indices: bool = False) -> None:
        super().__init__(output_size, return_indices)

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max pooling of (N, C, D, H, W) or (C, D, H, W) to a fixed output size (an int, or a
    triple whose None entries keep the input's size), over ``AdaptiveAvgPool3d``'s windows."""

    def __init__(self, output_size: int | None | tuple[int | None, int | None, int | None],
                 return_indices: bool = False) -> None:
        super().__init__(output_size, return_indices)

    def forward(self, input) -> Tensor | tuple[Tensor, Tensor]:
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


class _LPPoolNd(Module):
    def __init__(self, norm_type: float, kernel_size, stride=None,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """Power-average pooling (sum_window x^p)^(1/p) along L (``F.lp_pool1d``)."""

    def forward(self, input) -> Tensor:
        return F.lp_pool1d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """Power-average pooling (sum_window x^p)^(1/p) over H, W (``F.lp_pool2d``)."""

    def forward(self, input) -> Tensor:
        return F.lp_pool2d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool3d(_LPPoolNd):
    """Power-average pooling (sum_window x^p)^(1/p) over D, H, W (``F.lp_pool3d``)."""

    def forward(self, input) -> Tensor:
        return F.lp_pool3d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)
