"""Activation kernels beyond those of ``elementwise``: ELU (and SELU, CELU through its constants),
hardtanh, log-sigmoid, Mish, PReLU.  numba ufuncs over float32/float64, as in ``elementwise``
(``g`` the incoming gradient, ``x`` the forward input)."""

from __future__ import annotations

import math

from tinyopt.kernels.jit import ufunc

F2 = ("float32(float32, float32)", "float64(float64, float64)")
F1 = ("float32(float32)", "float64(float64)")
F3 = ("float32(float32, float32, float32)", "float64(float64, float64, float64)")
F4 = ("float32(float32, float32, float32, float32)", "float64(float64, float64, float64, float64)")
F5 = ("float32(float32, float32, float32, float32, float32)",
      "float64(float64, float64, float64, float64, float64)")


@ufunc(*F4)
def elu(x, alpha, scale, input_scale):
    """scale x for x > 0, else scale alpha (exp(input_scale x) - 1) (PyTorch's elu; SELU and
    CELU are its cases alpha, scale = 1.6733, 1.0507 and input_scale = 1 / alpha)."""
    if x <= 0:
        return math.expm1(x * input_scale) * alpha * scale
    return x * scale


@ufunc(*F5)
def elu_grad(g, x, alpha, scale, input_scale):
    """(NaN takes the positive branch, as in PyTorch.)"""
    if x <= 0:
        return g * input_scale * alpha * scale * math.exp(x * input_scale)
    return g * scale


@ufunc(*F4)
def hardtanh_grad(g, x, lo, hi):
    """g strictly inside (lo, hi), else 0 (PyTorch's hardtanh_backward; NaN passes g)."""
    return 0.0 if (x <= lo or x >= hi) else g


@ufunc(*F1)
def log_sigmoid(x):
    """log(1 / (1 + e^-x)) = min(x, 0) - log1p(e^-|x|), without overflow."""
    return min(x, 0.0) - math.log1p(math.exp(-abs(x)))


@ufunc(*F2)
def log_sigmoid_grad(g, x):
    z = math.exp(-abs(x))
    if x < 0:
        return g * (1.0 - z / (1.0 + z))
    return g * (z / (1.0 + z))


@ufunc(*F1)
def mish(x):
    """x tanh(softplus(x)) (Misra 2019, https://arxiv.org/abs/1908.08681)."""
    return x * math.tanh(math.log1p(math.exp(x)))


@ufunc(*F2)
def mish_grad(g, x):
    s = 1.0 / (1.0 + math.exp(-x))
    t = math.tanh(math.log1p(math.exp(x)))
    return g * (t + x * s * (1.0 - t * t))


@ufunc(*F2)
def prelu(x, w):
    """x for x > 0, else w x (He et al. 2015, https://arxiv.org/abs/1502.01852)."""
    return x if x > 0 else w * x


@ufunc(*F3)
def prelu_grad_x(g, x, w):
    return g if x > 0 else w * g


@ufunc(*F2)
def prelu_grad_w(g, x):
    return 0.0 if x > 0 else x * g
