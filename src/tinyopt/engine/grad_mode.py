"""Whether new graph nodes record gradients: ``no_grad`` turns it off inside a ``with`` block."""

from __future__ import annotations

import functools
import threading

class _State(threading.local):
    enabled = True  # every thread starts with grad mode on


_state = _State()


def is_grad_enabled() -> bool:
    return _state.enabled


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class no_grad:
    """Context manager (and decorator) under which ops build nodes that do not require grad."""

    def __enter__(self) -> None:
        self._prev = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc) -> None:
        set_grad_enabled(self._prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager that turns gradient recording back on."""

    def __enter__(self) -> None:
        self._prev = is_grad_enabled()
        set_grad_enabled(True)
