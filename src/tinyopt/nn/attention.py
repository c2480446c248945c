"""``torch.nn.attention``: choosing a scaled-dot-product-attention backend.  tinyopt has one
attention kernel (``F.scaled_dot_product_attention``: the math of PyTorch's ``MATH`` backend,
fused), so ``sdpa_kernel(...)`` accepts any backend list and changes nothing."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    """PyTorch's attention backends (with its values)."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4

    __str__ = enum.Enum.__str__  # ("SDPBackend.MATH", not "0")


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    """Inside, attention would use ``backends``: tinyopt's one kernel serves them all."""
    listed = backends if isinstance(backends, (list, tuple)) else [backends]
    for b in listed:
        if not isinstance(b, SDPBackend):
            raise ValueError(f"Expected a SDPBackend or a list of them, got {b!r}")
    yield
