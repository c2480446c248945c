"""tinyopt: PyTorch's training API on a small ggml-like static-graph engine.

``import tinyopt as to`` gives tensors and their functions (``to.tensor``, ``to.cat``, ``to.exp``,
``to.no_grad``, ``to.manual_seed``...), dtypes and devices with PyTorch's names (``to.float32``,
``to.long``, ``to.device("cpu")``), ``to.nn``, ``to.optim``, ``to.data``, ``to.autograd``,
``to.linalg``, ``to.distributions`` and the ``to.cuda``/``to.accelerator``/``to.backends``
namespaces (no GPU: their ``is_available()`` is False).
"""
import builtins as _builtins
import typing as _typing

import numpy as _np

from tinyopt.engine import (Generator, Parameter, Size, Tensor, device, enable_grad,
                            inference_mode, is_grad_enabled, is_inference_mode_enabled,
                            manual_seed, no_grad, set_grad_enabled)
from tinyopt.engine.dtypes import bool_ as bool
from tinyopt.engine.dtypes import (float16, float32, float64, int8, int16, int32, int64, uint8,
                                   uint16, uint32, uint64)
from tinyopt.engine.dtypes import float16 as half
from tinyopt.engine.dtypes import float32 as float
from tinyopt.engine.dtypes import float64 as double
from tinyopt.engine.dtypes import int16 as short
from tinyopt.engine.dtypes import int32 as int
from tinyopt.engine.dtypes import int64 as long
from tinyopt.engine.dtypes import promote as _promote
from tinyopt.engine.dtypes import result_type as _result_type
from tinyopt.engine.random import get_rng_state, initial_seed, seed, set_rng_state
from tinyopt.engine.tensor import (BoolTensor, ByteTensor, CharTensor, DoubleTensor,
                                   FloatTensor, IntTensor, LongTensor, ShortTensor, is_tensor)
from tinyopt.engine.lazy_exports import exports as _exports
from tinyopt.engine.lazy_exports import table as _table
from tinyopt.engine.ops import __all__ as _ops_all

# Everything else is imported on first use (``tinyopt.engine.lazy_exports``): ``import tinyopt`` loads
# the tensor and its dtypes, not the op families, kernels, layers, optimizers or drivers.
if _typing.TYPE_CHECKING:
    from tinyopt import (accelerator, amp, autograd, backends, compiler, cpu, cuda, data,
                         distributions, hub, jit, linalg, mps, nn, onnx, optim, safetensors,
                         sparse, special, testing, torch_format, utils, version, xpu)
    from tinyopt.amp import autocast, get_autocast_dtype, is_autocast_enabled
    from tinyopt.checkpoint import CheckpointError, load_into
    from tinyopt.compiler import compile
    from tinyopt.engine.ops import *  # noqa: F403  (the tensor API's functions: to.exp, to.cat...)
    from tinyopt.engine.plan_cache import CacheInfo
    from tinyopt.engine.printing import set_printoptions
    from tinyopt.engine.layout import (channels_last, channels_last_3d, contiguous_format,
                                       layout, memory_format, preserve_format, sparse_coo,
                                       strided)
    from tinyopt.engine.sparse import sparse_coo_tensor, spmm
    from tinyopt.engine.typeinfo import finfo, iinfo
    from tinyopt.kernels.num_threads import get_num_threads, set_num_threads
    from tinyopt.serialization import load, save
    from tinyopt.switches import (are_deterministic_algorithms_enabled, get_default_device,
                                  get_float32_matmul_precision,
                                  is_deterministic_algorithms_warn_only_enabled,
                                  set_default_device, set_float32_matmul_precision,
                                  use_deterministic_algorithms)
    from tinyopt.train import evaluate, fit

_WHERE = _table({
    "tinyopt.amp": "autocast get_autocast_dtype is_autocast_enabled",
    "tinyopt.checkpoint": "CheckpointError load_into",
    "tinyopt.compiler": "compile",
    "tinyopt.engine.plan_cache": "CacheInfo",
    "tinyopt.engine.printing": "set_printoptions",
    "tinyopt.engine.layout": ("channels_last channels_last_3d contiguous_format layout "
                              "memory_format preserve_format sparse_coo strided"),
    "tinyopt.engine.sparse": "sparse_coo_tensor spmm",
    "tinyopt.engine.typeinfo": "finfo iinfo",
    "tinyopt.kernels.num_threads": "get_num_threads set_num_threads",
    "tinyopt.serialization": "load save",
    "tinyopt.switches": (
        "are_deterministic_algorithms_enabled get_default_device get_float32_matmul_precision "
        "is_deterministic_algorithms_warn_only_enabled set_default_device "
        "set_float32_matmul_precision use_deterministic_algorithms"),
    "tinyopt.train": "evaluate fit",
    "tinyopt.engine.ops": " ".join(_ops_all),
})
_lazy_getattr, __dir__ = _exports(__name__, globals(), _WHERE, submodules=(
    "accelerator amp autograd backends checkpoint compiler cpu cuda data distributions hub jit "
    "kernels linalg mps multiprocessing nn onnx optim safetensors serialization sparse special "
    "switches testing torch_format train utils version xpu"))

