"""``tinyopt.autograd``: ``backward``, ``grad`` (first order), ``Function`` (custom ops with a
Python backward), ``Variable`` (PyTorch's legacy name for a tensor) and the anomaly-detection
switches (accepted, no effect)."""

from __future__ import annotations

from typing import Any

from tinyopt.autograd import function
from tinyopt.autograd.function import Function, once_differentiable
from tinyopt.engine.autograd import backward, grad
from tinyopt.engine.grad_mode import (enable_grad, inference_mode, no_grad,
                                      set_grad_enabled)
from tinyopt.engine.tensor import Tensor, as_tensor


def Variable(data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:
    """PyTorch's legacy wrapper: the tensor itself (``requires_grad`` sets the flag of a leaf)."""
    t = as_tensor(data)
    if requires_grad:
        t.requires_grad_()
    return t


class detect_anomaly:
    """Accepted for compatibility: tinyopt checks nothing more inside (a no-op)."""

    def __init__(self, check_nan: bool = True):
        pass

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass


def set_detect_anomaly(mode: bool, check_nan: bool = True) -> None:
    """Accepted for compatibility (a no-op)."""


__all__ = ["Function", "Variable", "backward", "detect_anomaly", "enable_grad", "function", "grad",
           "inference_mode", "no_grad", "once_differentiable", "set_detect_anomaly",
           "set_grad_enabled"]
