"""``LRScheduler``: the mechanism every scheduler shares, written once.

- the optimizer check (``TypeError: list is not an Optimizer``) and ``initial_lr``/``base_lrs``;
- the constructor's first step, the epoch counting, ``step(epoch)``'s deprecated closed form;
- the call-order warnings: ``lr_scheduler.step()`` before ``optimizer.step()`` (read from the
  optimizer's own step counter: the optimizer's ``step`` is never wrapped on the instance, so a
  scheduler makes no reference cycle), and ``get_lr()`` called outside ``step()``;
- ``state_dict()``/``load_state_dict()``: plain data (JSON-able), PyTorch's keys; a loaded dict is
  checked entirely before anything changes (unknown keys, types against the current state, what
  the constructor would reject), so a rejected load leaves no key behind and a key named like a
  method (``step``) can never shadow it.

A subclass gives its constructor (PyTorch's arguments and checks), ``_lr()`` (the chainable
update of the groups' lrs) and, where there is one, ``_get_closed_form_lr()``; ``_check_values``
re-applies its constructor checks to a loaded state.
"""

from __future__ import annotations

import copy
import math
import types
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tinyopt.optim.optimizer import Optimizer

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being "
    "deprecated where possible. Please use `scheduler.step()` to step the "
    "scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. "
    "Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose."
)

_PER_GROUP = ("base_lrs", "_last_lr", "min_lrs", "max_lrs", "base_momentums", "max_momentums",
              "lr_lambdas")

_LEGACY_KEYS = frozenset({"verbose"})
"""Keys of older PyTorch scheduler states that no longer mean anything (ignored on load)."""


# ---- shared helpers -----------------------------------------------------------------------------
def check_optimizer(optimizer: Any) -> Optimizer:
    """``optimizer``, or PyTorch's TypeError when it is not an Optimizer."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
    return optimizer


def per_group(name: str, optimizer: Any, value: Any) -> list[Any]:
    """One value per param group: a scalar is repeated, a list/tuple must have one per group."""
    groups = check_optimizer(optimizer).param_groups
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. "
                f"{name} has {len(value)} values, param_groups has {len(groups)}.")
        return list(value)
    return [value] * len(groups)


def group_values(optimizer: Optimizer, key: str) -> list[Any]:
    """``[group[key] for group in optimizer.param_groups]`` (KeyError when a group lacks it)."""
    return [group[key] for group in optimizer.param_groups]


def set_momentum(group: dict[str, Any], momentum: float, use_beta1: bool) -> None:
    """Write a cycled momentum: ``betas[0]`` for Adam-like optimizers, else ``momentum``."""
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def check_momentum_support(optimizer: Optimizer) -> bool:
    """Whether the optimizer cycles ``betas[0]`` (else ``momentum``); ValueError if neither."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option "
                         "enabled")
    return "betas" in optimizer.defaults


def plain(value: Any) -> Any:
    """A deep copy of ``value`` made of plain containers (tuple -> list, mappings -> dict; a
    Counter stays a Counter, which PyTorch's MultiStepLR needs and JSON saves as a dict)."""
    if isinstance(value, Counter):
        return Counter({k: plain(v) for k, v in value.items()})
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return copy.deepcopy(value)


