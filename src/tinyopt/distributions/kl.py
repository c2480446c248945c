"""``kl_divergence(p, q)``: KL(p || q) = E_p[log p(x) - log q(x)], batched, with gradients, for
the pairs registered here (``register_kl`` adds more), as ``torch.distributions.kl``.

    Normal:      1/2 (s_p^2 / s_q^2 + (m_p - m_q)^2 / s_q^2 - 1 - log(s_p^2 / s_q^2))
    Categorical: sum_k p_k (log p_k - log q_k)   (inf where q_k = 0 < p_k; 0 where p_k = 0)
    Bernoulli:   the same over {0, 1}, with the log terms as softplus of the logits
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tinyopt.distributions.bernoulli import Bernoulli
from tinyopt.distributions.categorical import Categorical
from tinyopt.distributions.distribution import Distribution
from tinyopt.distributions.normal import Normal
from tinyopt.engine import ops as F
from tinyopt.engine.tensor import Tensor

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict[tuple[type, type], Callable[[Any, Any], Tensor]] = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator: ``fn(p, q)`` computes KL(p || q) for ``p`` of ``type_p``, ``q`` of ``type_q``
    (and their subclasses, the most specific registration winning)."""
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)
            and isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_p and type_q to be subclasses of Distribution but got "
                        f"{type_p} and {type_q}")

    def decorator(fn: Callable) -> Callable:
        _KL_REGISTRY[type_p, type_q] = fn
        return fn
    return decorator


def _dispatch(type_p: type, type_q: type) -> Callable | None:
    matches = [(type_p.__mro__.index(p) + type_q.__mro__.index(q), fn)
               for (p, q), fn in _KL_REGISTRY.items()
               if issubclass(type_p, p) and issubclass(type_q, q)]
    return min(matches, key=lambda m: m[0])[1] if matches else None


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) over the batch shape."""
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{type(p).__name__} and q type {type(q).__name__}")
    return fn(p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = p.probs * (p.logits - q.logits)
    t = F.where((q.probs == 0).expand_as(t), math.inf, t)
    t = F.where((p.probs == 0).expand_as(t), 0.0, t)
    return t.sum(-1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t1 = F.where(p.probs == 0, 0.0, F.where(q.probs == 0, math.inf, t1))
    t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    t2 = F.where(p.probs == 1, 0.0, F.where(q.probs == 1, math.inf, t2))
    return t1 + t2
