"""``Distribution``: the base class, with ``torch.distributions.Distribution``'s shapes,
argument validation and errors.

A distribution has a ``batch_shape`` (independent distributions side by side, e.g. one per row
of a policy's output) and an ``event_shape`` (the shape of one sample).  ``sample(sample_shape)``
returns ``sample_shape + batch_shape + event_shape`` values drawn from tinyopt's generator
(``to.manual_seed``), with no gradient; ``rsample`` (where the distribution has one) is
reparameterized, so gradients flow into the parameters; ``log_prob(value)`` and ``entropy()`` are
graph ops with gradients.

Validation is on by default (as in torch, off under ``python -O``): invalid parameters raise
``ValueError`` when the distribution is made, and ``log_prob`` of a value outside the support
raises.  ``validate_args=False`` or ``Distribution.set_default_validate_args(False)`` turn it
off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.distributions import constraints
from tinyopt.distributions.params import lazy_property
from tinyopt.engine.tensor import Size, Tensor

__all__ = ["Distribution"]


class Distribution:
    """Base class of probability distributions (``torch.distributions.Distribution``)."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__
    arg_constraints: dict[str, constraints.Constraint] = {}

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for distributions made from now on."""
        if value not in (True, False):
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape: tuple[int, ...] = Size(),
                 event_shape: tuple[int, ...] = Size(),
                 validate_args: bool | None = None) -> None:
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if not self._validate_args:
            return
        for param, constraint in self.arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param, None),
                                                         lazy_property):
                continue  # the other parameterization, not computed
            value = getattr(self, param)
            if not constraint.check(value).numpy().all():
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the constraint "
                    f"{constraint!r}, but found invalid values:\n{value}")

    @property
    def batch_shape(self) -> Size:
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        """The shape of one sample, without batching."""
        return self._event_shape

    @property
    def support(self) -> constraints.Constraint:
        """The constraint every sample satisfies (``constraints.real``,
        ``constraints.boolean``...)."""
        raise NotImplementedError

    @property
    def mean(self) -> Tensor:
        """The mean of the distribution, batched over ``batch_shape``."""
        raise NotImplementedError

    @property
    def mode(self) -> Tensor:
        """The most likely value, batched over ``batch_shape``."""
        raise NotImplementedError(f"{type(self)} does not implement mode")

    @property
    def variance(self) -> Tensor:
        """The variance of the distribution, batched over ``batch_shape``."""
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        """The standard deviation (the square root of :attr:`variance`)."""
        return self.variance.sqrt()

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        """The same distribution with its parameters expanded (as views) to ``batch_shape``."""
        raise NotImplementedError

    def sample(self, sample_shape: Any = Size()) -> Tensor:
        """Samples of shape ``sample_shape + batch_shape + event_shape``, without gradient."""
        from tinyopt.engine.grad_mode import no_grad
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape: Any = Size()) -> Tensor:
        """Reparameterized samples: gradients flow into the parameters."""
        raise NotImplementedError

    def sample_n(self, n: int) -> Tensor:
        """``n`` samples: ``sample((n,))`` (deprecated in PyTorch; warns as PyTorch does)."""
        import warnings
        warnings.warn("`sample_n(n)` will be deprecated. Use `sample((n,))` instead.",
                      FutureWarning, stacklevel=2)
        return self.sample(Size((n,)))

    def log_prob(self, value: Tensor) -> Tensor:
        """log p(value), batched over ``batch_shape``, with gradients to the parameters."""
        raise NotImplementedError

    def cdf(self, value: Tensor) -> Tensor:
        """The cumulative distribution function at ``value``, batched over ``batch_shape``."""
        raise NotImplementedError

    def icdf(self, value: Tensor) -> Tensor:
        """The inverse of :meth:`cdf` at ``value``."""
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True) -> Tensor:
        """Every value of a discrete support, along a new first dimension (expanded over
        ``batch_shape`` with ``expand``)."""
        raise NotImplementedError

    def entropy(self) -> Tensor:
        """The entropy, batched over ``batch_shape``, with gradients to the parameters."""
        raise NotImplementedError

    def perplexity(self) -> Tensor:
        """``exp(entropy())``, batched over ``batch_shape``."""
        return self.entropy().exp()

    # ---- helpers for subclasses -----------------------------------------------------------
    def _extended_shape(self, sample_shape: Any = Size()) -> Size:
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)  # an int raises TypeError, as in torch
        return Size(tuple(sample_shape) + self._batch_shape + self._event_shape)

    def _validate_sample(self, value: Any) -> None:
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_start = value.ndim - len(self._event_shape)
        if Size(value.shape[event_start:]) != self._event_shape:
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{value.size()} vs {self._event_shape}.")
        actual, expected = value.size(), self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{actual} vs {Size(expected)}.")
        support = self.support
        if not np.all(support.check(value).numpy()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support ({support!r}) of the "
                f"distribution {self!r}, but found invalid values:\n{value}")

    def _get_checked_instance(self, cls: type, _instance: Any = None) -> Any:
        if _instance is None and type(self).__init__ != cls.__init__:  # type: ignore[misc]
            raise NotImplementedError(
                f"Subclass {type(self).__name__} of {cls.__name__} that defines a custom "
                f"__init__ method must also define a custom .expand() method.")
        return type(self).__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        shown = [(k, self.__dict__[k]) for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(f"{k}: {v if v.numel() == 1 else v.size()}" for k, v in shown)
        return f"{type(self).__name__}({args})"
