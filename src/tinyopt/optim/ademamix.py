"""AdEMAMix: Adam with a mixture of a fast and a slow momentum."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class AdEMAMix(FusedOptimizer):
    r"""AdEMAMix (Pagliardini et al. 2024, "The AdEMAMix Optimizer: Better, Faster, Older",
    https://arxiv.org/abs/2409.03137) as ``pytorch_optimizer.AdEMAMix``, with PyTorch's
    per-parameter step.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize});\quad
               \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \text{ if weight\_decouple,
               else } g_t \leftarrow g_t + \lambda\theta_{t-1} \\
        m^{(1)}_t &= \beta_1 m^{(1)}_{t-1} + (1 - \beta_1) g_t, \quad
        v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2, \quad
        m^{(2)}_t = \beta_3(t) m^{(2)}_{t-1} + (1 - \beta_3(t)) g_t \\
        \theta_t &= \theta_{t-1} - \gamma\, \frac{m^{(1)}_t / (1 - \beta_1^t) + \alpha(t)\,
                    m^{(2)}_t}{\sqrt{v_t / (1 - \beta_2^t)} + \epsilon}

    ``betas = (beta1, beta2, beta3)``.  The schedulers, over :math:`T` = ``t_alpha_beta3``
    steps (None: constant :math:`\alpha`, :math:`\beta_3`): :math:`\alpha(t) = \min(t\alpha/T,
    \alpha)` and :math:`\beta_3(t) = \min\!\big(\exp\frac{\ln\beta_1 \ln\beta_3}{(1 - t/T)
    \ln\beta_3 + (t/T)\ln\beta_1}, \beta_3\big)` (the slow momentum's half-life grows
    linearly from :math:`\beta_1`'s).  ``fixed_decay``: :math:`1 - \lambda` instead of
    :math:`1 - \gamma\lambda`.  State: ``step``, ``exp_avg``, ``exp_avg_sq``, ``exp_avg_slow``.
    Elementwise: ZeRO-1 may cut a parameter.

    Example::

        opt = AdEMAMix(model.parameters(), lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0,
                       t_alpha_beta3=100_000)
    """

    kernel = kernels.ademamix
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter
    host64 = ("beta1", "beta2", "beta3", "alpha", "T")

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
                 weight_decay: float = 0.0, weight_decouple: bool = False,
                 fixed_decay: bool = False, alpha: float = 5.0,
                 t_alpha_beta3: float | None = None, eps: float = 1e-8, maximize: bool = False,
                 *, stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                        weight_decouple=weight_decouple, fixed_decay=fixed_decay, alpha=alpha,
                        t_alpha_beta3=t_alpha_beta3, eps=eps, maximize=maximize)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        betas = group["betas"]
        if len(betas) != 3:
            raise ValueError(f"betas must be a triple (beta1, beta2, beta3), got {betas!r}")
        for k, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {b}")
        for name in ("alpha", "weight_decay", "eps"):
            if not 0.0 <= group[name]:
                raise ValueError(f"Invalid {name} value: {group[name]}")
        T = group["t_alpha_beta3"]
        if T is not None and not 0.0 < T:
            raise ValueError(f"Invalid t_alpha_beta3 value: {T}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq", "exp_avg_slow")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2, b3 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        T = group["t_alpha_beta3"]
        return dict(beta1=b1, beta2=b2, beta3=b3, alpha=float(group["alpha"]),
                    T=0.0 if T is None else float(T), w=w, w_c=1 - w, b2=b2,
                    one_minus_b2=1.0 - b2, eps=group["eps"], weight_decay=wd,
                    decay=1.0 - wd * (1.0 if group["fixed_decay"] else lr), neg_lr=-lr, one=1.0)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["weight_decouple"]), group["t_alpha_beta3"] is not None,
                bool(host["w"] < 0.5))
