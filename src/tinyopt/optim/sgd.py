"""SGD with optional momentum, dampening, Nesterov momentum and weight decay (``torch.optim.SGD``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.kernels import optim_reduce
from tinyopt.optim.cautious import cautious_call
from tinyopt.optim.fused import FusedOptimizer


class SGD(FusedOptimizer):
    r"""Stochastic gradient descent, optionally with momentum, as ``torch.optim.SGD``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda \theta_{t-1} \\
        b_t &= g_t \text{ at the first step, else } \mu b_{t-1} + (1 - \tau) g_t \\
        \theta_t &= \theta_{t-1} - \gamma\,(g_t + \mu b_t \text{ if nesterov else } b_t)

    State: ``momentum_buffer`` (only when momentum != 0).  ``foreach`` and ``fused`` are accepted
    and ignored (tinyopt is always fused); ``differentiable=True`` raises.  tinyopt's
    ``cautious=True`` (Liang et al. 2024, https://arxiv.org/abs/2411.16085) applies the step
    direction only where it agrees in sign with the gradient, rescaled by
    :math:`n / (\#\text{agreeing} + 1)` (``tinyopt.optim.cautious``).

    Example::

        opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        opt.zero_grad(); loss.backward(); opt.step()
    """

    kernel = kernels.sgd
    cautious_kernel = optim_reduce.cautious_sgd
    _sparse_error = None  # as PyTorch: the dense update of a row-sparse gradient is its sparse one
    _sparse_weight_decay_error = ("add(sparse, dense) is not supported. Use add(dense, sparse) "
                                  "instead.")
    scalar_state = ()

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None, cautious: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach,
                        differentiable=differentiable, fused=fused)
        if cautious:  # (only then in the defaults: the others stay torch's)
            defaults["cautious"] = True
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("momentum_buffer" if group["momentum"] != 0 else None,)

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        return dict(neg_lr=-group["lr"], momentum=group["momentum"],
                    one_minus_dampening=1.0 - group["dampening"], weight_decay=group["weight_decay"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["momentum"] != 0), bool(group["nesterov"]), bool(group["maximize"]),
                bool(group["weight_decay"] != 0))

    def _call(self, kernel: Any, group: dict[str, Any], fb, args: tuple,
              host: dict[str, Any]) -> None:
        kernel, host = cautious_call(self, kernel, group, host)
        super()._call(kernel, group, fb, args, host)
