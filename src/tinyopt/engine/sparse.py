"""Sparse COO tensors, as ``torch.sparse_coo_tensor`` makes them: what GCN and GAT scripts use.

    adj = torch.sparse_coo_tensor(indices, values, (n, n))      # or dense.to_sparse()
    h = torch.sparse.mm(adj, x @ w)                              # differentiable in x, w, values

A :class:`SparseCOOTensor` holds ``indices`` (int64, (sparse_dim, nnz), concrete: checked
against the size when made) and ``values`` (a Tensor (nnz, *dense_dims), which may require grad
and be any graph node).  What works: ``to_dense``, ``coalesce`` (sorted, duplicates summed),
``indices()``/``values()`` (``_indices``/``_values``), ``_nnz``, ``is_coalesced``, ``size``,
``shape``, ``dim``, ``sparse_dim``/``dense_dim``, ``t``/``transpose(0, 1)`` of a matrix,
``mm``/``@`` with a dense matrix on either side (``torch.sparse.mm``, ``torch.spmm``,
``torch.mm``, ``torch.matmul``), ``+`` (with a sparse tensor: sparse; with a dense one: dense),
multiplying or dividing by a number, ``to``/``float``/``double``,
``requires_grad_`` and ``grad``, ``detach``.  Other tensor methods raise an ``AttributeError``
naming these.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from tinyopt.engine.dtypes import as_dtype, torch_name
from tinyopt.engine.layout import sparse_coo
from tinyopt.engine.tensor import Size, Tensor, as_tensor, leaf, tensor

__all__ = ["SparseCOOTensor", "is_sparse", "sparse_coo_tensor", "spmm"]


_SUPPORTED = ("to_dense, coalesce, indices, values, _nnz, size, shape, dim, t, mm, @, "
              "multiplication by a number, to")


class SparseCOOTensor:
    """A sparse COO tensor (see the module docstring)."""

    is_sparse = True
    layout = sparse_coo
    is_cuda = False

    def __init__(self, indices: np.ndarray, values: Tensor, shape: tuple[int, ...],
                 coalesced: bool = False):
        self._idx = indices
        self._indices = leaf(indices)
        self._vals = values
        self.shape = Size(shape)
        self._coalesced = coalesced

    # ---- what it is ----------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self._vals.dtype

    @property
    def device(self) -> Any:
        return self._vals.device

    @property
    def requires_grad(self) -> bool:
        return self._vals.requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> SparseCOOTensor:
        """Let the values require grad (in place)."""
        self._vals.requires_grad_(requires_grad)
        return self

    @property
    def grad(self) -> SparseCOOTensor | None:
        """The gradient, as a sparse tensor with these indices (torch gives a sparse grad)."""
        g = self._vals.grad
        return None if g is None else SparseCOOTensor(self._idx, g, tuple(self.shape),
                                                       self._coalesced)

    def size(self, dim: int | None = None) -> Any:
        """The shape, or its ``dim`` entry."""
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        """The number of dimensions (sparse and dense)."""
        return len(self.shape)

    ndim = property(dim)

    def sparse_dim(self) -> int:
        """The number of dimensions the indices address."""
        return self._idx.shape[0]

    def dense_dim(self) -> int:
        """The number of dimensions of each value."""
        return len(self.shape) - self._idx.shape[0]

    def _nnz(self) -> int:
        return self._idx.shape[1]

    def is_coalesced(self) -> bool:
        """Whether the indices are sorted and unique."""
        return self._coalesced

    def indices(self) -> Tensor:
        """The (sparse_dim, nnz) int64 indices of a coalesced tensor."""
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._indices

    def values(self) -> Tensor:
        """The (nnz, *dense_dims) values of a coalesced tensor."""
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._vals

    def _values(self) -> Tensor:
        return self._vals

    def __repr__(self) -> str:
        return (f"tensor(indices={self._indices!r},\n       values={self._vals!r},\n       "
                f"size={tuple(self.shape)}, nnz={self._nnz()}, layout=torch.sparse_coo)")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"'{name}' is not supported for sparse COO tensors in tinyopt "
                             f"(supported: {_SUPPORTED}); call .to_dense() first")

    # ---- conversions ---------------------------------------------------------------------------
    def to_dense(self, dtype: Any = None, *, masked_grad: bool | None = None) -> Tensor:
        """The dense tensor (duplicate entries add up); differentiable in the values."""
        from tinyopt.engine.ops.sparse import coo_to_dense
        out = coo_to_dense(self._vals, self._indices, tuple(self.shape))
        return out if dtype is None else out.to(dtype)

    def coalesce(self) -> SparseCOOTensor:
        """Indices sorted (row-major) and unique, duplicate values summed."""
        if self._coalesced:
            return self
        dims = self.shape[:self.sparse_dim()]
        flat = np.ravel_multi_index(tuple(self._idx), dims) if self._nnz() else \
            np.zeros(0, np.int64)
        keys, inverse = np.unique(flat, return_inverse=True)
        idx = np.stack(np.unravel_index(keys, dims)).astype(np.int64).reshape(len(dims), -1)
        vals = self._vals
        if keys.size != flat.size or not np.array_equal(keys, flat):
            from tinyopt.engine.ops.creation import zeros
            vals = zeros((keys.size,) + tuple(vals.shape[1:]), dtype=vals.dtype).index_add(
                0, leaf(inverse.astype(np.int64).reshape(-1)), vals)
        return SparseCOOTensor(idx, vals, tuple(self.shape), True)

    def to_sparse(self, *args: Any, **kwargs: Any) -> SparseCOOTensor:
        """Itself (already sparse)."""
        return self

    def to(self, *args: Any, **kwargs: Any) -> SparseCOOTensor:
        """The values converted as ``Tensor.to`` does; the indices kept."""
        return SparseCOOTensor(self._idx, self._vals.to(*args, **kwargs), tuple(self.shape),
                               self._coalesced)

    def float(self) -> SparseCOOTensor:
        """The values as float32."""
        return self.to(np.float32)

    def double(self) -> SparseCOOTensor:
        """The values as float64."""
        return self.to(np.float64)

    def cpu(self) -> SparseCOOTensor:
        """Itself (everything is on the CPU)."""
        return self

    def detach(self) -> SparseCOOTensor:
        """The same entries, cut from autograd."""
        return SparseCOOTensor(self._idx, self._vals.detach(), tuple(self.shape),
                               self._coalesced)

    def clone(self) -> SparseCOOTensor:
        """A copy of the indices and values."""
        return SparseCOOTensor(self._idx.copy(), self._vals.clone(), tuple(self.shape),
                               self._coalesced)

    # ---- arithmetic ----------------------------------------------------------------------------
    def t(self) -> SparseCOOTensor:
        """The transposed matrix."""
        if len(self.shape) != 2 or self.sparse_dim() != 2:
            raise RuntimeError(f"t() expects a 2-D sparse matrix, got size {tuple(self.shape)}")
        return SparseCOOTensor(self._idx[::-1].copy(), self._vals,
                               (self.shape[1], self.shape[0]))

    def transpose(self, dim0: int, dim1: int) -> SparseCOOTensor:
        """The transposed matrix (dims 0 and 1 only)."""
        if sorted((dim0 % 2, dim1 % 2)) != [0, 1] or len(self.shape) != 2:
            raise NotImplementedError("tinyopt's sparse tensors transpose matrices only "
                                      "(dims 0 and 1)")
        return self.t()

    def mm(self, mat2: Any) -> Tensor:
        """``self @ mat2`` for a dense matrix ``mat2``."""
        return spmm(self, mat2)

    def matmul(self, other: Any) -> Tensor:
        """``self @ other`` for a dense matrix ``other``."""
        return spmm(self, other)

    def __matmul__(self, other: Any) -> Tensor:
        return spmm(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        """dense @ sparse, as (sparse^T @ dense^T)^T."""
        return spmm(self.t(), as_tensor(other).t()).t()

    def __add__(self, other: Any) -> Any:
        """sparse + sparse: the entries of both (uncoalesced); sparse + dense: dense."""
        if isinstance(other, SparseCOOTensor):
            if tuple(other.shape) != tuple(self.shape):
                raise RuntimeError(f"add: expected sizes to match, got {tuple(self.shape)} and "
                                   f"{tuple(other.shape)}")
            from tinyopt.engine.ops.movement import cat
            return SparseCOOTensor(np.concatenate([self._idx, other._idx], 1),
                                   cat([self._vals, other._vals.to(self._vals.dtype)], 0),
                                   tuple(self.shape))
        return self.to_dense() + other

    __radd__ = __add__

    def __mul__(self, other: Any) -> SparseCOOTensor:
        if not isinstance(other, numbers.Number):
            raise NotImplementedError("tinyopt's sparse tensors multiply by numbers only")
        return SparseCOOTensor(self._idx, self._vals * other, tuple(self.shape),
                               self._coalesced)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> SparseCOOTensor:
        if not isinstance(other, numbers.Number):
            raise NotImplementedError("tinyopt's sparse tensors divide by numbers only")
        return self * (1.0 / other)

    def __neg__(self) -> SparseCOOTensor:
        return self * -1


def is_sparse(x: Any) -> bool:
    """Whether ``x`` is a sparse COO tensor."""
    return isinstance(x, SparseCOOTensor)


def sparse_coo_tensor(indices: Any, values: Any, size: Any = None, *, dtype: Any = None,
                      device: Any = None, requires_grad: bool = False,
                      check_invariants: bool | None = None,
                      is_coalesced: bool | None = None) -> SparseCOOTensor:
    """A sparse COO tensor of ``values`` (nnz, *dense_dims) at ``indices`` (sparse_dim, nnz), as
    ``torch.sparse_coo_tensor``; ``size`` defaults to the smallest that holds the indices."""
    idx = np.asarray(indices.numpy() if isinstance(indices, Tensor) else indices)
    if idx.dtype.kind not in "iu":
        if idx.size:
            raise RuntimeError(f"indices must be an int64 tensor, got {idx.dtype}")
        idx = idx.astype(np.int64)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if idx.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    vals = values if isinstance(values, Tensor) else as_tensor(values) if isinstance(
        values, np.ndarray) else tensor(values)  # (Python floats: float32, as torch)
    if dtype is not None:
        vals = vals.to(as_dtype(dtype))
    if vals.ndim == 0 or vals.shape[0] != idx.shape[1]:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{idx.shape[1]}, nnz from values: "
                           f"{vals.shape[0] if vals.ndim else 0}")
    if size is None:
        sparse_size = tuple(int(m) + 1 for m in idx.max(1)) if idx.shape[1] else \
            (0,) * idx.shape[0]
        shape = sparse_size + tuple(vals.shape[1:])
    else:
        shape = tuple(int(s) for s in size)
    sd = idx.shape[0]
    if len(shape) != sd + vals.ndim - 1:
        raise RuntimeError(f"number of dimensions must be sparse_dim ({sd}) + dense_dim "
                           f"({vals.ndim - 1}), but got {len(shape)}")
    if tuple(vals.shape[1:]) != shape[sd:]:
        raise RuntimeError(f"values has incorrect size, expected {[idx.shape[1], *shape[sd:]]}, "
                           f"got {list(vals.shape)}")
    if idx.shape[1]:
        for d in range(sd):
            lo, hi = int(idx[d].min()), int(idx[d].max())
            if lo < 0:
                raise RuntimeError(f"found negative index {lo} for dim {d}")
            if hi >= shape[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                                   f"{shape[d]} but found index {hi}")
    if requires_grad:
        vals = vals.detach().requires_grad_() if not vals.requires_grad else vals
    coalesced = bool(is_coalesced) if is_coalesced is not None else idx.shape[1] <= 1
    return SparseCOOTensor(idx, vals, shape, coalesced)


def to_sparse(x: Tensor, sparse_dim: int | None = None) -> SparseCOOTensor:
    """The sparse COO tensor of ``x``'s nonzero entries (its values differentiable in ``x``)."""
    x = as_tensor(x)
    sd = x.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 < sd <= x.ndim:
        raise RuntimeError(f"sparse_dim must be in [1, {x.ndim}], got {sparse_dim}")
    arr = np.asarray(x.numpy())
    mask = arr.reshape(arr.shape[:sd] + (-1,)).any(-1) if sd < x.ndim else arr != 0
    idx = np.stack(np.nonzero(mask)).astype(np.int64).reshape(sd, -1)
    vals = x[tuple(leaf(i) for i in idx)] if idx.shape[1] else x.reshape(-1)[:0].reshape(
        (0,) + x.shape[sd:])
    return SparseCOOTensor(idx, vals, x.shape, True)


