"""Elementwise losses and their gradients: binary cross-entropy on probabilities, smooth L1,
Huber, Kullback-Leibler divergence.  numba ufuncs over float32/float64 (numpy broadcasting); ``x``
is the input, ``y`` the target, ``g`` the incoming gradient.  ``first_outside_unit`` finds an input
of binary cross-entropy outside [0, 1] (PyTorch refuses those)."""

from __future__ import annotations

import math

from tinyopt.kernels.jit import kernel, ufunc

F3 = ("float32(float32, float32, float32)", "float64(float64, float64, float64)")
F4 = ("float32(float32, float32, float32, float32)", "float64(float64, float64, float64, float64)")
F2 = ("float32(float32, float32)", "float64(float64, float64)")


@kernel
def first_outside_unit(x):
    """The flat index of the first element not in [0, 1] (NaN included), or -1."""
    for i in range(x.size):
        v = x.flat[i]
        if not (v >= 0 and v <= 1):
            return i
    return -1


@ufunc(*F3)
def bce(x, y, w):
    """-w (y max(log x, -100) + (1 - y) max(log(1 - x), -100)) (PyTorch clamps the logs)."""
    lx = max(math.log(x), -100.0) if x > 0 else -100.0
    l1x = max(math.log(1.0 - x), -100.0) if x < 1 else -100.0
    return -w * (y * lx + (1.0 - y) * l1x)


# PyTorch's epsilon of binary cross-entropy's gradient is the float 1e-12, also for float64
BCE_GRAD_EPS = 9.999999960041972e-13  # float32(1e-12)


@ufunc(*F4)
def bce_grad(g, x, y, w):
    """g w (x - y) / max((1 - x) x, eps), eps = float32(1e-12) as in PyTorch."""
    return g * w * (x - y) / max((1.0 - x) * x, BCE_GRAD_EPS)


@ufunc(*F3)
def bce_grad_target(g, x, w):
    """d/dy: -g w logit(x) = -g w log(x / (1 - x)), unclamped as PyTorch's (inf at x = 0, -inf at
    x = 1: the loss's logs are clamped, their derivative in y is not)."""
    return -(math.log(x / (1.0 - x))) * g * w


@ufunc(*F3)
def smooth_l1(x, y, beta):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = x - y)."""
    d = abs(x - y)
    return 0.5 * d * d / beta if d < beta else d - 0.5 * beta


@ufunc(*F4)
def smooth_l1_grad(g, x, y, beta):
    """-g where d < -beta, g where d > beta, else g d / beta (d = x - y; beta > 0): a NaN d
    falls to the last branch and gives NaN, as PyTorch's."""
    d = x - y
    if d < -beta:
        return -g
    if d > beta:
        return g
    return g * d / beta


@ufunc(*F3)
def huber(x, y, delta):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta) (d = x - y)."""
    d = abs(x - y)
    return 0.5 * d * d if d <= delta else delta * (d - 0.5 * delta)


@ufunc(*F4)
def huber_grad(g, x, y, delta):
    d = x - y
    if d < -delta:
        return -g * delta
    if d > delta:
        return g * delta
    return g * d


@ufunc(*F2)
def kl_div(x, t):
    """xlogy(t, t) - t x, with xlogy(0, 0) = 0 (x: log-probabilities, t: probabilities)."""
    if t > 0:
        tlogt = t * math.log(t)
    else:
        tlogt = 0.0 if t == 0 else math.nan
    return tlogt - t * x


@ufunc(*F2)
def kl_div_grad(g, t):
    """d/dx of kl_div: -g t."""
    return -g * t


@ufunc(*F2)
def kl_div_log_target_grad(g, t):
    """d/dx of kl_div_log_target: -g exp(t)."""
    return -g * math.exp(t)


@ufunc(*F2)
def kl_div_log_target(x, t):
    """exp(t) (t - x) (t: log-probabilities)."""
    return math.exp(t) * (t - x)


@ufunc(*F3)
def kl_div_grad_target(g, x, t):
    """d/dt of kl_div: g (log t + t / t - x), PyTorch's xlogy(t, t) gradient: t / t is 1 for a
    finite t != 0 and NaN at t = 0, inf or NaN, where PyTorch's is NaN too."""
    return g * ((math.log(t) if t != 0 else 0.0) + t / t - x)


@ufunc(*F3)
def kl_div_log_target_grad_target(g, x, t):
    """d/dt of kl_div_log_target: g exp(t) (t + 1 - x)."""
    return g * math.exp(t) * (t + 1.0 - x)
