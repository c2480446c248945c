"""The ops of sparse COO tensors (``tinyopt.engine.sparse``): ``coo_mm`` (sparse x dense, with
the gradients of the values and of the dense operand) and ``coo_to_dense`` (duplicates add up;
the gradient gathers).  The indices are a concrete int64 source, checked when the sparse tensor
was made."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous
from tinyopt.engine.tensor import Tensor
from tinyopt.kernels import sparse as K


def _rows_cols(idx: np.ndarray, transpose: bool) -> tuple[np.ndarray, np.ndarray]:
    """The entries' (rows, columns), of the matrix or of its transpose."""
    rows, cols = (idx[1], idx[0]) if transpose else (idx[0], idx[1])
    return c_contiguous(rows), c_contiguous(cols)


def _mm_forward(t):
    transpose = t.attrs[0]
    return lambda out, vals, x, idx: K.coo_mm(*_rows_cols(idx, transpose), c_contiguous(vals),
                                              c_contiguous(x), out)


def _mm_backward(t, g):
    vals, x, idx = t.srcs
    transpose = t.attrs[0]
    gv = node("coo_mm_grad_values", (g, x, idx), vals.shape, g.dtype, t.attrs) \
        if vals.requires_grad else None
    gx = node("coo_mm", (vals, g, idx), x.shape, g.dtype, (not transpose,)) \
        if x.requires_grad else None
    return gv, gx, None


def _grad_values_forward(t):
    transpose = t.attrs[0]
    return lambda out, g, x, idx: K.coo_mm_grad_values(*_rows_cols(idx, transpose),
                                                       c_contiguous(g), c_contiguous(x),
                                                       out)


defop("coo_mm", forward=_mm_forward, backward=_mm_backward)
defop("coo_mm_grad_values", forward=_grad_values_forward)


def coo_mm(values: Tensor, indices: Tensor, dense: Tensor, rows: int,
           transpose: bool = False) -> Tensor:
    """A @ dense for the sparse (rows, dense.shape[0]) matrix A of ``indices`` (2, nnz) and
    ``values`` (nnz,); with ``transpose``, A's transpose (indices read as (col, row))."""
    return node("coo_mm", (values, dense, indices), (rows, dense.shape[1]), dense.dtype,
                (bool(transpose),))


def _to_dense_forward(t):
    def fwd(out, vals, idx):
        out[...] = 0
        np.add.at(out, tuple(idx), vals)
    return fwd


defop("coo_to_dense", forward=_to_dense_forward, backward=lambda t, g: (
    node("coo_gather", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))
defop("coo_gather", forward=lambda t: (lambda out, g, idx: np.copyto(out, g[tuple(idx)])))


def coo_to_dense(values: Tensor, indices: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The dense tensor of ``shape`` holding the entries (duplicates added)."""
    return node("coo_to_dense", (values, indices), shape, values.dtype)
