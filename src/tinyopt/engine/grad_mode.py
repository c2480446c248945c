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


_state = _State()


def is_grad_enabled() -> bool:
    """Whether operations are recorded for autograd now (False inside ``no_grad``)."""
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """Whether inference mode is on (inside ``inference_mode()``)."""
    return not _state.enabled


class _Mode:
    """A context manager and decorator that sets grad mode to ``_mode`` and restores it."""

    _mode = True

    def __enter__(self) -> None:
        self._prev = _state.enabled
        _state.enabled = self._mode

    def __exit__(self, *exc: Any) -> None:
        _state.enabled = self._prev

    def __call__(self, fn: F) -> F:
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = _state.enabled
            _state.enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                _state.enabled = prev
        return wrapper  # type: ignore[return-value]

    def clone(self) -> _Mode:
        return type(self)()


class no_grad(_Mode):
    """Ops inside build tensors that do not require grad."""

    _mode = False


class enable_grad(_Mode):
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
        self._prev = _state.enabled
        self._mode = bool(mode)
        _state.enabled = self._mode

    def __enter__(self) -> None:
        _state.enabled = self._mode

    def __call__(self, fn: F) -> F:
        _state.enabled = self._prev  # as a decorator it changes nothing until ``fn`` runs
        return super().__call__(fn)

    def clone(self) -> set_grad_enabled:
        """A new context manager with the same mode (what decorators use for each call)."""
        return set_grad_enabled(self._mode)


class no_fold:
    """Inside, ops over concrete tensors record graph nodes instead of running at once: autodiff
    builds gradient graphs this way, so a compiled plan never captures one step's values."""

    def __enter__(self) -> None:
        self._prev = _state.fold
        _state.fold = False

    def __exit__(self, *exc: Any) -> None:
        _state.fold = self._prev
