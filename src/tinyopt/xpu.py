"""``torch.xpu`` probes (Intel GPUs): no such device (``is_available()`` is False; using one
raises, as ``device("xpu")`` does).  ``tinyopt.mps`` is the same for Apple GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinyopt.engine.device import check_device

__all__ = ["device_count", "is_available", "synchronize"]


def absent(name: str) -> tuple[Callable[[], bool], Callable[[], int], Callable[..., None]]:
    """``is_available``, ``device_count`` and ``synchronize`` of device type ``name``, which
    tinyopt does not have."""

    def is_available() -> bool:
        """False: there is no such device."""
        return False

    def device_count() -> int:
        """0: there is no such device."""
        return 0

    def synchronize(device: Any = None) -> None:
        """Refused: there is no such device."""
        check_device(name)

    return is_available, device_count, synchronize


is_available, device_count, synchronize = absent("xpu")
