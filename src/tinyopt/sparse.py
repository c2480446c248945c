"""``torch.sparse``: products with sparse COO matrices (``tinyopt.engine.sparse``).

    adj = tinyopt.sparse_coo_tensor(edge_index, weights, (n, n))
    h = tinyopt.sparse.mm(adj, x)           # differentiable in x and in the weights
"""

from __future__ import annotations

from typing import Any

from tinyopt.engine.sparse import SparseCOOTensor, sparse_coo_tensor, spmm, to_sparse
from tinyopt.engine.tensor import Tensor

__all__ = ["FloatTensor", "DoubleTensor", "addmm", "mm", "sum"]


def mm(mat1: SparseCOOTensor, mat2: Any) -> Tensor:
    """``mat1 @ mat2`` for a sparse COO matrix ``mat1`` and a dense matrix ``mat2``; the gradient
    reaches ``mat2`` and ``mat1``'s values."""
    return spmm(mat1, mat2)


def addmm(mat: Any, mat1: SparseCOOTensor, mat2: Any, *, beta: float = 1.0,
          alpha: float = 1.0) -> Tensor:
    """``beta * mat + alpha * (mat1 @ mat2)`` for a sparse ``mat1``."""
    return mat * beta + spmm(mat1, mat2) * alpha


def sum(input: SparseCOOTensor, dim: Any = None, dtype: Any = None) -> Any:
    """The sum of all entries (a dense scalar), or over ``dim`` (a sparse tensor while sparse
    dimensions remain, as in PyTorch)."""
    dense = input.to_dense() if dtype is None else input.to_dense().to(dtype)
    if dim is None:
        return dense.sum()
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    left = input.sparse_dim() - len({d % input.dim() for d in dims} &
                                    set(range(input.sparse_dim())))
    out = dense.sum(dims)
    return to_sparse(out, left) if left > 0 else out


def FloatTensor(indices: Any, values: Any, size: Any = None) -> SparseCOOTensor:
    """The legacy ``torch.sparse.FloatTensor(indices, values, size)``: a float32 COO tensor."""
    return sparse_coo_tensor(indices, values, size, dtype="float32")


def DoubleTensor(indices: Any, values: Any, size: Any = None) -> SparseCOOTensor:
    """The legacy ``torch.sparse.DoubleTensor(indices, values, size)``."""
    return sparse_coo_tensor(indices, values, size, dtype="float64")
