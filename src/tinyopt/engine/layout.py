"""``torch.layout`` and ``torch.memory_format`` values: ``strided`` (every dense tensor) and
``sparse_coo`` (``engine/sparse.py``); ``contiguous_format``, ``preserve_format``,
``channels_last``, ``channels_last_3d``, which ``memory_format=`` arguments accept (tinyopt's
tensors are row-major; the argument changes nothing)."""

from __future__ import annotations

__all__ = ["channels_last", "channels_last_3d", "contiguous_format", "layout", "memory_format",
           "preserve_format", "sparse_coo", "strided"]


class layout:  # noqa: N801 - torch's class name
    """A tensor layout (``torch.strided``, ``torch.sparse_coo``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class memory_format:  # noqa: N801 - torch's class name
    """A memory format (``torch.contiguous_format``...)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


strided = layout("strided")
sparse_coo = layout("sparse_coo")
contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
