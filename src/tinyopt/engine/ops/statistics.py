"""Statistics built from differentiable ops: sums and means that skip NaNs (``nansum``,
``nanmean``), covariance and correlation matrices (``cov``, ``corrcoef``), and trapezoidal
integration (``trapezoid``, ``cumulative_trapezoid``).

- ``nansum(x)``: the sum of the non-NaN elements (gradient: 1 there, 0 at the NaNs);
  ``nanmean(x)``: that sum over the count of non-NaN elements (NaN where all are NaN).
- ``cov(X, correction=1, fweights, aweights)``: X holds variables in rows and observations in
  columns; with w = fweights * aweights, mean m = sum(w x) / sum(w) and
  cov = (X - m) diag(w) (X - m)^T / (sum(w) - correction * sum(w aweights) / sum(w)) (the last
  factor 1 without aweights), as ``numpy.cov``; ``corrcoef`` divides by the standard deviations
  and clips to [-1, 1].
- ``trapezoid(y, x, dx, dim)``: sum over ``dim`` of (y[i] + y[i+1]) / 2 (x[i+1] - x[i]) (or
  times ``dx``); ``cumulative_trapezoid`` keeps the partial sums.
"""

from __future__ import annotations

import warnings

from tinyopt.engine.dtypes import FLOATS, float32, is_low, scalar_type_name
from tinyopt.engine.ops.differences import diff
from tinyopt.engine.ops.elementwise import clamp, isnan, sqrt, where
from tinyopt.engine.ops.reduce import cumsum, sum
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["corrcoef", "cov", "cumulative_trapezoid", "nanmean", "nansum", "trapezoid"]


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The sum over ``dim`` of the elements that are not NaN."""
    x = as_tensor(input)
    if x.dtype in FLOATS or is_low(x.dtype):
        x = where(isnan(x), 0.0, x)
    return sum(x, dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The mean over ``dim`` of the elements that are not NaN (NaN where all are)."""
    x = as_tensor(input)
    if x.dtype not in FLOATS and not is_low(x.dtype):
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype "
                           f"but got {scalar_type_name(x.dtype)}")
    count = sum((~isnan(x)).to(x.dtype), dim, keepdim, dtype=dtype)
    return nansum(x, dim, keepdim, dtype=dtype) / count


def cov(input, *, correction: int = 1, fweights=None, aweights=None) -> Tensor:
    """The covariance matrix of the variables in ``input``'s rows (observations in columns; a
    1-D input is one variable, giving a 0-d result), with integer frequency weights
    ``fweights`` and observation weights ``aweights`` (see the module docstring)."""
    x = as_tensor(input)
    if x.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {x.ndim} dimensions")
    if x.dtype not in FLOATS and not is_low(x.dtype):
        x = x.to(float32)  # (integer observations: float32, as torch's default dtype)
    x = x.reshape(1, -1) if x.ndim < 2 else x
    n = x.shape[1]
    w = None
    for name, wt in (("fweights", fweights), ("aweights", aweights)):
        if wt is None:
            continue
        wt = as_tensor(wt)
        if wt.ndim > 1 or wt.shape[0] != n:
            raise RuntimeError(f"cov(): expected {name} to have one dimension and {n} elements "
                               f"but got {tuple(wt.shape)}")
        if name == "fweights" and wt.dtype.kind not in "iu":
            raise RuntimeError(f"cov(): expected fweights to have integral dtype but got "
                               f"fweights with {scalar_type_name(wt.dtype)} dtype")
        w = wt.to(x.dtype) if w is None else w * wt.to(x.dtype)
    if w is None:
        w_sum = float(n)
        mean = x.mean(1, keepdim=True)
        factor = float(n - correction)
    else:
        w_sum = w.sum()
        mean = (x * w).sum(1, keepdim=True) / w_sum
        factor = w_sum - correction * ((w * as_tensor(aweights).to(x.dtype)).sum() / w_sum
                                       if aweights is not None and correction != 0 else 1.0)
    if isinstance(factor, float) and factor <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", UserWarning, stacklevel=2)
        factor = 0.0
    elif not isinstance(factor, float):
        factor = clamp(factor, min=0.0)
    xm = x - mean
    c = xm @ (xm if w is None else xm * w).transpose(0, 1)
    return (c / factor).squeeze()  # (torch's: a view of the quotient, whatever its shape)


def corrcoef(input) -> Tensor:
    """Pearson correlation coefficients of the variables in ``input``'s rows: ``cov`` over the
    products of their standard deviations, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = sqrt(c.diagonal())
    c = c / d.reshape(-1, 1) / d.reshape(1, -1)
    return clamp(c, -1.0, 1.0)


def _spacing(y: Tensor, x, dx, dim: int, op: str) -> Tensor | float:
    if x is not None and dx is not None:
        raise RuntimeError(f"{op}: cannot pass both x and dx")
    if x is None:
        return 1.0 if dx is None else float(dx)
    x = as_tensor(x)
    d = diff(x, dim=dim if x.ndim == y.ndim else -1)
    if x.ndim == 1 and y.ndim > 1:  # spacings along dim, broadcast over the rest
        shape = [1] * y.ndim
        shape[dim % y.ndim] = d.shape[0]
        d = d.reshape(*shape)
    return d


def trapezoid(y, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The integral of ``y`` along ``dim`` by the trapezoidal rule, at sample points ``x`` (1-D,
    or ``y``'s shape) or spacing ``dx`` (default 1)."""
    y = as_tensor(y)
    d = _spacing(y, x, dx, dim, "trapezoid")
    n = y.shape[dim]
    if n == 0:
        return sum(y, dim)
    left, right = y.narrow(dim, 0, n - 1), y.narrow(dim, 1, n - 1)
    if isinstance(d, float):
        return (sum(y, dim) - (y.select(dim, 0) + y.select(dim, -1)) * 0.5) * d
    return sum(d * (left + right), dim) / 2


def cumulative_trapezoid(y, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The running trapezoidal integral of ``y`` along ``dim`` (one element fewer than ``y``)."""
    y = as_tensor(y)
    d = _spacing(y, x, dx, dim, "cumulative_trapezoid")
    n = y.shape[dim]
    left, right = y.narrow(dim, 0, max(n - 1, 0)), y.narrow(dim, min(1, n), max(n - 1, 0))
    return cumsum((left + right) * d / 2, dim)
