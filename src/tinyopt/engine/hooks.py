"""The handle returned by every ``register_*_hook`` method (modules and optimizers alike)."""

from __future__ import annotations

import itertools


class RemovableHandle:
    """``remove()`` (or leaving a ``with`` block) unregisters the hook from its registry."""

    _ids = itertools.count()

    def __init__(self, hooks: dict):
        self._hooks = hooks
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
