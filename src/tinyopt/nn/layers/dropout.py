"""``Dropout``: zero each element with probability p during training, as ``torch.nn.Dropout``.

In training mode the kept elements are scaled by 1/(1-p) so the expectation is unchanged
(Srivastava et al. 2014, https://jmlr.org/papers/v15/srivastava14a.html); in eval mode the layer
is the identity.  Masks come from tinyopt's global generator, so ``tinyopt.manual_seed`` makes them
reproducible.
"""

from __future__ import annotations

from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.module import Module


class Dropout(Module):
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
