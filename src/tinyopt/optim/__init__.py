"""tinyopt.optim: ``torch.optim``-compatible optimizers, each one fused numba kernel per group.

Example::

    from tinyopt import optim
    opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        sched.step()

The optimizers need only ``Parameter``: any parameter whose ``.grad`` was set by any means
(``p.grad = numpy_array``) can be optimized, with no graph involved.
"""

from typing import TYPE_CHECKING

from tinyopt.optim.adadelta import Adadelta
from tinyopt.optim.adafactor import Adafactor
from tinyopt.optim.adagrad import Adagrad
from tinyopt.optim.adam import Adam
from tinyopt.optim.adamax import Adamax
from tinyopt.optim.adamw import AdamW
from tinyopt.optim.ademamix import AdEMAMix
from tinyopt.optim.adopt import ADOPT
from tinyopt.optim.asgd import ASGD
from tinyopt.optim.eight_bit import Adam8bit, AdamW8bit, Lion8bit, SGD8bit
from tinyopt.optim.lamb import Lamb
from tinyopt.optim.lars import LARS
from tinyopt.optim.lbfgs import LBFGS
from tinyopt.optim.lion import Lion
from tinyopt.optim.muon import Muon
from tinyopt.optim.nadam import NAdam
from tinyopt.optim.optimizer import Optimizer
from tinyopt.optim.prodigy import Prodigy
from tinyopt.optim.radam import RAdam
from tinyopt.optim.rmsprop import RMSprop
from tinyopt.optim.rprop import Rprop
from tinyopt.optim.schedule_free import AdamWScheduleFree, RAdamScheduleFree, SGDScheduleFree
from tinyopt.optim.sgd import SGD
from tinyopt.optim.soap import SOAP
from tinyopt.optim.sparse_adam import SparseAdam

from tinyopt.optim import lr_scheduler  # after Optimizer, which it imports

if TYPE_CHECKING:
    from tinyopt.optim import swa_utils

__all__ = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon",
           "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam", "lr_scheduler",
           "swa_utils"]
__all__ += ["ADOPT", "AdEMAMix", "Adam8bit", "AdamW8bit", "AdamWScheduleFree", "LARS", "Lamb", "Lion", "Lion8bit",
            "Prodigy", "RAdamScheduleFree", "SGD8bit", "SGDScheduleFree", "SOAP"]  # (issue 31)


def __getattr__(name: str):
    if name == "swa_utils":  # on first use: it imports tinyopt.nn's layers (issue 14: import time)
        import importlib
        return importlib.import_module("tinyopt.optim.swa_utils")
    raise AttributeError(f"module 'tinyopt.optim' has no attribute {name!r}")
