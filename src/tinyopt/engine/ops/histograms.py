"""``torch.histogram`` and ``torch.histc``: counts of values in equal-width bins (computed now,
from the values; no gradient, as in PyTorch)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tinyopt.engine.tensor import Tensor, as_tensor, tensor

__all__ = ["histc", "histogram"]


class HistogramResult(NamedTuple):
    hist: Tensor
    bin_edges: Tensor


def _values(input: Any, op: str) -> np.ndarray:
    x = as_tensor(input)
    if x.dtype.kind != "f":
        raise NotImplementedError(f'"{op}" not implemented for \'{x.dtype}\'')
    return np.asarray(x.detach().numpy()).reshape(-1)


def histogram(input: Any, bins: Any = 100, *, range: tuple[float, float] | None = None,
              weight: Any = None, density: bool = False) -> HistogramResult:
    """``(hist, bin_edges)``: counts (or a density, or summed ``weight``) of the values in
    ``bins`` equal bins over ``range`` (default: the values' min to max), or over the given
    edges when ``bins`` is a tensor."""
    v = _values(input, "histogramdd")
    edges = np.asarray(bins.numpy()) if isinstance(bins, Tensor) else int(bins)
    w = None if weight is None else np.asarray(as_tensor(weight).numpy()).reshape(-1)
    hist, out_edges = np.histogram(v, edges, range=range, weights=w, density=density)
    return HistogramResult(tensor(hist.astype(v.dtype)), tensor(out_edges.astype(v.dtype)))


def histc(input: Any, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """Counts in ``bins`` equal bins over [min, max] (the values' own range when both are 0);
    values outside are not counted."""
    v = _values(input, "histc")
    lo, hi = (float(v.min()), float(v.max())) if min == 0 and max == 0 and v.size else \
        (float(min), float(max))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    hist, _ = np.histogram(v[(v >= lo) & (v <= hi)], int(bins), range=(lo, hi))
    return tensor(hist.astype(v.dtype))
