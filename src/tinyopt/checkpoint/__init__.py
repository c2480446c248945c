"""Checkpoints: ``save``, ``load`` and ``load_into`` — safe, atomic, exact.

    tinyopt.save("run.tinyopt", model=model, optimizer=opt, scheduler=sched, loader=loader,
                  epoch=3, note="lr sweep")
    ...                                              # later, in a fresh process:
    meta = tinyopt.load_into("run.tinyopt", model=model, optimizer=opt, scheduler=sched,
                             loader=loader)          # all-or-nothing; restores the global RNG too
    meta["epoch"], meta["note"]                      # -> 3, "lr sweep"
    everything = tinyopt.load("run.tinyopt")         # {"model": {...state dict...}, ..., "rng": {...}}

What a checkpoint holds (each keyword of ``save`` is one named entry):

- objects with ``state_dict()`` (modules, optimizers, schedulers, data loaders, ...): their state dict;
  ``load_into`` gives it back through ``load_state_dict``;
- ``tinyopt.Generator`` objects: their state (``load_into`` calls ``set_state``);
- any other value: numpy arrays, numpy scalars, ``None``, bools, ints, floats (also nan/inf),
  strings, and lists, tuples and dicts of these (dict keys may be str, int, float, bool, None or
  tuples) — returned as they were saved, with dtypes, 0-d arrays, tuples and key types intact.

RNG: the entry named ``rng`` is reserved for a random generator.  By default ``save`` stores the
global generator's state (``tinyopt.manual_seed``'s, used by initialisation, dropout and data
shuffling) under it, and ``load_into`` restores it, which exact resume needs.  Pass ``rng=False``
to ``save`` to store none, or to ``load_into`` to leave the global generator alone; pass
``rng=<Generator>`` to either to save from / restore into another generator.

The package, one job a module: ``format`` (values <-> a JSON manifest and numpy arrays),
``archive`` (the zip file: written atomically, read whole and checked before anything changes;
no pickle, no code runs), ``restore`` (``load_into``, all or nothing, through restore points).
A truncated, corrupted or foreign file raises ``CheckpointError`` (a ``ValueError``) naming the
file and the problem.
"""

from __future__ import annotations

import os
from typing import Any

from tinyopt.checkpoint.archive import read, write, write_atomically  # noqa: F401 - other formats
from tinyopt.checkpoint.format import CheckpointError, Encoder, entry_for
from tinyopt.checkpoint.restore import load_into
from tinyopt.engine import random

__all__ = ["CheckpointError", "load", "load_into", "save"]


def save(path: str | os.PathLike, /, **objects: Any) -> None:
    """Write ``objects`` (by keyword) to one checkpoint file at ``path``, atomically.

    Each keyword becomes an entry: an object with ``state_dict()`` saves its state dict, a
    ``tinyopt.Generator`` its state, anything else is saved as a value (see the module docstring).
    The global generator's state is saved as ``rng`` unless ``rng=False`` (or ``rng=<Generator>``
    saves that one).  Everything is encoded before the file is touched, so an unsupported value
    raises ``TypeError`` and leaves any existing file as it was.
    """
    path = os.fspath(path)
    rng = objects.pop("rng", True)
    if rng is True:
        objects["rng"] = random.default_generator
    elif isinstance(rng, random.Generator):
        objects["rng"] = rng
    elif rng is not False:
        raise TypeError(f"save: rng must be True, False or a tinyopt Generator, got {rng!r} "
                        f"(the name 'rng' is reserved for a random generator)")
    encoder = Encoder()
    entries = {name: entry_for(name, obj, encoder) for name, obj in objects.items()}
    write(path, entries, encoder)


def load(path: str | os.PathLike, /) -> dict[str, Any]:
    """Read a checkpoint: ``{name: value}`` with each object's state dict, each generator's state
    and each saved value (``rng`` holds the generator state saved by default).

    Raises ``CheckpointError`` for a truncated, corrupted or foreign file; never unpickles.
    """
    return read(path)[1]
