"""ReduceLROnPlateau: lower the lr when a metric has stopped improving."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Literal, SupportsFloat

from tinyopt.optim.lr_scheduler.base import (
    EPOCH_DEPRECATION_WARNING,
    LRScheduler,
    check_optimizer,
    group_values,
    is_int,
)
from tinyopt.optim.optimizer import Optimizer

class ReduceLROnPlateau(LRScheduler):
    r"""Multiply the lr by ``factor`` when a metric has stopped improving for ``patience`` steps.

    ``step(metric)`` counts a step as bad unless the metric beats the best seen by the threshold
    (``rel``: ``best * (1 - threshold)`` in min mode, ``best * (1 + threshold)`` in max mode;
    ``abs``: ``best -/+ threshold``). After more than ``patience`` bad steps every group's lr
    becomes ``max(lr * factor, min_lr)`` (unless that changes it by less than ``eps``) and
    ``cooldown`` steps are ignored.

    Args:
        optimizer: wrapped optimizer.
        mode: ``"min"`` or ``"max"``. Default: ``"min"``.
        factor: multiplier of the lr, < 1. Default: 0.1.
        patience: number of bad steps tolerated. Default: 10.
        threshold: significance threshold. Default: 1e-4.
        threshold_mode: ``"rel"`` or ``"abs"``. Default: ``"rel"``.
        cooldown: steps to wait after a reduction. Default: 0.
        min_lr: lower bound of the lr (float or one per group). Default: 0.
        eps: minimal change of the lr. Default: 1e-8.
    """

    def __init__(self, optimizer: Optimizer, mode: Literal["min", "max"] = "min",
                 factor: float = 0.1, patience: int = 10, threshold: float = 1e-4,
                 threshold_mode: Literal["rel", "abs"] = "rel", cooldown: int = 0,
                 min_lr: list[float] | float = 0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        check_optimizer(optimizer)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError(
                    f"expected {len(optimizer.param_groups)} min_lrs, got {len(min_lr)}")
        self._check_modes(mode, threshold_mode)
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = group_values(optimizer, "lr")
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        """Reset the bad-step and cooldown counters."""
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(  # type: ignore[override]
            self, metrics: SupportsFloat, epoch: int | None = None) -> None:
        """Record ``metrics`` (a number) and reduce the lrs if it has plateaued."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr(epoch)
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = group_values(self.optimizer, "lr")

    def _reduce_lr(self, epoch: int) -> None:
        if len(self.optimizer.param_groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(
                    "The number of param groups in the `optimizer` "
                    f"({len(self.optimizer.param_groups)}) differs from when "
                    f"`ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually due to "
                    "a new param group being added to the optimizer. Please modify the "
                    "`min_lrs` field to match the length of the `optimizer` param groups.")
            self.min_lrs = [self.default_min_lr] * len(self.optimizer.param_groups)
        for i, group in enumerate(self.optimizer.param_groups):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[i])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler is waiting out ``cooldown`` epochs after a reduction."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    @staticmethod
    def _check_modes(mode: Any, threshold_mode: Any) -> None:
        if mode not in {"min", "max"}:
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in {"rel", "abs"}:
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        self._check_modes(mode, threshold_mode)
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def _check_values(self, state: dict[str, Any]) -> None:
        self._check_modes(state["mode"], state["threshold_mode"])
        if not state["factor"] < 1.0:
            raise ValueError("Factor should be < 1.0.")
        for key in ("patience", "cooldown", "cooldown_counter", "num_bad_epochs"):
            if not is_int(state[key]) or state[key] < 0:
                raise ValueError(f"loaded state dict: {key!r} = {state[key]!r:.30}, expected an "
                                 "integer >= 0")

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        super()._install(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold,
                             threshold_mode=self.threshold_mode)
