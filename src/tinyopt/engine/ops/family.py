"""What the op families share: the helpers each family's builders and kernels' callers use.

A family (``engine/ops/<name>.py``) builds nodes with ``engine.op.node`` over ``engine.tensor``'s
tensors; the checks and conversions every family repeats live here once:

- :func:`c_contiguous`: an array as the numba kernels take it (C-contiguous, a copy only if not);
- :func:`wrap_dim`: a dimension argument checked and made non-negative, with torch's IndexError;
- :func:`require_float`: the refusal of integer and bool inputs by a float-only op, with torch's
  error (type and words) where torch refuses them.

Operand promotion (``elementwise.promoted_operands``) and casts (``elementwise.to``) are the
elementwise family's, as their ``cast`` op is.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import FLOATS, is_low, scalar_type_name
from tinyopt.engine.tensor import Tensor


def c_contiguous(x: np.ndarray) -> np.ndarray:
    """``x`` if it is C-contiguous, else a C-contiguous copy (what the kernels index)."""
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def wrap_dim(op: str, d: int, ndim: int) -> int:
    """Dimension ``d`` of a tensor of ``ndim`` dimensions in ``[0, ndim)`` (negative counts from
    the end; a 0-d tensor has dimensions 0 and -1, as in torch), or torch's IndexError."""
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {d})")
    return d % max(ndim, 1)


_MEAN_ERROR = (RuntimeError, "mean(): could not infer output dtype. Input dtype must be either a "
                             "floating point or complex dtype. Got: {T}")
_FLOAT_ONLY_ERRORS = {  # op: torch's error for integer and bool inputs ({T}: "Long", "Bool"...)
    **{op: (NotImplementedError, f'"{kernel}" not implemented for \'{{T}}\'') for op, kernel in (
        ("softmax", "softmax_lastdim_kernel_impl"),
        ("log_softmax", "log_softmax_lastdim_kernel_impl"),
        ("cross_entropy", "log_softmax_lastdim_kernel_impl"), ("nll_loss", "nll_loss_out_frame"),
        ("layer_norm", "LayerNormKernelImpl"), ("group_norm", "GroupNormKernelImpl"),
        ("batch_norm", "batch_norm"), ("instance_norm", "batch_norm"),
        ("lerp", "lerp_kernel_scalar"),
        ("logcumsumexp", "logcumsumexp_out_cpu"), ("elu", "elu_cpu"), ("mse_loss", "mse_cpu"),
        ("smooth_l1", "smooth_l1_cpu"), ("huber", "huber_cpu"),
        ("binary_cross_entropy", "binary_cross_entropy"), ("log_sigmoid", "log_sigmoid_cpu"),
        ("logsigmoid", "log_sigmoid_cpu"),
        ("mish", "mish_cpu"),
        ("binary_cross_entropy_with_logits", "log_sigmoid_cpu"))},
    "l1_loss": _MEAN_ERROR, "adaptive_avg_pool2d": _MEAN_ERROR,
    "dropout": (RuntimeError, "result type Float can't be cast to the desired output type {T}"),
    "kl_div": (RuntimeError, "kl_div: Integral inputs not supported."),
    "cosine_similarity": (RuntimeError, "expected common dtype to be floating point, yet common "
                                        "dtype is {T}")}


def require_float(op: str, *ts: Tensor) -> None:
    """Refuse integer and bool inputs of a float-only op: with torch's error where torch refuses
    them, else (torch computes them; tinyopt does not) with a TypeError saying what to do."""
    for t in ts:
        if t.dtype not in FLOATS and not is_low(t.dtype):
            if op in _FLOAT_ONLY_ERRORS:
                kind, words = _FLOAT_ONLY_ERRORS[op]
                raise kind(words.format(T=scalar_type_name(t.dtype)))
            raise TypeError(f"{op}: expected a floating point tensor, got {t.dtype} "
                            f"(shape {t.shape}); convert with .float()")
