"""Adam, with optional AMSGrad and decoupled weight decay (``torch.optim.Adam``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.kernels import optim_reduce
from tinyopt.optim.cautious import cautious_call
from tinyopt.optim.fused import FusedOptimizer


def check_adam_hyperparameters(lr: float, eps: float, betas: tuple[float, float],
                               weight_decay: float = 0.0, *, positive: bool = False) -> None:
    """PyTorch's checks (and messages) of the Adam family's ``lr``, ``eps``, ``betas`` and
    ``weight_decay`` (Adam, AdamW, Adamax, NAdam, RAdam, SparseAdam); ``positive``: ``lr`` and
    ``eps`` must be > 0 (SparseAdam), not only >= 0."""
    if not (0.0 < lr if positive else 0.0 <= lr):
        raise ValueError(f"Invalid learning rate: {lr}")
    if not (0.0 < eps if positive else 0.0 <= eps):
        raise ValueError(f"Invalid epsilon value: {eps}")
    if len(betas) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class Adam(FusedOptimizer):
    r"""Adam (Kingma & Ba, https://arxiv.org/abs/1412.6980) as ``torch.optim.Adam``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize});\quad
               \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \text{ if decoupled, else }
               g_t \leftarrow g_t + \lambda\theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \hat v_t &= \max(\hat v_{t-1}, v_t) \text{ if amsgrad else } v_t \\
        \theta_t &= \theta_{t-1} - \frac{\gamma}{1 - \beta_1^t}\,
                    \frac{m_t}{\sqrt{\hat v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    State: ``step`` (0-d float32), ``exp_avg``, ``exp_avg_sq``, and ``max_exp_avg_sq`` with
    amsgrad.  ``foreach``/``fused`` are accepted and ignored; ``capturable``/``differentiable``
    set to True raise.  tinyopt's ``cautious=True`` (C-Adam; Liang et al. 2024,
    https://arxiv.org/abs/2411.16085) applies :math:`m_t` only where it agrees in sign with
    :math:`g_t`, rescaled by :math:`n / (\#\text{agreeing} + 1)` (``tinyopt.optim.cautious``).

    Example::

        opt = Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    """

    kernel = kernels.adam
    cautious_kernel = optim_reduce.cautious_adam
    _sparse_error = "Adam does not support sparse gradients, please consider SparseAdam instead"
    host64 = ("lr", "beta1", "beta2")

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False, cautious: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        if cautious:  # (only then in the defaults: the others stay torch's)
            defaults["cautious"] = True
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq" if group["amsgrad"] else None)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        return dict(lr=lr, beta1=b1, beta2=b2, w=w, w_c=1 - w, b2=b2, one_minus_b2=1.0 - b2,
                    eps=group["eps"], weight_decay=wd, decay=1.0 - lr * wd)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["amsgrad"]), bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["decoupled_weight_decay"]), bool(host["w"] < 0.5))

    def _call(self, kernel: Any, group: dict[str, Any], fb, args: tuple,
              host: dict[str, Any]) -> None:
        kernel, host = cautious_call(self, kernel, group, host)
        super()._call(kernel, group, fb, args, host)
