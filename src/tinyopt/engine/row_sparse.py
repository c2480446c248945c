"""Row-sparse gradients: the gradient of ``nn.Embedding(..., sparse=True)``'s weight.

PyTorch gives such a weight a sparse COO gradient: the rows looked up (``indices``) and their
gradients (``values``, one row per lookup, duplicates summed by ``coalesce``).  tinyopt keeps the
gradient in its dense (V, D) layout -- the plan writes it as for any parameter, with zeros in the
rows not looked up, so that the gradient path stays copy-free and accumulation works as usual --
and records beside it *which rows were looked up* since the gradient was last reset: a (V,)
uint8 mask per parameter, set by the embedding's backward kernel.  ``SparseAdam`` updates only
those rows, as torch's updates only the rows of the sparse gradient's indices (a row looked up
whose gradient happens to be 0 is still updated, as in torch).

The record is reset whenever the gradient is: ``p.grad = ...`` (``zero_grad()``) and
``zero_grad(set_to_none=False)`` call :func:`forget_rows`.

    >>> emb = nn.Embedding(10, 3, sparse=True)
    >>> emb(to.tensor([[1, 4, 4]])).sum().backward()
    >>> rows, values = sparse_grad(emb.weight)   # rows [1, 4]; values (2, 3), row 4 twice summed
"""

from __future__ import annotations

import weakref

import numpy as np

_MASKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def row_mask(p) -> np.ndarray:
    """The (V,) uint8 mask of the rows of ``p`` looked up since its gradient was reset (made, all
    zero, on first use: from then on ``p``'s gradient counts as row-sparse)."""
    m = _MASKS.get(p)
    if m is None or m.shape[0] != p.shape[0]:
        m = np.zeros(p.shape[0], np.uint8)
        _MASKS[p] = m
    return m


def row_sparse_params() -> list:
    """The parameters whose gradients are row-sparse (usually none: this is cheap to ask)."""
    return list(_MASKS) if _MASKS.data else []  # (.data: no Python-level __len__)


def forget_rows(p) -> None:
    """The gradient of ``p`` was reset: no row counts as looked up (the mask is cleared in place,
    so that cached plans holding it keep writing the live one)."""
    if not _MASKS.data:  # no row-sparse parameter (zero_grad resets every gradient: no lookup)
        return
    m = _MASKS.get(p)
    if m is not None:
        m[:] = 0


def is_row_sparse(p) -> bool:
    """Whether ``p``'s gradient comes from a sparse embedding (torch: ``p.grad.is_sparse``)."""
    return p in _MASKS


def grad_rows(p) -> np.ndarray | None:
    """The rows of ``p`` looked up since its gradient was reset, sorted (int64), or None when
    ``p``'s gradient is not row-sparse (torch: ``p.grad.coalesce().indices()[0]``)."""
    m = _MASKS.get(p)
    return None if m is None else np.flatnonzero(m)


def sparse_grad(p) -> tuple[np.ndarray, np.ndarray] | None:
    """``p``'s gradient in row-sparse form, ``(rows, values)`` with ``values = p.grad[rows]``:
    torch's ``g = p.grad.coalesce(); (g.indices()[0], g.values())``.  None when ``p`` has no
    gradient; ValueError when its gradient is dense."""
    if p._grad is None:
        return None
    rows = grad_rows(p)
    if rows is None:
        raise ValueError("sparse_grad: the gradient is dense (not from an Embedding or "
                         "EmbeddingBag with sparse=True)")
    return rows, p._grad.reshape(p.shape[0], -1)[rows].reshape((len(rows),) + p.shape[1:])
