"""``tinyopt.autocast`` (``torch.autocast``): mixed precision for a region of the forward pass.

    with to.autocast("cpu", dtype=to.bfloat16):
        loss = F.cross_entropy(model(x), y)   # linear layers in bfloat16, the loss in float32
    loss.backward()

Inside the region, torch's CPU policy: the *lower_precision_fp* ops (matmul, mm, bmm, linear,
addmm/baddbmm, conv1d/conv2d/conv_transpose2d, prelu, scaled_dot_product_attention) round their
float32 inputs to ``dtype`` and give ``dtype`` results; the *fp32* ops (every loss, ``prod``)
take 16-bit inputs in float32 and give float32; float64 tensors are left alone; other ops keep
their inputs' dtype.  There is no fast 16-bit BLAS on CPU, so the lowered ops read the rounded
values, compute in float32 and round their results (``engine/autocast.py``) - the results torch
computes, up to the order of float32 sums.  Gradients are float32 (``docs/low_precision.md``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tinyopt.engine import autocast as _state_module
from tinyopt.engine.dtypes import as_dtype, float16, is_low, torch_name

_F = TypeVar("_F", bound=Callable[..., Any])
_DEVICES = ("cpu", "cuda")


def is_autocast_available(device_type: str) -> bool:
    """Whether ``device_type`` supports autocast (``"cpu"``, and ``"cuda"`` by name: it is
    disabled with a warning, as torch does without CUDA)."""
    return device_type in _DEVICES


def get_autocast_dtype(device_type: str) -> np.dtype:
    """The default autocast dtype: bfloat16 for ``"cpu"``, float16 for ``"cuda"``."""
    if device_type == "cuda":
        return float16
    return _state_module.current.dtype or as_dtype("bfloat16")


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on in this thread (for ``"cpu"``; never for ``"cuda"``)."""
    return device_type != "cuda" and _state_module.current.dtype is not None


class autocast:
    """Context manager (or decorator) running the ops of its region in mixed precision, as
    ``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``; see the
    module docstring.  ``cache_enabled`` is accepted and has no effect: a graph casts each
    weight once per forward anyway.  The state is per thread and nests; ``enabled=False``
    switches autocast off inside."""

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'")
        self.device = device_type
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else as_dtype(dtype)
        enabled = bool(enabled)
        if enabled and device_type == "cuda":
            warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.",
                          stacklevel=2)
            enabled = False
        elif enabled and not is_low(self.fast_dtype):
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtypes of torch.bfloat16, "
                          "torch.float16 currently.", stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._cache_enabled = cache_enabled
        self._prev: list[np.dtype | None] = []

    def __enter__(self) -> autocast:
        state = _state_module.current
        self._prev.append(state.dtype)
        if self.device == "cpu":
            state.dtype = self.fast_dtype if self._enabled else None
        return self

    def __exit__(self, *exc: object) -> None:
        _state_module.current.dtype = self._prev.pop()

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)
        return run  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (f"autocast(device_type={self.device!r}, dtype={torch_name(self.fast_dtype)}, "
                f"enabled={self._enabled})")
