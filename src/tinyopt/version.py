"""``torch.version``: tinyopt's version, and None for the GPU toolkits it is not built with."""

from __future__ import annotations

__all__ = ["__version__", "cuda", "debug", "git_version", "hip"]

__version__ = "0.1.0"
cuda: str | None = None
hip: str | None = None
debug = False
git_version = "unknown"
