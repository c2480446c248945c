"""LAMB: Adam with a layer-wise trust ratio (``pytorch_optimizer.Lamb``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim_reduce as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer


class Lamb(FusedOptimizer):
    r"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in
    76 minutes", https://arxiv.org/abs/1904.00962; version 3: moments without bias correction)
    as ``pytorch_optimizer.Lamb`` (whose step size has the first moment's, per parameter here).

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}), \qquad
        m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \theta' &= \theta_{t-1}(1 - \gamma\lambda) \text{ if weight\_decouple else } \theta_{t-1},
        \qquad u_t = \frac{m_t}{\sqrt{v_t} + \epsilon} \;(+ \lambda\theta' \text{ if not
        weight\_decouple}) \\
        \theta_t &= \theta' - \frac{\gamma}{1 - \beta_1^t}\,
        \frac{\min(\lVert\theta'\rVert, 10)}{\lVert u_t\rVert + \epsilon}\, u_t

    per parameter (the trust ratio is 1 where either norm is 0, or with ``adam=True``);
    ``grad_averaging=False`` takes :math:`g_t` for :math:`(1 - \beta_1) g_t`; ``fixed_decay``:
    :math:`1 - \lambda`.  One kernel call per group, two passes: the first updates the moments
    and sums both norms of every parameter (``kernels/optim_reduce.py``), the second steps.
    State: ``step``, ``exp_avg``, ``exp_avg_sq``, and the last ``weight_norm``, ``adam_norm``,
    ``trust_ratio``.  Not elementwise (ZeRO-1 cannot cut a parameter).

    Example::

        opt = Lamb(model.parameters(), lr=1e-3, weight_decay=1e-2)
    """

    kernel = kernels.lamb
    scalar_state = ("step", "weight_norm", "adam_norm", "trust_ratio")
    host64 = ("lr", "beta1_wide", "clamp")

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0,
                 weight_decouple: bool = True, fixed_decay: bool = False,
                 grad_averaging: bool = True, adam: bool = False, eps: float = 1e-6,
                 maximize: bool = False, clamp: float = 10.0, *,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                        weight_decouple=weight_decouple, fixed_decay=fixed_decay,
                        grad_averaging=grad_averaging, adam=adam, eps=eps, maximize=maximize,
                        clamp=clamp)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])
        if not 0.0 < group["clamp"]:
            raise ValueError(f"Invalid clamp value: {group['clamp']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        return dict(beta1=b1, beta3=1.0 - b1 if group["grad_averaging"] else 1.0, b2=b2,
                    one_minus_b2=1.0 - b2, eps=group["eps"], weight_decay=wd,
                    decay=1.0 - wd * (1.0 if group["fixed_decay"] else lr), lr=lr,
                    beta1_wide=b1, clamp=float(group["clamp"]))

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["weight_decouple"]), bool(group["adam"]))

    def _call(self, kernel: Any, group: dict[str, Any], fb, args: tuple,
              host: dict[str, Any]) -> None:
        super()._call(kernel, group, fb, args, host)
        on = fb.flags != 0  # the norms and trust ratio of this step, as state
        fb.scalars[on, 1:4] = fb.coef[on, 5:8]
