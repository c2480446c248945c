"""tinyopt: PyTorch's training API on a small ggml-like static-graph engine.

``import tinyopt as to`` gives tensors and their functions (``to.tensor``, ``to.cat``, ``to.exp``,
``to.no_grad``, ``to.manual_seed``...), dtypes and devices with PyTorch's names (``to.float32``,
``to.long``, ``to.device("cpu")``), ``to.nn``, ``to.optim``, ``to.data``, ``to.autograd`` and
the ``to.cuda``/``to.accelerator``/``to.backends`` namespaces (no GPU: they answer False).
"""
import builtins as _builtins

from tinyopt.engine import (CacheInfo, Generator, Parameter, Size, Tensor, as_tensor, device,
                            enable_grad, from_numpy, inference_mode, is_grad_enabled,
                            is_inference_mode_enabled, manual_seed, no_grad, set_grad_enabled,
                            tensor)
from tinyopt.engine.dtypes import bool_ as bool
from tinyopt.engine.dtypes import float32, float64, int8, int16, int32, int64, uint8
from tinyopt.engine.dtypes import float32 as float
from tinyopt.engine.dtypes import float64 as double
from tinyopt.engine.dtypes import int16 as short
from tinyopt.engine.dtypes import int32 as int
from tinyopt.engine.dtypes import int64 as long
from tinyopt.engine.dtypes import promote, result_type as _result_type
from tinyopt.engine.printing import set_printoptions
from tinyopt.engine.random import (default_generator, get_rng_state, initial_seed, seed,
                                   set_rng_state)
from tinyopt.engine.tensor import (BoolTensor, ByteTensor, CharTensor, DoubleTensor,
                                   FloatTensor, IntTensor, LongTensor, ShortTensor, is_tensor)
from tinyopt.engine.ops import (abs, acos, all, any, add, addcdiv, addcmul, allclose, arange, arccos,
                                arcsin, arctan, argmax, argmin, asin, atan, bernoulli,
                                bitwise_and, bitwise_not, bitwise_or, bitwise_xor, cat, ceil,
                                clamp, clamp_max, clamp_min, clip, clone, cos, cosh, div,
                                divide, empty, empty_like, eq, equal, erf, exp, expm1, eye, fix,
                                flatten, floor, floor_divide, fmod, full, full_like, ge,
                                greater, greater_equal, gt, hypot, isclose, isfinite, isinf,
                                isnan, isneginf, isposinf, le, lerp, less, less_equal, linspace,
                                log, log1p, log2, log10, log_softmax, logaddexp, logical_and,
                                logical_not, logical_or, logical_xor, logspace, logsumexp, lt,
                                masked_fill, matmul, max, maximum, mean, min, minimum, mul,
                                multinomial, multiply, nan_to_num, ne, neg, negative, normal,
                                not_equal, ones, ones_like, permute, positive, pow, rand,
                                rand_like, randint, randint_like, randn, randn_like, randperm,
                                reciprocal, relu, remainder, reshape, round, rsqrt, sigmoid,
                                sign, sin, sinh, softmax, sqrt, square, squeeze, stack, std, sub,
                                subtract, sum, t, tan, tanh, transpose, true_divide, trunc,
                                unsqueeze, var, where, xlogy, zeros, zeros_like)
from tinyopt import nn, optim, data, utils, autograd, cuda, accelerator, backends
from tinyopt.checkpoint import CheckpointError, load_into
from tinyopt.serialization import load, save
from tinyopt.train import evaluate, fit

__version__ = "0.1.0"


def get_default_dtype():
    """The dtype of new floating-point tensors: float32."""
    return float32


def set_default_dtype(d) -> None:
    """Only float32 is supported as the default floating-point dtype."""
    if d != float32:
        raise NotImplementedError("tinyopt's default floating-point dtype is float32; pass "
                                  "dtype=... to the factories instead")


def is_floating_point(input: Tensor) -> _builtins.bool:
    return input.is_floating_point()


def numel(input: Tensor) -> _builtins.int:
    return input.numel()


def promote_types(type1, type2):
    """The dtype two dtypes promote to (``torch.promote_types``)."""
    return promote(type1, type2)


def result_type(tensor1, tensor2):
    """The dtype of an op over the two operands, by PyTorch's promotion rules."""
    return _result_type(tensor1, tensor2)


def can_cast(from_, to) -> _builtins.bool:
    from tinyopt.engine.dtypes import category
    return category(from_) <= category(to)


def __getattr__(name: str):
    if name == "distributed":  # on first use (it never imports mpi4py before init_process_group)
        import importlib
        return importlib.import_module("tinyopt.distributed")
    raise AttributeError(f"module 'tinyopt' has no attribute {name!r}")
