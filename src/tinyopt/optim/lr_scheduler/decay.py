"""Schedules that multiply the lr: by a function of the epoch, at steps or milestones, by a
constant factor, along a linear ramp, exponentially, polynomially.

Each closed form is a small function of ``(base lr, epoch, arguments)``; the schedulers use it
for ``step(epoch)`` and, as PyTorch does, a chainable (recursive) update for ``step()``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tinyopt.optim.lr_scheduler.base import (
    LRScheduler,
    callable_state,
    check_callable_state,
    check_optimizer,
    group_values,
    is_number,
    plain,
)
from tinyopt.optim.optimizer import Optimizer


# ---- closed forms ---------------------------------------------------------------------------------
def step_decay(base_lr: float, t: int, step_size: int, gamma: float) -> float:
    r""":math:`\eta_0 \gamma^{\lfloor t / \text{step\_size} \rfloor}`"""
    return base_lr * gamma ** (t // step_size)


def multistep_decay(base_lr: float, t: int, milestones: Counter, gamma: float) -> float:
    r""":math:`\eta_0 \gamma^{|\{m \in \text{milestones}: m \le t\}|}` (repeats count)."""
    return base_lr * gamma ** bisect_right(sorted(milestones.elements()), t)


def constant_factor(base_lr: float, t: int, factor: float, total_iters: int) -> float:
    """``factor`` times the lr until ``total_iters``, the lr afterwards."""
    return base_lr * (factor + (t >= total_iters) * (1 - factor))


def linear_ramp(base_lr: float, t: int, start: float, end: float, total_iters: int) -> float:
    r""":math:`\eta_0 (s + (e - s) \min(t, T) / T)`"""
    return base_lr * (start + (end - start) * min(total_iters, t) / total_iters)


def exponential_decay(base_lr: float, t: int, gamma: float) -> float:
    r""":math:`\eta_0 \gamma^t`"""
    return base_lr * gamma ** t


def polynomial_decay(base_lr: float, t: int, total_iters: int, power: float) -> float:
    r""":math:`\eta_0 (1 - \min(t, T) / T)^p`"""
    return base_lr * (1.0 - min(total_iters, t) / total_iters) ** power


# ---- a function of the epoch ----------------------------------------------------------------------
class _LambdaScheduler(LRScheduler):
    """Shared storage of LambdaLR and MultiplicativeLR: one function of the epoch per group."""

    _NESTED_STATE = ("lr_lambdas",)

    def _set_lambdas(self, optimizer: Optimizer, lr_lambda: Any) -> None:
        n = len(check_optimizer(optimizer).param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            lambdas = list(lr_lambda)
        for fn in lambdas:
            if not callable(fn):
                raise TypeError(f"lr_lambda should be a function, but got {type(fn).__name__}")
        self.optimizer = optimizer
        self.lr_lambdas: list[Callable[[int], float]] = lambdas

    def state_dict(self) -> dict[str, Any]:
        """As the base class; functions and lambdas are not saved (None), the ``__dict__`` of
        callable objects is."""
        state = super().state_dict()
        state["lr_lambdas"] = [callable_state(fn) for fn in self.lr_lambdas]
        return state

    def _check_values(self, state: dict[str, Any]) -> None:
        saved = state["lr_lambdas"]
        if not isinstance(saved, (list, tuple)):
            raise ValueError(f"loaded state dict: lr_lambdas must be a list, got {saved!r:.60}")
        if len(saved) != len(self.lr_lambdas):
            raise ValueError(f"loaded state dict has {len(saved)} lr_lambdas, expected "
                             f"{len(self.lr_lambdas)}")
        for i, (fn, st) in enumerate(zip(self.lr_lambdas, saved)):
            check_callable_state(f"lr_lambdas[{i}]", fn, st)

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        super()._install(state_dict)
        for fn, saved in zip(self.lr_lambdas, state_dict.get("lr_lambdas", ()), strict=False):
            if saved is not None:
                fn.__dict__.update(plain(saved))


class LambdaLR(_LambdaScheduler):
    r"""Set each group's lr to its initial lr times a function of the epoch.

    .. math:: \eta_t = \eta_0 \cdot \lambda(t)

    Args:
        optimizer: wrapped optimizer.
        lr_lambda: a function of the integer epoch giving a multiplicative factor, or a list of
            such functions, one per param group.
        last_epoch: index of the last epoch. Default: -1.

    Example::

        sched = LambdaLR(opt, lr_lambda=lambda epoch: 0.95 ** epoch)
    """

    def __init__(self, optimizer: Optimizer,
                 lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
                 last_epoch: int = -1) -> None:
        self._set_lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def _lr(self) -> list[float]:
        return [base_lr * lmbda(self.last_epoch)
                for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)]


class MultiplicativeLR(_LambdaScheduler):
    r"""Multiply each group's current lr by a function of the epoch at every step.

    .. math:: \eta_t = \eta_{t-1} \cdot \lambda(t)

    Args:
        optimizer: wrapped optimizer.
        lr_lambda: a function of the integer epoch giving a multiplicative factor, or a list of
            such functions, one per param group.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer,
                 lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
                 last_epoch: int = -1) -> None:
        self._set_lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def _lr(self) -> list[float]:
        if self._is_initial:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * lmbda(self.last_epoch)
                for lmbda, group in zip(self.lr_lambdas, self.optimizer.param_groups, strict=True)]


