"""Elementary functions that LLVM vectorizes, for float32 kernels: in float64 arithmetic (within
1 float32 ulp) and, at the end, in float32 arithmetic (twice the lanes, within a few ulps).

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

import numpy as np
from numba import types
from numba.extending import overload

from tinyopt.kernels.jit import inline, subroutine
from tinyopt.kernels.native.instructions import float_of_bits


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
    # (-x widened first: exp_fast of a float32 is exp_fast of it widened, bit for bit, and one
    # signature of exp_fast is one compile less in a cold first step: tanh_fast calls the other)
    return 1.0 / (1.0 + exp_fast(-np.float64(x)))


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


# ---- float32 arithmetic ------------------------------------------------------------------------
# The functions above compute in float64, 4 lanes an AVX2 instruction; these compute in float32,
# 8 lanes, for kernels whose float32 values then round to within a few ulps instead of one: the
# GELU of 393k float32 (the tiny GPT's feed-forward) took 5.6 ms with libm's erf and 0.45 ms with
# these (one core, CPU time, loaded machine; PyTorch's: 0.17 ms, 16 lanes).  Constants are float32 so that no operation widens to float64.  Called through
# :func:`~tinyopt.kernels.jit.inline` (a division in a subroutine keeps its ZeroDivisionError
# check, which keeps the caller's loop from vectorizing).

_F32 = np.float32
_LOG2E = _F32(1.4426950408889634)
_LN2_HI = _F32(0.693359375)  # ln 2 = _LN2_HI + _LN2_LO; k * _LN2_HI is exact for |k| < 2^15
_LN2_LO = _F32(-2.12194440e-4)
_EXP_HI = _F32(89.0)    # e^89 > the largest float32: inf by the arithmetic itself
_EXP_LO = _F32(-104.0)  # e^-104 < half the smallest subnormal: 0 by the arithmetic itself
_ONE, _HALF = _F32(1.0), _F32(0.5)
_T2, _T3, _T4, _T5, _T6, _T7 = (_F32(1 / 2), _F32(1 / 6), _F32(1 / 24), _F32(1 / 120),
                                _F32(1 / 720), _F32(1 / 5040))


@inline
def exp_f32(x):
    """e^x for float32 ``x``, in float32 arithmetic: x = k ln 2 + r with |r| <= ln 2 / 2, e^r by
    its Taylor polynomial of degree 7 (truncation error below 6e-9), times 2^k made from its
    bits in two halves (so that subnormal results round once, correctly).  Within 1 ulp of the
    exact value wherever the result is a normal float32 (tests/test_kernels_vecmath.py); inf
    above ln(max float32), 0 below ln of half the smallest subnormal, NaN for NaN."""
    c = _EXP_HI if x > _EXP_HI else (_EXP_LO if x < _EXP_LO else x)
    k = np.floor(c * _LOG2E + _HALF)
    r = (c - k * _LN2_HI) - k * _LN2_LO
    p = _ONE + r * (_ONE + r * (_T2 + r * (_T3 + r * (_T4 + r * (_T5 + r * (_T6 + r * _T7))))))
    ki = np.int32(k)  # (for NaN, whatever it is: p is NaN)
    k1 = ki >> 1
    return (p * float_of_bits(np.int32((k1 + 127) << 23))
            * float_of_bits(np.int32((ki - k1 + 127) << 23)))


# Q(z) = erfc(z / sqrt 2) / 2 = t e^(-z^2 / 2) R(t), t = 1 / (1 + c z), c = 0.4 / sqrt 2: R is a
# smooth function of t on [0, 1] (R(0) = 0.2 / sqrt(pi), where erfc(w) ~ e^(-w^2) / (w sqrt pi)),
# and this polynomial of degree 10 is its least-squares fit at 300 Chebyshev nodes of [0, 1] to
# values computed with mpmath at 30 digits: relative error 9e-9 in exact arithmetic, ~1.5e-7 in
# float32 arithmetic (the rounding of 10 Horner steps).
_C_TAIL = _F32(0.4 / math.sqrt(2.0))
_R = tuple(_F32(v) for v in (
    0.11283792, 0.11283793, 0.10380783, 0.08585023, 0.059661347, 0.041284025, -0.021756437,
    0.066215865, -0.11544836, 0.069078445, -0.014368795))
_R0, _R1, _R2, _R3, _R4, _R5, _R6, _R7, _R8, _R9, _R10 = _R


@inline
def normal_cdf_f32(x, e):
    """Phi(x), the standard normal CDF, for float32 ``x`` in float32 arithmetic, given
    ``e = exp_f32(-x * x / 2)`` (which a caller of the density needs too): the tail Q(|x|) =
    t e R(t) (see above) for x < 0, 1 - Q(|x|) otherwise, so the lower tail keeps its relative
    accuracy where 1 + erf(x / sqrt 2) would cancel: relative error below 4e-7 (a few ulps),
    plus ~x^2 6e-8 from the rounding of x^2 / 2 in the lower tail.  NaN gives NaN, +-inf 1 and
    0."""
    t = _ONE / (_ONE + _C_TAIL * abs(x))
    R = _R0 + t * (_R1 + t * (_R2 + t * (_R3 + t * (_R4 + t * (_R5 + t * (_R6 + t * (
        _R7 + t * (_R8 + t * (_R9 + t * _R10)))))))))
    q = t * e * R
    return q if x < _F32(0.0) else _ONE - q


def float32_or(single, other):
    """``f(*args)`` for kernels: ``single(*args)`` where the first argument is float32, else
    ``other(*args)``; chosen when the caller is compiled and inlined into it (numba's
    ``overload``), so one scalar function serves both signatures of a ufunc (``single`` in
    float32 arithmetic, ``other`` as exact as float64 needs).  One or two arguments."""
    s, o = inline(single), inline(other)
    if single.__code__.co_argcount == 1:
        def chosen(a):
            return (single if isinstance(a, np.float32) else other)(a)

        def s1(a):
            return s(a)

        def o1(a):
            return o(a)

        @overload(chosen, inline="always")
        def _choose(a):
            return s1 if a == types.float32 else o1
    else:
        def chosen(a, b):
            return (single if isinstance(a, np.float32) else other)(a, b)

        def s2(a, b):
            return s(a, b)

        def o2(a, b):
            return o(a, b)

        @overload(chosen, inline="always")
        def _choose(a, b):
            return s2 if a == types.float32 else o2
    chosen.__name__ = chosen.__qualname__ = f"{single.__name__}_or_{other.__name__}"
    return chosen
