"""Adadelta (``torch.optim.Adadelta``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class Adadelta(FusedOptimizer):
    r"""Adadelta (Zeiler 2012, https://arxiv.org/abs/1212.5701) as ``torch.optim.Adadelta``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda\theta_{t-1} \\
        v_t &= \rho v_{t-1} + (1 - \rho) g_t^2, \qquad
        \Delta_t = \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}}\, g_t \\
        u_t &= \rho u_{t-1} + (1 - \rho) \Delta_t^2, \qquad \theta_t = \theta_{t-1} - \gamma \Delta_t

    State: ``step``, ``square_avg`` (v), ``acc_delta`` (u).  ``foreach`` is accepted and ignored;
    ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = Adadelta(model.parameters(), lr=1.0, rho=0.9)   # pytorch/examples' MNIST
    """

    kernel = kernels.adadelta
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter

    def __init__(self, params: Iterable, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {group['rho']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("square_avg", "acc_delta")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        rho = float(group["rho"])
        return dict(rho=rho, one_minus_rho=1.0 - rho, eps=group["eps"],
                    weight_decay=group["weight_decay"], neg_lr=-group["lr"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return bool(group["maximize"]), bool(group["weight_decay"] != 0)
