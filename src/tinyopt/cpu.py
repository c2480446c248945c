"""``torch.cpu``: the one device tinyopt runs on, and the deprecated ``torch.cpu.amp.autocast``
(``torch.autocast("cpu", ...)``, ``tinyopt.amp``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["amp", "current_device", "device_count", "is_available", "synchronize"]


def is_available() -> bool:
    """True: tinyopt runs on the CPU."""
    return True


def device_count() -> int:
    """1: the CPU."""
    return 1


def current_device() -> str:
    """``"cpu"``."""
    return "cpu"


def synchronize(device: Any = None) -> None:
    """Nothing runs asynchronously: a no-op."""


def _autocast(enabled: bool = True, dtype: Any = None, cache_enabled: bool = True) -> Any:
    """``torch.cpu.amp.autocast(...)``: ``tinyopt.autocast("cpu", ...)`` (bfloat16 by
    default)."""
    from tinyopt.amp import autocast
    return autocast("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


amp = SimpleNamespace(autocast=_autocast)
