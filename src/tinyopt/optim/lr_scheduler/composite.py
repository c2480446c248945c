"""Schedulers made of schedulers: one after the other (SequentialLR) or all at once
(ChainedScheduler).  Their state nests the members' states under ``"_schedulers"``."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tinyopt.optim.lr_scheduler.base import LRScheduler, group_values
from tinyopt.optim.lr_scheduler.plateau import ReduceLROnPlateau
from tinyopt.optim.optimizer import Optimizer

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

    def restore_point(self) -> Callable[[], None]:
        """As the base class, putting the members back too."""
        members = [s.restore_point() for s in self._schedulers]
        own = super().restore_point()

        def restore() -> None:
            for r in members:
                r()
            own()
        return restore

    def _check_values(self, state: dict[str, Any]) -> None:
        saved = state["_schedulers"]
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self._schedulers):
            n = len(saved) if isinstance(saved, (list, tuple)) else "no"
            raise ValueError(f"loaded state dict has {n} scheduler states, but this "
                             f"{type(self).__name__} has {len(self._schedulers)} schedulers")
        for s, sd in zip(self._schedulers, saved, strict=True):
            s._check_state_dict(sd)

    def _install(self, state_dict: Mapping[str, Any]) -> None:
        super()._install(state_dict)
        for s, sd in zip(self._schedulers, state_dict.get("_schedulers", ()), strict=False):
            s._install(sd)


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
        self._last_lr = group_values(self._schedulers[-1].optimizer, "lr")

    def step(self) -> None:  # type: ignore[override]
        """Step every member once, in order."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = group_values(self._schedulers[-1].optimizer, "lr")
