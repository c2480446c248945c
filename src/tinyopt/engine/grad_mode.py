"""Whether new graph nodes record gradients: ``no_grad`` turns it off inside a ``with`` block.

``no_grad``, ``enable_grad``, ``inference_mode`` and ``set_grad_enabled`` work as context managers
and decorators, as in PyTorch.  The state is per thread.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    enabled = True  # every thread starts with grad mode on
    fold = True     # ops over concrete tensors run at once (off while autodiff builds a graph)


current = _State()
"""This thread's mode (``enabled``, ``fold``), read by the engine as it makes each node; the
context managers below set it."""


def is_grad_enabled() -> bool:
    """Whether operations are recorded for autograd now (False inside ``no_grad``)."""
    return current.enabled


def is_inference_mode_enabled() -> bool:
    """Whether inference mode is on (inside ``inference_mode()``)."""
    return not current.enabled


class _Mode:
    """A context manager and decorator that sets grad mode to ``_mode`` and restores it."""

    _mode = True

    def __enter__(self) -> None:
        self._prev = current.enabled
        current.enabled = self._mode

    def __exit__(self, *exc: Any) -> None:
        current.enabled = self._prev

    def __call__(self, fn: F) -> F:
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = current.enabled
            current.enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                current.enabled = prev
        return wrapper  # type: ignore[return-value]

    def clone(self) -> _Mode:
        return type(self)()


class _BareMode(_Mode):
    """A mode that also decorates without parentheses: ``@no_grad`` as ``@no_grad()``, as in
    PyTorch (``orig_func``, the decorated function, is what the bare form passes)."""

    def __new__(cls, orig_func: Callable[..., Any] | None = None) -> Any:
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise TypeError(f"{cls.__name__}: expected a function to decorate, got "
                             f"{type(orig_func).__name__}")
        return cls()(orig_func)


class no_grad(_BareMode):
    """Ops inside build tensors that do not require grad."""

    _mode = False


class enable_grad(_BareMode):
    """Turn gradient recording back on (inside ``no_grad``)."""

    _mode = True


class inference_mode(_Mode):
    """``inference_mode(mode=True)``: ``no_grad`` when ``mode`` (tinyopt has no separate
    inference tensors)."""

    def __init__(self, mode: bool = True):
        self._mode = not mode

    def clone(self) -> inference_mode:
        """A new context manager with the same mode (what decorators use for each call)."""
        return inference_mode(not self._mode)


class set_grad_enabled(_Mode):
    """``set_grad_enabled(mode)``: sets grad mode at once (as a function), and restores it when
    used as a context manager or decorator."""

    def __init__(self, mode: bool):
        self._prev = current.enabled
        self._mode = bool(mode)
        current.enabled = self._mode

    def __enter__(self) -> None:
        current.enabled = self._mode

    def __call__(self, fn: F) -> F:
        current.enabled = self._prev  # as a decorator it changes nothing until ``fn`` runs
        return super().__call__(fn)

    def clone(self) -> set_grad_enabled:
        """A new context manager with the same mode (what decorators use for each call)."""
        return set_grad_enabled(self._mode)


class no_fold:
    """Inside, ops over concrete tensors record graph nodes instead of running at once: autodiff
    builds gradient graphs this way, so a compiled plan never captures one step's values."""

    def __enter__(self) -> None:
        self._prev = current.fold
        current.fold = False

    def __exit__(self, *exc: Any) -> None:
        current.fold = self._prev
