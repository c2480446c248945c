"""Cosine schedules (SGDR, Loshchilov & Hutter 2016, https://arxiv.org/abs/1608.03983): without
restarts (CosineAnnealingLR) and with warm restarts (CosineAnnealingWarmRestarts)."""

from __future__ import annotations

import math
from typing import Any

from tinyopt.optim.lr_scheduler.base import (
    LRScheduler,
    group_values,
    is_int,
    is_number,
    within_step,
)
from tinyopt.optim.optimizer import Optimizer


def cosine(base_lr: float, t: float, period: float, eta_min: float) -> float:
    r""":math:`\eta_{min} + \tfrac12 (\eta_0 - \eta_{min})(1 + \cos(t \pi / T))`"""
    return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * t / period)) / 2


def _check_t_max(T_max: Any) -> None:  # noqa: N803 - PyTorch's name
    if not is_number(T_max) or not T_max > 0:
        raise ValueError(f"Expected positive T_max, but got {T_max}")


class CosineAnnealingLR(LRScheduler):
    r"""Anneal each group's lr along a half cosine from its initial lr to ``eta_min``.

    The closed form is (SGDR without restarts)

    .. math:: \eta_t = \eta_{min} + \tfrac12 (\eta_0 - \eta_{min})
              \left(1 + \cos\frac{t \pi}{T_{max}}\right)

    and, as in PyTorch, the lr is updated recursively so that it chains with other changes:

    .. math:: \eta_{t} = \eta_{min} + (\eta_{t-1} - \eta_{min})
              \frac{1 + \cos(t \pi / T_{max})}{1 + \cos((t - 1) \pi / T_{max})}

    Past ``T_max`` the lr climbs back up along the cosine (it is periodic with period
    ``2 * T_max``).

    Args:
        optimizer: wrapped optimizer.
        T_max: number of epochs of the half period (must be positive; PyTorch would fail with
            ZeroDivisionError at the first step for 0).
        eta_min: minimum learning rate. Default: 0.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        _check_t_max(T_max)
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _check_t_max(state["T_max"])

    def _lr(self) -> list[float]:
        eta_min, t, T = self.eta_min, self.last_epoch, self.T_max
        if self._is_initial:
            return group_values(self.optimizer, "lr")
        if self._step_count == 1 and t > 0:
            return [cosine(base_lr, t, T, eta_min) for base_lr in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [group["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups,
                                              strict=True)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (group["lr"] - eta_min) + eta_min
                for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [cosine(b, self.last_epoch, self.T_max, self.eta_min) for b in self.base_lrs]


def _check_restarts(T_0: Any, T_mult: Any, eta_min: Any) -> None:  # noqa: N803
    if not is_int(T_0) or T_0 <= 0:
        raise ValueError(f"Expected positive integer T_0, but got {T_0}")
    if not is_int(T_mult) or T_mult < 1:
        raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
    if not isinstance(eta_min, (float, int)):
        raise ValueError(
            f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")


class CosineAnnealingWarmRestarts(LRScheduler):
    r"""Cosine annealing with warm restarts (SGDR).

    .. math:: \eta_t = \eta_{min} + \tfrac12 (\eta_0 - \eta_{min})
              \left(1 + \cos\frac{T_{cur} \pi}{T_i}\right)

    where :math:`T_{cur}` counts epochs since the last restart and the period :math:`T_i` starts
    at ``T_0`` and is multiplied by ``T_mult`` at each restart. ``step(epoch)`` accepts a
    fractional epoch (e.g. ``epoch + i / iters_per_epoch``) to restart within an epoch.

    Args:
        optimizer: wrapped optimizer.
        T_0: number of epochs until the first restart (positive int).
        T_mult: factor by which the period grows after each restart (int >= 1). Default: 1.
        eta_min: minimum learning rate. Default: 0.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1,  # noqa: N803
                 eta_min: float = 0.0, last_epoch: int = -1) -> None:
        _check_restarts(T_0, T_mult, eta_min)
        self.T_0 = T_0
        self.T_i: float = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur: float = last_epoch
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _check_restarts(state["T_0"], state["T_mult"], state["eta_min"])
        if not state["T_i"] > 0:
            raise ValueError(f"loaded state dict: T_i = {state['T_i']}, expected a positive "
                             "period")

    def _lr(self) -> list[float]:
        return [cosine(b, self.T_cur, self.T_i, self.eta_min) for b in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or jump to ``epoch`` (may be fractional; must be non-negative)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        with within_step(self):
            values = self.get_lr()
        self._set_lrs(values)
