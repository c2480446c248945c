"""``fit``: train a model for a number of epochs (``ggml_opt_fit`` + ``ggml_opt_epoch``).

    history = tinyopt.fit(model, (x, y), nn.CrossEntropyLoss(), optim.AdamW(model.parameters()),
                          epochs=5, batch_size=64, logical_batch_size=256, val_split=0.1, seed=0)
    history[-1].val.accuracy

Each epoch: the training part of the data is shuffled (a new order every epoch), run in physical
batches of ``batch_size`` with one optimizer step per logical batch of ``logical_batch_size``
samples (gradient accumulation, ggml's ``opt_period``), then the validation part is evaluated in
eval mode under ``no_grad``.  Every batch of the same shape replays one cached plan: after the
first epoch no plan is compiled (a short last batch is a second shape, compiled once).

``checkpoint=path`` saves everything after every epoch and ``resume=path`` continues such a run
bit for bit, in a fresh process if need be (``tinyopt.train.resume``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, TextIO

from tinyopt.data import DataLoader
from tinyopt.nn.module import Module
from tinyopt.optim import in_plan
from tinyopt.optim.lr_scheduler import ReduceLROnPlateau
from tinyopt.train.batches import BatchRunner
from tinyopt.train.callbacks import CallbackList
from tinyopt.train.evaluation import run_eval
from tinyopt.train.inputs import check_fit_args, fit_data
from tinyopt.train.progress import Progress, make_progress
from tinyopt.train.results import Accumulator, EpochRecord, History, Result
from tinyopt.train.resume import check_path, restore_fit, save_fit, stateful
from tinyopt.train.strategy import FitStrategy, strategy_of


def fit(model: Module, train_data: Any, loss_fn: Any, optimizer: Any, *, epochs: int,
        batch_size: int, logical_batch_size: int | None = None, val_split: float = 0.0,
        val_data: Any = None, scheduler: Any = None, scheduler_interval: str = "step",
        shuffle: bool = True, callbacks: Any = (), progress: bool | TextIO = True,
        seed: int | None = None, predictions: bool = False,
        checkpoint: str | os.PathLike | None = None,
        resume: str | os.PathLike | None = None) -> History:
    """Train ``model`` on ``train_data`` for ``epochs`` epochs; return the :class:`History`.

    Args:
        model: a ``tinyopt.nn.Module``; in train mode while training, eval mode while
            validating, and left in the mode it had before the call.
        train_data: a map-style data set of ``(input, target)`` samples, or a pair of arrays
            ``(x, y)``.
        loss_fn: ``loss_fn(model(x), y)`` returns a scalar Tensor (mean-reduced).  Classification
            losses (``cross_entropy``, ``nll_loss``, ``CrossEntropyLoss``, ``NLLLoss``) with
            integer targets also report accuracy, and labels are checked against the output width.
        optimizer: a ``tinyopt.optim.Optimizer`` over the model's parameters.
        epochs: number of passes over the training data.
        batch_size: physical batch size: samples per forward/backward.  A last smaller batch is
            included (it is a second shape, compiled once).
        logical_batch_size: samples per optimizer step (default ``batch_size``); a multiple of
            ``batch_size``.  The physical losses are scaled by ``n_b / N_L`` before
            differentiation, so the accumulated gradient is that of the mean loss over the logical
            batch: with plain SGD, ``batch_size=B, logical_batch_size=k*B`` takes the same steps
            as ``batch_size=k*B``.
        val_split: fraction in [0, 1) of the data held out for validation, taken from the END of
            ``train_data`` as given (as ggml and Keras do; shuffle beforehand if it is sorted):
            the last ``n - int(n * (1 - val_split))`` samples.
        val_data: a separate validation data set or ``(x, y)``; not together with ``val_split``.
        scheduler: an ``lr_scheduler`` of ``optimizer``.  Stepped after every optimizer step
            (``scheduler_interval="step"``, the default: OneCycleLR, CosineAnnealingLR over
            steps...) or once per epoch (``"epoch"``: StepLR over epochs...).
            ``ReduceLROnPlateau`` is always stepped once per epoch with the validation loss (the
            training loss when there is no validation data).
        shuffle: reshuffle the training part every epoch.
        callbacks: callables ``f(epoch, record)`` called after each epoch, or objects with hooks;
            see ``tinyopt.train.callbacks``.  Returning True from ``on_epoch_end`` stops training.
        progress: True: a live bar on standard error when it is a terminal, else one line per
            epoch; False: nothing; a text stream: report to it (same terminal test).
        seed: seed of the shuffling order; None draws it from tinyopt's global generator (so
            ``tinyopt.manual_seed`` also makes the order reproducible).  Dropout draws from the
            global generator: seed that with ``tinyopt.manual_seed``.
        predictions: keep each epoch's predictions (data-set order) in the results.
        checkpoint: a file to save after every epoch (atomically, replacing the previous one):
            model, optimizer, scheduler, the shuffling state, the global generator, stateful
            callbacks, the epoch and step counters and the history; see
            ``tinyopt.train.resume``.
        resume: a checkpoint written by ``fit(checkpoint=...)`` to continue from: everything
            saved is restored into the objects given (all or nothing), training continues with
            the epoch after the saved one up to ``epochs`` in all (as Keras' ``epochs`` with
            ``initial_epoch``), and the returned History holds the saved epochs too.  The result
            is bit-for-bit that of the uninterrupted run.  May be the same path as
            ``checkpoint``.

    Every argument and the data are checked before training starts (and before the optimizer,
    scheduler, model or any random generator change): ValueError/TypeError name what is wrong.

    Where the training runs is the model's strategy (``tinyopt.train.strategy``): this process,
    unless the model provides another.  A ``DistributedDataParallel`` model (a job launched with
    ``mpiexec``) does: every rank trains on its ``DistributedSampler`` share (``batch_size``
    samples per rank), the metrics are combined over the ranks, and only rank 0 reports and
    writes checkpoints; see ``tinyopt.distributed.fitting``.
    """
    where = "fit"
    epochs, batch_size, logical = check_fit_args(
        where, model, loss_fn, optimizer, epochs, batch_size, logical_batch_size, scheduler,
        scheduler_interval, seed, shuffle)
    hooks = CallbackList(where, callbacks)
    strategy = strategy_of(model)
    strategy.check(where, predictions=predictions)
    report = make_progress(progress if strategy.is_main else False)
    if checkpoint is not None:
        checkpoint = check_path(where, "checkpoint", checkpoint, exists=False)
    if resume is not None:
        resume = check_path(where, "resume", resume, exists=True)
    train_set, val_set, kind, classes = fit_data(where, model, loss_fn, train_data, val_split,
                                                 val_data, batch_size, logical)

    # ---- everything checked: train ---------------------------------------------------------
    loader, n = strategy.train_loader(train_set, batch_size, bool(shuffle), seed)
    val_loader = (DataLoader(strategy.val_part(val_set), batch_size=batch_size)
                  if val_set is not None else None)
    runner = BatchRunner(where, model, loss_fn, kind, classes)
    plateau = isinstance(scheduler, ReduceLROnPlateau)
    per_step = scheduler is not None and not plateau and scheduler_interval == "step"
    train = TrainPass(model, optimizer, runner, strategy, report, batch_size=batch_size,
                      logical=logical, before_step=hooks.before_step,
                      scheduler=scheduler if per_step else None, predictions=predictions,
                      shuffled_predictions=predictions and bool(shuffle))
    config = {"n_train": len(train_set), "shuffle": bool(shuffle), "batch_size": batch_size,
              "logical_batch_size": logical}
    saved = stateful(hooks.items)
    first_epoch, history = 0, History()
    if resume is not None:
        first_epoch, train.steps, history = strategy.restore(resume, batch_size, lambda: (
            restore_fit(where, resume, model=model, optimizer=optimizer, scheduler=scheduler,
                        loader=loader, callbacks=saved, config=config)))
    was_training = model.training
    hooks.call("on_train_begin")
    try:
        for epoch in range(first_epoch, epochs):
            hooks.call("on_epoch_begin", epoch)
            start = time.perf_counter()
            compiling = epoch == first_epoch
            train_result = train(epoch, loader, n, f"epoch {epoch + 1}/{epochs} train", start,
                                 compiling)
            val_result = None
            if val_loader is not None:
                val_result = run_eval(model, val_loader, runner, report,
                                      f"epoch {epoch + 1}/{epochs} val  ", predictions,
                                      reduce=strategy.reduce, compiling=compiling)
            if plateau:
                scheduler.step((val_result or train_result).loss)
            elif scheduler is not None and scheduler_interval == "epoch":
                scheduler.step()
            lrs = [float(g["lr"]) for g in getattr(optimizer, "param_groups", [])]
            record = EpochRecord(epoch, train_result, val_result, lrs,
                                 time.perf_counter() - start)
            history.append(record)
            report.epoch_end(record, epochs)
            stop = hooks.call("on_epoch_end", epoch, record)
            if stop:
                history.stopped_early = epoch + 1 < epochs
            if checkpoint is not None:
                strategy.save(optimizer, lambda extra: save_fit(
                    checkpoint, model=model, optimizer=optimizer, scheduler=scheduler,
                    loader=loader, callbacks=saved, epoch=epoch + 1, step=train.steps,
                    history=history, config=config, extra=extra))
            if stop:
                break
    finally:
        model.train(was_training)
    hooks.call("on_train_end", history)
    return history


@dataclass
class TrainPass:
    """The training half of an epoch (``ggml_opt_epoch``): physical batches of ``batch_size``
    through forward and backward, one optimizer step per logical batch of ``logical`` samples,
    with the callbacks' ``before_step`` hooks before it and the per-step ``scheduler`` after it;
    ``steps`` counts the optimizer steps taken.  The physical losses are scaled by
    ``n_b / N_L``, so the accumulated gradient is the logical batch's mean."""

    model: Module
    optimizer: Any
    runner: BatchRunner
    strategy: FitStrategy
    report: Progress
    batch_size: int
    logical: int
    before_step: list[Any]
    scheduler: Any  # stepped after every optimizer step, or None
    shuffled_predictions: bool  # predictions kept in data-set order through the shuffle
    predictions: bool
    steps: int = 0

    def __call__(self, epoch: int, loader: DataLoader, n: int, label: str, start: float,
                 compiling: bool) -> Result:
        """One pass over ``loader`` (``n`` samples of this process) in train mode."""
        logical, batch_size = self.logical, self.batch_size
        # a step after every batch with nothing between backward and step: the step runs inside
        # the backward plan (bit for bit the same; tinyopt.optim.in_plan)
        in_backward = (logical == batch_size and self.strategy.update_in_backward
                       and not self.before_step)
        self.model.train()
        self.strategy.epoch_begin(epoch)
        acc = Accumulator(n, self.predictions)
        batches = iter(loader)
        order = loader.state_dict()["order"] if self.shuffled_predictions else None
        total = len(loader)
        position = group = 0
        self.report.begin(label, total, compiling=compiling)
        for done, batch in enumerate(batches, 1):
            if position % logical == 0:
                self.optimizer.zero_grad()
                group = min(logical, n - position)  # samples in this logical batch
            index = order[position:position + batch_size] if order is not None else None
            size = min(batch_size, n - position)
            update = in_plan.prepare(self.optimizer) if in_backward else None
            # the strategy's context (DDP's: no_sync() but for the last batch of a logical batch)
            with self.strategy.sync(position + size, logical, n):
                position += self.runner(batch, acc, backward=True, scale=size / group,
                                        index=index, update=update)
            if position % logical == 0 or position == n:
                for before in self.before_step:
                    before(self.steps)
                if update is None or not update.finish():
                    self.optimizer.step()
                self.steps += 1
                if self.scheduler is not None:
                    self.scheduler.step()
            self.report.update(label, done, total, acc, start)
        self.strategy.reduce(acc)
        return acc.result(time.perf_counter() - start)
