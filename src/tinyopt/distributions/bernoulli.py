"""``Bernoulli``: 1 with probability ``probs`` (or sigmoid(``logits``)), else 0
(``torch.distributions.Bernoulli``).

    log p(x) = x log p + (1 - x) log(1 - p) = -BCEWithLogits(logits, x)
    H = BCEWithLogits(logits, p)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from tinyopt.distributions import constraints
from tinyopt.distributions.distribution import Distribution
from tinyopt.distributions.params import (broadcast_all, lazy_property, logits_to_probs,
                                          probs_to_logits)
from tinyopt.engine import ops as F
from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Size, Tensor

__all__ = ["Bernoulli"]


class Bernoulli(Distribution):
    """Independent coin flips; the shape of ``probs``/``logits`` is the batch shape.  Samples
    are 0.0/1.0 in the parameter's dtype."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean  # type: ignore[assignment]
    has_enumerate_support = True

    def __init__(self, probs: Tensor | float | None = None, logits: Tensor | float | None = None,
                 validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = isinstance(probs, numbers.Number)
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            assert logits is not None
            is_scalar = isinstance(logits, numbers.Number)
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        super().__init__(Size() if is_scalar else self._param.size(),
                         validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Bernoulli:
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = Size(batch_shape)
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(batch_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(batch_shape)
            new._param = new.logits
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self) -> Size:
        """The shape of the parameter given (``probs`` or ``logits``)."""
        return self._param.size()

    @property
    def mean(self) -> Tensor:
        """``p``."""
        return self.probs

    @property
    def mode(self) -> Tensor:
        """1 where p > 1/2, 0 where p < 1/2, NaN at p = 1/2."""
        p = self.probs
        return F.where(p == 0.5, math.nan, (p >= 0.5).to(p.dtype))

    @property
    def variance(self) -> Tensor:
        """``p (1 - p)``."""
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Any = Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return F.bernoulli(self.probs.expand(shape))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self) -> Tensor:
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = F.arange(2, dtype=self._param.dtype)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values