# ---- steps and milestones -------------------------------------------------------------------------
def _check_step_size(step_size: Any) -> None:
    if not is_number(step_size) or not step_size > 0:
        raise ValueError(f"Expected positive step_size, but got {step_size}")


class StepLR(LRScheduler):
    r"""Multiply each group's lr by ``gamma`` every ``step_size`` epochs.

    .. math:: \eta_t = \eta_0 \cdot \gamma^{\lfloor t / \text{step\_size} \rfloor}

    Args:
        optimizer: wrapped optimizer.
        step_size: period of the decay, in epochs (must be positive; PyTorch would instead fail
            with ZeroDivisionError at the first step for 0).
        gamma: multiplicative factor of the decay. Default: 0.1.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        _check_step_size(step_size)
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _check_step_size(state["step_size"])

    def _lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [step_decay(b, self.last_epoch, self.step_size, self.gamma) for b in self.base_lrs]


def _milestones(saved: Any) -> Counter[int]:
    """Loaded milestones as a Counter (JSON turns its integer keys into strings)."""
    if not isinstance(saved, Mapping):
        raise ValueError(f"loaded state dict: milestones must be a mapping, got {saved!r:.60}")
    try:
        out = Counter({int(k): int(v) for k, v in saved.items()})
    except (TypeError, ValueError):
        raise ValueError(f"loaded state dict: milestones must map epochs to counts, got "
                         f"{saved!r:.60}") from None
    if any(v < 0 for v in out.values()):
        raise ValueError(f"loaded state dict: milestones has a negative count: {saved!r:.60}")
    return out


class MultiStepLR(LRScheduler):
    r"""Multiply each group's lr by ``gamma`` at each milestone epoch.

    .. math:: \eta_t = \eta_0 \cdot \gamma^{|\{m \in \text{milestones} : m \le t\}|}

    A milestone listed ``n`` times multiplies by ``gamma ** n``.  ``milestones`` is a Counter in
    the state dict too, as PyTorch's ``step(epoch)`` needs.

    Args:
        optimizer: wrapped optimizer.
        milestones: epoch indices (increasing).
        gamma: multiplicative factor of the decay. Default: 0.1.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones: Counter[int] = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _milestones(state["milestones"])

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        super()._install(state_dict)
        self.milestones = _milestones(self.milestones)

    def _lr(self) -> list[float]:
        if self.last_epoch not in self.milestones:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch]
                for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [multistep_decay(b, self.last_epoch, self.milestones, self.gamma)
                for b in self.base_lrs]


