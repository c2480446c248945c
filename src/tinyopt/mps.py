"""``torch.mps`` probes (Apple GPUs): no such device (``is_available()`` is False; using one
raises, as ``device("mps")`` does)."""

from __future__ import annotations

from tinyopt.xpu import absent

__all__ = ["device_count", "is_available", "synchronize"]

is_available, device_count, synchronize = absent("mps")
