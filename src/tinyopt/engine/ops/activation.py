"""Activation ops: elu/selu/celu, hardtanh/relu6, logsigmoid, mish, prelu, each one node with a
fused gradient kernel (``tinyopt.kernels.activation``)."""

from __future__ import annotations

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.elementwise import broadcast_shape, sum_to
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import activation as K

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _unary(name: str, kernel, grad_kernel) -> None:
    defop(name, forward=lambda t: (lambda out, x: kernel(x, *t.attrs, out=out)),
          backward=lambda t, g: (node(name + "_grad", (g, t.srcs[0]), t.shape, t.dtype,
                                      t.attrs),), inplace=True)
    defop(name + "_grad", forward=lambda t: (lambda out, g, x: grad_kernel(g, x, *t.attrs,
                                                                           out=out)),
          inplace=True)


_unary("elu", K.elu, K.elu_grad)
_unary("log_sigmoid", K.log_sigmoid, K.log_sigmoid_grad)
_unary("mish", K.mish, K.mish_grad)


def _float_input(op: str, x) -> Tensor:
    x = as_tensor(x)
    require_float(op, x)
    return x


def elu(x, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    """scale x for x > 0, else scale alpha (exp(input_scale x) - 1)
    (Clevert et al. 2015, https://arxiv.org/abs/1511.07289)."""
    x = _float_input("elu", x)
    return node("elu", (x,), x.shape, x.dtype, (float(alpha), float(scale), float(input_scale)))


def selu(x) -> Tensor:
    """SELU (Klambauer et al. 2017, https://arxiv.org/abs/1706.02515): elu with PyTorch's alpha
    and scale."""
    return elu(x, SELU_ALPHA, SELU_SCALE, 1.0)


def celu(x, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)) (Barron 2017)."""
    return elu(x, alpha, 1.0, 1.0 / alpha)


def log_sigmoid(x) -> Tensor:
    """log(sigmoid(x)), computed stably."""
    x = _float_input("logsigmoid", x)
    return node("log_sigmoid", (x,), x.shape, x.dtype)


def mish(x) -> Tensor:
    """x tanh(softplus(x))."""
    x = _float_input("mish", x)
    return node("mish", (x,), x.shape, x.dtype)


# hardtanh is clamp forward, with PyTorch's strict-interior gradient (clamp passes the bounds)
defop("hardtanh", forward=lambda t: (lambda out, x: np.clip(x, *t.attrs, out=out)),
      backward=lambda t, g: (node("hardtanh_grad", (g, t.srcs[0]), t.shape, t.dtype,
                                  t.attrs),), inplace=True)
defop("hardtanh_grad", forward=lambda t: (lambda out, g, x: K.hardtanh_grad(g, x, *t.attrs,
                                                                            out=out)),
      inplace=True)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """min(max(x, min_val), max_val); the gradient passes strictly inside (min_val, max_val)."""
    x = _float_input("hardtanh", x)
    return node("hardtanh", (x,), x.shape, x.dtype, (float(min_val), float(max_val)))


# ---- prelu ---------------------------------------------------------------------------------------
def _prelu_backward(t, g):
    x, w = t.srcs
    gx = node("prelu_grad_x", (g, x, w), t.shape, t.dtype) if x.requires_grad else None
    gw = sum_to(node("prelu_grad_w", (g, x), t.shape, t.dtype), w.shape) \
        if w.requires_grad else None
    return gx, gw


defop("prelu", forward=lambda t: (lambda out, x, w: K.prelu(x, w, out=out)),
      backward=_prelu_backward, inplace=True)
defop("prelu_grad_x", forward=lambda t: (lambda out, g, x, w: K.prelu_grad_x(g, x, w, out=out)))
defop("prelu_grad_w", forward=lambda t: (lambda out, g, x: K.prelu_grad_w(g, x, out=out)))


def prelu(input, weight) -> Tensor:
    """x for x > 0, else w x, with ``weight`` of 1 element or one per channel (dimension 1)."""
    input, weight = autocast.lower(input, weight)
    x = _float_input("prelu", input)
    w = as_tensor(weight).to(x.dtype)
    if w.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {w.ndim}")
    n = w.numel()
    if x.ndim == 0:
        if n != 1:
            raise RuntimeError(f"prelu: a 0-d input needs a 1-element weight, got {n}")
        w = w.reshape(())
    elif n != 1:
        channels = x.shape[1] if x.ndim > 1 else 1
        if n != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {n} and channel size = {channels}.")
        w = w.reshape((1, n) + (1,) * (x.ndim - 2))
    else:
        w = w.reshape(())
    return node("prelu", (x, w), broadcast_shape("prelu", x.shape, w.shape), x.dtype)