def callable_state(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """State of a callable object (its ``__dict__``); None for plain functions and lambdas."""
    if isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__"):
        return None
    return plain(fn.__dict__)


def check_callable_state(where: str, fn: Callable[..., Any], saved: Any) -> None:
    """A saved ``callable_state`` must fit ``fn``: None, or a dict of its existing attributes."""
    if saved is None:
        return
    own = callable_state(fn)
    if own is None:
        raise ValueError(f"loaded state dict: {where} is a function here, whose state is not "
                         f"saved, but the dict holds {type(saved).__name__} {saved!r:.60}")
    if not isinstance(saved, Mapping) or not set(saved) <= set(own):
        raise ValueError(f"loaded state dict: {where} must be None or a dict of the attributes "
                         f"{sorted(own)} of {type(fn).__name__}, got {saved!r:.60}")


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fits(new: Any, current: Any) -> bool:
    """Whether a loaded value has the kind of the current one (numbers, flags, text, lists of the
    same length, mappings); None on either side fits anything."""
    if current is None or new is None:
        return True
    if isinstance(current, bool):
        return isinstance(new, bool)
    if is_number(current):
        return is_number(new)
    if isinstance(current, str):
        return isinstance(new, str)
    if isinstance(current, (list, tuple)):
        return (isinstance(new, (list, tuple)) and len(new) == len(current)
                and all(_fits(a, b) for a, b in zip(new, current)))
    if isinstance(current, Mapping):
        return isinstance(new, Mapping)
    return True


class within_step:
    """``get_lr()`` is being called by ``step()`` (no warning)."""

    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self) -> None:
        self.o._get_lr_called_within_step = True

    def __exit__(self, *exc: object) -> None:
        self.o._get_lr_called_within_step = False


class _initial_mode:
    """The constructor's step is running (``_is_initial``)."""

    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self) -> None:
        self.o._is_initial = True

    def __exit__(self, *exc: object) -> None:
        self.o._is_initial = False


