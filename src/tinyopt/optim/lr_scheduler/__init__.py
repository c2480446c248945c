"""Learning-rate schedulers with ``torch.optim.lr_scheduler``'s names, arguments and values.

A scheduler rewrites ``group["lr"]`` (and for OneCycleLR/CyclicLR ``group["momentum"]`` or
``group["betas"][0]``) in its optimizer's ``param_groups`` each time ``step()`` is called; the
optimizer reads its hyperparameters from ``param_groups`` at every step, so nothing recompiles::

    from tinyopt import optim

    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for epoch in range(100):
        train_one_epoch(model, opt)        # calls opt.step() per batch
        sched.step()                       # after opt.step(), as in PyTorch >= 1.1
    sched.get_last_lr()                    # [lr of group 0, lr of group 1, ...]

Every scheduler computes the same floats as PyTorch 2.x at every step, including PyTorch's
*chainable* (recursive) forms: CosineAnnealingLR, for example, updates the current lr by the ratio
of consecutive cosine values instead of evaluating the closed form, so that it composes with other
schedulers (ChainedScheduler) and with manual lr changes exactly as PyTorch does.

``state_dict()`` returns plain data (numbers, strings, lists, dicts; never the optimizer, never a
function), so a checkpoint can store it as JSON; ``load_state_dict`` also accepts a dict that went
through JSON (string keys) or that came from PyTorch's own scheduler.
"""

from tinyopt.optim.lr_scheduler.base import EPOCH_DEPRECATION_WARNING, LRScheduler, _LRScheduler  # noqa: F401
from tinyopt.optim.lr_scheduler.composite import ChainedScheduler, SequentialLR
from tinyopt.optim.lr_scheduler.cosine import CosineAnnealingLR, CosineAnnealingWarmRestarts
from tinyopt.optim.lr_scheduler.cyclic import CyclicLR, OneCycleLR
from tinyopt.optim.lr_scheduler.decay import (
    ConstantLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    MultiplicativeLR,
    MultiStepLR,
    PolynomialLR,
    StepLR,
)
from tinyopt.optim.lr_scheduler.plateau import ReduceLROnPlateau

__all__ = [
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
    "LRScheduler",
]
