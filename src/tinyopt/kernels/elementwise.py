"""Elementwise kernels: numba ufuncs (numpy broadcasting, ``out=``), float32 and float64.

Each is a scalar function of its inputs; numpy's iterator walks the (broadcast, strided) arrays and
numba compiles the inner loop.  Called as ``k(x, y, out=out)``, they write ``out`` in place.
Integer signatures come first: numpy picks the first loop its inputs cast to safely, and int64 ->
float64 counts as safe, so a float loop listed first would take int64 inputs and then fail to write
an int64 ``out``.  Names ending in ``_grad`` are the fused vector-Jacobian products of the
forward kernel of the same stem: ``g`` is the incoming gradient, ``x`` the forward input, ``y`` the
forward output.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from tinyopt.kernels import vecmath as _V
from tinyopt.kernels.jit import ufunc
from tinyopt.kernels.threaded_ufunc import threaded_ufunc

F2 = ("float32(float32, float32)", "float64(float64, float64)")
I2 = ("int64(int64, int64)",)
F1 = ("float32(float32)", "float64(float64)")
F3 = ("float32(float32, float32, float32)", "float64(float64, float64, float64)")
F4 = ("float32(float32, float32, float32, float32)", "float64(float64, float64, float64, float64)")
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
LN2 = math.log(2.0)
LN10 = math.log(10.0)


# ---- arithmetic -------------------------------------------------------------------------------
@ufunc(*I2, *F2)
def add(x, y):
    return x + y


@ufunc(*I2, *F2)
def sub(x, y):
    return x - y


@ufunc(*I2, *F2)
def mul(x, y):
    return x * y


@ufunc(*F2)
def div(x, y):
    return x / y


@ufunc(*F2)
def pow(x, y):
    """x ** y (IEEE semantics: NaN for a negative base and a non-integer exponent)."""
    return x ** y


@ufunc(*F3)
def pow_grad_base(g, x, y):
    """d(x**y)/dx * g = g * y * x**(y-1); exact zero where y == 0."""
    return g * y * x ** (y - 1) if y != 0 else 0.0


@ufunc(*F3)
def pow_grad_exp(g, x, out):
    """d(x**y)/dy * g = g * x**y * log(x), with 0 where x == 0 and the output is 0 (PyTorch)."""
    return g * out * math.log(x) if not (x == 0 and out == 0) else 0.0


@ufunc(*I2, *F2)
def maximum(x, y):
    """max(x, y), NaN if either is NaN (``torch.maximum``)."""
    if x != x:
        return x
    if y != y:
        return y
    return x if x > y else y


@ufunc(*I2, *F2)
def minimum(x, y):
    """min(x, y), NaN if either is NaN (``torch.minimum``)."""
    if x != x:
        return x
    if y != y:
        return y
    return x if x < y else y


@ufunc(*F3)
def max_grad(g, x, y):
    """The share of ``g`` that max(x, y) sends to x: all where x > y, half on ties (PyTorch)."""
    if x > y:
        return g
    if x == y:
        return g * 0.5
    return 0.0


@ufunc(*F3)
def min_grad(g, x, y):
    """The share of ``g`` that min(x, y) sends to x: all where x < y, half on ties (PyTorch)."""
    if x < y:
        return g
    if x == y:
        return g * 0.5
    return 0.0


@ufunc("boolean(boolean, boolean, boolean)", "int64(boolean, int64, int64)",
       "float32(boolean, float32, float32)", "float64(boolean, float64, float64)")
def where(c, x, y):
    """x where c, else y.  (The bool loop comes first: numpy takes the first loop its inputs
    cast to, and bools cast to int64.)"""
    return x if c else y


# ---- unary -------------------------------------------------------------------------------------
@ufunc("int64(int64)", *F1)
def neg(x):
    return -x


@ufunc("int64(int64)", *F1)
def abs(x):
    """|x| as PyTorch: the sign bit cleared (abs(-0.0) = 0.0, abs(-NaN) = NaN)."""
    return builtins.abs(x)


@ufunc(*F2)
def abs_grad(g, x):
    """g * sgn(x) as torch's: sgn(0) = sgn(NaN) = +0, so a NaN or infinite g there gives NaN."""
    if x > 0:
        return g
    if x < 0:
        return -g
    return g * 0.0


