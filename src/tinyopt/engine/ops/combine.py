"""Tensors assembled from others: ``block_diag`` (matrices on a diagonal), ``combinations``
(r-subsets of a vector's elements) and ``cartesian_prod`` (all tuples of elements of several
vectors), built from differentiable ops."""

from __future__ import annotations

import itertools

import numpy as np

from tinyopt.engine.dtypes import promote
from tinyopt.engine.ops.movement import cat, meshgrid, stack
from tinyopt.engine.ops.resample import pad
from tinyopt.engine.tensor import Tensor, as_tensor, leaf

__all__ = ["block_diag", "cartesian_prod", "combinations"]


def block_diag(*tensors) -> Tensor:
    """The block-diagonal matrix of the given matrices (0-d and 1-d ones count as one row), as
    ``torch.block_diag``."""
    mats = []
    for i, t in enumerate(tensors):
        t = as_tensor(t)
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. "
                               f"Input {i} has {t.ndim} dimensions")
        mats.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not mats:
        return as_tensor(np.zeros((1, 0), np.float32))
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = promote(dtype, m.dtype)
    width = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = width - left - m.shape[1]
        rows.append(pad(m.to(dtype), (left, right)) if m.shape[0] else
                    as_tensor(np.zeros((0, width), dtype)))
        left += m.shape[1]
    return cat(rows, 0)


def combinations(input, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The ``r``-element combinations of a 1-D tensor's elements, one per row, in
    lexicographic order of positions (``itertools.combinations``, or
    ``combinations_with_replacement``)."""
    x = as_tensor(input)
    if x.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(x.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return x[:0]
    pick = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    idx = np.array(list(pick(range(x.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    return stack([x[leaf(np.ascontiguousarray(idx[:, j]))] for j in range(r)], 1)


def cartesian_prod(*tensors) -> Tensor:
    """The rows (a_i, b_j, ...) of every combination of elements of the 1-D ``tensors``, the
    last varying fastest (``itertools.product``); one tensor comes back as it is."""
    ts = [as_tensor(t) for t in tensors]
    for t in ts:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(ts) == 1:
        return ts[0]
    return stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)
