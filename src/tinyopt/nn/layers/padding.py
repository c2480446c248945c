"""Padding layers, as ``torch.nn``: ``ZeroPad1d/2d``, ``ConstantPad1d/2d``, ``ReflectionPad1d/2d``,
``ReplicationPad1d/2d``.  ``padding`` is an int (every side) or (left, right[, top, bottom]);
each calls ``nn.functional.pad``."""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


def _sides(padding, n: int) -> tuple[int, ...]:
    if isinstance(padding, (tuple, list)):
        if len(padding) != n:
            raise ValueError(f"padding must be an int or a tuple of {n} ints, got {padding!r}")
        return tuple(int(p) for p in padding)
    return (int(padding),) * n


class _Pad(Module):
    _sides = 2
    _mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _sides(padding, self._sides)

    def forward(self, input) -> Tensor:
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPad):
    """Pad the last dimension with ``value``."""


class ConstantPad2d(_ConstantPad):
    """Pad the last two dimensions with ``value``."""

    _sides = 4


class ZeroPad1d(ConstantPad1d):
    """Pad the last dimension with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pad the last two dimensions with zeros."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_Pad):
    """Pad the last dimension with its mirror image (the edge is not repeated)."""

    _mode = "reflect"


class ReflectionPad2d(ReflectionPad1d):
    """Pad the last two dimensions with their mirror image."""

    _sides = 4


class ReplicationPad1d(_Pad):
    """Pad the last dimension by repeating its edge value."""

    _mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    """Pad the last two dimensions by repeating their edge values."""

    _sides = 4
