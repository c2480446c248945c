"""Matrix-product kernels that BLAS does slowly or not at all: the outer product, and the bias (and
ReLU) that follow a linear layer's GEMM.

BLAS treats ``(m, 1) @ (1, n)`` as a GEMM with inner size 1 and takes about 3x as long as one
vectorized pass writing the result (784x500 float32: 68 us through ``np.dot``, 24 us here), and
this product is every batch-1 weight gradient.
"""

from __future__ import annotations

import numpy as np

from tinyopt.kernels.jit import kernel
from tinyopt.kernels.native.instructions import select


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
@kernel(nrt=False)
def bias_add(out, b, relu):
    """out[i, j] += b[j] in place, then, if ``relu``, out[i, j] = relu(out[i, j]): out (m, n)
    C-contiguous, b (n,), one float dtype.  The same additions as ``np.add(out, b, out=out)``,
    so the same bits; relu as ``kernels.elementwise.relu`` (NaN stays NaN, -0.0 stays -0.0).
    With ``relu`` it is the bias add and the ReLU after a linear layer's GEMM in one pass over
    its output instead of two.  One kernel for both: a first step with plain and ReLU linear
    layers (an MLP, a transformer's feed-forward) compiled two kernels of numba's fixed cost
    each (0.07-0.08 s of CPU; the one kernel 0.08 s).  The ReLU is ``v < lo`` with lo = 0, or
    -inf without it (no value is below -inf, and NaN compares False): a compare with a number,
    where a compare and a flag made LLVM compile the loop once per flag value (0.09 s)."""
    lo = out.dtype.type(select(relu, 0.0, -np.inf))
    for i in range(out.shape[0]):
        row = out[i]
        for j in range(out.shape[1]):
            v = row[j] + b[j]
            row[j] = select(v < lo, 0.0, v)
