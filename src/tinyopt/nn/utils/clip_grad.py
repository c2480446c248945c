"""Gradient clipping, as ``torch.nn.utils.clip_grad_norm_`` and ``clip_grad_value_``.

Example::

    loss.backward()
    total = clip_grad_norm_(model.parameters(), max_norm=1.0)   # returns the norm before clipping
    opt.step()

Gradients are scaled in place, so gradients in an optimizer's flat buffer stay there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from tinyopt.engine.tensor import Parameter

_EPS = 1e-6  # PyTorch's: clip_coef = max_norm / (total_norm + 1e-6)


def _as_list(parameters) -> list[Parameter]:
    if isinstance(parameters, Parameter):
        return [parameters]
    return list(parameters)


def _norm(x: np.ndarray, p: float) -> np.ndarray:
    """``torch.linalg.vector_norm(x, p)`` over all elements, in ``x``'s dtype."""
    x = x.reshape(-1)
    if p == 2.0:
        return np.sqrt(np.dot(x, x))
    a = np.abs(x)
    if p == math.inf:
        return a.max(initial=0.0)
    if p == -math.inf:
        return a.min() if a.size else np.array(math.inf, x.dtype)
    if p == 0.0:
        return np.array(np.count_nonzero(x), dtype=x.dtype)
    if p == 1.0:
        return a.sum()
    return np.power(np.power(a, p).sum(), 1.0 / p).astype(x.dtype)


def get_total_norm(tensors: Iterable[np.ndarray], norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> np.ndarray:
    r"""The ``norm_type``-norm of the norms of ``tensors`` (= the norm of all of them concatenated).

    Returns a 0-d array (0.0 for no tensors).  ``foreach`` is accepted and ignored.
    """
    norm_type = float(norm_type)
    arrays = [np.asarray(t) for t in tensors]
    if not arrays:
        return np.array(0.0, dtype=np.float32)
    dtype = np.result_type(*arrays)
    norms = np.array([_norm(a, norm_type) for a in arrays], dtype=dtype)
    total = np.asarray(_norm(norms, norm_type), dtype=dtype)
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                           "non-finite, so it cannot be clipped. To disable this error and scale "
                           "the gradients by the non-finite norm anyway, set "
                           "`error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters: Iterable[Parameter] | Parameter, max_norm: float,
                          total_norm, foreach: bool | None = None) -> None:
    r"""Scale the gradients in place by :math:`\min(1, \text{max\_norm} / (\text{total\_norm} + 10^{-6}))`."""
    grads = [p._grad for p in _as_list(parameters) if p._grad is not None]
    if not grads:
        return
    total = np.asarray(total_norm)
    coef = np.minimum(np.asarray(float(max_norm), total.dtype) / (total + total.dtype.type(_EPS)),
                      total.dtype.type(1.0))
    for g in grads:
        np.multiply(g, coef.astype(g.dtype), out=g)


def clip_grad_norm_(parameters: Iterable[Parameter] | Parameter, max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None) -> np.ndarray:
    r"""Clip the gradients' total norm to ``max_norm``, in place; return the total norm (before).

    :math:`\|g\| = \big(\sum_p \|g_p\|^q\big)^{1/q}` with :math:`q` = ``norm_type`` (``inf`` for the
    max); each gradient is multiplied by :math:`\min(1, \text{max\_norm} / (\|g\| + 10^{-6}))`.
    Parameters whose grad is None are ignored.  Raises RuntimeError when the norm is NaN or inf
    and ``error_if_nonfinite`` is True (nothing is changed then).
    """
    parameters = _as_list(parameters)
    grads = [p._grad for p in parameters if p._grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters: Iterable[Parameter] | Parameter, clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]``, in place (NaN stays NaN)."""
    clip_value = float(clip_value)
    for p in _as_list(parameters):
        if p._grad is not None:
            np.clip(p._grad, -clip_value, clip_value, out=p._grad)
