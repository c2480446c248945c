"""Group normalization and instance normalization, fused as layer and batch norm are: a statistics
node (mu, rstd, var per sample and group), an apply node, and backward nodes that compute dx in
one pass and (dw, db) together in another (kernels: ``tinyopt.kernels.group_norm``).

Instance norm is group norm with one channel per group.  With running statistics it updates them
in training as PyTorch does (the batch-norm rule for every instance, averaged over the batch, with
the unbiased variance), as an effect of the first realization (see ``engine/realize.py``); with
``use_input_stats=False`` it normalizes with the running statistics (batch norm in eval mode).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous, require_float

from tinyopt.engine.ops.nn import batch_norm, running_stat
from tinyopt.engine.realize import add_effect
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels import group_norm as K

_ONE = np.ones(1)  # stands in for an absent weight or bias (the kernels skip it)


def _view(shape: tuple[int, ...], G: int) -> tuple[int, int, int, int]:
    return shape[0], G, shape[1] // G, math.prod(shape[2:])


def _stats_forward(t):
    G, eps = t.attrs
    v = _view(t.srcs[0].shape, G)
    return lambda out, x: K.group_norm_stats(c_contiguous(x).reshape(v), eps, out)


def _apply_forward(t):
    G, has_w, has_b = t.attrs
    v = _view(t.shape, G)

    def fwd(out, x, stats, *wb):
        K.group_norm_apply(c_contiguous(x).reshape(v), stats, wb[0] if has_w else _ONE,
                           wb[-1] if has_b else _ONE, has_w, has_b, out.reshape(v))
    return fwd


def _grad_x_forward(t):
    G, has_w = t.attrs
    v = _view(t.shape, G)

    def fwd(out, g, x, stats, *w):
        K.group_norm_grad_x(c_contiguous(g).reshape(v), c_contiguous(x).reshape(v), stats,
                            w[0] if has_w else _ONE, has_w, out.reshape(v))
    return fwd


def _grad_wb_forward(t):
    v = _view(t.srcs[1].shape, t.attrs[0])
    return lambda out, g, x, stats: K.group_norm_grad_wb(c_contiguous(g).reshape(v),
                                                         c_contiguous(x).reshape(v),
                                                         stats, out)


def _backward(t, g):
    x, stats = t.srcs[0], t.srcs[1]
    G, has_w, has_b = t.attrs
    w = (t.srcs[2],) if has_w else ()
    gx = node("group_norm_grad_x", (g, x, stats) + w, x.shape, g.dtype, (G, has_w)) \
        if x.requires_grad else None
    grads = [gx, None]
    if any(s.requires_grad for s in t.srcs[2:]):
        wb = node("group_norm_grad_wb", (g, x, stats), (2, x.shape[1]), g.dtype, (G,))
        if has_w:
            grads.append(wb[0] if t.srcs[2].requires_grad else None)
        if has_b:
            grads.append(wb[1] if t.srcs[-1].requires_grad else None)
    else:
        grads += [None] * (has_w + has_b)
    return tuple(grads)


defop("group_norm_stats", forward=_stats_forward)
defop("group_norm", forward=_apply_forward, backward=_backward)
defop("group_norm_grad_x", forward=_grad_x_forward)
defop("group_norm_grad_wb", forward=_grad_wb_forward)
defop("instance_running_stats", forward=lambda t: (lambda out, stats: K.instance_running_stats(
    stats, t.attrs[0], out)))


def _affine(op: str, x: Tensor, C: int, weight, bias) -> list[Tensor]:
    srcs = []
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            p = as_tensor(p)
            if p.shape != (C,):
                raise RuntimeError(f"{op}: expected {name} to be a vector of size equal to the "
                                   f"number of channels in input ({C}), but got {name} of shape "
                                   f"{list(p.shape)}")
            srcs.append(p.to(x.dtype))
    return srcs


def _normalize(x: Tensor, G: int, weight, bias, eps: float, op: str) -> tuple[Tensor, Tensor]:
    affine = _affine(op, x, x.shape[1], weight, bias)
    stats = node("group_norm_stats", (x,), (x.shape[0] * G, 3), x.dtype, (G, float(eps)))
    y = node("group_norm", (x, stats, *affine), x.shape, x.dtype,
             (G, weight is not None, bias is not None))
    return y, stats


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Group normalization of (N, C, *) inputs: each sample's channels split into ``num_groups``
    groups, each group normalized over its channels and spatial positions (biased variance),
    then y = xhat * weight[c] + bias[c]."""
    x = as_tensor(input)
    require_float("group_norm", x)
    if x.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{x.ndim}")
    G = int(num_groups)
    if G <= 0 or x.shape[1] % G:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, "
                           f"but got input of shape {list(x.shape)} and num_groups={num_groups}")
    return _normalize(x, G, weight, bias, eps, "group_norm")[0]


def instance_norm(input, running_mean: np.ndarray | None = None,
                  running_var: np.ndarray | None = None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Tensor:
    """Instance normalization of (N, C, *) inputs: every (sample, channel) normalized over its
    spatial positions, then y = xhat * weight[c] + bias[c].  ``use_input_stats=False`` uses the
    running statistics instead; otherwise given running arrays are updated in place when the
    output is realized (PyTorch's rule, see the module docstring)."""
    x = as_tensor(input)
    require_float("instance_norm", x)
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of shape (N, C, *), got "
                         f"{list(x.shape)}")
    N, C, S = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    rm = None if running_mean is None else running_stat("running_mean", running_mean, C)
    rv = None if running_var is None else running_stat("running_var", running_var, C)
    if (rm is None) != (rv is None):
        raise ValueError("instance_norm: give both running_mean and running_var, or neither")
    if not use_input_stats:
        if rm is None:
            raise ValueError("Expected running_mean and running_var to be defined when "
                             "use_input_stats is false")
        return batch_norm(x, rm, rv, weight, bias, False, momentum, eps)
    if S <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{list(x.shape)}")
    y, stats = _normalize(x, C, weight, bias, eps, "instance_norm")
    if rm is not None:
        means = node("instance_running_stats", (stats,), (3, C), x.dtype, (N,))
        m = leaf(np.array(float(momentum)))
        add_effect(y, node("batch_norm_update", (means, leaf(rm), leaf(rv), m), (0,),
                           x.dtype, (S,)))
    return y
