"""Adamax: Adam with the infinity norm (``torch.optim.Adamax``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer


class Adamax(FusedOptimizer):
    r"""Adamax (Kingma & Ba, https://arxiv.org/abs/1412.6980, section 7) as ``torch.optim.Adamax``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda\theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad
        u_t = \max(\beta_2 u_{t-1}, |g_t| + \epsilon) \\
        \theta_t &= \theta_{t-1} - \frac{\gamma}{1 - \beta_1^t} \frac{m_t}{u_t}

    State: ``step``, ``exp_avg`` (m), ``exp_inf`` (u).  ``foreach`` is accepted and ignored;
    ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = Adamax(model.parameters(), lr=2e-3)
    """

    kernel = kernels.adamax
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    host64 = ("lr", "beta1")

    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_inf")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        b1, b2 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        return dict(lr=float(group["lr"]), beta1=b1, w=w, w_c=1 - w, b2=b2, eps=group["eps"],
                    weight_decay=group["weight_decay"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(host["w"] < 0.5))
