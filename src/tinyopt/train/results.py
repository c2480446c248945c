"""Results of a pass over a data set (``ggml_opt_result``) and the history ``fit`` returns.

A :class:`Result` holds, for one epoch's training part or one evaluation:

* ``n``: samples seen, ``batches``: physical batches run, ``seconds``: wall time;
* ``loss`` ± ``loss_unc``: the mean loss and its standard error;
* ``accuracy`` ± ``accuracy_unc``: for classification losses only (else None);
* ``predictions``: the predicted classes (or model outputs), in data-set order, when asked for.

Uncertainties follow ``ggml_opt_result_loss`` / ``ggml_opt_result_accuracy``:

* the loss is measured per physical batch, so with batch losses ``l_b`` over ``n_b`` samples
  (``N = sum n_b`` samples, ``B`` batches)::

      loss     = sum_b n_b l_b / N                       (the per-sample mean for a mean-reduced loss)
      var      = sum_b n_b (l_b - loss)^2 / N
      loss_unc = sqrt(var / (B - 1))                     (NaN for B < 2)

  With equal batch sizes this is exactly ggml's ``sqrt(var_batches / (nbatches - 1))``: the
  standard error of the mean of the batch losses.  The weights only matter for a short last batch.
* accuracy is the fraction of correct argmax predictions over the ``m`` labelled targets (samples,
  or positions for (N, C, d1, ...) outputs; targets equal to ``ignore_index`` are not counted)::

      accuracy_unc = sqrt(accuracy (1 - accuracy) / (m - 1))   (NaN for m < 2)

  the binomial standard error, as ggml reports it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Result:
    """Loss and accuracy (with standard errors) of one pass over a data set; see the module doc."""

    n: int
    batches: int
    loss: float
    loss_unc: float
    accuracy: float | None = None
    accuracy_unc: float | None = None
    seconds: float = 0.0
    predictions: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def samples_per_second(self) -> float:
        """Samples per second of wall time (inf when no time was measured)."""
        return self.n / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        """The numbers as a JSON-able dict (predictions left out)."""
        return {"n": self.n, "batches": self.batches, "loss": self.loss,
                "loss_unc": self.loss_unc, "accuracy": self.accuracy,
                "accuracy_unc": self.accuracy_unc, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        """The inverse of :meth:`as_dict` (predictions are not kept)."""
        return cls(n=int(d["n"]), batches=int(d["batches"]), loss=float(d["loss"]),
                   loss_unc=float(d["loss_unc"]),
                   accuracy=None if d["accuracy"] is None else float(d["accuracy"]),
                   accuracy_unc=None if d["accuracy_unc"] is None else float(d["accuracy_unc"]),
                   seconds=float(d["seconds"]))

    def __str__(self) -> str:
        text = f"loss {plus_minus(self.loss, self.loss_unc, 4)}"
        if self.accuracy is not None:
            text += (f", accuracy {plus_minus(100 * self.accuracy, 100 * self.accuracy_unc, 2)}%")
        return text


def plus_minus(value: float, unc: float | None, digits: int, sep: str = " ± ") -> str:
    """``value ± unc`` with ``digits`` decimals (``value`` alone when ``unc`` is None or nan)."""
    if unc is None or math.isnan(unc):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f}{sep}{unc:.{digits}f}"


class Accumulator:
    """Running sums of one pass; ``result()`` freezes them into a :class:`Result`.

    Also gives the running loss/accuracy in O(1) for the progress bar.
    """

    def __init__(self, size: int | None = None, predictions: bool = False):
        self.n = 0
        self.batches = 0
        self._mean = 0.0  # sample-weighted running mean and sum of squared deviations of the
        self._m2 = 0.0    # batch losses (West 1979, stable where sum(l^2) - N mean^2 cancels)
        self.correct = 0
        self.counted = 0
        self.classification = False
        self._size = size
        self.keep_predictions = predictions
        self._pred: np.ndarray | None = None

    def add(self, n: int, loss: float, correct: int | None = None, counted: int = 0,
            pred: np.ndarray | None = None, index: np.ndarray | None = None) -> None:
        """Record a batch of ``n`` samples with mean loss ``loss``; ``correct`` of ``counted``
        targets right; ``pred`` the batch's predictions for data-set rows ``index``."""
        self.n += n
        self.batches += 1
        delta = loss - self._mean
        self._mean += delta * (n / self.n)  # exactly loss at the first batch: n / n == 1
        self._m2 += n * delta * (loss - self._mean)
        if correct is not None:
            self.classification = True
            self.correct += int(correct)
            self.counted += int(counted)
        if self.keep_predictions and pred is not None:
            if self._pred is None:
                size = self._size if self._size is not None else n
                self._pred = np.zeros((size,) + pred.shape[1:], dtype=pred.dtype)
            if index is None:
                index = np.arange(self.n - n, self.n)
            self._pred[index] = pred

    @property
    def loss(self) -> float:
        return self._mean if self.n else math.nan

    @property
    def loss_unc(self) -> float:
        if self.batches < 2:
            return math.nan
        return math.sqrt(max(self._m2, 0.0) / self.n / (self.batches - 1))

    @property
    def accuracy(self) -> float | None:
        if not self.classification:
            return None
        return self.correct / self.counted if self.counted else math.nan

    @property
    def accuracy_unc(self) -> float | None:
        if not self.classification:
            return None
        if self.counted < 2:
            return math.nan
        acc = self.correct / self.counted
        return math.sqrt(acc * (1 - acc) / (self.counted - 1))

    def sums(self) -> tuple[int, int, float, float, int, int, bool]:
        """The running sums as plain values (for :meth:`combine` in another process)."""
        return (self.n, self.batches, self._mean, self._m2, self.correct, self.counted,
                self.classification)

    def combine(self, every: list[tuple[int, int, float, float, int, int, bool]]) -> None:
        """Make the sums those of the passes ``every`` (their :meth:`sums`, this one's among
        them) taken together, in order: counts add, and the means and squared deviations
        combine by Chan et al.'s update (1979), so each process gets the same result."""
        n, batches, mean, m2, correct, counted, classification = every[0]
        for n_b, b_b, mean_b, m2_b, c_b, k_b, cls_b in every[1:]:
            total = n + n_b
            if total:
                delta = mean_b - mean
                mean += delta * n_b / total
                m2 += m2_b + delta * delta * n * n_b / total
            n, batches = total, batches + b_b
            correct, counted = correct + c_b, counted + k_b
            classification = classification or cls_b
        self.n, self.batches, self._mean, self._m2 = n, batches, mean, m2
        self.correct, self.counted, self.classification = correct, counted, classification

    def result(self, seconds: float) -> Result:
        return Result(n=self.n, batches=self.batches, loss=self.loss, loss_unc=self.loss_unc,
                      accuracy=self.accuracy, accuracy_unc=self.accuracy_unc, seconds=seconds,
                      predictions=self._pred)


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of ``fit``: ``epoch`` (0-based), training and validation results (``val`` None
    without validation data), the learning rate of each param group at the end of the epoch and
    the epoch's wall time."""

    epoch: int
    train: Result
    val: Result | None
    lr: list[float]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON-able dict (for :meth:`from_dict`)."""
        return {"epoch": self.epoch, "train": self.train.as_dict(),
                "val": None if self.val is None else self.val.as_dict(), "lr": list(self.lr),
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpochRecord:
        """The inverse of :meth:`as_dict`."""
        return cls(epoch=int(d["epoch"]), train=Result.from_dict(d["train"]),
                   val=None if d["val"] is None else Result.from_dict(d["val"]),
                   lr=[float(v) for v in d["lr"]], seconds=float(d["seconds"]))


class History:
    """What ``fit`` returns: the list of :class:`EpochRecord` s, indexable and iterable.

    ``history.train`` and ``history.val`` are the per-epoch results as lists;
    ``history[-1].val.accuracy`` is the last validation accuracy; ``as_dict()`` is JSON-able (for
    a checkpoint's metadata, for instance).  ``stopped_early`` is True when a callback stopped
    training before ``epochs`` epochs.
    """

    def __init__(self, records: list[EpochRecord] | None = None):
        self.records: list[EpochRecord] = list(records or [])
        self.stopped_early = False

    def append(self, record: EpochRecord) -> None:
        """Add the record of one more epoch."""
        self.records.append(record)

    @property
    def train(self) -> list[Result]:
        """The training :class:`Result` of every epoch, in order."""
        return [r.train for r in self.records]

    @property
    def val(self) -> list[Result | None]:
        """The validation :class:`Result` of every epoch (None for epochs without validation)."""
        return [r.val for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> EpochRecord:
        return self.records[i]

    def __iter__(self) -> Iterator[EpochRecord]:
        return iter(self.records)

    def as_dict(self) -> dict[str, Any]:
        """The history as a JSON-able dict (for :meth:`from_dict`; a ``fit`` checkpoint
        holds one)."""
        return {"epochs": [r.as_dict() for r in self.records],
                "stopped_early": self.stopped_early}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> History:
        """The inverse of :meth:`as_dict`; the history saved in a ``fit`` checkpoint is
        ``History.from_dict(tinyopt.load(path)["fit"]["history"])``."""
        history = cls([EpochRecord.from_dict(r) for r in d["epochs"]])
        history.stopped_early = bool(d["stopped_early"])
        return history

    def plot(self, file: str | os.PathLike | None = None, *, axes: Any = None) -> Any:
        """Loss and accuracy per epoch with bands of one standard error, for training and
        validation, to ``file`` (PNG, PDF, SVG... by its suffix) and/or into ``axes`` (one
        matplotlib Axes for the loss, or a pair for loss and accuracy); returns the Figure.
        Needs matplotlib (``pip install 'tinyopt[plot]'``); see ``tinyopt.train.plot``."""
        from tinyopt.train.plot import plot_history
        return plot_history(self, file, axes=axes)

    def __repr__(self) -> str:
        if not self.records:
            return "History(0 epochs)"
        last = self.records[-1]
        val = f", val {last.val}" if last.val is not None else ""
        return f"History({len(self)} epochs; last: train {last.train}{val})"
