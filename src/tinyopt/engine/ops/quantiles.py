"""``torch.quantile``: the q-th quantiles along a dimension, from the sorted values (so the
gradient reaches the elements picked), with PyTorch's interpolations."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from tinyopt.engine.ops.movement import stack
from tinyopt.engine.ops.selection import sort
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["quantile"]

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(input: Any, q: Any, dim: int | None = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:
    """The ``q`` quantiles (a number, or a 1-D tensor of them: a new first dimension) of
    ``input`` along ``dim`` (all elements when None): position q (n - 1) in the sorted values,
    between neighbours as ``interpolation`` says."""
    x = as_tensor(input)
    if x.dtype.kind != "f":
        raise RuntimeError(f"quantile() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"quantile() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest. Got {interpolation}")
    scalar = isinstance(q, numbers.Real)
    qs = [float(q)] if scalar else np.asarray(as_tensor(q).numpy(), dtype=np.float64).reshape(
        -1).tolist()
    if not scalar and as_tensor(q).ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    for v in qs:
        if not 0.0 <= v <= 1.0:
            raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {v}")
    if dim is None:
        flat, d = x.reshape(-1), 0
    else:
        d = dim % max(x.ndim, 1)
        flat = x
    n = flat.shape[d] if flat.ndim else 1
    if n == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    values = sort(flat, d)[0] if flat.ndim else flat.reshape(1)
    outs = []
    for v in qs:
        pos = v * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        a, b = values.select(d, lo), values.select(d, hi)
        if interpolation == "lower":
            r = a
        elif interpolation == "higher":
            r = b
        elif interpolation == "nearest":
            r = values.select(d, int(round(pos)))
        elif interpolation == "midpoint":
            r = a + (b - a) * 0.5
        else:  # torch.lerp's two-sided formula (exact at both ends)
            w = pos - lo
            r = a + (b - a) * w if w < 0.5 else b - (b - a) * (1.0 - w)
        if keepdim:
            r = r.unsqueeze(d) if dim is not None else r.reshape((1,) * x.ndim)
        outs.append(r)
    return outs[0] if scalar else stack(outs, 0)
