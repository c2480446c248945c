"""tinyopt: PyTorch's training API on a small ggml-like static-graph engine.

``import tinyopt as to`` gives tensors and their functions (``to.tensor``, ``to.cat``, ``to.exp``,
``to.no_grad``, ``to.manual_seed``...), ``to.nn``, ``to.optim`` and ``to.data``.
"""
from tinyopt.engine import (CacheInfo, Generator, Parameter, Tensor, enable_grad, float32,
                            float64, get_rng_state, int64, is_grad_enabled, manual_seed, no_grad,
                            set_grad_enabled, set_rng_state, tensor)
from tinyopt.engine.ops import (abs, arange, argmax, argmin, cat, clamp, exp, flatten, full,
                                log, log_softmax, logsumexp, matmul, max, maximum, mean, min,
                                minimum, ones, permute, rand, randn, relu, reshape, sigmoid,
                                softmax, sqrt, square, squeeze, stack, sum, tanh, transpose,
                                unsqueeze, var, where, zeros)
from tinyopt import nn, optim, data, utils, amp
from tinyopt.checkpoint import CheckpointError, load_into
from tinyopt.serialization import load, save
from tinyopt.train import evaluate, fit

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "distributed":  # on first use (it never imports mpi4py before init_process_group)
        import importlib
        return importlib.import_module("tinyopt.distributed")
    raise AttributeError(f"module 'tinyopt' has no attribute {name!r}")
