"""Where ``fit`` runs: the strategy that places its data, steps and checkpoints.

``fit`` asks the model for one (``model.fit_strategy()``) and uses this single-process default
when the model has none; a ``DistributedDataParallel`` model returns the data-parallel one
(``tinyopt.distributed.fitting``), which trains every rank on its share of the data and combines
the metrics.  ``fit`` knows nothing else of where it runs: these hooks are the whole contract.

    class MyStrategy(FitStrategy):        # what a model's fit_strategy() may return
        def reduce(self, acc):            # combine an epoch's sums with other workers'
            ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tinyopt.data import DataLoader
from tinyopt.engine import random
from tinyopt.train.results import Accumulator

__all__ = ["FitStrategy", "strategy_of"]


class FitStrategy:
    """Training in this process (the default).  Subclasses override what differs.

    ``is_main``: this process reports progress and writes checkpoints.
    ``update_in_backward``: the optimizer step may run inside the backward plan
    (``tinyopt.optim.in_plan``) when nothing sits between backward and step.
    """

    is_main = True
    update_in_backward = True

    def check(self, where: str, *, predictions: bool) -> None:
        """Refuse the ``fit`` arguments this strategy cannot honour (ValueError)."""

    def train_loader(self, train_set: Any, batch_size: int, shuffle: bool,
                     seed: int | None) -> tuple[DataLoader, int]:
        """The training loader, and the number of samples an epoch of it holds."""
        generator = random.Generator(int(seed)) if seed is not None else None
        loader = DataLoader(train_set, batch_size=batch_size, shuffle=shuffle,
                            generator=generator)
        return loader, len(train_set)

    def val_part(self, val_set: Any) -> Any:
        """The part of the validation data this process evaluates."""
        return val_set

    def epoch_begin(self, epoch: int) -> None:
        """Called before each training epoch."""

    def sync(self, end: int, logical: int, n: int) -> contextlib.AbstractContextManager[Any]:
        """The context of a physical batch ending at sample ``end`` of the ``n`` of the epoch,
        with ``logical`` samples per optimizer step."""
        return contextlib.nullcontext()

    def reduce(self, acc: Accumulator) -> None:
        """Combine an epoch's sums with the other processes' (in place)."""

    def save(self, optimizer: Any, write: Callable[[dict[str, Any] | None], None]) -> None:
        """Write the checkpoint: ``write(extra)``, with ``extra`` entries for ``fit``'s
        checkpoint entry (or None)."""
        write(None)

    def restore(self, path: str, batch_size: int, restore: Callable[[], Any]) -> Any:
        """Resume from the checkpoint at ``path``: ``restore()`` loads it into the objects
        (all or nothing); returns what it returns."""
        return restore()


def strategy_of(model: Any) -> FitStrategy:
    """The model's strategy (``model.fit_strategy()``), else training in this process."""
    provide = getattr(model, "fit_strategy", None)
    return provide() if callable(provide) else FitStrategy()
