"""``torch.backends.cudnn`` as PyTorch's CPU build has it: ``import torch.backends.cudnn as
cudnn; cudnn.benchmark = True`` works (DCGAN), the flags keep what is set and change nothing, and
``is_available()`` is False."""

from __future__ import annotations

enabled = True
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: there is no cuDNN (no GPU)."""
    return False


def version() -> None:
    """None, as on PyTorch's CPU build."""
    return None


def is_acceptable(tensor: object) -> bool:
    """False: no tensor goes to cuDNN."""
    return False
