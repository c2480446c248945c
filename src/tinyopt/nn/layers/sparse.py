"""``Embedding``: a lookup table of ``num_embeddings`` vectors, as ``torch.nn.Embedding``.

``forward(idx)`` returns ``weight[idx]`` (shape ``idx.shape + (embedding_dim,)``); the gradient
scatters back into the looked-up rows.  ``weight`` starts as N(0, 1); the ``padding_idx`` row starts
at zero and gets no gradient.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.nn import functional as F
from tinyopt.nn import init
from tinyopt.nn.layers._factory import param_dtype
from tinyopt.nn.module import Module


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        dt = param_dtype(device, dtype)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if padding_idx > 0:
                if padding_idx >= num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
            elif padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dt),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            w = np.array(_weight._data if isinstance(_weight, Parameter) else _weight,
                         dtype=dt if dtype is not None else None)
            if w.dtype.kind != "f":
                w = w.astype(dt)
            if w.shape != (num_embeddings, embedding_dim):
                raise ValueError(f"Shape of weight {w.shape} does not match num_embeddings and "
                                 f"embedding_dim ({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(w, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    def forward(self, input) -> Tensor:
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
        w = np.asarray(embeddings._data if isinstance(embeddings, Parameter) else embeddings)
        if w.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = w.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=w, _freeze=freeze)
