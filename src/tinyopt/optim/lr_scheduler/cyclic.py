"""Cyclical schedules, stepped after every batch: CyclicLR (Smith 2017) and the 1cycle policy
(Smith & Topin 2017).  Both may cycle the momentum (``momentum``, or ``betas[0]`` for Adam-like
optimizers) inversely to the lr."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tinyopt.optim.lr_scheduler.base import (
    LRScheduler,
    callable_state,
    check_callable_state,
    check_momentum_support,
    check_optimizer,
    is_int,
    is_number,
    per_group,
    plain,
    set_momentum,
)
from tinyopt.optim.optimizer import Optimizer

_MODES = ("triangular", "triangular2", "exp_range")
_PHASE_KEYS = {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"}


class CyclicLR(LRScheduler):
    r"""Cyclical learning rate (CLR, Smith 2017, https://arxiv.org/abs/1506.01186).

    The lr cycles between ``base_lr`` and ``max_lr`` (and, with ``cycle_momentum``, momentum
    inversely between ``max_momentum`` and ``base_momentum``); call ``step()`` after every batch.
    With cycle length :math:`S = s_{up} + s_{down}` and :math:`t` = ``last_epoch``:

    .. math::
        c = \lfloor 1 + t / S \rfloor,\quad x = 1 + t / S - c,\quad
        f = \begin{cases} x / r & x \le r \\ (x - 1)/(r - 1) & x > r\end{cases},\ r = s_{up}/S

        \eta_t = \eta_{base} + (\eta_{max} - \eta_{base})\, f \cdot \text{scale}(c \text{ or } t)

    Policies: ``triangular`` (scale 1), ``triangular2`` (scale halves each cycle),
    ``exp_range`` (scale ``gamma ** t``), or a custom ``scale_fn``.

    Args:
        optimizer: wrapped optimizer.
        base_lr: lower lr boundary (float or one per group); written into the groups.
        max_lr: upper lr boundary (float or one per group).
        step_size_up: iterations in the increasing half of a cycle (positive). Default: 2000.
        step_size_down: iterations in the decreasing half; ``None`` means ``step_size_up``.
        mode: ``"triangular"``, ``"triangular2"`` or ``"exp_range"``; ignored with ``scale_fn``.
        gamma: constant of ``exp_range``. Default: 1.0.
        scale_fn: custom scaling policy ``x -> [0, 1]``. Default: None.
        scale_mode: ``"cycle"`` or ``"iterations"``: what ``scale_fn`` is evaluated on.
        cycle_momentum: cycle ``momentum`` (or ``betas[0]`` for Adam-like optimizers).
            Default: True.
        base_momentum: lower momentum boundary. Default: 0.8.
        max_momentum: upper momentum boundary. Default: 0.9.
        last_epoch: index of the last batch. Default: -1.
    """

    _NESTED_STATE = ("_scale_fn_custom",)

    def __init__(self, optimizer: Optimizer, base_lr: float | list[float],
                 max_lr: float | list[float], step_size_up: int = 2000,
                 step_size_down: int | None = None,
                 mode: Literal["triangular", "triangular2", "exp_range"] = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: Literal["cycle", "iterations"] = "cycle",
                 cycle_momentum: bool = True, base_momentum: float | list[float] = 0.8,
                 max_momentum: float | list[float] = 0.9, last_epoch: int = -1) -> None:
        # Validate everything before writing into the param groups.
        base_lrs = per_group("base_lr", optimizer, base_lr)
        max_lrs = per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if not up > 0:
            raise ValueError(f"Expected positive step_size_up, but got {step_size_up}")
        if not down >= 0:
            raise ValueError(f"Expected non-negative step_size_down, but got {step_size_down}")
        if mode not in _MODES and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        if cycle_momentum:
            use_beta1 = check_momentum_support(optimizer)
            base_momentums = per_group("base_momentum", optimizer, base_momentum)
            max_momentums = per_group("max_momentum", optimizer, max_momentum)

        self.optimizer = optimizer
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups, strict=True):
                group["lr"] = lr
        self.max_lrs = max_lrs
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        self.mode = mode
        self.gamma = gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = use_beta1
            self.base_momentums = base_momentums
            self.max_momentums = max_momentums
            if last_epoch == -1:
                for m_momentum, b_momentum, group in zip(max_momentums, base_momentums,
                                                         optimizer.param_groups, strict=True):
                    set_momentum(group, m_momentum, self.use_beta1)
                    group["max_momentum"] = m_momentum
                    group["base_momentum"] = b_momentum
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode in ("triangular", "triangular2"):
            self.scale_mode = "cycle"
        elif self.mode == "exp_range":
            self.scale_mode = "iterations"

    def scale_fn(self, x: float) -> float:
        """The amplitude scaling of the policy at ``x`` (cycle number or iteration)."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def _lr(self) -> list[float]:
        """Learning rates at ``last_epoch``; with ``cycle_momentum`` also writes the momentums."""
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)

        lrs = [base_lr + (max_lr - base_lr) * scale_factor * scale
               for base_lr, max_lr in zip(self.base_lrs, self.max_lrs, strict=True)]
        if self.cycle_momentum:
            momentums = [max_m - (max_m - base_m) * scale_factor * scale
                         for base_m, max_m in zip(self.base_momentums, self.max_momentums,
                                                  strict=True)]
            for group, momentum in zip(self.optimizer.param_groups, momentums, strict=True):
                set_momentum(group, momentum, self.use_beta1)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """As the base class; a custom ``scale_fn`` is saved only as a callable object's
        ``__dict__`` (functions and lambdas are saved as None)."""
        state = super().state_dict()
        fn = self._scale_fn_custom
        state["_scale_fn_custom"] = None if fn is None else callable_state(fn)
        return state

    def _check_values(self, state: dict[str, Any]) -> None:
        if not (is_number(state["total_size"]) and state["total_size"] > 0
                and is_number(state["step_ratio"]) and 0 < state["step_ratio"] <= 1):
            raise ValueError(f"loaded state dict: total_size {state['total_size']!r:.30} and "
                             f"step_ratio {state['step_ratio']!r:.30} do not describe a cycle")
        if state["mode"] not in _MODES and self._scale_fn_custom is None:
            raise ValueError("mode is invalid and scale_fn is None")
        if state["scale_mode"] not in ("cycle", "iterations"):
            raise ValueError(f"loaded state dict: scale_mode {state['scale_mode']!r:.30} is not "
                             "'cycle' or 'iterations'")
        fn = self._scale_fn_custom
        saved = state["_scale_fn_custom"]
        if fn is None:
            if saved is not None:
                raise ValueError("loaded state dict holds the state of a custom scale_fn, but "
                                 "this CyclicLR has none")
        else:
            check_callable_state("scale_fn", fn, saved)

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        super()._install(state_dict)
        saved = state_dict.get("_scale_fn_custom")
        if saved is not None:
            self._scale_fn_custom.__dict__.update(plain(saved))
        self._init_scale_fn()


