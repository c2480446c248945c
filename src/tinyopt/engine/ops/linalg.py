"""Matrix products through numpy's BLAS: matmul (2-D and batched) and linear (x W^T + b)."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.elementwise import _operands, _require_float, sum_to
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import linalg as LK
from tinyopt.kernels import reduce as RK


def _matmul_backward(t, g):
    a, b = t.srcs
    ga = sum_to(matmul(g, b.transpose(-1, -2)), a.shape) if a.requires_grad else None
    gb = sum_to(matmul(a.transpose(-1, -2), g), b.shape) if b.requires_grad else None
    return ga, gb


def _matmul_forward(t):
    # np.dot takes BLAS's fast path with ``out=``; np.matmul with ``out=`` may not.
    if t.ndim == 2 and t.srcs[0].shape[1] == 1:  # an outer product: batch-1 weight gradients
        return lambda out, a, b: LK.outer(a[:, 0], b[0], out)
    if t.ndim == 2:
        return lambda out, a, b: np.dot(a, b, out=out)
    if t.srcs[1].ndim == 2:  # (..., k) @ (k, n), e.g. linear's input gradient: one GEMM, not a
        k, n = t.srcs[1].shape  # stack of small ones (35x20x5000 @ 5000x200: 1.3 s -> 0.1 s)
        return lambda out, a, b: np.dot(np.ascontiguousarray(a).reshape(-1, k), b,
                                        out=out.reshape(-1, n))
    return lambda out, a, b: np.matmul(a, b, out=out)


defop("matmul", forward=_matmul_forward, backward=_matmul_backward)


def matmul(a, b) -> Tensor:
    """Matrix product with PyTorch's rules: 1-D operands are promoted to matrices and the added
    dimension removed afterwards; leading (batch) dimensions broadcast."""
    a, b = _operands("matmul", a, b)
    _require_float("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                           f"{a.shape} and {b.shape}")
    if a.ndim == 1:  # (1, k) @ b; with a 1-D b that is already (1,), a dot product
        r = matmul(a.reshape(1, -1), b)
        return r.squeeze(-2) if b.ndim > 1 else r.squeeze(-1)
    if b.ndim == 1:
        return matmul(a, b.reshape(-1, 1)).squeeze(-1)
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                           f"({a.shape[-1]} != {b.shape[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise RuntimeError(f"matmul: batch dimensions of {a.shape} and {b.shape} cannot be "
                           f"broadcast") from None
    return node("matmul", (a, b), batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _linear_forward(t):
    n_in, n_out = t.srcs[1].shape[1], t.shape[-1]

    def fwd(out, x, w, b=None):
        out2 = out.reshape(-1, n_out)
        np.dot(x.reshape(-1, n_in), w.T, out=out2)
        if b is not None:  # numpy's SIMD loop: 700x5000 + 5000 in 2.7 ms, the numba ufunc 17 ms
            np.add(out2, b, out=out2)
    return fwd


def _linear_backward(t, g):
    x, w = t.srcs[0], t.srcs[1]
    gx = matmul(g, w) if x.requires_grad else None
    gw = node("linear_grad_weight", (g, x), w.shape, g.dtype) if w.requires_grad else None
    if len(t.srcs) == 2:
        return gx, gw
    b = t.srcs[2]
    gb = node("linear_grad_bias", (g,), b.shape, g.dtype) if b.requires_grad else None
    return gx, gw, gb


# The parameter gradients of linear as one node each (rather than reshape, transpose and matmul,
# and reshape and sum): fewer nodes to build and run on every step of a small model.
def _linear_grad_weight_forward(t):
    n_out, n_in = t.shape

    def fwd(out, g, x):  # dW = g2^T x2 over the rows of g and x
        g2, x2 = g.reshape(-1, n_out), x.reshape(-1, n_in)
        if g2.shape[0] == 1:
            LK.outer(g2[0], x2[0], out)
        else:
            np.dot(g2.T, x2, out=out)
    return fwd


def _linear_grad_bias_forward(t):
    n_out = t.shape[0]
    return lambda out, g: RK.sum_axis(np.ascontiguousarray(g).reshape(1, -1, n_out),
                                      out.reshape(1, n_out))


defop("linear", forward=_linear_forward, backward=_linear_backward)
defop("linear_grad_weight", forward=_linear_grad_weight_forward)
defop("linear_grad_bias", forward=_linear_grad_bias_forward)


def linear(input, weight, bias=None) -> Tensor:
    """y = x W^T + b, with x of shape (..., in), W (out, in) and b (out,)."""
    x, w = as_tensor(input), as_tensor(weight)
    if x.dtype != w.dtype:
        x, w = _operands("linear", x, w)
    _require_float("linear", x, w)
    if w.ndim != 2 or x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise RuntimeError(f"linear: input of shape {x.shape} and weight of shape {w.shape} "
                           f"do not match (expected input (..., {w.shape[-1]}))")
    srcs = (x, w)
    if bias is not None:
        b = as_tensor(bias)
        if b.shape != (w.shape[0],):
            raise RuntimeError(f"linear: bias has shape {b.shape}, expected ({w.shape[0]},)")
        srcs = (x, w, b.to(x.dtype))
    return node("linear", srcs, x.shape[:-1] + (w.shape[0],), x.dtype)
