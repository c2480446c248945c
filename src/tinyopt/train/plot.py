"""``History.plot``: a ``fit`` history's loss and accuracy curves, per epoch, with bands of one
standard error, for training and validation (matplotlib, the optional ``plot`` extra)::

    history = to.fit(model, (x, y), loss_fn, opt, epochs=10, val_split=0.1)
    history.plot("curves.png")                  # a PNG (or .pdf, .svg: the suffix says)
    fig, (a, b) = plt.subplots(1, 2)
    history.plot(axes=(a, b))                   # into your own figure

The training numbers of an epoch are the means over its batches (the model changing as it goes),
the validation numbers those of the model at the end of the epoch; each band is mean ± the
standard error :class:`~tinyopt.train.results.Result` reports (no band where it is undefined,
as for a single batch).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tinyopt.train.results import History, Result

INSTALL = "History.plot needs matplotlib: pip install 'tinyopt[plot]' (or pip install matplotlib)"


def _matplotlib() -> Any:
    try:
        import matplotlib.figure
    except ImportError as e:
        raise ImportError(INSTALL) from e
    return matplotlib.figure


def _curve(ax: Any, epochs: np.ndarray, results: list[Result | None], what: str, label: str,
           color: str, scale: float) -> None:
    """One curve with its band: ``what`` is ``loss`` or ``accuracy``."""
    rows = [(e, getattr(r, what), getattr(r, what + "_unc")) for e, r in zip(epochs, results)
            if r is not None and getattr(r, what) is not None]
    if not rows:
        return
    x = np.array([e for e, _, _ in rows], dtype=float)
    y = np.array([v for _, v, _ in rows], dtype=float) * scale
    unc = np.array([u if u is not None and not math.isnan(u) else np.nan for _, _, u in rows],
                   dtype=float) * scale
    ax.plot(x, y, marker="o", markersize=3, color=color, label=label)
    ok = ~np.isnan(unc)
    if ok.any():
        ax.fill_between(x, y - unc, y + unc, where=ok, color=color, alpha=0.25, linewidth=0)


def plot_history(history: History, file: str | os.PathLike | None = None, *,
                 axes: Any = None) -> Any:
    """Draw ``history`` (see the module docstring) and return the matplotlib Figure.

    Args:
        file: where to save the figure (format from the suffix: ``.png``, ``.pdf``, ``.svg``...);
            None saves nothing.
        axes: draw into these instead of a new figure: one Axes (the loss only) or a pair (loss,
            accuracy).  Without it, a new figure has the loss on the left and, for
            classification losses, the accuracy in percent on the right.
    """
    figure_module = _matplotlib()
    classification = any(r.accuracy is not None for r in history.train)
    if axes is None:
        fig = figure_module.Figure(figsize=(10 if classification else 5.5, 4), layout="constrained")
        axes = fig.subplots(1, 2 if classification else 1)
    loss_ax, acc_ax = (axes, None) if not isinstance(axes, (Sequence, np.ndarray)) else \
        (axes[0], axes[1] if len(axes) > 1 else None)
    epochs = np.array([r.epoch + 1 for r in history.records])
    for ax, what, scale, label in ((loss_ax, "loss", 1.0, "loss"),
                                   (acc_ax, "accuracy", 100.0, "accuracy (%)")):
        if ax is None or (what == "accuracy" and not classification):
            continue
        _curve(ax, epochs, history.train, what, "train", "C0", scale)
        _curve(ax, epochs, history.val, what, "validation", "C1", scale)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if len(epochs):
            ax.set_xticks(epochs if len(epochs) <= 12 else
                          np.unique(np.linspace(epochs[0], epochs[-1], 12).round().astype(int)))
        if ax.get_lines():  # (an empty history has no curve to name)
            ax.legend(title="± 1 standard error", fontsize="small", title_fontsize="small")
    fig = loss_ax.figure
    if file is not None:
        fig.savefig(os.fspath(file), dpi=120)
    return fig