def spmm(mat1: Any, mat2: Any) -> Tensor:
    """sparse @ dense for a 2-D sparse ``mat1`` and dense ``mat2`` (``torch.sparse.mm``)."""
    from tinyopt.engine.ops.sparse import coo_mm
    if isinstance(mat2, SparseCOOTensor):
        raise NotImplementedError("tinyopt's sparse.mm multiplies a sparse matrix by a dense "
                                  "one; call .to_dense() on the second operand")
    if not isinstance(mat1, SparseCOOTensor):
        raise TypeError("spmm: the first operand must be a sparse COO tensor")
    b = as_tensor(mat2)
    if mat1.dim() != 2 or mat1.sparse_dim() != 2:
        raise RuntimeError(f"sparse.mm: expected a 2-D sparse matrix, got size "
                           f"{tuple(mat1.shape)} with {mat1.sparse_dim()} sparse dims")
    if b.ndim != 2:
        raise RuntimeError(f"sparse.mm: expected a 2-D dense matrix, got {b.ndim}-D")
    if mat1.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x"
                           f"{mat1.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    vals = mat1._vals
    if vals.dtype != b.dtype:
        raise RuntimeError(f"expected mat1 and mat2 to have the same dtype, but got: "
                           f"{torch_name(vals.dtype)} != {torch_name(b.dtype)}")
    return coo_mm(vals, mat1._indices, b, mat1.shape[0])
