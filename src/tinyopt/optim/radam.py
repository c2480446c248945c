"""RAdam: Adam with a rectified variance (``torch.optim.RAdam``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer


class RAdam(FusedOptimizer):
    r"""RAdam (Liu et al., https://arxiv.org/abs/1908.03265) as ``torch.optim.RAdam``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize});\quad
               \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \text{ if decoupled, else }
               g_t \leftarrow g_t + \lambda\theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2,
        \qquad \hat m_t = m_t / (1 - \beta_1^t) \\
        \rho_\infty &= \frac{2}{1 - \beta_2} - 1, \qquad
        \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1 - \beta_2^t} \\
        \theta_t &= \theta_{t-1} - \gamma \hat m_t\, r_t \frac{\sqrt{1 - \beta_2^t}}{\sqrt{v_t} + \epsilon}
        \text{ if } \rho_t > 5, \quad
        r_t = \sqrt{\frac{(\rho_t - 4)(\rho_t - 2)\rho_\infty}{(\rho_\infty - 4)(\rho_\infty - 2)\rho_t}};
        \qquad \theta_t = \theta_{t-1} - \gamma \hat m_t \text{ otherwise}

    State: ``step``, ``exp_avg`` (m), ``exp_avg_sq`` (v).  ``foreach`` is accepted and ignored;
    ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = RAdam(model.parameters(), lr=1e-3)
    """

    kernel = kernels.radam
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    host64 = ("beta1", "beta2")

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        return dict(beta1=b1, beta2=b2, lr=lr, w=w, w_c=1 - w, b2=b2, one_minus_b2=1.0 - b2,
                    eps=group["eps"], weight_decay=wd, decay=1.0 - lr * wd, one=1.0)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["decoupled_weight_decay"]), bool(host["w"] < 0.5))
