"""Scans along one axis of a ``(A, R, B)`` view: the exact gradient of the cumulative product.

``cumprod_grad(g, x, y, out)``: with y_j = prod_{i<=j} x_i along R, out_k = dL/dx_k =
sum_{j>=k} g_j prod_{i<=j, i!=k} x_i, exact when some x_i are zero (dividing y by x would give
NaN there): before the first zero z, out_k = sum_{k<=j<z} g_j y_j / x_k; at z, the products
skip x_z (y_{z-1} times the running product after it); after z, 0.  float32/float64,
C-contiguous, O(R) per row.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def cumprod_grad(g, x, y, out):
    A, R, B = x.shape
    for a in range(A):
        for b in range(B):
            z = R
            for k in range(R):
                if x[a, k, b] == 0:
                    z = k
                    break
            acc = 0.0  # sum_{j>=k, j<z} g_j y_j, built from the end
            for k in range(z - 1, -1, -1):
                acc += g[a, k, b] * y[a, k, b]
                out[a, k, b] = acc / x[a, k, b]
            if z < R:
                before = y[a, z - 1, b] if z > 0 else 1.0
                run = before
                total = 0.0
                for j in range(z, R):
                    if j > z:
                        run *= x[a, j, b]
                    total += g[a, j, b] * run
                out[a, z, b] = total
                for k in range(z + 1, R):
                    out[a, k, b] = 0.0