class OneCycleLR(LRScheduler):
    r"""The 1cycle policy (Smith & Topin, https://arxiv.org/abs/1708.07120).

    The lr rises from ``max_lr / div_factor`` to ``max_lr`` over the first ``pct_start`` of
    ``total_steps``, then anneals to ``initial_lr / final_div_factor``; momentum (or ``betas[0]``)
    moves inversely between ``max_momentum`` and ``base_momentum``. Within a phase from step
    :math:`a` to :math:`b`, with :math:`p = (t - a) / (b - a)`:

    .. math:: \text{cos: } \eta = \eta_{end} + \tfrac12(\eta_{start} - \eta_{end})(1 + \cos \pi p)
              \qquad \text{linear: } \eta = (\eta_{end} - \eta_{start})\, p + \eta_{start}

    ``three_phase=True`` uses the paper's symmetric warm-up/cool-down plus a final annihilation
    phase. Call ``step()`` after every batch; stepping past ``total_steps`` raises ValueError.

    Args:
        optimizer: wrapped optimizer.
        max_lr: peak lr (float or one per group).
        total_steps: total number of steps; or give ``epochs`` and ``steps_per_epoch``.
        epochs, steps_per_epoch: ``total_steps = epochs * steps_per_epoch`` when total_steps
            is None.
        pct_start: fraction of the cycle spent increasing the lr (a float). Default: 0.3.
            ``pct_start * total_steps == 1`` (a warm-up of zero steps) is a ValueError here;
            PyTorch fails on it with ZeroDivisionError.
        anneal_strategy: ``"cos"`` or ``"linear"``. Default: ``"cos"``.
        cycle_momentum: cycle ``momentum`` / ``betas[0]``. Default: True.
        base_momentum: lower momentum boundary. Default: 0.85.
        max_momentum: upper momentum boundary. Default: 0.95.
        div_factor: ``initial_lr = max_lr / div_factor``. Default: 25.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``. Default: 1e4.
        three_phase: use three phases. Default: False.
        last_epoch: index of the last batch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, max_lr: float | list[float],
                 total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: Literal["cos", "linear"] = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85,
                 max_momentum: float | list[float] = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        # Validate everything before writing into the param groups.
        check_optimizer(optimizer)
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(
                    f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
            total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if float(pct_start * total_steps) == 1.0:  # PyTorch: ZeroDivisionError in the constructor
            raise ValueError(
                f"pct_start * total_steps must not be 1 (got {pct_start} * {total_steps}): the "
                "warm-up phase would last zero steps")
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        max_lrs = per_group("max_lr", optimizer, max_lr)
        if cycle_momentum:
            use_beta1 = check_momentum_support(optimizer)
            max_momentums = per_group("max_momentum", optimizer, max_momentum)
            base_momentums = per_group("base_momentum", optimizer, base_momentum)

        self.optimizer = optimizer
        self.total_steps = total_steps
        if three_phase:
            self._schedule_phases: list[dict[str, Any]] = [
                {"end_step": float(pct_start * total_steps) - 1, "start_lr": "initial_lr",
                 "end_lr": "max_lr", "start_momentum": "max_momentum",
                 "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct_start * total_steps) - 2, "start_lr": "max_lr",
                 "end_lr": "initial_lr", "start_momentum": "base_momentum",
                 "end_momentum": "max_momentum"},
                {"end_step": total_steps - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"},
            ]
        else:
            self._schedule_phases = [
                {"end_step": float(pct_start * total_steps) - 1, "start_lr": "initial_lr",
                 "end_lr": "max_lr", "start_momentum": "max_momentum",
                 "end_momentum": "base_momentum"},
                {"end_step": total_steps - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
            ]
        self._anneal_func_type = anneal_strategy
        if last_epoch == -1:
            for group, peak in zip(optimizer.param_groups, max_lrs, strict=True):
                group["initial_lr"] = peak / div_factor
                group["max_lr"] = peak
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = use_beta1
            if last_epoch == -1:
                for m_momentum, b_momentum, group in zip(max_momentums, base_momentums,
                                                         optimizer.param_groups, strict=True):
                    set_momentum(group, m_momentum, self.use_beta1)
                    group["max_momentum"] = m_momentum
                    group["base_momentum"] = b_momentum
        super().__init__(optimizer, last_epoch)

    def _check_values(self, state: dict[str, Any]) -> None:
        if not is_int(state["total_steps"]) or state["total_steps"] <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got "
                             f"{state['total_steps']!r:.30}")
        if state["_anneal_func_type"] not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{state['_anneal_func_type']!r:.30}")
        for phase in state["_schedule_phases"]:
            names = {k: v for k, v in phase.items() if k != "end_step"} \
                if isinstance(phase, Mapping) else {}
            if (not names or not set(names.values()) <= _PHASE_KEYS
                    or not is_number(phase.get("end_step"))):
                raise ValueError(f"loaded state dict: a schedule phase {phase!r:.80} is not one "
                                 f"of OneCycleLR's (end_step and lr/momentum keys of the groups)")

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _lr(self) -> list[float]:
        """Learning rates at ``last_epoch``; with ``cycle_momentum`` also writes the momentums."""
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(f"Tried to step {step_num} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        last = len(self._schedule_phases) - 1
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == last:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lrs.append(self._anneal_func(group[phase["start_lr"]],
                                                 group[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        momentum = self._anneal_func(group[phase["start_momentum"]],
                                                     group[phase["end_momentum"]], pct)
                        set_momentum(group, momentum, self.use_beta1)
                    break
                start_step = phase["end_step"]
        return lrs
