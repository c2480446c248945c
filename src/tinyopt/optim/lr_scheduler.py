"""Learning-rate schedulers with ``torch.optim.lr_scheduler``'s names, arguments and values.

A scheduler rewrites ``group["lr"]`` (and for OneCycleLR/CyclicLR ``group["momentum"]`` or
``group["betas"][0]``) in its optimizer's ``param_groups`` each time ``step()`` is called; the
optimizer reads its hyperparameters from ``param_groups`` at every step, so nothing recompiles::

    from tinyopt import optim

    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for epoch in range(100):
        train_one_epoch(model, opt)        # calls opt.step() per batch
        sched.step()                       # after opt.step(), as in PyTorch >= 1.1
    sched.get_last_lr()                    # [lr of group 0, lr of group 1, ...]

Every scheduler computes the same floats as PyTorch 2.x at every step, including PyTorch's
*chainable* (recursive) forms: CosineAnnealingLR, for example, updates the current lr by the ratio
of consecutive cosine values instead of evaluating the closed form, so that it composes with other
schedulers (ChainedScheduler) and with manual lr changes exactly as PyTorch does.

``state_dict()`` returns plain data (numbers, strings, lists, dicts; never the optimizer, never a
function), so a checkpoint can store it as JSON; ``load_state_dict`` also accepts a dict that went
through JSON (string keys) or that came from PyTorch's own scheduler.
"""

from __future__ import annotations

import copy
import math
import types
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import wraps
from typing import Any, Literal, SupportsFloat
from weakref import ref

from tinyopt.optim.optimizer import Optimizer

__all__ = [
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
    "LRScheduler",
]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being "
    "deprecated where possible. Please use `scheduler.step()` to step the "
    "scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. "
    "Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose."
)


# ---- helpers ----------------------------------------------------------------------------------
def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")


def _format_param(name: str, optimizer: Optimizer, param: Any) -> list[Any]:
    """One value per param group: a scalar is repeated, a list/tuple must have one per group."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. "
                f"{name} has {len(param)} values, param_groups has {len(optimizer.param_groups)}."
            )
        return list(param)
    return [param] * len(optimizer.param_groups)


def _group_values(optimizer: Optimizer, key: str) -> list[Any]:
    """``[group[key] for group in optimizer.param_groups]`` (KeyError when a group lacks it)."""
    return [group[key] for group in optimizer.param_groups]


def _set_momentum(group: dict[str, Any], momentum: float, use_beta1: bool) -> None:
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def _plain(value: Any) -> Any:
    """A deep copy of ``value`` made of plain containers (Counter -> dict, tuple -> list)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return copy.deepcopy(value)


def _callable_state(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """State of a callable object (its ``__dict__``); None for plain functions and lambdas."""
    if isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__"):
        return None
    return _plain(fn.__dict__)


def _warn_get_lr_called_within_step(scheduler: LRScheduler) -> None:
    if not scheduler._get_lr_called_within_step:
        warnings.warn(
            "To get the last learning rate computed by the scheduler, "
            "please use `get_last_lr()`.",
            UserWarning,
            stacklevel=3,
        )


class _enable_get_lr_call:
    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self) -> _enable_get_lr_call:
        self.o._get_lr_called_within_step = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.o._get_lr_called_within_step = False


class _initial_mode:
    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self) -> None:
        self.o._is_initial = True

    def __exit__(self, *exc: object) -> None:
        self.o._is_initial = False


