"""AdamW: Adam with decoupled weight decay (``torch.optim.AdamW``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.optim.adam import Adam


class AdamW(Adam):
    r"""AdamW (Loshchilov & Hutter, https://arxiv.org/abs/1711.05101) as ``torch.optim.AdamW``.

    Adam whose weight decay does not enter the moments: before the moment update,
    :math:`\theta \leftarrow \theta (1 - \gamma\lambda)`.  Default ``weight_decay=1e-2``.
    See :class:`~tinyopt.optim.Adam` for the rest of the update, the state and tinyopt's
    ``cautious=True`` (C-AdamW, Liang et al. 2024, https://arxiv.org/abs/2411.16085).

    Example::

        opt = AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 cautious: bool = False, stochastic_rounding: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True, cautious=cautious,
                         stochastic_rounding=stochastic_rounding)

    def _set_state(self, state, groups: list[dict[str, Any]]) -> None:
        for group in groups:  # as torch.optim.AdamW.__setstate__
            group["decoupled_weight_decay"] = True
        super()._set_state(state, groups)
