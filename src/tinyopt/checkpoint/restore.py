"""Restoring a checkpoint into live objects, all or nothing: ``load_into`` and the rollback
protocol it restores through.

Before ``load_into`` loads anything, it takes a *restore point* of every object it was given: a
function that puts the object back exactly as it is now.  If loading one object raises, that
object and those already loaded are put back, so either every object is restored or none changes.

The protocol: an object with a ``restore_point()`` method makes its own restore point.  Objects
whose state is more than their state dict implement it -- a ``DataLoader`` (its attributes as
they were, so the epoch iterator in use stays attached to it, and its generators' states), the
learning-rate schedulers (their attributes with their containers copied, so a rejected state that
added a key leaves nothing behind; a composite scheduler puts its members back too), a
``Generator`` and a ``ZeroRedundancyOptimizer`` (this rank's shard: ``state_dict()`` would need
every rank).  Any other object -- a module, an optimizer, a stateful callback -- is put back by
``load_state_dict`` of a copy of its ``state_dict()``.
"""

from __future__ import annotations

import collections.abc
import os
from typing import Any

import numpy as np

from tinyopt.checkpoint.archive import read
from tinyopt.checkpoint.format import CheckpointError, tensor_array
from tinyopt.engine import random
from tinyopt.engine.tensor import Tensor

__all__ = ["load_into", "restore_point"]


def restore_point(obj: Any) -> collections.abc.Callable[[], None]:
    """A function that puts ``obj`` back as it is now: ``obj.restore_point()`` when it has one,
    else ``load_state_dict`` of a copy of its current ``state_dict()``."""
    own = getattr(obj, "restore_point", None)
    if callable(own) and not isinstance(obj, type):
        return own()
    snapshot = _snapshot(obj.state_dict())
    return lambda: obj.load_state_dict(snapshot)


def _snapshot(v: Any) -> Any:
    """A copy of a state dict that later in-place updates of the object cannot change."""
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, Tensor):
        return np.array(tensor_array(v), copy=True)
    if isinstance(v, collections.abc.Mapping):
        items = [(k, _snapshot(x)) for k, x in v.items()]
        try:
            return type(v)(items)
        except TypeError:
            return dict(items)
    if isinstance(v, list):
        return [_snapshot(x) for x in v]
    if isinstance(v, tuple):
        copied = [_snapshot(x) for x in v]
        return type(v)(*copied) if hasattr(v, "_fields") else tuple(copied)
    return v


def load_into(path: str | os.PathLike, /, **objects: Any) -> dict[str, Any]:
    """Restore objects from a checkpoint, all or nothing; returns the entries not loaded.

    Each keyword names an entry: objects with ``load_state_dict`` get its state dict, Generators
    its state.  The global generator is restored from ``rng`` when the checkpoint has one (pass
    ``rng=False`` to skip it, or ``rng=<Generator>`` to restore into another generator).

    The whole file is read and checked first (``CheckpointError`` for a bad file or a missing
    entry).  Then a restore point of each object is taken (``tinyopt.checkpoint.restore``) and
    ``load_state_dict`` is called on each in keyword order; if one raises, the objects already
    loaded are put back and the error propagates, so either every object is restored or none
    changes -- a data loader stays attached to the epoch iterator it had, a scheduler keeps no key
    the rejected file added.
    """
    path = os.fspath(path)
    records, values = read(path)
    rng = objects.pop("rng", None)
    if rng is None:
        if "rng" in records and records["rng"]["kind"] == "generator":
            objects["rng"] = random.default_generator
    elif rng is True:
        objects["rng"] = random.default_generator
    elif isinstance(rng, random.Generator):
        objects["rng"] = rng
    elif rng is not False:
        raise TypeError(f"load_into: rng must be True, False or a tinyopt Generator, got {rng!r}")

    for name, obj in objects.items():
        if name not in records:
            held = ", ".join(records) or "nothing"
            raise CheckpointError(path, f"has no entry {name!r} (it holds: {held})")
        kind = records[name]["kind"]
        if isinstance(obj, random.Generator):
            if kind != "generator":
                raise CheckpointError(path, f"entry {name!r} is a {kind} entry, not a generator "
                                            f"state, so it cannot be loaded into a Generator")
        elif callable(getattr(obj, "load_state_dict", None)):
            if kind != "state":
                raise CheckpointError(path, f"entry {name!r} is a {kind} entry, not a state dict, "
                                            f"so it cannot be loaded into a "
                                            f"{type(obj).__name__}")
        else:
            raise TypeError(f"load_into: {name}={type(obj).__name__} has no load_state_dict(); "
                            f"use tinyopt.load(path)[{name!r}] to read plain values")

    restores = [restore_point(obj) for obj in objects.values()]
    for i, (name, obj) in enumerate(objects.items()):
        try:
            if isinstance(obj, random.Generator):
                obj.set_state(values[name])
            else:
                obj.load_state_dict(values[name])
        except BaseException as error:
            try:  # in case it changed something before rejecting the state
                restores[i]()
            except Exception:  # noqa: BLE001 - it may reject its own old state too
                pass
            for restore in reversed(restores[:i]):
                try:
                    restore()
                except Exception as e:  # noqa: BLE001
                    raise RuntimeError(f"load_into: loading {name!r} from {path} failed "
                                       f"({error!r}), and restoring the previous state of the "
                                       f"objects already loaded failed too ({e!r}); they may be "
                                       f"inconsistent") from error
            raise
    return {name: value for name, value in values.items() if name not in objects}
