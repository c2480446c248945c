"""Elementwise losses, each one node (and one per gradient) over broadcast operands:
binary cross-entropy on probabilities, smooth L1, Huber and the KL divergence
(kernels: ``tinyopt.kernels.pointwise_loss``).  The reductions are the engine's mean and sum."""

from __future__ import annotations

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.elementwise import promoted_operands, broadcast_shape, sum_to
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import pointwise_loss as K

_ONE = {np.dtype(np.float32): np.ones((), np.float32), np.dtype(np.float64): np.ones((), np.float64)}
for _a in _ONE.values():
    _a.flags.writeable = False


def _operand_pair(op: str, input, target) -> tuple[Tensor, Tensor]:
    x, y = promoted_operands(op, *autocast.fp32(input, target))
    require_float(op, x, y)
    return x, y


# ---- binary cross-entropy --------------------------------------------------------------------------
def _bce_forward(t):
    def fwd(out, x, y, w):
        bad = K.first_outside_unit(x)
        if bad >= 0:
            raise RuntimeError(f"all elements of input should be between 0 and 1 (binary_cross_"
                               f"entropy got {x.flat[bad]!r}; apply sigmoid first or use "
                               f"binary_cross_entropy_with_logits)")
        K.bce(x, y, w, out=out)
    return fwd


def _bce_backward(t, g):
    x, y, w = t.srcs
    gx = node("bce_grad", (g, x, y, w), t.shape, t.dtype) if x.requires_grad else None
    gy = node("bce_grad_target", (g, x, w), t.shape, t.dtype) if y.requires_grad else None
    return gx, gy, None


defop("bce", forward=_bce_forward, backward=_bce_backward)
defop("bce_grad", forward=lambda t: (lambda out, g, x, y, w: K.bce_grad(g, x, y, w, out=out)))
defop("bce_grad_target", forward=lambda t: (lambda out, g, x, w: K.bce_grad_target(g, x, w,
                                                                                   out=out)))


def binary_cross_entropy(input, target, weight=None) -> Tensor:
    """Elementwise -w (y log x + (1 - y) log(1 - x)) of probabilities ``input`` (each log clamped
    at -100, as PyTorch does); ``weight`` broadcasts to the input.  Inputs outside [0, 1] raise
    when the graph runs.  Unreduced."""
    x, y = _operand_pair("binary_cross_entropy", input, target)
    if y.shape != x.shape:
        raise ValueError(f"Using a target size ({list(y.shape)}) that is different to the input "
                         f"size ({list(x.shape)}) is deprecated. Please ensure they have the same "
                         f"size.")
    if weight is None:
        w = as_tensor(_ONE[x.dtype])
    else:
        w = as_tensor(weight).to(x.dtype)
        broadcast_shape("binary_cross_entropy", y.shape, w.shape)
        if w.requires_grad:
            raise RuntimeError("the derivative for 'weight' is not implemented")
    return node("bce", (x, y, w), x.shape, x.dtype)


# ---- smooth L1 and Huber -------------------------------------------------------------------------
def _pair_loss(name: str, kernel, grad_kernel) -> None:
    def backward(t, g):
        x, y = t.srcs
        gx = node(name + "_grad", (g, x, y), t.shape, t.dtype, t.attrs)
        return (sum_to(gx, x.shape) if x.requires_grad else None,
                sum_to(-gx, y.shape) if y.requires_grad else None)

    defop(name, forward=lambda t: (lambda out, x, y: kernel(x, y, *t.attrs, out=out)),
          backward=backward)
    defop(name + "_grad", forward=lambda t: (lambda out, g, x, y: grad_kernel(g, x, y, *t.attrs,
                                                                              out=out)))


_pair_loss("smooth_l1", K.smooth_l1, K.smooth_l1_grad)
_pair_loss("huber", K.huber, K.huber_grad)


def _pair(op: str, input, target, attrs: tuple) -> Tensor:
    x, y = _operand_pair(op, input, target)
    return node(op, (x, y), broadcast_shape(op, x.shape, y.shape), x.dtype, attrs)


def smooth_l1(input, target, beta: float = 1.0) -> Tensor:
    """Elementwise 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = x - y); unreduced."""
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    return _pair("smooth_l1", input, target, (float(beta),))


def huber(input, target, delta: float = 1.0) -> Tensor:
    """Elementwise 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta); unreduced."""
    if delta <= 0:
        raise RuntimeError(f"huber_loss does not support non-positive values for delta, got "
                           f"{delta}")
    return _pair("huber", input, target, (float(delta),))


# ---- KL divergence -------------------------------------------------------------------------------
def _kl_forward(t):
    kernel = K.kl_div_log_target if t.attrs[0] else K.kl_div
    return lambda out, x, y: kernel(x, y, out=out)


def _kl_backward(t, g):
    x, y = t.srcs
    gx = gy = None
    if x.requires_grad:
        gx = sum_to(node("kl_div_grad", (g, y), t.shape, t.dtype, t.attrs), x.shape)
    if y.requires_grad:
        gy = sum_to(node("kl_div_grad_target", (g, x, y), t.shape, t.dtype, t.attrs), y.shape)
    return gx, gy


defop("kl_div", forward=_kl_forward, backward=_kl_backward)
defop("kl_div_grad", forward=lambda t: (lambda out, g, y: (
    K.kl_div_log_target_grad if t.attrs[0] else K.kl_div_grad)(g, y, out=out)))
defop("kl_div_grad_target", forward=lambda t: (lambda out, g, x, y: (
    K.kl_div_log_target_grad_target if t.attrs[0] else K.kl_div_grad_target)(g, x, y, out=out)))


def kl_div(input, target, log_target: bool = False) -> Tensor:
    """Elementwise KL divergence of log-probabilities ``input`` from ``target``:
    t (log t - x), or exp(t) (t - x) with ``log_target``; unreduced."""
    return _pair("kl_div", input, target, (bool(log_target),))
