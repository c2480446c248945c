"""``Dropout``: zero each element with probability p during training, as ``torch.nn.Dropout``;
``Dropout1d``/``Dropout2d``/``Dropout3d`` zero whole channels.

In training mode the kept elements are scaled by 1/(1-p) so the expectation is unchanged
(Srivastava et al. 2014, https://jmlr.org/papers/v15/srivastava14a.html); in eval mode the layer
is the identity.  Masks come from tinyopt's global generator, so ``tinyopt.manual_seed`` makes them
reproducible.
"""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


class _DropoutNd(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero each element with probability p (scale the rest by 1 / (1 - p)) in training."""


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) or (C, L) inputs with probability p in training."""

    def forward(self, input) -> Tensor:
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) inputs with probability p in training (Tompson et al.
    2015, https://arxiv.org/abs/1411.4280)."""

    def forward(self, input) -> Tensor:
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) inputs with probability p in training."""

    def forward(self, input) -> Tensor:
        return F.dropout3d(input, self.p, self.training, self.inplace)
