"""Weight averaging (``tinyopt.optim.swa_utils``): one pass over a flat buffer of averaged weights.

``a`` is the averaged model's weights and ``b`` the model's, 1-d, C-contiguous, one float dtype,
the same length (a whole model laid end to end: EMA of every parameter in one call).  Scalars are
in ``a``'s dtype.  Iteration ``i`` writes only ``a[i]``.

- :func:`lerp_`: ``a <- lerp(a, b, w)``, exponential moving average (``w = 1 - decay``) and the
  equal-weight average written as a lerp (``w = 1 / (n + 1)``).  As PyTorch's CPU ``lerp``:
  ``fma(w, b - a, a)`` when ``|w| < 0.5``, else ``fma(w - 1, b - a, b)``, one rounding in each
  fused multiply-add (checked against torch 2.13 with AVX2: all elements, bit for bit; the
  unfused ``a + w (b - a)`` differs in about a quarter of them).
- :func:`running_mean_`: ``a <- a + (b - a) / d``, the equal-weight average of ``d`` models
  (``d = n + 1``), as PyTorch's per-tensor ``get_swa_avg_fn``.
"""

from __future__ import annotations

from tinyopt.kernels.jit import parallel_kernel, prange
from tinyopt.kernels.native.instructions import fma


@parallel_kernel(sized_by=0)
def lerp_(a, b, w, c):
    """``a <- lerp(a, b, w)`` in place; ``c`` is ``w - 1`` rounded in ``a``'s dtype."""
    n = a.shape[0]
    if abs(w) < 0.5:
        for i in prange(n):
            a[i] = fma(w, b[i] - a[i], a[i])
    else:
        for i in prange(n):
            a[i] = fma(c, b[i] - a[i], b[i])


@parallel_kernel(sized_by=0)
def running_mean_(a, b, d):
    """``a <- a + (b - a) / d`` in place."""
    for i in prange(a.shape[0]):
        a[i] = a[i] + (b[i] - a[i]) / d
