"""Rprop: resilient backpropagation (``torch.optim.Rprop``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tinyopt.kernels import optim as kernels
from tinyopt.optim.fused import FusedOptimizer


class Rprop(FusedOptimizer):
    r"""Rprop (Riedmiller & Braun, https://doi.org/10.1109/ICNN.1993.298623) as ``torch.optim.Rprop``.

    Each element keeps its own step size :math:`s`, grown by :math:`\eta_+` while the gradient
    keeps its sign and shrunk by :math:`\eta_-` when it flips (the gradient is then taken as 0):

    .. math::
        s_t &= \mathrm{clamp}\!\left(s_{t-1} \cdot
        \begin{cases}\eta_+ & g_t g_{t-1} > 0 \\ \eta_- & g_t g_{t-1} < 0 \\ 1 & \text{else}
        \end{cases},\ s_{min}, s_{max}\right), \qquad
        \theta_t = \theta_{t-1} - \mathrm{sign}(g_t)\, s_t

    State: ``step``, ``prev`` (the last gradient used), ``step_size`` (starts at lr).
    ``foreach`` is accepted and ignored; ``capturable``/``differentiable`` set to True raise.

    Example::

        opt = Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50))
    """

    kernel = kernels.rprop
    host64 = ("eta_minus", "eta_plus", "step_min", "step_max")  # (rounded as coefficients)
    _elementwise = True  # each element steps from its own state: ZeRO-1 may cut a parameter

    def __init__(self, params: Iterable, lr: float = 1e-2,
                 etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False,
                 stochastic_rounding: bool = False) -> None:
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults, stochastic_rounding=stochastic_rounding)

    def validate(self, group: dict[str, Any]) -> None:
        etas = group["etas"]
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")

    def state_names(self, group: dict[str, Any]) -> tuple[str | None, ...]:
        return ("prev", "step_size")

    def state_init(self, group: dict[str, Any]) -> dict[str, float]:
        return {"step_size": float(group["lr"])}

    def host_scalars(self, group: dict[str, Any], r) -> dict[str, Any]:
        (eta_minus, eta_plus), (step_min, step_max) = group["etas"], group["step_sizes"]
        return dict(eta_minus=eta_minus, eta_plus=eta_plus, step_min=step_min, step_max=step_max)

    def switches(self, group: dict[str, Any], host: dict[str, Any]) -> tuple[bool, ...]:
        return (bool(group["maximize"]),)
