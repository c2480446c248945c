"""Constraints: the set a distribution's parameter or sample must lie in (``torch.distributions.
constraints``), with torch's names and reprs (they appear in validation errors).

``c.check(value)`` gives a bool tensor of the batch shape (an event is valid when all its
entries are).  Checks read the values only, never build a graph: a validity test carries no
gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.engine.tensor import Tensor, as_tensor, leaf

__all__ = ["Constraint", "boolean", "dependent", "dependent_property", "independent",
           "integer_interval", "interval", "nonnegative", "positive", "real", "real_vector",
           "simplex", "unit_interval"]


def _values(value: Any) -> np.ndarray:
    return np.asarray(as_tensor(value).detach().numpy())


class Constraint:
    """A region of valid values.  ``event_dim`` rightmost dimensions form one event;
    ``is_discrete`` says whether the region is countable."""

    is_discrete = False
    event_dim = 0

    def check(self, value: Any) -> Tensor:
        """A bool tensor: which events of ``value`` satisfy the constraint."""
        with np.errstate(invalid="ignore"):
            return leaf(np.asarray(self._check(_values(value))))

    def _check(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__[1:] + "()"


class _Dependent(Constraint):
    """The support depends on other parameters (``Categorical.support``): not checked here."""

    def __init__(self, *, is_discrete: bool = False, event_dim: int = 0) -> None:
        self.is_discrete = is_discrete
        self.event_dim = event_dim

    def check(self, value: Any) -> Tensor:
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint: Any) -> bool:
    return isinstance(constraint, _Dependent)


class dependent_property(property, _Dependent):
    """A property whose value is a constraint built from the instance (a support that depends
    on a parameter); on the class it is a dependent constraint."""

    def __init__(self, fn: Any = None, *, is_discrete: bool = False, event_dim: int = 0) -> None:
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn: Any) -> dependent_property:
        return dependent_property(fn, is_discrete=self.is_discrete, event_dim=self.event_dim)


class _Real(Constraint):
    def _check(self, v: np.ndarray) -> np.ndarray:
        return v == v  # False for NaN


class _Boolean(Constraint):
    is_discrete = True

    def _check(self, v: np.ndarray) -> np.ndarray:
        return (v == 0) | (v == 1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound: float) -> None:
        self.lower_bound = lower_bound

    def _check(self, v: np.ndarray) -> np.ndarray:
        return self.lower_bound < v

    def __repr__(self) -> str:
        return f"{type(self).__name__[1:]}(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    def _check(self, v: np.ndarray) -> np.ndarray:
        return self.lower_bound <= v


class _Interval(Constraint):
    """Values in the closed interval [lower_bound, upper_bound]."""
    def __init__(self, lower_bound: float, upper_bound: float) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def _check(self, v: np.ndarray) -> np.ndarray:
        return (self.lower_bound <= v) & (v <= self.upper_bound)

    def __repr__(self) -> str:
        return (f"{type(self).__name__[1:]}(lower_bound={self.lower_bound}, "
                f"upper_bound={self.upper_bound})")


class _IntegerInterval(_Interval):
    """Integers in the closed interval [lower_bound, upper_bound]."""
    is_discrete = True

    def _check(self, v: np.ndarray) -> np.ndarray:
        return (v % 1 == 0) & super()._check(v)


class _Simplex(Constraint):
    """Non-negative vectors summing to 1 (within 1e-6) over the last dimension."""

    event_dim = 1

    def _check(self, v: np.ndarray) -> np.ndarray:
        return np.all(v >= 0, axis=-1) & (np.abs(v.sum(-1) - 1) < 1e-6)


class _IndependentConstraint(Constraint):
    """``base`` on every entry of the ``reinterpreted_batch_ndims`` rightmost dimensions."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        self.is_discrete = base_constraint.is_discrete
        self.event_dim = base_constraint.event_dim + reinterpreted_batch_ndims

    def _check(self, v: np.ndarray) -> np.ndarray:
        r = self.base_constraint._check(v)
        n = self.reinterpreted_batch_ndims
        if r.ndim < n:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {v.ndim}")
        return np.asarray(r.reshape(r.shape[:r.ndim - n] + (-1,)).all(-1))

    def __repr__(self) -> str:
        return (f"{type(self).__name__[1:]}({self.base_constraint!r}, "
                f"{self.reinterpreted_batch_ndims})")


dependent = _Dependent()
independent = _IndependentConstraint
real = _Real()
real_vector = independent(real, 1)
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
integer_interval = _IntegerInterval
simplex = _Simplex()
