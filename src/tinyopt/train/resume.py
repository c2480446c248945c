"""``fit``'s checkpoints: save after every epoch, resume exactly where a run stopped.

    history = tinyopt.fit(model, data, loss_fn, opt, epochs=2, batch_size=64,
                          scheduler=sched, checkpoint="run.tinyopt")
    ...                                   # later, in a fresh process, with fresh objects:
    history = tinyopt.fit(model, data, loss_fn, opt, epochs=4, batch_size=64,
                          scheduler=sched, checkpoint="run.tinyopt", resume="run.tinyopt")
    len(history)                          # 4: the two saved epochs, then epochs 3 and 4

A ``fit`` checkpoint is an ordinary ``tinyopt.save`` file (so ``tinyopt.load_into(path,
model=model)`` reads just the weights from it) with these entries:

==================  ================================================================================
``model``           the model's state dict (parameters and buffers, e.g. BatchNorm running stats)
``optimizer``       the optimizer's state dict (state buffers, step counts, hyperparameters)
``scheduler``       the scheduler's state dict (only when ``fit`` was given one)
``loader``          ``fit``'s training DataLoader: the shuffling generator's state
``callback_<i>``    the state dict of the i-th callback, for callbacks with ``state_dict()`` and
                    ``load_state_dict()`` (as Lightning saves stateful callbacks)
``rng``             tinyopt's global generator (dropout masks, and shuffling when ``seed=None``)
``fit``             ``{"epoch": epochs done, "step": optimizer steps done, "history": the History
                    as a dict, "config": batch sizes, training samples, shuffle}``
==================  ================================================================================

Together these are everything that the rest of the run depends on, so a resumed ``fit`` takes
bit-for-bit the steps the uninterrupted one would have taken.
"""

from __future__ import annotations

import collections.abc
import os
from typing import Any

from tinyopt.checkpoint import load, load_into, save
from tinyopt.train.results import History

FORMAT = 1  # version of the "fit" entry


def check_path(where: str, name: str, path: Any, *, exists: bool) -> str:
    """``path`` as a str; its folder (``exists=False``) or the file itself (``exists=True``) must
    exist, so a typo fails before training rather than after the first epoch."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{where}: {name} must be a path (str or os.PathLike), got "
                        f"{type(path).__name__}")
    path = os.fspath(path)
    if exists:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{where}: {name} checkpoint {path!r} does not exist")
    else:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{where}: the folder of {name}={path!r} does not exist")
        if os.path.isdir(path):
            raise IsADirectoryError(f"{where}: {name}={path!r} is a folder; give a file name")
    return path


def stateful(callbacks: list[Any]) -> dict[str, Any]:
    """``{"callback_<i>": cb}`` for the callbacks that can save and restore their state."""
    return {f"callback_{i}": cb for i, cb in enumerate(callbacks)
            if callable(getattr(cb, "state_dict", None))
            and callable(getattr(cb, "load_state_dict", None))}


def save_fit(path: str, *, model: Any, optimizer: Any, scheduler: Any, loader: Any,
             callbacks: dict[str, Any], epoch: int, step: int, history: History,
             config: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
    """Write a ``fit`` checkpoint (atomically; see ``tinyopt.checkpoint.save``); ``extra``
    entries go into the ``fit`` entry (under DDP: ``world_size`` and ``rng_ranks``, every rank's
    generator)."""
    objects: dict[str, Any] = {"model": model, "optimizer": optimizer, "loader": loader}
    if scheduler is not None:
        objects["scheduler"] = scheduler
    objects.update(callbacks)
    state = {"format": FORMAT, "epoch": epoch, "step": step, "history": history.as_dict(),
             "config": config, **(extra or {})}
    save(path, **objects, fit=state)


def restore_fit(where: str, path: str, *, model: Any, optimizer: Any, scheduler: Any,
                loader: Any, callbacks: dict[str, Any],
                config: dict[str, Any]) -> tuple[int, int, History]:
    """Restore a ``fit`` checkpoint into the objects, all or nothing; return ``(epochs done,
    optimizer steps done, the saved History)``.

    The file and its ``fit`` entry are checked against this call (same number of training
    samples, shuffle, a scheduler exactly when the checkpoint has one, the same stateful
    callbacks) before any object changes; ``tinyopt.load_into`` then restores every object and
    the global generator, or none.
    """
    values = load(path)

    def bad(problem: str) -> ValueError:
        return ValueError(f"{where}: cannot resume from {path}: {problem}")

    state = values.get("fit")
    if not isinstance(state, collections.abc.Mapping) or "epoch" not in state:
        raise bad("it was not written by fit(checkpoint=...) (it has no 'fit' entry; use "
                  "tinyopt.load_into to restore objects from other checkpoints)")
    if state.get("format") != FORMAT:
        raise bad(f"unknown fit checkpoint format {state.get('format')!r}")
    epoch, step = state["epoch"], state["step"]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (epoch, step)):
        raise bad(f"bad epoch/step counters {epoch!r}/{step!r}")
    saved = state.get("config") or {}
    if "n_train" in saved and saved["n_train"] != config["n_train"]:
        raise bad(f"it was written for {saved['n_train']} training samples, this call has "
                  f"{config['n_train']}")
    if "shuffle" in saved and saved["shuffle"] != config["shuffle"]:
        raise bad(f"it was written with shuffle={saved['shuffle']}, this call has "
                  f"shuffle={config['shuffle']}")
    if scheduler is not None and "scheduler" not in values:
        raise bad("it holds no scheduler state, but fit was given a scheduler")
    if scheduler is None and "scheduler" in values:
        raise bad("it holds a scheduler state; pass the scheduler to fit to resume it")
    saved_callbacks = sorted(k for k in values if k.startswith("callback_"))
    if saved_callbacks != sorted(callbacks):
        raise bad(f"it holds the state of callbacks {saved_callbacks}, but the stateful "
                  f"callbacks of this call are {sorted(callbacks)} (callback_<i>: the i-th "
                  f"callback with state_dict/load_state_dict)")
    try:
        history = History.from_dict(state["history"])
    except (KeyError, TypeError, ValueError) as e:
        raise bad(f"its history is malformed ({e})") from e
    if len(history) != epoch:
        raise bad(f"its history has {len(history)} epochs but its epoch counter is {epoch}")
    objects: dict[str, Any] = {"model": model, "optimizer": optimizer, "loader": loader}
    if scheduler is not None:
        objects["scheduler"] = scheduler
    objects.update(callbacks)
    load_into(path, **objects)
    history.stopped_early = False
    return epoch, step, history
