"""``evaluate``: loss and accuracy of a model on a data set, in eval mode under ``no_grad``.

    result = tinyopt.evaluate(model, (x_test, y_test), nn.CrossEntropyLoss(), batch_size=500)
    print(result)                   # loss 0.3612 ± 0.0081, accuracy 87.10 ± 0.34%
    result.accuracy, result.n       # 0.871, 10000
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from tinyopt.data import DataLoader
from tinyopt.engine.grad_mode import no_grad
from tinyopt.nn.module import Module
from tinyopt.train.batches import BatchRunner
from tinyopt.train.inputs import (as_dataset, check_labels, check_model, known_labels, loss_kind,
                                  positive_int, probe)
from tinyopt.train.progress import Progress, make_progress
from tinyopt.train.results import Accumulator, Result


def evaluate(model: Module, data: Any, loss_fn: Any, batch_size: int, *,
             predictions: bool = False, progress: bool | TextIO = False) -> Result:
    """Loss (± standard error) and, for classification losses, accuracy of ``model`` on ``data``.

    Args:
        model: the model; put in eval mode for the pass and restored to its mode afterwards.
        data: a map-style data set of ``(input, target)`` samples or a pair of arrays ``(x, y)``.
        loss_fn: ``loss_fn(model(x), y)`` must return a scalar Tensor (a mean-reduced loss).
        batch_size: samples per batch; a last smaller batch is included.
        predictions: keep the predictions in ``result.predictions`` (data-set order): the argmax
            class for classification losses, else the model's outputs.
        progress: False (default), True (standard error) or a text stream; see
            ``tinyopt.train.progress``.

    Returns a :class:`tinyopt.train.Result`; see ``tinyopt.train.results`` for the formulas.
    Nothing is differentiated and parameters' ``.grad`` are untouched.
    """
    where = "evaluate"
    check_model(where, model)
    if not callable(loss_fn):
        raise TypeError(f"{where}: loss_fn must be callable, got {type(loss_fn).__name__}")
    batch_size = positive_int(where, "batch_size", batch_size)
    dataset = as_dataset(where, "data", data)
    if len(dataset) == 0:
        raise ValueError(f"{where}: the data set is empty")
    report = make_progress(progress)
    loader = DataLoader(dataset, batch_size=batch_size)
    kind = loss_kind(loss_fn)
    classes = probe(where, model, loss_fn, next(iter(loader)), kind)
    labels = known_labels(dataset)
    if classes is not None and labels is not None:
        check_labels(where, "the data", labels, classes, kind.ignore_index)
    runner = BatchRunner(where, model, loss_fn, kind, classes)
    result = run_eval(model, loader, runner, report, "evaluate", predictions)
    report.result("evaluate", result)
    return result


def run_eval(model: Module, loader: DataLoader, runner: BatchRunner, report: Progress,
             label: str, predictions: bool = False, reduce: Any = None,
             compiling: bool = True) -> Result:
    """One pass over ``loader`` in eval mode under ``no_grad`` (``fit`` validates with this);
    ``reduce(accumulator)`` combines the sums with other ranks' before the result is made."""
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    acc = Accumulator(len(loader.dataset), predictions)
    total = len(loader)
    report.begin(label, total, compiling)
    try:
        with no_grad():
            for done, batch in enumerate(loader, 1):
                runner(batch, acc, backward=False)
                report.update(label, done, total, acc, start)
    finally:
        model.train(was_training)
    if reduce is not None:
        reduce(acc)
    return acc.result(time.perf_counter() - start)
