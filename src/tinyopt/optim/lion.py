"""Lion: sign of an interpolated momentum (the ``lion-pytorch`` package's optimizer)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.kernels import optim_reduce
from tinyopt.optim.cautious import cautious_call
from tinyopt.optim.fused import FusedOptimizer


class Lion(FusedOptimizer):
    r"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
    https://arxiv.org/abs/2302.06675) as ``lion_pytorch.Lion``; with ``cautious=True``, C-Lion
    (Liang et al. 2024, https://arxiv.org/abs/2411.16085).

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}), \qquad
        \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \\
        u_t &= \mathrm{sign}(\beta_1 m_{t-1} + (1 - \beta_1) g_t) \qquad
        (\text{cautious: } u_t \leftarrow u_t \odot \mathbb 1[u_t g_t > 0]\,
        \tfrac{n}{\sum \mathbb 1[u_t g_t > 0] + 1}) \\
        \theta_t &= \theta_{t-1} - \gamma u_t, \qquad m_t = \beta_2 m_{t-1} + (1 - \beta_2) g_t

    (:math:`n` the parameter's size).  Lion's step has the same size in every coordinate: use
    a learning rate 3-10x smaller than AdamW's and a weight decay 3-10x larger (the paper's
    advice).  State: ``exp_avg`` (m).  Elementwise without ``cautious`` (ZeRO-1 may cut a
    parameter); with it the mask's count is per parameter, one two-pass kernel call per group.

    Example::

        opt = Lion(model.parameters(), lr=1e-4, weight_decay=1e-2)
    """

    kernel = kernels.lion
    cautious_kernel = optim_reduce.cautious_lion
    _elementwise = True  # (cautious groups are not: see tinyopt.optim.cautious)
    scalar_state = ()

    def __init__(self, params: Iterable, lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0, *,
                 cautious: bool = False, maximize: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay, cautious=cautious,
                        maximize=maximize)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        betas = group["betas"]
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        for k, b in enumerate(betas):
            if not 0.0 <= b <= 1.0:
                raise ValueError(f"Invalid beta parameter at index {k}: {b}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg",)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        return dict(decay=1.0 - lr * wd, beta1=b1, one_minus_beta1=1.0 - b1, b2=b2,
                    one_minus_b2=1.0 - b2, neg_lr=-lr, one=1.0, zero=0.0)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0))

    def _call(self, kernel: Any, group: dict[str, Any], fb, args: tuple,
              host: dict[str, Any]) -> None:
        kernel, host = cautious_call(self, kernel, group, host)
        super()._call(kernel, group, fb, args, host)
