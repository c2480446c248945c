"""Upsampling layers, as ``torch.nn``: ``Upsample`` (and its fixed-mode forms
``UpsamplingNearest2d``, ``UpsamplingBilinear2d``), ``PixelShuffle`` and ``PixelUnshuffle``."""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


class Upsample(Module):
    """Resize the spatial dimensions to ``size`` or by ``scale_factor`` with ``mode`` ('nearest',
    'nearest-exact', 'linear', 'bilinear', 'area'); see ``nn.functional.interpolate``."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input) -> Tensor:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = "scale_factor=" + repr(self.scale_factor)
        else:
            info = "size=" + repr(self.size)
        return info + ", mode=" + repr(self.mode)


class UpsamplingNearest2d(Upsample):
    """``Upsample(mode='nearest')`` of (N, C, H, W) inputs."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(mode='bilinear', align_corners=True)`` of (N, C, H, W) inputs."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(Module):
    """(N, C r^2, H, W) -> (N, C, H r, W r) (Shi et al. 2016, https://arxiv.org/abs/1609.05158)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input) -> Tensor:
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(N, C, H r, W r) -> (N, C r^2, H, W), the inverse of ``PixelShuffle``."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input) -> Tensor:
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
