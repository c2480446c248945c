"""The autocast state and torch's CPU autocast policy, read by the op builders.

Inside ``tinyopt.autocast("cpu", dtype=...)`` (``tinyopt/amp/autocast_mode.py``) the builders of
torch's *lower_precision_fp* ops (matmul, linear, the convolutions, prelu, attention) pass their
inputs through :func:`lower`, which rounds every float32 (or other-16-bit) tensor to the autocast
dtype, and the builders of its *fp32* ops (the losses, ``prod``) through :func:`fp32`, which
widens 16-bit tensors to float32.  float64 tensors are never cast (torch's "eligible" rule).
The op itself then computes in float32 over the widened 16-bit values (``engine/op.py``: there is
no fast half-precision BLAS on CPU) and rounds its result to the 16-bit dtype, so
``(x @ w).dtype`` is bfloat16 inside the region, as in torch.

The state is per thread, as torch's; gradient graphs are built with autocast off
(:class:`disabled`): backward ops run in the dtypes of their forward ops.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from tinyopt.engine.dtypes import float32, float64
from tinyopt.engine.tensor import Tensor, as_tensor


class _State(threading.local):
    dtype: np.dtype | None = None  # the autocast dtype inside an enabled region, else None


current = _State()
"""This thread's autocast dtype, read by the op builders; ``tinyopt.autocast`` and
:class:`disabled` set it."""


def lower(*xs: Any) -> tuple:
    """``xs`` with each floating, non-float64 tensor (or array) cast to the autocast dtype, when
    autocast is on; unchanged otherwise."""
    d = current.dtype
    return xs if d is None else tuple(_cast(x, d) for x in xs)


def fp32(*xs: Any) -> tuple:
    """``xs`` with each 16-bit float tensor cast to float32, when autocast is on."""
    return xs if current.dtype is None else tuple(_cast(x, float32) for x in xs)


def _cast(x: Any, d: np.dtype) -> Any:
    if not isinstance(x, (Tensor, np.ndarray)):
        return x
    x = as_tensor(x)
    if x.dtype == d or x.dtype == float64 or not x.is_floating_point():
        return x
    from tinyopt.engine.ops.elementwise import to
    return to(x, d)


class disabled:
    """Autocast off inside (while autodiff builds a gradient graph)."""

    def __enter__(self) -> None:
        self._prev = current.dtype
        current.dtype = None

    def __exit__(self, *exc: object) -> None:
        current.dtype = self._prev