__version__ = "0.1.0"


pi = 3.141592653589793
e = 2.718281828459045
inf = _builtins.float("inf")
nan = _builtins.float("nan")
newaxis = None
dtype = _np.dtype  # tinyopt's dtypes are numpy's: isinstance(x.dtype, torch.dtype) holds


def is_complex(input: Tensor) -> _builtins.bool:
    """False: tinyopt has no complex tensors."""
    return False


def get_default_dtype() -> float32.__class__:
    """The dtype of new floating-point tensors: float32."""
    return float32


def set_default_dtype(d: object) -> None:
    """Only float32 is supported as the default floating-point dtype."""
    if d != float32:
        raise NotImplementedError("tinyopt's default floating-point dtype is float32; pass "
                                  "dtype=... to the factories instead")


def is_floating_point(input: Tensor) -> _builtins.bool:
    """Whether ``input``'s dtype is a floating-point one."""
    return input.is_floating_point()


def numel(input: Tensor) -> _builtins.int:
    """The number of elements of ``input``."""
    return input.numel()


def promote_types(type1: object, type2: object) -> float32.__class__:
    """The dtype two dtypes promote to (``torch.promote_types``)."""
    return _promote(type1, type2)


def result_type(tensor1: object, tensor2: object) -> float32.__class__:
    """The dtype of an op over the two operands, by PyTorch's promotion rules."""
    return _result_type(tensor1, tensor2)


def can_cast(from_: object, to: object) -> _builtins.bool:
    """Whether ``from_`` casts to ``to`` by PyTorch's in-place rule (never to a lower category:
    float > integer > bool)."""
    from tinyopt.engine.dtypes import category
    return category(from_) <= category(to)


def __getattr__(name: str):
    if name.startswith("_foreach_"):  # torch's private list ops (``engine/ops/foreach.py``)
        from tinyopt.engine.ops import foreach
        if name in foreach.__all__:
            return getattr(foreach, name)
    if name == "bfloat16":  # ml_dtypes' dtype, imported on first use (``docs/low_precision.md``)
        from tinyopt.engine.dtypes import bfloat16_or_name
        return bfloat16_or_name()
    # the others, and the submodules (``tinyopt.distributed`` never imports mpi4py before
    # init_process_group)
    return _lazy_getattr(name)


# a literal list, then the ops' names: what type checkers need to see the exports (under
# ``mypy --strict`` a name imported here is public only if a literal ``__all__`` lists it)
__all__ = [
    "BoolTensor", "ByteTensor", "CacheInfo", "CharTensor", "CheckpointError", "DoubleTensor",
    "FloatTensor", "Generator", "IntTensor", "LongTensor", "Parameter", "ShortTensor", "Size",
    "Tensor", "accelerator", "amp", "are_deterministic_algorithms_enabled", "autocast", "autograd",
    "backends", "bool", "can_cast", "channels_last", "channels_last_3d", "compile", "compiler",
    "contiguous_format", "cpu", "cuda", "data", "device", "distributions", "double", "dtype", "e",
    "enable_grad", "evaluate", "finfo", "fit", "float", "float16", "float32", "float64",
    "get_autocast_dtype", "get_default_device", "get_default_dtype",
    "get_float32_matmul_precision", "get_num_threads", "get_rng_state", "half", "hub", "iinfo",
    "inf", "inference_mode", "initial_seed", "int", "int16", "int32", "int64", "int8",
    "is_autocast_enabled", "is_complex", "is_deterministic_algorithms_warn_only_enabled",
    "is_floating_point", "is_grad_enabled", "is_inference_mode_enabled", "is_tensor", "jit",
    "layout", "linalg", "load", "load_into", "long", "manual_seed", "memory_format", "mps", "nan",
    "newaxis", "nn", "no_grad", "numel", "onnx", "optim", "pi", "preserve_format", "promote_types",
    "result_type", "save", "seed", "set_default_device", "set_default_dtype",
    "set_float32_matmul_precision", "set_grad_enabled", "set_num_threads", "set_printoptions",
    "set_rng_state", "short", "sparse", "sparse_coo", "sparse_coo_tensor", "special", "spmm",
    "strided", "testing", "uint16", "uint32", "uint64", "uint8", "use_deterministic_algorithms",
    "utils", "version", "xpu"]
__all__ += [_name for _name in _ops_all if _name not in __all__]