# ---- constant factor and linear ramp --------------------------------------------------------------
def _check_constant(factor: Any) -> None:
    if factor > 1.0 or factor < 0:
        raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")


class ConstantLR(LRScheduler):
    r"""Multiply each group's lr by ``factor`` until epoch ``total_iters``, then restore it.

    .. math:: \eta_t = \eta_0 \cdot (\text{factor} \text{ if } t < \text{total\_iters}
              \text{ else } 1)

    Args:
        optimizer: wrapped optimizer.
        factor: the multiplier, in [0, 1]. Default: 1/3.
        total_iters: number of epochs the multiplier lasts. Default: 5.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        _check_constant(factor)
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _check_constant(state["factor"])

    def _lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * (1.0 / self.factor) for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [constant_factor(b, self.last_epoch, self.factor, self.total_iters)
                for b in self.base_lrs]


def _check_linear(start_factor: Any, end_factor: Any) -> None:
    if start_factor > 1.0 or start_factor <= 0:
        raise ValueError("Starting multiplicative factor expected to be greater than 0 and less "
                         "or equal to 1.")
    if end_factor > 1.0 or end_factor < 0:
        raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")


class LinearLR(LRScheduler):
    r"""Ramp each group's lr multiplier linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs (a warm-up when ``start_factor < end_factor``).

    .. math:: \eta_t = \eta_0 \left(s + (e - s) \frac{\min(t, T)}{T}\right)

    computed, as in PyTorch, recursively: :math:`\eta_t = \eta_{t-1}
    \left(1 + \frac{e - s}{T s + (t - 1)(e - s)}\right)` for :math:`1 \le t \le T`.

    Args:
        optimizer: wrapped optimizer.
        start_factor: multiplier at epoch 0, in (0, 1]. Default: 1/3.
        end_factor: multiplier from epoch ``total_iters`` on, in [0, 1]. Default: 1.0.
        total_iters: number of epochs of the ramp. Default: 5.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        _check_linear(start_factor, end_factor)
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        _check_linear(state["start_factor"], state["end_factor"])

    def _lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return group_values(self.optimizer, "lr")
        s, e = self.start_factor, self.end_factor
        ratio = 1.0 + (e - s) / (self.total_iters * s + (self.last_epoch - 1) * (e - s))
        return [group["lr"] * ratio for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [linear_ramp(b, self.last_epoch, self.start_factor, self.end_factor,
                            self.total_iters) for b in self.base_lrs]


# ---- exponential and polynomial -------------------------------------------------------------------
class ExponentialLR(LRScheduler):
    r"""Multiply each group's lr by ``gamma`` every epoch: :math:`\eta_t = \eta_0 \gamma^t`.

    Args:
        optimizer: wrapped optimizer.
        gamma: multiplicative factor of the decay.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self) -> list[float]:
        if self._is_initial:  # resuming must not move the lr one step ahead of itself
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [exponential_decay(b, self.last_epoch, self.gamma) for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    r"""Decay each group's lr polynomially to zero over ``total_iters`` epochs.

    .. math:: \eta_t = \eta_0 \left(1 - \frac{\min(t, T)}{T}\right)^{p}

    computed, as in PyTorch, as the ratio of consecutive values times the current lr.

    Args:
        optimizer: wrapped optimizer.
        total_iters: number of epochs of the decay. Default: 5.
        power: the power ``p``. Default: 1.0.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def _lr(self) -> list[float]:
        if self._is_initial or self.last_epoch > self.total_iters:
            return group_values(self.optimizer, "lr")
        decay_factor = ((1.0 - self.last_epoch / self.total_iters)
                        / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * decay_factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [polynomial_decay(b, self.last_epoch, self.total_iters, self.power)
                for b in self.base_lrs]
