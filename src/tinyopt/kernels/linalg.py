"""Matrix-product kernels that BLAS does slowly or not at all: the outer product, and the bias (and
ReLU) that follow a linear layer's GEMM.

BLAS treats ``(m, 1) @ (1, n)`` as a GEMM with inner size 1 and takes about 3x as long as one
vectorized pass writing the result (784x500 float32: 68 us through ``np.dot``, 24 us here), and
this product is every batch-1 weight gradient.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def outer(a, b, out):
    """out[i, j] = a[i] * b[j]: a (m,), b (n,), out (m, n) C-contiguous, one float dtype.  One
    product per element, so the result is bit-identical to the GEMM's."""
    for i in range(out.shape[0]):
        ai = a[i]
        row = out[i]
        for j in range(out.shape[1]):
            row[j] = ai * b[j]


# numpy's broadcast add of a bias row takes 2-3x as long as a plain loop over the rows (float32,
# one core: 1024x384 58 -> 25 us, 1024x128 21 -> 7 us, 256x500 19 -> 8 us; 700x5000 the same)
@kernel
def bias_add(out, b):
    """out[i, j] += b[j] in place: out (m, n) C-contiguous, b (n,), one float dtype; the same
    additions as ``np.add(out, b, out=out)``, so the same bits."""
    for i in range(out.shape[0]):
        row = out[i]
        for j in range(out.shape[1]):
            row[j] = row[j] + b[j]


@kernel
def bias_relu(out, b):
    """out[i, j] = relu(out[i, j] + b[j]) in place: out (m, n) C-contiguous, b (n,), one float
    dtype; relu as ``kernels.elementwise.relu`` (NaN stays NaN, -0.0 stays -0.0).  The bias add
    and the ReLU after a linear layer's GEMM in one pass over its output instead of two: the
    same additions in the same dtype, so the same bits."""
    for i in range(out.shape[0]):
        row = out[i]
        for j in range(out.shape[1]):
            v = row[j] + b[j]
            row[j] = 0.0 if v < 0 else v
