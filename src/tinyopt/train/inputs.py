"""Checking what ``fit`` and ``evaluate`` are given, before anything runs.

Data come as a map-style data set (``tinyopt.data.Dataset``, anything with ``__len__`` and
``__getitem__`` whose samples are ``(input, target)`` pairs) or as a pair of arrays ``(x, y)``.
Classification losses (``cross_entropy``, ``nll_loss``, ``CrossEntropyLoss``, ``NLLLoss``, or a
``functools.partial`` of the functions) are recognised so that accuracy can be reported and
labels checked against the width of the model's output.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyopt.data import DataLoader, Subset, TensorDataset
from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Tensor
from tinyopt.nn import functional as F
from tinyopt.nn.layers.loss import CrossEntropyLoss, NLLLoss
from tinyopt.nn.module import Module


def positive_int(where: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
    return int(value)


def check_model(where: str, model: Any) -> None:
    if not isinstance(model, Module):
        raise TypeError(f"{where}: model must be a tinyopt.nn.Module, got {type(model).__name__}")


def as_dataset(where: str, name: str, data: Any) -> Any:
    """``data`` as a map-style data set: a pair of arrays becomes a ``TensorDataset``."""
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError(f"{where}: {name} given as a tuple must be (inputs, targets), got "
                             f"{len(data)} items")
        return TensorDataset(*data)
    if hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        return data
    raise TypeError(f"{where}: {name} must be a Dataset or a tuple (inputs, targets) of arrays, "
                    f"got {type(data).__name__}")


def split_batch(where: str, batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a collated batch."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    n = len(batch) if isinstance(batch, (tuple, list)) else type(batch).__name__
    raise ValueError(f"{where}: each sample of the data must be an (input, target) pair, got "
                     f"{n}")


@dataclass(frozen=True)
class LossKind:
    """Whether ``loss_fn`` is a classification loss, and the target value it ignores."""

    classification: bool
    ignore_index: int = -100


def loss_kind(loss_fn: Any) -> LossKind:
    if isinstance(loss_fn, (CrossEntropyLoss, NLLLoss)):
        return LossKind(True, int(loss_fn.ignore_index))
    fn, kwargs = loss_fn, {}
    while isinstance(fn, functools.partial):
        kwargs = {**fn.keywords, **kwargs}
        fn = fn.func
    if fn is F.cross_entropy or fn is F.nll_loss:
        return LossKind(True, int(kwargs.get("ignore_index", -100)))
    return LossKind(False)


def known_labels(dataset: Any) -> np.ndarray | None:
    """The targets of an array-backed data set (``TensorDataset`` of two arrays, or ``Subset`` s
    of one) without fetching the inputs; None for other data sets."""
    index = None
    while type(dataset) is Subset:
        ix = np.asarray(dataset.indices, dtype=np.int64)
        index = ix if index is None else ix[index]
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset or len(dataset.tensors) != 2:
        return None
    labels = dataset.tensors[1]
    return labels if index is None else labels[index]


def check_labels(where: str, name: str, labels: np.ndarray, classes: int,
                 ignore_index: int) -> None:
    """Raise ValueError unless every label is ``ignore_index`` or in ``[0, classes)``."""
    labels = np.asarray(labels)
    if labels.size == 0 or labels.dtype.kind not in "iub":
        return
    bad = ((labels < 0) | (labels >= classes)) & (labels != ignore_index)
    if bad.any():
        pos = np.unravel_index(int(np.argmax(bad)), labels.shape)
        at = pos[0] if labels.ndim == 1 else pos
        raise ValueError(f"{where}: {name} has label {labels[pos]} at index {at}, outside the "
                         f"model's {classes} classes (labels must be in [0, {classes})"
                         + (f" or {ignore_index}" if ignore_index >= 0 else "") + ")")


def probe(where: str, model: Module, loss_fn: Any, batch: Any, kind: LossKind,
          name: str = "the data") -> int | None:
    """Build (not run) the graph of one batch and check the model's output and the loss.

    Returns the number of classes (the output's dim 1) for a classification loss with integer
    targets, else None.  The model is put in eval mode and no gradient graph is recorded, so no
    random numbers are drawn (dropout) and nothing is computed.
    """
    x, y = split_batch(where, batch)
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            out = model(x)
            if not isinstance(out, Tensor):
                raise TypeError(f"{where}: the model must return a Tensor, got "
                                f"{type(out).__name__}")
            labels = np.asarray(y.numpy() if isinstance(y, Tensor) else y)
            classes = None
            if kind.classification and labels.dtype.kind in "iu" and out.ndim >= 2:
                classes = out.shape[1]
                check_labels(where, name, labels, classes, kind.ignore_index)
            loss = loss_fn(out, y)
    finally:
        model.train(was_training)
    if not isinstance(loss, Tensor):
        raise TypeError(f"{where}: loss_fn must return a Tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(f"{where}: loss_fn must return a scalar (use reduction='mean'), got a "
                         f"tensor of shape {loss.shape}")
    return classes


def split_sizes(where: str, n: int, val_split: float) -> tuple[int, int]:
    """``(n_train, n_val)``: the last ``n - int(n * (1 - val_split))`` samples validate."""
    if isinstance(val_split, bool) or not isinstance(val_split, (int, float, np.floating)) \
            or not (0.0 <= val_split < 1.0) or math.isnan(val_split):
        raise ValueError(f"{where}: val_split must be a number in [0, 1), got {val_split!r}")
    n_train = int(n * (1.0 - float(val_split)))
    n_val = n - n_train
    if val_split > 0 and n_val == 0:
        raise ValueError(f"{where}: val_split={val_split} of {n} samples leaves no validation "
                         f"sample")
    return n_train, n_val


def check_fit_args(where: str, model: Any, loss_fn: Any, optimizer: Any, epochs: Any,
                   batch_size: Any, logical_batch_size: Any, scheduler: Any,
                   scheduler_interval: Any, seed: Any, shuffle: Any) -> tuple[int, int, int]:
    """Check ``fit``'s arguments other than the data; return ``(epochs, batch_size, logical
    batch size)`` as ints."""
    check_model(where, model)
    if not callable(loss_fn):
        raise TypeError(f"{where}: loss_fn must be callable, got {type(loss_fn).__name__}")
    if not (callable(getattr(optimizer, "step", None))
            and callable(getattr(optimizer, "zero_grad", None))):
        raise TypeError(f"{where}: optimizer must be an Optimizer (with step and zero_grad), got "
                        f"{type(optimizer).__name__}")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"{where}: epochs must be a non-negative integer, got {epochs!r}")
    batch_size = positive_int(where, "batch_size", batch_size)
    if logical_batch_size is None:
        logical = batch_size
    else:
        logical = positive_int(where, "logical_batch_size", logical_batch_size)
        if logical % batch_size:
            raise ValueError(f"{where}: logical_batch_size ({logical}) must be a multiple of "
                             f"batch_size ({batch_size})")
    if scheduler_interval not in ("step", "epoch"):
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
    return int(epochs), batch_size, logical


def fit_data(where: str, model: Module, loss_fn: Any, train_data: Any, val_split: float,
             val_data: Any, batch_size: int,
             logical: int) -> tuple[Any, Any, LossKind, int | None]:
    """``fit``'s training and validation sets (None without validation), checked against the
    model and the loss: ``(train_set, val_set, loss kind, classes)`` (see :func:`probe`)."""
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
    return train_set, val_set, kind, classes
