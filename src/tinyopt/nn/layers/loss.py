"""Loss layers, as ``torch.nn``: ``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss``,
``BCEWithLogitsLoss``.  Each holds its options (class weights as buffers) and calls
``tinyopt.nn.functional``; ``loss_fn(input, target)`` returns a Tensor to ``backward()``."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module

_REDUCTIONS = ("none", "mean", "sum")


class _Loss(Module):
    reduction: str

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = F._legacy_reduction(size_average, reduce)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{reduction!r} is not a valid value for reduction (expected one of "
                             f"{_REDUCTIONS})")
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight, "weight"))


def _buffer(value, name: str) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.array(value.numpy() if isinstance(value, Tensor) else value)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating point array, got dtype {arr.dtype}")
    return arr


class CrossEntropyLoss(_WeightedLoss):
    """Cross-entropy between logits (N, C) or (N, C, d1, ...) and int64 class indices, with
    per-class ``weight``, ``ignore_index`` and ``label_smoothing``."""

    def __init__(self, weight=None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target) -> Tensor:
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of int64 class indices under log-probabilities (N, C, ...)."""

    def __init__(self, weight=None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target) -> Tensor:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error (x - y)^2, reduced by ``reduction``."""

    def forward(self, input, target) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error |x - y|, reduced by ``reduction``."""

    def forward(self, input, target) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy in one stable expression, with an element ``weight``
    (broadcast to the input) and a per-class ``pos_weight`` for positive examples."""

    def __init__(self, weight=None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean", pos_weight=None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight, "weight"))
        self.register_buffer("pos_weight", _buffer(pos_weight, "pos_weight"))

    def forward(self, input, target) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
