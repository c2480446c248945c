"""``torch.special``: the special functions tinyopt has, under PyTorch's names (differentiable,
as the ops they are)."""

from __future__ import annotations

import math
from typing import Any

from tinyopt.engine.ops import elementwise as _ew
from tinyopt.engine.ops import reduce as _reduce
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["erf", "expit", "expm1", "log1p", "log_softmax", "logit", "round", "sinc", "softmax",
           "xlogy"]

erf = _ew.erf
expm1 = _ew.expm1
log1p = _ew.log1p
expit = _ew.sigmoid
xlogy = _ew.xlogy
round = _ew.round
softmax = _reduce.softmax
log_softmax = _reduce.log_softmax


def logit(input: Any, eps: float | None = None) -> Tensor:
    """log(p / (1 - p)), ``p`` clamped to [eps, 1 - eps] when ``eps`` is given."""
    p = as_tensor(input)
    if eps is not None:
        p = _ew.clamp(p, eps, 1.0 - eps)
    return _ew.log(p / (1.0 - p))


def sinc(input: Any) -> Tensor:
    """sin(pi x) / (pi x), 1 at 0."""
    x = as_tensor(input)
    px = x * math.pi
    safe = _ew.where(_ew.eq(x, 0), px * 0 + 1.0, px)
    return _ew.where(_ew.eq(x, 0), px * 0 + 1.0, _ew.sin(safe) / safe)
