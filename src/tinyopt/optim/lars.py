"""LARS: SGD with a layer-wise trust ratio (``pytorch_optimizer.LARS``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyopt.kernels import optim_reduce as kernels
from tinyopt.optim.fused import FusedOptimizer


class LARS(FusedOptimizer):
    r"""LARS (You et al. 2017, "Large Batch Training of Convolutional Networks",
    https://arxiv.org/abs/1708.03888) as ``pytorch_optimizer.LARS``.

    For a parameter of 2 or more dimensions (weights; biases and norms' scales step as plain
    SGD, without weight decay):

    .. math::
        g_t &\leftarrow \eta\, \frac{\lVert\theta_{t-1}\rVert}{\lVert g_t\rVert + \lambda
        \lVert\theta_{t-1}\rVert}\, (g_t + \lambda\theta_{t-1}) \\
        b_t &= \mu b_{t-1} + (1 - \tau) g_t \;(b_0 = 0), \qquad
        \theta_t = \theta_{t-1} - \gamma\,(g_t + \mu b_t \text{ if nesterov else } b_t)

    with :math:`\eta` = ``trust_coefficient`` (the ratio is 1 where :math:`\lVert\theta\rVert
    = 0` or the denominator is 0); without momentum, :math:`\theta_t = \theta_{t-1} - \gamma
    g_t`.  One kernel call per group, two passes: the first sums both norms of every parameter
    (``kernels/optim_reduce.py``), the second steps.  State: ``momentum_buffer`` (momentum >
    0).  Not elementwise (ZeRO-1 cannot cut a parameter).

    Example::

        opt = LARS(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    """

    kernel = kernels.lars
    scalar_state = ()
    host64 = ("tc", "weight_decay_wide")

    def __init__(self, params: Iterable, lr: float = 1e-3, weight_decay: float = 0.0,
                 momentum: float = 0.9, dampening: float = 0.0,
                 trust_coefficient: float = 1e-3, nesterov: bool = False,
                 maximize: bool = False, *, stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, dampening=dampening,
                        trust_coefficient=trust_coefficient, nesterov=nesterov,
                        maximize=maximize)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        for name in ("weight_decay", "trust_coefficient"):
            if not 0.0 <= group[name]:
                raise ValueError(f"Invalid {name} value: {group[name]}")
        for name in ("momentum", "dampening"):
            if not 0.0 <= group[name] <= 1.0:
                raise ValueError(f"Invalid {name} value: {group[name]}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("momentum_buffer" if group["momentum"] > 0 else None,)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        wd = float(group["weight_decay"])
        return dict(weight_decay=wd, weight_decay_wide=wd, tc=float(group["trust_coefficient"]),
                    momentum=group["momentum"], one_minus_dampening=1.0 - group["dampening"],
                    neg_lr=-group["lr"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["momentum"] > 0), bool(group["nesterov"]))

    def _call(self, kernel: Any, group: dict[str, Any], fb, args: tuple,
              host: dict[str, Any]) -> None:
        matrix = fb.scratch.get("matrix")
        if matrix is None:
            matrix = fb.scratch["matrix"] = np.array([p.ndim > 1 for p in fb.params], np.float32)
        fb.scalars[:, 3] = matrix  # which parameters take the trust ratio (read by the kernel)
        super()._call(kernel, group, fb, args, host)