# ---- the base class -----------------------------------------------------------------------------
class LRScheduler:
    r"""Base class of the schedulers (``torch.optim.lr_scheduler.LRScheduler``).

    Args:
        optimizer: the optimizer whose ``param_groups[i]["lr"]`` this scheduler sets.
        last_epoch: index of the last epoch seen. ``-1`` (default) starts the schedule and writes
            ``group["initial_lr"] = group["lr"]`` into every group that lacks it; any other value
            resumes and requires ``initial_lr`` in every group (KeyError otherwise).

    ``base_lrs`` holds the groups' ``initial_lr``; ``last_epoch`` counts ``step()`` calls (the
    constructor performs the first one, so it is 0 after construction).  A PyTorch-style subclass
    that overrides :meth:`get_lr` works as in PyTorch.

    Warning: constructing a scheduler overwrites ``group["lr"]``; when restoring a checkpoint,
    construct the scheduler before calling the optimizer's ``load_state_dict``.
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False
    _INT_KEYS: tuple[str, ...] = ("last_epoch", "_step_count")
    _NESTED_STATE: tuple[str, ...] = ()  # keys whose values a subclass saves in its own way

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        check_optimizer(optimizer)
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
        self.base_lrs: list[float] = group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and perform the constructor's step."""
        self._step_count = 0
        with _initial_mode(self):
            self.step()

    # ---- stepping ---------------------------------------------------------------------------------
    def get_last_lr(self) -> list[float]:
        """The learning rates of the param groups as last set by this scheduler (a new list)."""
        return list(self._last_lr)

    def get_lr(self) -> list[float]:
        """Compute the learning rates of the next step (``step()`` calls it; use
        :meth:`get_last_lr` to read the current ones)."""
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=2)
        return self._lr()

    def _lr(self) -> list[float]:
        """The chainable update: this step's lr of every group (built-in schedulers)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule by one step and write the new lrs into the param groups.

        Call it after ``optimizer.step()``. ``epoch`` is deprecated (as in PyTorch): when given,
        ``last_epoch`` is set to it and the closed form is used where one exists.
        """
        if self._step_count == 1:
            self._warn_call_order()
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _warn_call_order(self) -> None:
        """PyTorch's warnings when the first ``step()`` after construction comes before any
        ``optimizer.step()`` (the optimizer counts its own steps)."""
        if "step" in vars(self.optimizer):
            warnings.warn(
                "Seems like `optimizer.step()` has been overridden after learning rate scheduler "
                "initialization. Please, make sure to call `optimizer.step()` before "
                "`lr_scheduler.step()`. See more details at "
                "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                UserWarning, stacklevel=3)
        elif not getattr(self.optimizer, "_opt_called", False):
            warnings.warn(
                "Detected call of `lr_scheduler.step()` before `optimizer.step()`. "
                "In PyTorch 1.1.0 and later, you should call them in the opposite order: "
                "`optimizer.step()` before `lr_scheduler.step()`.  Failure to do this "
                "will result in PyTorch skipping the first value of the learning rate schedule. "
                "See more details at "
                "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                UserWarning, stacklevel=3)

    def _update_lr(self, epoch: int | None = None) -> None:
        with within_step(self):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        self._set_lrs(values)

    def _set_lrs(self, values: list[float]) -> None:
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr: list[float] = group_values(self.optimizer, "lr")

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute except the optimizer, as plain data."""
        return {key: plain(value) for key, value in self.__dict__.items()
                if key != "optimizer" and key not in self._NESTED_STATE}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state returned by :meth:`state_dict` (of tinyopt or of PyTorch, possibly
        through JSON); nothing changes when it is rejected."""
        self._check_state_dict(state_dict)
        self._install(state_dict)

    def restore_point(self) -> Callable[[], None]:
        """A function that puts this scheduler back as it is now (the rollback protocol of
        ``tinyopt.load_into``, see ``tinyopt.checkpoint.restore``): its attributes, with their
        lists, dicts and arrays copied, so that a rejected state that added a key (say ``step``)
        or changed a list in place leaves nothing behind."""
        attrs = {k: copy.copy(v) if isinstance(v, (list, dict, np.ndarray)) else v
                 for k, v in vars(self).items()}

        def restore() -> None:
            d = vars(self)
            d.clear()
            d.update(attrs)
        return restore

    def _check_state_dict(self, state_dict: Any) -> None:
        """Raise before anything changes if ``state_dict`` cannot be loaded into this scheduler."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        own = self.state_dict()
        name = type(self).__name__
        for key, value in state_dict.items():
            if key in _LEGACY_KEYS:
                continue
            if key not in own:
                raise ValueError(f"loaded state dict has the key {key!r}, which is not part of "
                                 f"the state of {name} (its keys: {sorted(own)})")
            if key in self._NESTED_STATE:
                continue
            if not _fits(value, own[key]):
                if (key in _PER_GROUP and isinstance(value, (list, tuple))
                        and len(value) != len(own[key])):
                    raise ValueError(f"loaded state dict has {len(value)} values in {key!r}, but "
                                     f"the optimizer of this {name} has {len(own[key])} param "
                                     "groups")
                raise ValueError(f"loaded state dict: {key!r} = {value!r:.60} does not fit the "
                                 f"state of {name} ({own[key]!r:.60})")
        merged = {**own, **{k: v for k, v in state_dict.items() if k not in _LEGACY_KEYS}}
        for key in self._INT_KEYS:
            if key in merged and not is_int(merged[key]):
                raise ValueError(f"loaded state dict: {key!r} = {merged[key]!r:.60}, expected an "
                                 f"integer")
        if merged.get("_step_count", 0) < 0 or merged.get("last_epoch", -1) < -1:
            raise ValueError(f"loaded state dict: negative step counts (last_epoch "
                             f"{merged.get('last_epoch')}, _step_count {merged.get('_step_count')})")
        for key in ("base_lrs", "_last_lr"):
            for v in merged.get(key) or ():
                if not (is_number(v) and math.isfinite(v) and v >= 0):
                    raise ValueError(f"loaded state dict: {key!r} holds {v!r}, expected finite "
                                     f"learning rates >= 0")
        self._check_values(merged)

    def _check_values(self, state: dict[str, Any]) -> None:
        """Raise (the constructor's message) for a loaded value the constructor would reject."""

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        """Set the attributes of a checked state dict."""
        self.__dict__.update({key: plain(value) for key, value in state_dict.items()
                              if key != "optimizer" and key not in self._NESTED_STATE
                              and key not in _LEGACY_KEYS})


class _LRScheduler(LRScheduler):
    """Deprecated alias of :class:`LRScheduler` kept for code written against PyTorch < 2.0."""