@ufunc(*F1)
def exp(x):
    return math.exp(x)


@ufunc(*F1)
def log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@ufunc(*F1)
def sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@ufunc(*F1)
def square(x):
    return x * x


@ufunc(*F1)
def relu(x):
    """max(x, 0) as PyTorch: NaN stays NaN, -0.0 stays -0.0."""
    return 0.0 if x < 0 else x


@ufunc(*F2)
def relu_grad(g, y):
    """0 where the output y <= 0, else g: as PyTorch's threshold_backward, a NaN output (a NaN
    input) passes the gradient, and a zeroed one stops even a NaN gradient."""
    return 0.0 if y <= 0 else g


@ufunc(*F2)
def leaky_relu(x, slope):
    return x if x > 0 else x * slope


@ufunc(*F3)
def leaky_relu_grad(g, x, slope):
    return g if x > 0 else g * slope


# GELU in float32 arithmetic for float32 (vecmath's exp_f32 and normal_cdf_f32: vectorized, a
# few ulps), in float64 with libm's erf for float64.
_MINUS_HALF_F32 = np.float32(-0.5)
_INV_SQRT_2PI_F32 = np.float32(INV_SQRT_2PI)


def _gelu_f32(x):
    return x * _V.normal_cdf_f32(x, _V.exp_f32(_MINUS_HALF_F32 * x * x))


def _gelu_f64(x):
    return x * 0.5 * (1.0 + math.erf(x * INV_SQRT_2))


def _gelu_grad_f32(g, x):
    e = _V.exp_f32(_MINUS_HALF_F32 * x * x)
    return g * (_V.normal_cdf_f32(x, e) + x * e * _INV_SQRT_2PI_F32)


def _gelu_grad_f64(g, x):
    return g * (0.5 * (1.0 + math.erf(x * INV_SQRT_2)) + x * INV_SQRT_2PI * math.exp(-0.5 * x * x))


_gelu_value = _V.float32_or(_gelu_f32, _gelu_f64)
_gelu_slope = _V.float32_or(_gelu_grad_f32, _gelu_grad_f64)


@threaded_ufunc(*F1)
def gelu(x):
    """x * Phi(x), Phi the standard normal CDF (``approximate='none'``)."""
    return _gelu_value(x)


@threaded_ufunc(*F2)
def gelu_grad(g, x):
    """g * (Phi(x) + x phi(x)), phi the standard normal density."""
    return _gelu_slope(g, x)


@ufunc(*F1)
def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (``approximate='tanh'``)."""
    return 0.5 * x * (1.0 + math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@ufunc(*F2)
def gelu_tanh_grad(g, x):
    u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
    t = math.tanh(u)
    du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


@ufunc(*F1)
def sigmoid(x):
    """1 / (1 + e^-x), computed without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@ufunc(*F2)
def sigmoid_grad(g, y):
    return g * y * (1.0 - y)


@ufunc(*F1)
def tanh(x):
    return math.tanh(x)


@ufunc(*F2)
def tanh_grad(g, y):
    return g * (1.0 - y * y)


@ufunc(*F1)
def silu(x):
    """x * sigmoid(x)."""
    if x >= 0:
        return x / (1.0 + math.exp(-x))
    e = math.exp(x)
    return x * e / (1.0 + e)


@ufunc(*F2)
def silu_grad(g, x):
    if x >= 0:
        s = 1.0 / (1.0 + math.exp(-x))
    else:
        e = math.exp(x)
        s = e / (1.0 + e)
    return g * s * (1.0 + x * (1.0 - s))


