"""``Embedding`` and ``EmbeddingBag``: lookup tables of ``num_embeddings`` vectors, as
``torch.nn``.

``Embedding.forward(idx)`` returns ``weight[idx]`` (shape ``idx.shape + (embedding_dim,)``); the
gradient scatters back into the looked-up rows.  ``EmbeddingBag`` returns the sum, mean or max of
each bag of rows without materializing them.  ``weight`` starts as N(0, 1); the ``padding_idx`` row
starts at zero, gets no gradient, and is left out of bags.  ``max_norm`` rescales, in place, each
row looked up whose ``norm_type``-norm exceeds it.  ``Embedding(sparse=True)`` gives the weight a
row-sparse gradient (its dense layout plus the rows looked up, ``engine/row_sparse.py``; see
``docs/sequence.md``) for ``optim.SparseAdam``, and so does ``EmbeddingBag(sparse=True)`` (the
rows of its bags; mode 'max' raises torch's ValueError, as torch).
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.engine.ops.embedding_bag import embedding_bag
from tinyopt.nn import functional as F
from tinyopt.nn import init, kernels_ahead
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module


class Embedding(Module):
    """A lookup table: row ``i`` of ``weight`` (num_embeddings, embedding_dim) is the vector of
    index ``i``.  ``weight`` starts as N(0, 1) samples; the row ``padding_idx`` (if given)
    starts at zero and gets no gradient; ``max_norm`` renormalizes the looked-up rows in place,
    as PyTorch does.  Input: integer indices of any shape; output: that shape +
    (embedding_dim,)."""
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = _padding_idx(padding_idx, num_embeddings, "Padding_idx")
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dt),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            w = _weight_array(_weight, dt, dtype)
            if w.shape != (num_embeddings, embedding_dim):
                raise ValueError(f"Shape of weight {w.shape} does not match num_embeddings and "
                                 f"embedding_dim ({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(w, requires_grad=not _freeze)
        if max_norm is None and not sparse:
            kernels_ahead.at_build(self, kernels_ahead.embedding, self.weight.dtype,
                                   -1 if self.padding_idx is None else self.padding_idx,
                                   bool(scale_grad_by_freq))

    def reset_parameters(self) -> None:
        """Draw ``weight`` again from N(0, 1), with the ``padding_idx`` row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.value[self.padding_idx] = 0

    def forward(self, input) -> Tensor:
        kernels_ahead.called(self)
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False) -> Embedding:
        """An Embedding whose weight is a copy of the 2-D array ``embeddings`` (frozen unless
        ``freeze=False``)."""
        w = np.asarray(embeddings.value if isinstance(embeddings, Parameter) else embeddings)
        if w.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = w.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=w, _freeze=freeze)


def _padding_idx(padding_idx: int | None, n: int, word: str = "padding_idx") -> int | None:
    """``padding_idx`` checked against ``n`` rows, negative values counted from the end."""
    if padding_idx is not None:
        if padding_idx >= n or padding_idx < -n:
            raise AssertionError(f"{word} must be within num_embeddings")
        if padding_idx < 0:
            padding_idx += n
    return padding_idx


def _weight_array(weight, dt: np.dtype, dtype) -> np.ndarray:
    """A copy of a given ``_weight`` (array or Parameter), float (``dt`` unless it is float and
    no ``dtype`` was asked for)."""
    w = np.array(weight.value if isinstance(weight, Parameter) else weight,
                 dtype=dt if dtype is not None else None)
    return w if w.dtype.kind == "f" else w.astype(dt)


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings, as ``torch.nn.EmbeddingBag``:
    ``forward(input, offsets=None, per_sample_weights=None)`` with ``input`` (B, N) (B bags of N
    indices) or ``input`` (K,) and ``offsets`` (B,) (each bag's start; (B + 1,) with
    ``include_last_offset``) -> (B, embedding_dim).  ``per_sample_weights`` weight each index in
    ``mode='sum'``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.padding_idx = _padding_idx(padding_idx, num_embeddings)
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dt))
            self.reset_parameters()
        else:
            w = _weight_array(_weight, dt, dtype)
            if w.shape != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            self.weight = Parameter(w)
        self.mode = mode
        self.sparse = sparse
        self.include_last_offset = include_last_offset

    def reset_parameters(self) -> None:
        """Draw ``weight`` again from N(0, 1), with the ``padding_idx`` row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.value[self.padding_idx] = 0

    def forward(self, input, offsets=None, per_sample_weights=None) -> Tensor:
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                             self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                             self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx!r}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag whose weight is a copy of the 2-D array ``embeddings`` (frozen unless
        ``freeze=False``)."""
        w = np.asarray(embeddings.value if isinstance(embeddings, Parameter) else embeddings)
        if w.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = w.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, _weight=w,
                  include_last_offset=include_last_offset, padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag
