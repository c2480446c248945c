"""``torch.diff``: n-th forward differences along a dimension, from slices (so differentiable)."""

from __future__ import annotations

from tinyopt.engine.dtypes import bool_
from tinyopt.engine.ops.elementwise import logical_xor
from tinyopt.engine.ops.movement import cat, narrow
from tinyopt.engine.tensor import Tensor, as_tensor


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:
    """out[i] = x[i + 1] - x[i] along ``dim`` (``!=`` for bools), ``n`` times, after putting
    ``prepend`` before and ``append`` after ``x`` along ``dim``."""
    x = as_tensor(input)
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = dim % x.ndim
    parts = [as_tensor(p) for p in (prepend,) if p is not None] + [x] + \
        [as_tensor(a) for a in (append,) if a is not None]
    if len(parts) > 1:
        x = cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = narrow(x, d, 1, m - 1), narrow(x, d, 0, m - 1)
        x = logical_xor(hi, lo) if x.dtype == bool_ else hi - lo
    return x
