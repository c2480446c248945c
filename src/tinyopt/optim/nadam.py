"""NAdam: Adam with Nesterov momentum (``torch.optim.NAdam``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer


class NAdam(FusedOptimizer):
    r"""NAdam (Dozat, https://openreview.net/forum?id=OM0jvwB8jIp57ZJjtNEZ) as ``torch.optim.NAdam``;
    NAdamW with ``decoupled_weight_decay=True``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize});\quad
               \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \text{ if decoupled, else }
               g_t \leftarrow g_t + \lambda\theta_{t-1} \\
        \mu_t &= \beta_1 \left(1 - \tfrac12\, 0.96^{t\psi}\right), \qquad
        m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \theta_t &= \theta_{t-1} - \gamma \left(\frac{(1 - \mu_t)\, g_t}{1 - \prod_{i \le t}\mu_i}
                    + \frac{\mu_{t+1} m_t}{1 - \prod_{i \le t+1}\mu_i}\right)
                    \Big/ \left(\sqrt{v_t / (1 - \beta_2^t)} + \epsilon\right)

    State: ``step``, ``mu_product`` (the running product of the :math:`\mu_i`, float32 as in
    PyTorch), ``exp_avg`` (m), ``exp_avg_sq`` (v).  ``foreach`` is accepted and ignored;
    ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
    """

    kernel = kernels.nadam
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    scalar_state = ("step", "mu_product")
    host64 = ("lr", "beta1", "beta2", "psi")

    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])
        if not 0.0 <= group["momentum_decay"]:
            raise ValueError(f"Invalid momentum_decay value: {group['momentum_decay']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq")

    def state_init(self, group: dict[str, Any]) -> dict[str, float]:
        return {"mu_product": 1.0}

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        return dict(lr=lr, beta1=b1, beta2=b2, psi=float(group["momentum_decay"]), w=w,
                    w_c=1 - w, b2=b2, one_minus_b2=1.0 - b2, eps=group["eps"], weight_decay=wd,
                    decay=1.0 - lr * wd)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["decoupled_weight_decay"]), bool(host["w"] < 0.5))