@ufunc(*F3)
def softplus(x, beta, threshold):
    """log(1 + e^(beta x)) / beta, and x itself where beta x > threshold (PyTorch)."""
    z = beta * x
    if z > threshold:
        return x
    return math.log1p(math.exp(z)) / beta


@ufunc(*F4)
def softplus_grad(g, x, beta, threshold):
    z = beta * x
    if z > threshold:
        return g
    e = math.exp(z)
    return g * e / (1.0 + e)


@ufunc(*F3)
def clamp(x, lo, hi):
    """min(max(x, lo), hi) (so hi wins when lo > hi, as in PyTorch); pass -inf / inf for a
    missing bound.  NaN stays NaN, and a NaN bound makes every element NaN (PyTorch)."""
    if lo != lo or hi != hi:
        return lo + hi
    y = lo if x < lo else x
    return hi if y > hi else y


@ufunc(*F4)
def clamp_grad(g, x, lo, hi):
    """g where lo <= x <= hi, else 0 (PyTorch passes the gradient on the bounds)."""
    return g if (x >= lo and x <= hi) else 0.0


# ---- more unary ops and their gradients (comparisons are numpy's, with bool outputs) -----------
@ufunc(*F1)
def sign(x):
    """1, -1 or 0; 0 for NaN (PyTorch)."""
    return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)


@ufunc(*F1)
def erf(x):
    return math.erf(x)


@ufunc(*F2)
def erf_grad(g, x):
    """g * 2/sqrt(pi) * exp(-x^2)."""
    return g * TWO_OVER_SQRT_PI * math.exp(-x * x)


@ufunc(*F1)
def rsqrt(x):
    """1 / sqrt(x)."""
    return 1.0 / math.sqrt(x) if x >= 0 else math.nan


@ufunc(*F2)
def rsqrt_grad(g, y):
    """d(x^-1/2)/dx * g = -g y^3 / 2 with y the output."""
    return -0.5 * g * y * y * y


@ufunc(*F2)
def sin_grad(g, x):
    return g * math.cos(x)


@ufunc(*F2)
def cos_grad(g, x):
    return -g * math.sin(x)


@ufunc(*F2)
def tan_grad(g, y):
    """g (1 + y^2) with y = tan(x)."""
    return g * (1.0 + y * y)


@ufunc(*F2)
def sinh_grad(g, x):
    return g * math.cosh(x)


@ufunc(*F2)
def cosh_grad(g, x):
    return g * math.sinh(x)


@ufunc(*F2)
def asin_grad(g, x):
    return g / math.sqrt(1.0 - x * x)


@ufunc(*F2)
def acos_grad(g, x):
    return -g / math.sqrt(1.0 - x * x)


@ufunc(*F2)
def atan_grad(g, x):
    return g / (1.0 + x * x)


@ufunc(*F2)
def log1p_grad(g, x):
    return g / (1.0 + x)


@ufunc(*F2)
def expm1_grad(g, y):
    """g (y + 1) with y = e^x - 1."""
    return g * (y + 1.0)


@ufunc(*F2)
def log2_grad(g, x):
    return g / (x * LN2)


@ufunc(*F2)
def log10_grad(g, x):
    return g / (x * LN10)


@ufunc(*F2)
def reciprocal_grad(g, y):
    """-g y^2 with y = 1/x."""
    return -g * y * y


@ufunc(*F2)
def finite_grad(g, x):
    """g where x is finite, else 0 (the gradient of nan_to_num)."""
    return g if (x == x and x != math.inf and x != -math.inf) else 0.0


@ufunc(*F3)
def lerp(a, b, w):
    """a + w (b - a), PyTorch's formula: b - (b - a)(1 - w) when |w| >= 0.5 (exact at w = 1)."""
    d = b - a
    return a + w * d if math.fabs(w) < 0.5 else b - d * (1.0 - w)
