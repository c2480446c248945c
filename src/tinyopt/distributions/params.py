"""Parameters of distributions: broadcasting numbers and tensors together, probabilities <->
logits, and the lazily computed second parameterization (``torch.distributions.utils``)."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, Generic, TypeVar, overload

from tinyopt.engine import ops as F
from tinyopt.engine.dtypes import float32
from tinyopt.engine.grad_mode import enable_grad
from tinyopt.engine.tensor import Tensor, tensor
from tinyopt.engine.typeinfo import finfo

T = TypeVar("T")
R = TypeVar("R")


def broadcast_all(*values: Tensor | float) -> tuple[Tensor, ...]:
    """``values`` as tensors of one broadcast shape.  Numbers become tensors of the first
    tensor's dtype (float32 when all are numbers)."""
    if not all(isinstance(v, (Tensor, numbers.Number)) for v in values):
        raise ValueError("Input arguments must all be instances of Number, torch.Tensor or "
                         "objects implementing __torch_function__.")
    dtype = next((v.dtype for v in values if isinstance(v, Tensor)), float32)
    ts = [v if isinstance(v, Tensor) else tensor(v, dtype=dtype) for v in values]
    return F.broadcast_tensors(*ts)


def clamp_probs(probs: Tensor) -> Tensor:
    """``probs`` clamped to [eps, 1 - eps] (eps of its dtype), so that logs stay finite."""
    eps = finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """log p (or the log-odds log p - log(1 - p) when ``is_binary``) of the clamped ``probs``."""
    p = clamp_probs(probs)
    return p.log() - (-p).log1p() if is_binary else p.log()


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """sigmoid(logits) when ``is_binary``, else softmax over the last dimension."""
    return logits.sigmoid() if is_binary else logits.softmax(-1)


class lazy_property(Generic[T, R]):
    """A property computed on first access and then stored on the instance (a distribution
    made from ``probs`` computes ``logits`` only when asked)."""

    def __init__(self, wrapped: Callable[[T], R]) -> None:
        self.wrapped = wrapped
        update_wrapper(self, wrapped)  # type: ignore[arg-type]

    @overload
    def __get__(self, instance: None, obj_type: Any = None) -> lazy_property[T, R]: ...

    @overload
    def __get__(self, instance: T, obj_type: Any = None) -> R: ...

    def __get__(self, instance: T | None, obj_type: Any = None) -> R | lazy_property[T, R]:
        if instance is None:
            return self
        with enable_grad():  # as torch: a parameter computed inside no_grad still has a graph
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value
