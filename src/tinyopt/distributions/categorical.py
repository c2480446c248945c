"""``Categorical``: one of K classes, with probabilities ``probs`` or log-probabilities
``logits`` over the last dimension (``torch.distributions.Categorical``).

The policy of REINFORCE::

    probs = policy(state)                 # (1, K), softmax output
    m = Categorical(probs)
    action = m.sample()                   # int64, shape (1,)
    log_probs.append(m.log_prob(action))  # log p[action], with a gradient into the policy

``probs`` are normalized to sum to 1 (p / sum p); ``logits`` to log-probabilities
(l - logsumexp l).  log_prob(k) = logits[k]; entropy H = -sum_k p_k log p_k.
"""

from __future__ import annotations

import math
from typing import Any

from tinyopt.distributions import constraints
from tinyopt.distributions.distribution import Distribution
from tinyopt.distributions.params import lazy_property, logits_to_probs, probs_to_logits
from tinyopt.engine import ops as F
from tinyopt.engine.dtypes import int64
from tinyopt.engine.tensor import Size, Tensor, as_tensor
from tinyopt.engine.typeinfo import finfo

__all__ = ["Categorical"]


class Categorical(Distribution):
    """A categorical distribution over {0, ..., K-1}, K = ``probs.size(-1)``; leading
    dimensions of ``probs``/``logits`` are the batch.  Give exactly one of the two."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs: Tensor | None = None, logits: Tensor | None = None,
                 validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self._param = self.probs
        else:
            assert logits is not None
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
            self._param = self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.ndim > 1 else Size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Categorical:
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = Size(batch_shape)
        param_shape = batch_shape + (self._num_events,)
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(param_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(param_shape)
            new._param = new.logits
        new._num_events = self._num_events
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        """The integers 0 to ``num_events - 1``."""
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> Size:
        """The shape of the parameter given (``probs`` or ``logits``), categories included."""
        return self._param.size()

    @property
    def mean(self) -> Tensor:
        """NaN: the categories are labels, not numbers (as PyTorch)."""
        return F.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self) -> Tensor:
        """The most probable category (the first among ties)."""
        return self.probs.argmax(dim=-1)

    @property
    def variance(self) -> Tensor:
        """NaN: the categories are labels, not numbers (as PyTorch)."""
        return F.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape: Any = Size()) -> Tensor:
        """Class indices (int64) of shape ``sample_shape + batch_shape``."""
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        probs_2d = self.probs.reshape(-1, self._num_events)
        samples_2d = F.multinomial(probs_2d, sample_shape.numel(), True).T
        return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value: Tensor) -> Tensor:
        """log p[value] for class indices ``value`` broadcast against ``batch_shape``."""
        if self._validate_args:
            self._validate_sample(value)
        index = as_tensor(value).long().unsqueeze(-1)
        index, log_pmf = F.broadcast_tensors(index, self.logits)
        return log_pmf.gather(-1, index[..., :1]).squeeze(-1)

    def entropy(self) -> Tensor:
        """-sum_k p_k log p_k over the last dimension (a zero p_k contributes 0)."""
        logits = self.logits.clamp(min=finfo(self.logits.dtype).min)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = F.arange(self._num_events, dtype=int64)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values
