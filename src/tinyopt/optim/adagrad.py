"""Adagrad (``torch.optim.Adagrad``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class Adagrad(FusedOptimizer):
    r"""Adagrad (Duchi et al., https://jmlr.org/papers/v12/duchi11a.html) as ``torch.optim.Adagrad``.

    .. math::
        g_t &= \nabla_\theta f(\theta_{t-1}) \;(\times -1 \text{ if maximize}) + \lambda\theta_{t-1},
        \qquad \tilde\gamma = \frac{\gamma}{1 + (t - 1)\eta} \\
        s_t &= s_{t-1} + g_t^2, \qquad
        \theta_t = \theta_{t-1} - \tilde\gamma \frac{g_t}{\sqrt{s_t} + \epsilon}

    State (created at construction, as PyTorch does): ``step`` and ``sum`` (starting at
    ``initial_accumulator_value``).  ``foreach``/``fused`` are ignored; ``differentiable=True`` raises.

    Example::

        opt = Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
    """

    kernel = kernels.adagrad
    host64 = ("lr", "lr_decay")
    _eager_state = True
    _sparse_error = None  # as PyTorch: the dense update of a row-sparse gradient is its sparse one
    _sparse_weight_decay_error = "weight_decay option is not compatible with sparse gradients"

    def __init__(self, params: Iterable, lr: float = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 <= group["lr_decay"]:
            raise ValueError(f"Invalid lr_decay value: {group['lr_decay']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if not 0.0 <= group["initial_accumulator_value"]:
            raise ValueError("Invalid initial_accumulator_value value: "
                             f"{group['initial_accumulator_value']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("sum",)

    def state_init(self, group: dict[str, Any]) -> dict[str, float]:
        return {"sum": float(group["initial_accumulator_value"])}

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        return dict(lr=float(group["lr"]), lr_decay=float(group["lr_decay"]),
                    weight_decay=group["weight_decay"], eps=group["eps"])

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return bool(group["maximize"]), bool(group["weight_decay"] != 0)
