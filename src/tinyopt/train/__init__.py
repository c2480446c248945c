"""The training driver: ``fit`` and ``evaluate`` (``ggml_opt_fit`` / ``ggml_opt_epoch`` /
``ggml_opt_result`` in Python), their results with standard errors, progress and callbacks.

    import tinyopt as to
    from tinyopt import nn, optim

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    history = to.fit(model, (x, y), nn.CrossEntropyLoss(), optim.AdamW(model.parameters()),
                     epochs=5, batch_size=100, val_split=0.1, seed=0)
    print(history[-1].val)          # loss 0.3911 ± 0.0123, accuracy 86.50 ± 0.44%
    print(to.evaluate(model, (x_test, y_test), nn.CrossEntropyLoss(), batch_size=500))

Modules: ``fitting`` (``fit``), ``evaluation`` (``evaluate``), ``batches`` (one batch through the
model), ``results`` (``Result``, ``EpochRecord``, ``History``), ``progress`` (bar and lines),
``callbacks``, ``inputs`` (argument and data checks), ``resume`` (``fit``'s checkpoints), ``plot``
(``History.plot``'s curves, with matplotlib).
"""
from tinyopt.train.callbacks import Callback
from tinyopt.train.evaluation import evaluate
from tinyopt.train.fitting import fit
from tinyopt.train.results import EpochRecord, History, Result

__all__ = ["Callback", "EpochRecord", "History", "Result", "evaluate", "fit"]
