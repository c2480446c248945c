"""``CosineSimilarity`` and ``PairwiseDistance``, as ``torch.nn`` (see ``nn.functional``)."""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


class CosineSimilarity(Module):
    """<x1, x2> / (max(||x1||, eps) max(||x2||, eps)) along ``dim``."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1, x2) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """||x1 - x2 + eps||_p over the last dimension."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1, x2) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
