"""``tinyopt.cuda``: there is no CUDA device; availability checks answer False and using one
raises at once (as PyTorch built without CUDA does)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

from tinyopt.engine.device import check_device


class OutOfMemoryError(RuntimeError):
    """``torch.cuda.OutOfMemoryError``: never raised (no CUDA); there for ``except`` clauses."""


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def is_initialized() -> bool:
    return False


def _unavailable(*args: Any, **kwargs: Any) -> Any:
    check_device("cuda")


current_device = set_device = get_device_name = get_device_properties = init = _unavailable
get_device_capability = current_stream = mem_get_info = ipc_collect = _unavailable
reset_peak_memory_stats = reset_max_memory_allocated = _unavailable


def memory_allocated(device: Any = None) -> int:
    """0 bytes, as PyTorch's CPU build answers (scripts print it after a step)."""
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated


class Stream:
    """Refused as in PyTorch's CPU build: ``torch.cuda.Stream requires CUDA support``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("torch.cuda.Stream requires CUDA support")


class Event:
    """Refused as in PyTorch's CPU build (a dummy class there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Tried to instantiate dummy base class Event")


def synchronize(device: Any = None) -> None:
    """Nothing runs asynchronously on the CPU: a no-op (as PyTorch scripts call it to time)."""


def empty_cache() -> None:
    """No device memory to release: a no-op."""


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no CUDA device."""
    return False


def manual_seed(seed: int) -> None:
    """No CUDA generators to seed: a no-op (``tinyopt.manual_seed`` seeds the CPU one)."""


def manual_seed_all(seed: int) -> None:
    """No CUDA generators to seed: a no-op."""


def _amp_grad_scaler(init_scale: float = 2.0**16, growth_factor: float = 2.0,
                     backoff_factor: float = 0.5, growth_interval: int = 2000,
                     enabled: bool = True) -> Any:
    """The deprecated ``torch.cuda.amp.GradScaler(...)``: ``tinyopt.amp.GradScaler("cuda", ...)``
    (disabled, with PyTorch's warnings: there is no CUDA)."""
    from tinyopt.amp import GradScaler
    warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                  "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
    return GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                      enabled)


def _amp_autocast(enabled: bool = True, dtype: Any = None, cache_enabled: bool = True) -> Any:
    """The deprecated ``torch.cuda.amp.autocast(...)``: ``tinyopt.autocast("cuda", ...)``
    (disabled, with PyTorch's warning: there is no CUDA)."""
    from tinyopt.amp import autocast
    warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                  "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
    return autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


amp = SimpleNamespace(GradScaler=_amp_grad_scaler, autocast=_amp_autocast)

__all__ = ["Event", "OutOfMemoryError", "Stream", "amp", "current_device", "current_stream",
           "device_count", "empty_cache", "get_device_capability", "get_device_name",
           "is_available", "is_bf16_supported", "is_initialized", "manual_seed",
           "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info",
           "memory_allocated", "memory_reserved", "reset_peak_memory_stats", "set_device",
           "synchronize"]
