"""Callbacks of ``fit``: plain functions or objects with any of these methods.

=====================================  ============================================================
``on_train_begin()``                   before the first epoch (after every check has passed)
``on_epoch_begin(epoch)``              before epoch ``epoch`` (0-based)
``on_before_step(step)``               gradients of optimizer step ``step`` (0-based, counted over
                                       the whole fit) are complete and the step is about to run:
                                       the place for ``nn.utils.clip_grad_norm_``
``on_epoch_end(epoch, record)``        after validation, with the :class:`EpochRecord`; return True
                                       to stop training (early stopping)
``on_train_end(history)``              after the last epoch, with the :class:`History`
=====================================  ============================================================

A plain callable ``f`` is ``on_epoch_end``: ``f(epoch, record)``, returning True to stop.
Subclassing :class:`Callback` is optional; it only provides no-op methods.
"""

from __future__ import annotations

from typing import Any

from tinyopt.train.results import EpochRecord, History

HOOKS = ("on_train_begin", "on_epoch_begin", "on_before_step", "on_epoch_end", "on_train_end")


class Callback:
    """Base class with no-op hooks (see the module docstring)."""

    def on_train_begin(self) -> None:
        """Before the first epoch, after every check has passed."""
        pass

    def on_epoch_begin(self, epoch: int) -> None:
        """Before epoch ``epoch`` (0-based)."""
        pass

    def on_before_step(self, step: int) -> None:
        """The gradients of optimizer step ``step`` (0-based, over the whole fit) are complete and
        the step is about to run: the place for ``nn.utils.clip_grad_norm_``."""
        pass

    def on_epoch_end(self, epoch: int, record: EpochRecord) -> bool | None:
        """After validation, with the epoch's :class:`EpochRecord`; return True to stop training
        (early stopping)."""
        return None

    def on_train_end(self, history: History) -> None:
        """After the last epoch, with the :class:`History`."""
        pass


class _Function(Callback):
    def __init__(self, fn):
        self.fn = fn

    def on_epoch_end(self, epoch: int, record: EpochRecord) -> bool | None:
        return self.fn(epoch, record)


class CallbackList:
    """Dispatches each hook to every callback that defines it."""

    def __init__(self, where: str, callbacks: Any):
        if callbacks is None:
            callbacks = ()
        elif callable(callbacks) or any(hasattr(callbacks, h) for h in HOOKS):
            callbacks = (callbacks,)
        items = []
        for i, cb in enumerate(callbacks):
            if any(callable(getattr(cb, h, None)) for h in HOOKS):
                items.append(cb)
            elif callable(cb):
                items.append(_Function(cb))
            else:
                raise TypeError(f"{where}: callbacks[{i}] must be callable or have one of the "
                                f"methods {', '.join(HOOKS)}; got {type(cb).__name__}")
        self.items = items
        self.before_step = [cb.on_before_step for cb in items
                            if callable(getattr(cb, "on_before_step", None))]

    def call(self, hook: str, *args: Any) -> bool:
        """Call ``hook`` on every callback; True if any returned True."""
        stop = False
        for cb in self.items:
            method = getattr(cb, hook, None)
            if callable(method) and method(*args) is True:
                stop = True
        return stop
