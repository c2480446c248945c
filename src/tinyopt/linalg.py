"""``tinyopt.linalg``: norms and products with PyTorch's names (``torch.linalg``), the inverse
and linear solves (``tinyopt.engine.ops.matrix_inverse``), and the matrix exponential and
Householder product (graphs of matrix products, so differentiable)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyopt.engine.ops.distance import vector_norm
from tinyopt.engine.ops.matrix_inverse import LinAlgError, inv, solve
from tinyopt.engine.ops.linalg import matmul
from tinyopt.engine.ops.reduce import sum
from tinyopt.engine.tensor import Tensor, as_tensor


def matrix_norm(A: Any, ord: Any = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False,
                *, dtype: Any = None) -> Tensor:
    """The Frobenius norm of the matrices in the last two dimensions (other orders are not
    supported)."""
    if ord != "fro":
        raise NotImplementedError(f"linalg.matrix_norm(ord={ord!r}): only 'fro' is supported")
    return vector_norm(A, 2, dim, keepdim, dtype=dtype)


def norm(A: Any, ord: Any = None, dim: Any = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """``torch.linalg.norm``: the vector 2-norm (or ``ord``) of 1-D input or over ``dim``, the
    Frobenius norm of 2-D input."""
    x = as_tensor(A)
    if ord is None or ord == "fro":
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise NotImplementedError(f"linalg.norm(ord={ord!r}) is not supported")
    if x.ndim == 2 and dim is None or isinstance(dim, tuple) and len(dim) == 2:
        raise NotImplementedError("linalg.norm: matrix norms other than 'fro' are not supported")
    return vector_norm(x, ord, dim, keepdim, dtype=dtype)


def vecdot(x: Any, y: Any, *, dim: int = -1) -> Tensor:
    """Dot products along ``dim``."""
    return sum(as_tensor(x) * as_tensor(y), dim)


def multi_dot(tensors: list) -> Tensor:
    """The product of a chain of matrices (first and last may be 1-D)."""
    out = as_tensor(tensors[0])
    for t in tensors[1:]:
        out = matmul(out, t)
    return out


def matrix_exp(A: Any) -> Tensor:
    """exp(A) of the square matrices in the last two dimensions, by scaling and squaring: the
    degree-18 Taylor polynomial of A / 2^s (Horner's rule) squared s times, s chosen from A's
    1-norm (read now) so that ||A / 2^s|| <= 1/2 (truncation below 1e-23 relative).  Built from
    matrix products, so its gradient is exact for the polynomial."""
    a = as_tensor(A)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.matrix_exp: A must be batches of square matrices, but they "
                           f"are {a.shape[-2] if a.ndim > 1 else 1} by {a.shape[-1]} matrices")
    if a.dtype.kind != "f":
        raise RuntimeError(f"linalg.matrix_exp: Expected a floating point tensor, got {a.dtype}")
    values = np.asarray(a.detach().numpy())
    one_norm = float(np.abs(values).sum(axis=-2).max()) if values.size else 0.0
    if not math.isfinite(one_norm):
        s = 0
    else:
        s = max(0, math.ceil(math.log2(one_norm / 0.5))) if one_norm > 0.5 else 0
    x = a * (1.0 / 2.0 ** s) if s else a
    eye = as_tensor(np.eye(a.shape[-1], dtype=a.dtype))
    t = eye
    for k in range(18, 0, -1):
        t = eye + matmul(x, t) * (1.0 / k)
    for _ in range(s):
        t = matmul(t, t)
    return t


def cross(input: Any, other: Any, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (``torch.linalg.cross``)."""
    from tinyopt.engine.ops.vector_products import cross as _cross
    return _cross(input, other, dim)


def householder_product(A: Any, tau: Any) -> Tensor:
    """The first n columns of H_1 H_2 ... H_k, H_i = I - tau_i v_i v_i^T with v_i the i-th
    column of A (m x n) below the diagonal and a 1 on it (``torch.linalg.householder_product``,
    2-D ``A``); differentiable in A and tau."""
    a, t = as_tensor(A), as_tensor(tau)
    if a.ndim != 2 or t.ndim != 1:
        raise NotImplementedError("linalg.householder_product: tinyopt supports one matrix "
                                  "(2-D A, 1-D tau)")
    m, n = a.shape
    k = t.shape[0]
    if n > m or k > n:
        raise RuntimeError(f"torch.linalg.householder_product: input.shape[-2] must be greater "
                           f"than or equal to input.shape[-1] and input.shape[-1] must be greater "
                           f"than or equal to tau.shape[-1], got {a.shape} and {t.shape}")
    q = as_tensor(np.eye(m, dtype=a.dtype))
    rows = np.arange(m)
    for i in range(k):
        below = as_tensor((rows > i).astype(a.dtype))
        unit = as_tensor((rows == i).astype(a.dtype))
        v = a[:, i] * below + unit
        q = q - matmul(matmul(q, v.unsqueeze(1)) * t[i], v.unsqueeze(0))
    return q[:, :n]


__all__ = ["LinAlgError", "cross", "householder_product", "inv", "matmul", "matrix_exp",
           "matrix_norm", "multi_dot", "norm", "solve", "vecdot", "vector_norm"]
