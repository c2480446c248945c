"""ASGD: averaged stochastic gradient descent (``torch.optim.ASGD``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class ASGD(FusedOptimizer):
    r"""Averaged SGD (Polyak & Juditsky, https://doi.org/10.1137/0330046) as ``torch.optim.ASGD``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda\theta_{t-1} \\
        \theta_t &= \theta_{t-1}(1 - \lambda_d \eta_{t-1}) - \eta_{t-1} g_t, \qquad
        \bar\theta_t = \bar\theta_{t-1} + \mu_{t-1}(\theta_t - \bar\theta_{t-1})
        \;(= \theta_t \text{ while } \mu = 1) \\
        \eta_t &= \frac{\gamma}{(1 + \lambda_d \gamma t)^\alpha}, \qquad
        \mu_t = \frac{1}{\max(1, t - t_0)}

    State: ``step``, ``eta`` (starts at lr) and ``mu`` (float32 scalars, as in PyTorch), ``ax``
    (the average :math:`\bar\theta`).  ``foreach`` is accepted and ignored;
    ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = ASGD(model.parameters(), lr=1e-2, t0=1e3)
    """

    kernel = kernels.asgd
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    scalar_state = ("step", "eta", "mu")
    host64 = ("lr", "lambd", "alpha", "t0")

    def __init__(self, params: Iterable, lr: float = 1e-2, lambd: float = 1e-4,
                 alpha: float = 0.75, t0: float = 1e6, weight_decay: float = 0,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False, *,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("ax",)

    def state_init(self, group: dict[str, Any]) -> dict[str, float]:
        return {"eta": float(group["lr"]), "mu": 1.0}

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        return dict(lr=float(group["lr"]), lambd=float(group["lambd"]),
                    alpha=float(group["alpha"]), t0=float(group["t0"]),
                    weight_decay=group["weight_decay"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return bool(group["maximize"]), bool(group["weight_decay"] != 0)
