"""``tinyopt.accelerator``: tinyopt has no accelerator; ``is_available()`` is False and
``current_accelerator()`` None, so ``device = acc if acc else "cpu"`` idioms pick the CPU."""

from __future__ import annotations

from typing import Any

from tinyopt.engine.device import check_device


def is_available() -> bool:
    return False


def current_accelerator(check_available: bool = False) -> None:
    return None


def device_count() -> int:
    return 0


def current_device_index() -> int:
    return -1


def set_device_index(device: Any) -> None:
    check_device("cuda")


def synchronize(device: Any = None) -> None:
    """A no-op: nothing runs asynchronously."""


__all__ = ["current_accelerator", "current_device_index", "device_count", "is_available",
           "set_device_index", "synchronize"]
