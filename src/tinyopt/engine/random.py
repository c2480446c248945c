"""tinyopt's global random number generator, seeded by ``tinyopt.manual_seed``.

Initialisation, dropout masks and data shuffling draw from it (or from a ``Generator`` passed
explicitly), so one ``manual_seed(n)`` makes a run reproducible.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class Generator:
    """A seedable random generator with a saveable state, like ``torch.Generator``."""

    def __init__(self, seed: int | None = None):
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._seed = seed

    def manual_seed(self, seed: int) -> Generator:
        """Reseed this generator with ``seed`` (an int); returns the generator."""
        self._rng = np.random.Generator(np.random.PCG64(int(seed)))
        self._seed = int(seed)
        return self

    def initial_seed(self) -> int | None:
        """The seed this generator was last seeded with (None if it was seeded from entropy)."""
        return self._seed

    @property
    def numpy(self) -> np.random.Generator:
        """The underlying numpy generator."""
        return self._rng

    def get_state(self) -> dict:
        """A JSON-able snapshot of the generator state."""
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        """Restore a state from :meth:`get_state`; a malformed state raises and leaves the
        generator as it was."""
        bg = np.random.PCG64()
        bg.state = state  # validates the layout before anything changes
        self._rng = np.random.Generator(bg)

    def restore_point(self) -> Callable[[], None]:
        """A function that puts this generator back in its present state (the rollback protocol
        of ``tinyopt.load_into``; see ``tinyopt.checkpoint.restore``)."""
        state = self.get_state()
        return lambda: self.set_state(state)


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the global generator (initialisation, dropout, shuffling)."""
    return default_generator.manual_seed(seed)


def get_rng_state() -> dict:
    """A JSON-able snapshot of the global generator's state (for :func:`set_rng_state`)."""
    return default_generator.get_state()


def set_rng_state(state: dict) -> None:
    """Restore the global generator from :func:`get_rng_state`'s snapshot."""
    default_generator.set_state(state)


def seed() -> int:
    """Seed the global generator from the operating system's entropy; returns the seed."""
    s = int(np.random.SeedSequence().entropy % (1 << 63))
    default_generator.manual_seed(s)
    return s


def initial_seed() -> int | None:
    """The seed the global generator was last seeded with (None if seeded from entropy)."""
    return default_generator.initial_seed()
