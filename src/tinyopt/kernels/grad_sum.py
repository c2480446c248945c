"""Adding a one-row linear layer's parameter gradients straight into their running sums.

An eager backward (``engine/eager_grad.py``) sums a parameter's gradient contributions as the
backward graph does: the first one, then ``prev + g`` into a fresh array, then ``prev += g`` for
every later one.  A linear layer applied to one row at a time (an actor-critic's environment
steps: three layers, ~35 steps an episode) contributes ``outer(g, x)`` to its weight and
``sum_axis(g)`` to its bias on every step, each a kernel call into an array that is then added
into the sum by a second call.  These kernels do both at once, with the same arithmetic: each
product (or one-row sum) is rounded to the dtype, then added, so the bits are those of the two
calls (no fused multiply-add: kernels compile without ``fastmath``, so LLVM contracts nothing).
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def add_outer(out, a, b):
    """out[i, j] = out[i, j] + a[i] * b[j]: ``kernels.linalg.outer(a, b)`` then ``add``; out
    (m, n) C-contiguous, a (m,), b (n,), one float dtype."""
    for i in range(out.shape[0]):
        ai = a[i]
        row = out[i]
        for j in range(out.shape[1]):
            row[j] = row[j] + ai * b[j]


@kernel
def add_row_sum(out, g, zero):
    """out[j] = out[j] + (zero + g[j]): ``kernels.reduce.sum_axis`` over one row, which starts
    from 0 (so -0.0 becomes +0.0), then ``add``; out and g (n,), ``zero`` a 0 of their float
    dtype (an add in that dtype, as sum_axis's)."""
    for j in range(out.shape[0]):
        out[j] = out[j] + (zero + g[j])
