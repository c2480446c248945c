"""SGD with optional momentum, dampening, Nesterov momentum and weight decay (``torch.optim.SGD``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels.optim import opt_step_sgd
from tinyopt.optim.flat import CHUNK, FlatBuffer
from tinyopt.optim.fused import FusedOptimizer


class SGD(FusedOptimizer):
    r"""Stochastic gradient descent, optionally with momentum, as ``torch.optim.SGD``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda \theta_{t-1} \\
        b_t &= g_t \text{ at the first step, else } \mu b_{t-1} + (1 - \tau) g_t \\
        \theta_t &= \theta_{t-1} - \gamma\,(g_t + \mu b_t \text{ if nesterov else } b_t)

    State: ``momentum_buffer`` (only when momentum != 0).  ``foreach`` and ``fused`` are accepted
    and ignored (tinyopt is always fused); ``differentiable=True`` raises.

    Example::

        opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        opt.zero_grad(); loss.backward(); opt.step()
    """

    _has_step = False

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach,
                        differentiable=differentiable, fused=fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def _validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _run(self, group: dict[str, Any], fb: FlatBuffer) -> None:
        lr, mu, wd = float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])
        fb.hp[:4] = (lr, mu, 1.0 - float(group["dampening"]), wd)
        buf = fb.bufs["momentum_buffer"] if mu != 0 else fb.empty
        kernel = opt_step_sgd[mu != 0, bool(group["nesterov"]), bool(group["maximize"]), wd != 0]
        kernel(fb.data, fb.grad, buf, fb.seg, fb.chunk_seg, CHUNK, fb.flags, fb.steps, fb.hp)
