"""``Normal``: the Gaussian N(loc, scale^2) (``torch.distributions.Normal``).

    log p(x) = -(x - loc)^2 / (2 scale^2) - log scale - log sqrt(2 pi)
    H = 1/2 + 1/2 log(2 pi) + log scale

``rsample`` is the reparameterization x = loc + eps * scale with eps ~ N(0, 1) from tinyopt's
generator, so gradients reach ``loc`` and ``scale`` (the VAE's sampling step); ``sample`` draws
without gradient.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from tinyopt.distributions import constraints
from tinyopt.distributions.distribution import Distribution
from tinyopt.distributions.params import broadcast_all
from tinyopt.engine import ops as F
from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Size, Tensor

__all__ = ["Normal"]

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class Normal(Distribution):
    """A normal distribution with mean ``loc`` and standard deviation ``scale`` (numbers or
    tensors, broadcast together: their shape is the batch shape)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real  # type: ignore[assignment]
    has_rsample = True

    def __init__(self, loc: Tensor | float, scale: Tensor | float,
                 validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        numbers_only = isinstance(loc, numbers.Number) and isinstance(scale, numbers.Number)
        super().__init__(Size() if numbers_only else self.loc.size(),
                         validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Normal:
        new = self._get_checked_instance(Normal, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        """``loc``."""
        return self.loc

    @property
    def mode(self) -> Tensor:
        """``loc``."""
        return self.loc

    @property
    def stddev(self) -> Tensor:
        """``scale``."""
        return self.scale

    @property
    def variance(self) -> Tensor:
        """``scale ** 2``."""
        return self.stddev.pow(2)

    def sample(self, sample_shape: Any = Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return F.normal(self.loc.expand(shape), self.scale.expand(shape))

    def rsample(self, sample_shape: Any = Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = F.randn(shape, dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value: Tensor) -> Tensor:
        """P(X <= value) = (1 + erf((value - loc) / (scale sqrt 2))) / 2."""
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + F.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError("Normal.icdf needs torch.erfinv, which tinyopt does not have")

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()
