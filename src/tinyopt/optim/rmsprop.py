"""RMSprop, optionally centered and with momentum (``torch.optim.RMSprop``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class RMSprop(FusedOptimizer):
    r"""RMSprop (Hinton, lecture 6e; centered: Graves, https://arxiv.org/abs/1308.0850) as
    ``torch.optim.RMSprop``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda\theta_{t-1} \\
        v_t &= \alpha v_{t-1} + (1 - \alpha) g_t^2, \qquad
        \bar g_t = \alpha \bar g_{t-1} + (1 - \alpha) g_t \text{ (centered)} \\
        d_t &= \sqrt{v_t - \bar g_t^2} + \epsilon \text{ (centered) or } \sqrt{v_t} + \epsilon \\
        b_t &= \mu b_{t-1} + g_t / d_t,\quad \theta_t = \theta_{t-1} - \gamma b_t \text{ if } \mu > 0
        \text{, else } \theta_t = \theta_{t-1} - \gamma g_t / d_t

    State: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered).
    ``foreach`` is ignored; ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = RMSprop(model.parameters(), lr=1e-2, alpha=0.99, centered=True)
    """

    kernel = kernels.rmsprop
    _legacy_defaults = {**FusedOptimizer._legacy_defaults, "momentum": 0, "centered": False}

    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, *, stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        if not 0.0 <= group["momentum"]:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if not 0.0 <= group["alpha"]:
            raise ValueError(f"Invalid alpha value: {group['alpha']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("square_avg", "momentum_buffer" if group["momentum"] > 0 else None,
                "grad_avg" if group["centered"] else None)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        alpha = float(group["alpha"])
        w = r(1.0 - alpha)
        return dict(alpha=alpha, w=w, w_c=1 - w, eps=group["eps"],
                    weight_decay=group["weight_decay"], momentum=group["momentum"],
                    neg_lr=-group["lr"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["centered"]), bool(group["momentum"] > 0), bool(group["maximize"]),
                bool(group["weight_decay"] != 0), bool(host["w"] < 0.5))
