"""Process-wide switches PyTorch scripts set, with PyTorch's getters and checks.

- ``use_deterministic_algorithms(True)``: tinyopt's kernels are deterministic already (the same
  inputs give the same bits, run after run); the flag is kept for the getters.
- ``set_float32_matmul_precision("high")``: tinyopt's float32 products are always full float32
  ("highest"); the setting is kept and reported, as on a CPU where PyTorch ignores it too.
- ``set_default_device("cpu")``: the only device; any other is refused as ``device`` is.
"""

from __future__ import annotations

import warnings
from typing import Any

from tinyopt.engine.device import check_device
from tinyopt.engine.device import device as _device

__all__ = ["are_deterministic_algorithms_enabled", "get_default_device",
           "get_float32_matmul_precision", "is_deterministic_algorithms_warn_only_enabled",
           "set_default_device", "set_float32_matmul_precision", "use_deterministic_algorithms"]

_STATE: dict[str, Any] = {"deterministic": False, "warn_only": False, "precision": "highest"}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record the flag (tinyopt's algorithms are deterministic either way)."""
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms expects a bool, but got "
                        f"{type(mode).__name__}")
    _STATE["deterministic"], _STATE["warn_only"] = mode, bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """Whether ``use_deterministic_algorithms(True)`` was called last."""
    return bool(_STATE["deterministic"])


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """The ``warn_only`` of the last ``use_deterministic_algorithms``."""
    return bool(_STATE["warn_only"])


def set_float32_matmul_precision(precision: str) -> None:
    """'highest', 'high' or 'medium' (recorded; products stay full float32)."""
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current"
                      f"setFloat32MatmulPrecision call has no effect.", UserWarning, stacklevel=2)
        return
    _STATE["precision"] = precision


def get_float32_matmul_precision() -> str:
    """The precision last set (``"highest"`` by default)."""
    return str(_STATE["precision"])


def set_default_device(device: Any) -> None:
    """Only the CPU (or None) is accepted."""
    if device is not None:
        check_device(device)


def get_default_device() -> _device:
    """The CPU: the only device."""
    return _device("cpu")
