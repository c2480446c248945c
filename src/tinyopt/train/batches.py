"""One batch through the model (``ggml_opt_forward`` / ``ggml_opt_forward_backward``).

The model's output, the loss value and (when training) the gradients come from ONE plan run
(``tinyopt.engine.realize.realize``), so the reported loss and accuracy are those of the very
forward pass that was differentiated.  Gradient accumulation scales the loss that is
differentiated by ``n_b / N_L`` (batch size over logical batch size) through a scalar *input*
tensor: its value is bound per run, so every scale shares one cached plan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.engine.update_in_plan import backward_and_update
from tinyopt.engine.realize import realize
from tinyopt.engine.tensor import Tensor, leaf
from tinyopt.nn.module import Module
from tinyopt.train.inputs import LossKind, check_labels, split_batch
from tinyopt.train.results import Accumulator


class BatchRunner:
    """Runs batches of ``model`` + ``loss_fn`` and records them into an :class:`Accumulator`.

    ``classes`` (from :func:`tinyopt.train.inputs.probe`) turns on accuracy and the per-batch
    label check; None for regression losses.
    """

    def __init__(self, where: str, model: Module, loss_fn: Any, kind: LossKind,
                 classes: int | None):
        self.where = where
        self.model = model
        self.loss_fn = loss_fn
        self.kind = kind
        self.classes = classes

    def __call__(self, batch: Any, acc: Accumulator, *, backward: bool, scale: float = 1.0,
                 index: np.ndarray | None = None, update: Any = None) -> int:
        """Run one batch (forward, and backward into ``.grad`` when ``backward``, with ``update``
        stepping the parameters in the same run: ``engine/update_in_plan.py``); return its size."""
        x, y = split_batch(self.where, batch)
        if isinstance(y, Tensor) and y.op == "input":  # a DataLoader batch: check it as an array
            y = y.numpy()
        if self.classes is not None and isinstance(y, np.ndarray):
            if y.dtype != np.int64:
                y = y.astype(np.int64)
            if y.size and (y.max() >= self.classes or y.min() < 0):
                check_labels(self.where, "the data", y, self.classes, self.kind.ignore_index)
        out = self.model(x)
        loss = self.loss_fn(out, y)
        n = out.shape[0] if out.ndim else 1
        want_out = self.classes is not None or acc.keep_predictions
        outputs = [out, loss] if want_out else [loss]
        if backward:
            wanted = outputs
            if scale != 1.0:
                factor = np.asarray(scale, dtype=loss.dtype)
                target = loss * leaf(factor)
            else:
                target, wanted = loss, outputs[:-1]
            values = backward_and_update(target, update, wanted) if update is not None else None
            if values is None:
                values = realize(wanted, loss=target)
        else:
            values = realize(outputs)
        loss_value = float(values[1 if want_out else 0])
        if not want_out:
            acc.add(n, loss_value)
            return n
        out_value = values[0]
        if self.classes is None:
            acc.add(n, loss_value, pred=out_value, index=index)
            return n
        pred = out_value.argmax(axis=1)
        target_values = np.asarray(y.numpy() if isinstance(y, Tensor) else y)
        counted = target_values != self.kind.ignore_index
        correct = int(np.count_nonzero((pred == target_values) & counted))
        acc.add(n, loss_value, correct, int(np.count_nonzero(counted)), pred=pred, index=index)
        return n