def _patch_track_step_called(optimizer: Optimizer) -> None:
    """Wrap ``optimizer.step`` so a scheduler can warn when it is stepped before the optimizer."""
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = ref(optimizer)
    bound = optimizer.step
    func = getattr(bound, "__func__", None)

    @wraps(func if func is not None else bound)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        opt = opt_ref()
        opt._opt_called = True  # type: ignore[union-attr]
        if func is None:  # step was already a plain callable attribute
            return bound(*args, **kwargs)
        return func.__get__(opt, opt.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = wrapper  # type: ignore[method-assign]


# ---- base class -------------------------------------------------------------------------------
class LRScheduler:
    r"""Base class of the schedulers: subclasses implement :meth:`get_lr` (and sometimes ``step``).

    Args:
        optimizer: the optimizer whose ``param_groups[i]["lr"]`` this scheduler sets.
        last_epoch: index of the last epoch seen. ``-1`` (default) starts the schedule and writes
            ``group["initial_lr"] = group["lr"]`` into every group that lacks it; any other value
            resumes and requires ``initial_lr`` in every group (KeyError otherwise).

    ``base_lrs`` holds the groups' ``initial_lr``; ``last_epoch`` counts ``step()`` calls (the
    constructor performs the first one, so it is 0 after construction).

    Warning: constructing a scheduler overwrites ``group["lr"]``; when restoring a checkpoint,
    construct the scheduler before calling the optimizer's ``load_state_dict``.
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                        "scheduler with last_epoch >= 0.\n"
                        "This typically happens when:\n"
                        "1. You're trying to resume training from a checkpoint but haven't "
                        "properly loaded the optimizer state\n"
                        "2. You're using last_epoch >= 0 for a fresh training run (not recommended)"
                    )
        self.base_lrs: list[float] = _group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _patch_track_step_called(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and perform the constructor's step."""
        self._step_count = 0
        with _initial_mode(self):
            self.step()

    # ---- state ----------------------------------------------------------------------------
    _NESTED_STATE = ()   # keys whose values a subclass saves in its own way

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute except the optimizer, as plain data."""
        return {key: _plain(value) for key, value in self.__dict__.items()
                if key != "optimizer" and key not in self._NESTED_STATE}

    def _check_state_dict(self, state_dict: Any) -> None:
        """Raise before anything changes if ``state_dict`` cannot be loaded into this scheduler."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        n_groups = len(self.optimizer.param_groups)
        for key in ("base_lrs", "_last_lr"):
            value = state_dict.get(key)
            if isinstance(value, (list, tuple)) and len(value) != n_groups:
                raise ValueError(
                    f"loaded state dict has {len(value)} values in '{key}', but the optimizer "
                    f"of this {type(self).__name__} has {n_groups} param groups"
                )

    def _load_plain(self, state_dict: Mapping[str, Any]) -> None:
        self.__dict__.update({key: _plain(value) for key, value in state_dict.items()
                              if key != "optimizer" and key not in self._NESTED_STATE})

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state returned by :meth:`state_dict` (of tinyopt or of PyTorch)."""
        self._check_state_dict(state_dict)
        self._load_plain(state_dict)

    # ---- stepping -------------------------------------------------------------------------
    def get_last_lr(self) -> list[float]:
        """The learning rates of the param groups as last set by this scheduler (a new list)."""
        return list(self._last_lr)

    def get_lr(self) -> list[float]:
        """Compute the learning rates of the next step (called by :meth:`step`)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule by one step and write the new lrs into the param groups.

        Call it after ``optimizer.step()``. ``epoch`` is deprecated (as in PyTorch): when given,
        ``last_epoch`` is set to it and the closed form is used where one exists.
        """
        if self._step_count == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn(
                    "Seems like `optimizer.step()` has been overridden after learning rate "
                    "scheduler initialization. Please, make sure to call `optimizer.step()` "
                    "before `lr_scheduler.step()`. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(
                    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. "
                    "In PyTorch 1.1.0 and later, you should call them in the opposite order: "
                    "`optimizer.step()` before `lr_scheduler.step()`.  Failure to do this "
                    "will result in PyTorch skipping the first value of the learning rate "
                    "schedule. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        with _enable_get_lr_call(self):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr: list[float] = _group_values(self.optimizer, "lr")


class _LRScheduler(LRScheduler):
    """Deprecated alias of :class:`LRScheduler` kept for code written against PyTorch < 2.0."""


# ---- multiplicative schedules ---------------------------------------------------------------
class _LambdaScheduler(LRScheduler):
    """Shared storage of LambdaLR and MultiplicativeLR: one function of the epoch per group."""

    _NESTED_STATE = ("lr_lambdas",)

    def _set_lambdas(self, optimizer: Optimizer, lr_lambda: Any) -> None:
        _check_optimizer(optimizer)
        n = len(optimizer.param_groups)
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
        state["lr_lambdas"] = [_callable_state(fn) for fn in self.lr_lambdas]
        return state

    def _check_state_dict(self, state_dict: Any) -> None:
        super()._check_state_dict(state_dict)
        saved = state_dict.get("lr_lambdas", [None] * len(self.lr_lambdas))
        if len(saved) != len(self.lr_lambdas):
            raise ValueError(f"loaded state dict has {len(saved)} lr_lambdas, expected "
                             f"{len(self.lr_lambdas)}")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_state_dict(state_dict)
        self._load_plain(state_dict)
        for fn, saved in zip(self.lr_lambdas, state_dict.get("lr_lambdas", ()), strict=False):
            if saved is not None:
                fn.__dict__.update(_plain(saved))


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

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
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

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self._is_initial:
            return _group_values(self.optimizer, "lr")
        return [group["lr"] * lmbda(self.last_epoch)
                for lmbda, group in zip(self.lr_lambdas, self.optimizer.param_groups, strict=True)]


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
        _check_optimizer(optimizer)
        if not step_size > 0:
            raise ValueError(f"Expected positive step_size, but got {step_size}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size)
                for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    r"""Multiply each group's lr by ``gamma`` at each milestone epoch.

    .. math:: \eta_t = \eta_0 \cdot \gamma^{|\{m \in \text{milestones} : m \le t\}|}

    A milestone listed ``n`` times multiplies by ``gamma ** n``.

    Args:
        optimizer: wrapped optimizer.
        milestones: epoch indices (increasing).
        gamma: multiplicative factor of the decay. Default: 0.1.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        self.milestones: Counter[int] = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self.last_epoch not in self.milestones:
            return _group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch]
                for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch)
                for base_lr in self.base_lrs]

    def _load_plain(self, state_dict: Mapping[str, Any]) -> None:
        super()._load_plain(state_dict)
        # JSON turns the Counter's integer keys into strings.
        self.milestones = Counter({int(k): int(v) for k, v in dict(self.milestones).items()})


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
        _check_optimizer(optimizer)
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return _group_values(self.optimizer, "lr")
        return [group["lr"] * (1.0 / self.factor) for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base_lr in self.base_lrs]


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
        _check_optimizer(optimizer)
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and "
                             "less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _group_values(self.optimizer, "lr")
        s, e = self.start_factor, self.end_factor
        ratio = 1.0 + (e - s) / (self.total_iters * s + (self.last_epoch - 1) * (e - s))
        return [group["lr"] * ratio for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    r"""Multiply each group's lr by ``gamma`` every epoch: :math:`\eta_t = \eta_0 \gamma^t`.

    Args:
        optimizer: wrapped optimizer.
        gamma: multiplicative factor of the decay.
        last_epoch: index of the last epoch. Default: -1.
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self._is_initial:  # resuming must not move the lr one step ahead of itself
            return _group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


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
        _check_optimizer(optimizer)
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self._is_initial or self.last_epoch > self.total_iters:
            return _group_values(self.optimizer, "lr")
        decay_factor = ((1.0 - self.last_epoch / self.total_iters)
                        / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * decay_factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters)
                ** self.power for base_lr in self.base_lrs]


# ---- cosine schedules (SGDR) ----------------------------------------------------------------
class CosineAnnealingLR(LRScheduler):
    r"""Anneal each group's lr along a half cosine from its initial lr to ``eta_min``.

    The closed form is (SGDR without restarts, https://arxiv.org/abs/1608.03983)

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

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        if not T_max > 0:
            raise ValueError(f"Expected positive T_max, but got {T_max}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        eta_min, t, T = self.eta_min, self.last_epoch, self.T_max
        if self._is_initial:
            return _group_values(self.optimizer, "lr")
        if self._step_count == 1 and t > 0:
            return [eta_min + (base_lr - eta_min) * (1 + math.cos(t * math.pi / T)) / 2
                    for base_lr in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [group["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups,
                                              strict=True)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (group["lr"] - eta_min) + eta_min
                for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    r"""Cosine annealing with warm restarts (SGDR, https://arxiv.org/abs/1608.03983).

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

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(
                f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        return [self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base_lr in self.base_lrs]

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
        with _enable_get_lr_call(self):
            values = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = _group_values(self.optimizer, "lr")


# ---- cyclical schedules ---------------------------------------------------------------------
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
        _check_optimizer(optimizer)
        base_lrs = _format_param("base_lr", optimizer, base_lr)
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if not up > 0:
            raise ValueError(f"Expected positive step_size_up, but got {step_size_up}")
        if not down >= 0:
            raise ValueError(f"Expected non-negative step_size_down, but got {step_size_down}")
        if mode not in ["triangular", "triangular2", "exp_range"] and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with "
                                 "`cycle_momentum` option enabled")
            base_momentums = _format_param("base_momentum", optimizer, base_momentum)
            max_momentums = _format_param("max_momentum", optimizer, max_momentum)

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
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = base_momentums
            self.max_momentums = max_momentums
            if last_epoch == -1:
                for m_momentum, b_momentum, group in zip(max_momentums, base_momentums,
                                                         optimizer.param_groups, strict=True):
                    _set_momentum(group, m_momentum, self.use_beta1)
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

    def get_lr(self) -> list[float]:
        """Learning rates at ``last_epoch``; with ``cycle_momentum`` also writes the momentums."""
        _warn_get_lr_called_within_step(self)
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
                _set_momentum(group, momentum, self.use_beta1)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """As the base class; a custom ``scale_fn`` is saved only as a callable object's
        ``__dict__`` (functions and lambdas are saved as None)."""
        state = super().state_dict()
        fn = self._scale_fn_custom
        state["_scale_fn_custom"] = None if fn is None else _callable_state(fn)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_state_dict(state_dict)
        self._load_plain(state_dict)
        saved = state_dict.get("_scale_fn_custom")
        if saved is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(_plain(saved))
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
        _check_optimizer(optimizer)
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
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with "
                                 "`cycle_momentum` option enabled")
            max_momentums = _format_param("max_momentum", optimizer, max_momentum)
            base_momentums = _format_param("base_momentum", optimizer, base_momentum)

        self.optimizer = optimizer
        self.total_steps = total_steps
        if three_phase:
            self._schedule_phases = [
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
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for m_momentum, b_momentum, group in zip(max_momentums, base_momentums,
                                                         optimizer.param_groups, strict=True):
                    _set_momentum(group, m_momentum, self.use_beta1)
                    group["max_momentum"] = m_momentum
                    group["base_momentum"] = b_momentum
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        """Learning rates at ``last_epoch``; with ``cycle_momentum`` also writes the momentums."""
        _warn_get_lr_called_within_step(self)
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
                        _set_momentum(group, momentum, self.use_beta1)
                    break
                start_step = phase["end_step"]
        return lrs


# ---- composition ----------------------------------------------------------------------------
def _check_members(owner: str, optimizer: Any, schedulers: Sequence[Any]) -> None:
    for i, scheduler in enumerate(schedulers):
        if not hasattr(scheduler, "optimizer"):
            raise TypeError(f"{owner} at index {i} should have `optimizer` as its attribute.")
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(
                f"{owner} does not support `ReduceLROnPlateau` scheduler as it requires "
                "additional kwargs to be specified when calling `step`, but got one at index "
                f"{i} in the given schedulers sequence.")
        if optimizer is not scheduler.optimizer:
            raise ValueError(
                f"{owner} expects all schedulers to belong to the same optimizer, but got "
                f"scheduler {type(scheduler).__name__} at index {i} has {scheduler.optimizer}, "
                f"which is different from {type(optimizer).__name__}.")


class _NestedScheduler(LRScheduler):
    """State handling shared by SequentialLR and ChainedScheduler: the members' states nest."""

    _NESTED_STATE = ("_schedulers",)
    _schedulers: list[LRScheduler]

    def state_dict(self) -> dict[str, Any]:
        """As the base class, with each member's ``state_dict()`` under ``"_schedulers"``."""
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def _check_state_dict(self, state_dict: Any) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        saved = state_dict.get("_schedulers")
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self._schedulers):
            n = len(saved) if isinstance(saved, (list, tuple)) else "no"
            raise ValueError(f"loaded state dict has {n} scheduler states, but this "
                             f"{type(self).__name__} has {len(self._schedulers)} schedulers")
        for s, sd in zip(self._schedulers, saved, strict=True):
            s._check_state_dict(sd)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_state_dict(state_dict)
        self._load_plain(state_dict)
        for s, sd in zip(self._schedulers, state_dict["_schedulers"], strict=True):
            s.load_state_dict(sd)


class SequentialLR(_NestedScheduler):
    """Run schedulers one after the other, switching at the milestone epochs.

    Scheduler ``i`` drives the lr from epoch ``milestones[i - 1]`` on; at a milestone the new
    scheduler restarts from its epoch 0 (its closed form at 0 when it has one).

    Args:
        optimizer: wrapped optimizer (every scheduler must belong to it).
        schedulers: the schedulers, at least one.
        milestones: ``len(schedulers) - 1`` epochs at which to switch.
        last_epoch: index of the last epoch. Default: -1.

    Example::

        warmup = LinearLR(opt, start_factor=0.1, total_iters=5)
        decay = ExponentialLR(opt, gamma=0.9)
        sched = SequentialLR(opt, schedulers=[warmup, decay], milestones=[5])
    """

    def __init__(self, optimizer: Optimizer, schedulers: list[LRScheduler],
                 milestones: list[int], last_epoch: int = -1) -> None:
        name = type(self).__name__
        if len(schedulers) < 1:
            raise ValueError(f"{name} expects at least one scheduler, but got no scheduler.")
        _check_members(name, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to "
                f"{len(milestones)}")
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:  # back to the initial lrs
            group["lr"] = group["initial_lr"]
        self.recursive_undo()  # undo the step each member made in its constructor
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def recursive_undo(self, sched: Any = None) -> None:
        """Recursively undo the step performed by the construction of the schedulers."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch with the scheduler whose interval contains it."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_NestedScheduler):
    """Step several chainable schedulers together: each ``step()`` steps all of them in order,
    so their multiplicative effects compose.

    Args:
        schedulers: the schedulers, at least one, all of the same optimizer.
        optimizer: the optimizer; default: that of ``schedulers[0]``.

    Example::

        sched = ChainedScheduler([ConstantLR(opt, factor=0.1, total_iters=2),
                                  ExponentialLR(opt, gamma=0.9)])
    """

    def __init__(self, schedulers: Sequence[LRScheduler],
                 optimizer: Optimizer | None = None) -> None:
        name = type(self).__name__
        if len(schedulers) < 1:
            raise ValueError(f"{name} expects at least one scheduler to be chained, but got no "
                             "scheduler.")
        if optimizer is None:
            optimizer = schedulers[0].optimizer
        _check_members(name, optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = _group_values(self._schedulers[-1].optimizer, "lr")

    def step(self) -> None:  # type: ignore[override]
        """Step every member once, in order."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = _group_values(self._schedulers[-1].optimizer, "lr")


# ---- metric-driven ----------------------------------------------------------------------------
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
        _check_optimizer(optimizer)
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
        self._last_lr = _group_values(optimizer, "lr")
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
        self._last_lr = _group_values(self.optimizer, "lr")

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

    def _check_state_dict(self, state_dict: Any) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        self._check_modes(state_dict.get("mode", self.mode),
                          state_dict.get("threshold_mode", self.threshold_mode))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_state_dict(state_dict)
        self._load_plain(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold,
                             threshold_mode=self.threshold_mode)
