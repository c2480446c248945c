"""ADOPT: Adam with the current gradient normalized by the previous second moment."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyopt.kernels import optim as kernels
from tinyopt.optim.adam import check_adam_hyperparameters
from tinyopt.optim.fused import FusedOptimizer


def adopt_clip(step: float) -> float:
    """ADOPT's default gradient clip at step ``t``: :math:`t^{1/4}`."""
    return math.pow(step, 0.25)


class ADOPT(FusedOptimizer):
    r"""ADOPT (Taniguchi et al. 2024, "ADOPT: Modified Adam Can Converge with Any
    :math:`\beta_2` with the Optimal Rate", https://arxiv.org/abs/2411.02853) as
    ``pytorch_optimizer.ADOPT``, with PyTorch's per-parameter step (a parameter's first step is
    its own first gradient).

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize});\quad
               \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \text{ if weight\_decouple,
               else } g_t \leftarrow g_t + \lambda\theta_{t-1} \\
        t = 1&:\quad v_1 = g_1^2 \quad (\text{no step}) \\
        t > 1&:\quad n_t = \mathrm{clip}\!\left(\frac{g_t}{\max(\sqrt{v_{t-1}}, \epsilon)},
               c(t)\right), \quad m_t = \beta_1 m_{t-1} + (1 - \beta_1) n_t, \quad
               \theta_t = \theta_{t-1} - \gamma m_t, \quad
               v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2

    with :math:`c(t)` = ``clip_lambda(t)`` (default :math:`t^{1/4}`; None: no clipping) and
    ``fixed_decay``: :math:`1 - \lambda` instead of :math:`1 - \gamma\lambda`.  State: ``step``,
    ``exp_avg`` (m), ``exp_avg_sq`` (v).  A ``clip_lambda`` of your own is evaluated on the host
    once per distinct step of the group's parameters, and its values rounded to float32.
    Elementwise: ZeRO-1 may cut a parameter.

    Example::

        opt = ADOPT(model.parameters(), lr=1e-3, betas=(0.9, 0.9999))
    """

    kernel = kernels.adopt
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.9999),
                 clip_lambda: Callable[[float], float] | None = adopt_clip,
                 weight_decay: float = 0.0, weight_decouple: bool = False,
                 fixed_decay: bool = False, eps: float = 1e-6, maximize: bool = False, *,
                 stochastic_rounding: bool = False) -> None:
        self.clip_lambda = clip_lambda  # (a function: not a hyperparameter of the state dict)
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                        weight_decouple=weight_decouple, fixed_decay=fixed_decay, eps=eps,
                        maximize=maximize)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    # (the clip function is the optimizer's, not a hyperparameter: copies and pickles carry it)
    def _restore(self, defaults, groups, state) -> None:
        self.clip_lambda = getattr(self, "clip_lambda", adopt_clip)
        super()._restore(defaults, groups, state)

    def __deepcopy__(self, memo: dict) -> ADOPT:
        new = super().__deepcopy__(memo)
        new.clip_lambda = self.clip_lambda
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (*super().__reduce_ex__(protocol), {"clip_lambda": self.clip_lambda})

    def validate(self, group: dict[str, Any]) -> None:
        check_adam_hyperparameters(group["lr"], group["eps"], group["betas"],
                                   group["weight_decay"])

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("exp_avg", "exp_avg_sq")

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        w = r(1.0 - b1)
        return dict(decay=1.0 - wd * (1.0 if group["fixed_decay"] else lr), weight_decay=wd,
                    eps=group["eps"], w=w, w_c=1 - w, b2=b2, one_minus_b2=1.0 - b2, neg_lr=-lr)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]), bool(group["weight_decay"] != 0),
                bool(group["weight_decouple"]), self.clip_lambda is not None,
                self.clip_lambda not in (None, adopt_clip), bool(host["w"] < 0.5))

    def _run(self, fb, group: dict[str, Any], names: tuple[str | None, ...]) -> None:
        # (an override: the step is not taken inside the backward plan, which would not write
        # the clips)
        if self.clip_lambda not in (None, adopt_clip):  # this step's clip into S[j, 3]
            on = fb.flags != 0
            steps, where = np.unique(fb.steps[on] + np.float32(1), return_inverse=True)
            clips = np.array([self.clip_lambda(float(t)) for t in steps], np.float64)
            fb.scalars[on, 3] = clips[where]
        super()._run(fb, group, names)
