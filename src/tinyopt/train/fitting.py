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

import contextlib
import os
import time
from typing import Any, TextIO

import numpy as np

from tinyopt.data import DataLoader, Subset
from tinyopt.engine import random
from tinyopt.nn.module import Module
from tinyopt.optim import in_plan
from tinyopt.optim.lr_scheduler import ReduceLROnPlateau
from tinyopt.train.batches import BatchRunner
from tinyopt.train.callbacks import CallbackList
from tinyopt.train.evaluation import run_eval
from tinyopt.train.inputs import (as_dataset, check_labels, check_model, known_labels, loss_kind,
                                  positive_int, probe, split_sizes)
from tinyopt.train.progress import make_progress
from tinyopt.train.results import Accumulator, EpochRecord, History
from tinyopt.checkpoint import load
from tinyopt.train.resume import check_path, restore_fit, save_fit, stateful

_INTERVALS = ("step", "epoch")
_SYNC = contextlib.nullcontext()


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

    With a ``DistributedDataParallel`` model (a job launched with ``mpiexec``), every rank trains
    on its ``DistributedSampler`` share (``batch_size`` samples per rank), the metrics are
    combined over the ranks, and only rank 0 reports and writes checkpoints; see
    ``tinyopt.distributed.fitting``.
    """
    where = "fit"
    check_model(where, model)
    if not callable(loss_fn):
        raise TypeError(f"{where}: loss_fn must be callable, got {type(loss_fn).__name__}")
    if not (callable(getattr(optimizer, "step", None))
            and callable(getattr(optimizer, "zero_grad", None))):
        raise TypeError(f"{where}: optimizer must be an Optimizer (with step and zero_grad), got "
                        f"{type(optimizer).__name__}")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"{where}: epochs must be a non-negative integer, got {epochs!r}")
    epochs = int(epochs)
    batch_size = positive_int(where, "batch_size", batch_size)
    if logical_batch_size is None:
        logical = batch_size
    else:
        logical = positive_int(where, "logical_batch_size", logical_batch_size)
        if logical % batch_size:
            raise ValueError(f"{where}: logical_batch_size ({logical}) must be a multiple of "
                             f"batch_size ({batch_size})")
    if scheduler_interval not in _INTERVALS:
        raise ValueError(f"{where}: scheduler_interval must be 'step' or 'epoch', got "
                         f"{scheduler_interval!r}")
    if scheduler is not None:
        if not callable(getattr(scheduler, "step", None)):
            raise TypeError(f"{where}: scheduler must be an lr_scheduler (with step), got "
                            f"{type(scheduler).__name__}")
        if getattr(scheduler, "optimizer", optimizer) is not optimizer:
            raise ValueError(f"{where}: the scheduler wraps a different optimizer than the one "
                             f"given")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"{where}: seed must be an integer or None, got {type(seed).__name__}")
    if not isinstance(shuffle, (bool, np.bool_)):
        raise TypeError(f"{where}: shuffle must be a bool, got {shuffle!r}")
    hooks = CallbackList(where, callbacks)
    ddp = None
    if getattr(model, "_data_parallel", False):  # a DistributedDataParallel
        from tinyopt.distributed.fitting import DataParallelFit
        if predictions:
            raise ValueError(f"{where}: predictions=True is not supported with a "
                             f"DistributedDataParallel model (each rank sees only its share)")
        ddp = DataParallelFit(model)
    report = make_progress(progress if ddp is None or ddp.is_main else False)
    if checkpoint is not None:
        checkpoint = check_path(where, "checkpoint", checkpoint, exists=False)
    if resume is not None:
        resume = check_path(where, "resume", resume, exists=True)

    dataset = as_dataset(where, "train_data", train_data)
    n = len(dataset)
    n_train, n_val = split_sizes(where, n, val_split)
    if val_data is not None and n_val:
        raise ValueError(f"{where}: give val_split or val_data, not both")
    if n_train < logical:
        what = "logical_batch_size" if logical != batch_size else "batch_size"
        raise ValueError(f"{where}: the training data has {n_train} samples, fewer than one batch "
                         f"({what}={logical})")
    if n_val:
        train_set = Subset(dataset, np.arange(n_train))
        val_set = Subset(dataset, np.arange(n_train, n))
    else:
        train_set = dataset
        val_set = as_dataset(where, "val_data", val_data) if val_data is not None else None
        if val_set is not None and len(val_set) == 0:
            raise ValueError(f"{where}: val_data is empty")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"{where}: the model has no parameter that requires grad")

    kind = loss_kind(loss_fn)
    first = next(iter(DataLoader(train_set, batch_size=batch_size)))
    classes = probe(where, model, loss_fn, first, kind, "train_data")
    if classes is not None:
        for name, part in (("train_data", train_set), ("the validation data", val_set)):
            labels = known_labels(part) if part is not None else None
            if labels is not None:
                check_labels(where, name, labels, classes, kind.ignore_index)
    if val_set is not None:
        probe(where, model, loss_fn, next(iter(DataLoader(val_set, batch_size=batch_size))),
              kind, "the validation data")

    # ---- everything checked: train ---------------------------------------------------------
    if ddp is None:
        generator = random.Generator(int(seed)) if seed is not None else None
        loader = DataLoader(train_set, batch_size=batch_size, shuffle=bool(shuffle),
                            generator=generator)
        n_rank = n_train  # the samples of an epoch on this rank
    else:
        loader = ddp.train_loader(train_set, batch_size, bool(shuffle), seed)
        n_rank = len(loader.sampler)
        val_set = ddp.val_part(val_set) if val_set is not None else None
    val_loader = DataLoader(val_set, batch_size=batch_size) if val_set is not None else None
    runner = BatchRunner(where, model, loss_fn, kind, classes)
    in_backward = logical == batch_size and ddp is None and not hooks.before_step
    plateau = isinstance(scheduler, ReduceLROnPlateau)
    per_step = scheduler is not None and not plateau and scheduler_interval == "step"
    config = {"n_train": n_train, "shuffle": bool(shuffle), "batch_size": batch_size,
              "logical_batch_size": logical}
    saved = stateful(hooks.items)
    first_epoch, step, history = 0, 0, History()
    if resume is not None:
        if ddp is not None:
            ddp.before_restore(load(resume).get("fit"), resume, batch_size)
        first_epoch, step, history = restore_fit(
            where, resume, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader,
            callbacks=saved, config=config)
        if ddp is not None:
            ddp.after_restore()
    was_training = model.training
    hooks.call("on_train_begin")
    try:
        for epoch in range(first_epoch, epochs):
            hooks.call("on_epoch_begin", epoch)
            start = time.perf_counter()
            model.train()
            if ddp is not None:
                ddp.epoch_begin(epoch)
            acc = Accumulator(n_rank, predictions)
            batches = iter(loader)
            order = loader.state_dict()["order"] if predictions and shuffle else None
            total = len(loader)
            position = 0
            label = f"epoch {epoch + 1}/{epochs} train"
            report.begin(label, total, compiling=epoch == first_epoch)
            for done, batch in enumerate(batches, 1):
                if position % logical == 0:
                    optimizer.zero_grad()
                    group = min(logical, n_rank - position)  # samples in this logical batch
                index = order[position:position + batch_size] if order is not None else None
                size = min(batch_size, n_rank - position)
                sync = ddp.sync(position + size, logical, n_rank) if ddp else _SYNC
                # a step after every batch with nothing between backward and step: the step runs
                # inside the backward plan (bit for bit the same; tinyopt.optim.in_plan)
                update = in_plan.prepare(optimizer) if in_backward else None
                with sync:  # under DDP: no_sync() but for the last batch of a logical batch
                    m = runner(batch, acc, backward=True, scale=size / group, index=index,
                               update=update)
                position += m
                if position % logical == 0 or position == n_rank:
                    for before in hooks.before_step:
                        before(step)
                    if update is None or not update.finish():
                        optimizer.step()
                    step += 1
                    if per_step:
                        scheduler.step()
                report.update(label, done, total, acc, start)
            if ddp is not None:
                ddp.reduce(acc)
            train_result = acc.result(time.perf_counter() - start)
            val_result = None
            if val_loader is not None:
                val_result = run_eval(model, val_loader, runner, report,
                                      f"epoch {epoch + 1}/{epochs} val  ", predictions,
                                      reduce=ddp.reduce if ddp else None,
                                      compiling=epoch == first_epoch)
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
                extra = ddp.before_save(optimizer) if ddp else None
                if ddp is None or ddp.is_main:
                    save_fit(checkpoint, model=model, optimizer=optimizer, scheduler=scheduler,
                             loader=loader, callbacks=saved, epoch=epoch + 1, step=step,
                             history=history, config=config, extra=extra)
                if ddp is not None:
                    ddp.saved()
            if stop:
                break
    finally:
        model.train(was_training)
    hooks.call("on_train_end", history)
    return history
