"""``torch.mps`` probes (Apple GPUs): no such device (``is_available()`` is False; using one
raises, as ``device("mps")`` does)."""

from __future__ import annotations

from typing import Any

from tinyopt.engine.device import check_device

__all__ = ["device_count", "is_available", "synchronize"]


def is_available() -> bool:
    """False: there is no such device."""
    return False


def device_count() -> int:
    """0: there is no such device."""
    return 0


def synchronize(device: Any = None) -> None:
    """Refused: there is no such device."""
    check_device("mps")
