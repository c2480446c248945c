"""``tinyopt.linalg``: norms and products with PyTorch's names (``torch.linalg``)."""

from __future__ import annotations

from typing import Any

from tinyopt.engine.ops.distance import vector_norm
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


__all__ = ["matmul", "matrix_norm", "multi_dot", "norm", "vecdot", "vector_norm"]
