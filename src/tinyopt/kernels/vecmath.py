"""Elementary functions that LLVM vectorizes, for float32 kernels.

numba compiles ``math.exp`` and ``math.tanh`` to calls into libm, one element at a time: a loop of
them does not vectorize (numba vectorizes such calls only with Intel's SVML, which is not a
dependency).  These are plain float64 arithmetic, so a loop of them runs 4 elements per AVX2
instruction: 16k sigmoid+tanh took 1070 us with libm and 210 us with these (2-core machine, under
load).  Accuracy: below 2e-12 relative error (exp, sigmoid) and 3e-11 (tanh), i.e. within 1 ulp of
the exact float32 result over the whole float32 range; NaN gives NaN, +-inf the limits
(tests/test_kernels_vecmath.py).  Kernels take a compile-time ``fast`` flag (set for float32) and
call :func:`sig`, :func:`tanh`, :func:`exp`, which fall back to libm for float64.

They are subroutines (compiled into each calling kernel), not kernels of their own: as separate
numba dispatchers each costs its own cold compile and cache entry.  A cold compile of the LSTM
forward and backward step kernels took 4.65 s CPU with them as dispatchers and 4.29 s as
subroutines (means of 3 interleaved runs, loaded machine); ``inline="always"`` (numba's IR-level
inlining) made the forward kernel alone take 13.9 s.  They are called only from kernels.
"""

from __future__ import annotations

import math

from numba import types
from numba.extending import intrinsic

from tinyopt.kernels.jit import subroutine


@intrinsic
def fma(typingctx, x, y, z):
    """``x * y + z`` rounded once (LLVM's ``llvm.fma``: a ``vfmadd`` on CPUs that have one), as
    PyTorch's CPU kernels compute ``lerp``, ``add(alpha=)`` and ``addcmul``."""
    if not (isinstance(x, types.Float) and x == y == z):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return x(x, y, z), codegen


@subroutine
def exp_fast(x):
    """e^x in float64 arithmetic, vectorizable: (Taylor polynomial of e^(x / 4096)) ^ 4096, by
    12 squarings, on [-104, 104]; 0 below and inf above (where float32 results are 0 and inf
    anyway); relative error below 2e-12.  NaN gives NaN."""
    c = 104.0 if x > 104.0 else (-104.0 if x < -104.0 else x)
    y = c * (1.0 / 4096.0)
    p = 1.0 + y * (1.0 + y * (0.5 + y * (1.0 / 6.0 + y * (1.0 / 24.0 + y * (
        1.0 / 120.0 + y * (1.0 / 720.0 + y * (1.0 / 5040.0)))))))
    for _ in range(12):
        p = p * p
    return 0.0 if x < -104.0 else (math.inf if x > 104.0 else p)


@subroutine
def sigmoid_fast(x):
    """1 / (1 + e^-x) with :func:`exp_fast`."""
    return 1.0 / (1.0 + exp_fast(-x))


@subroutine
def tanh_fast(x):
    """tanh x: 1 - 2 / (e^2x + 1) with :func:`exp_fast`, and its Taylor series where |x| < 0.01
    (where the difference would lose digits)."""
    x2 = x * x
    small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    big = 1.0 - 2.0 / (exp_fast(2.0 * x) + 1.0)
    return small if abs(x) < 0.01 else big


@subroutine
def sig(x, fast):
    """1 / (1 + e^-x): :func:`sigmoid_fast` if ``fast`` (a compile-time constant of the caller)
    else with libm's exp."""
    return sigmoid_fast(x) if fast else 1.0 / (1.0 + math.exp(-x))


@subroutine
def tanh(x, fast):
    """tanh x: :func:`tanh_fast` if ``fast`` else libm's."""
    return tanh_fast(x) if fast else math.tanh(x)


@subroutine
def exp(x, fast):
    """e^x: :func:`exp_fast` if ``fast`` else libm's."""
    return exp_fast(x) if fast else math.exp(x)
