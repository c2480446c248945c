"""``tinyopt.nn``: modules, parameters, layers, losses, containers and initialisation, as
``torch.nn``.

``nn.Parameter`` is the engine's ``Parameter``, re-exported.
"""
import typing as _typing

from tinyopt.engine.lazy_exports import exports as _exports
from tinyopt.engine.tensor import Parameter
from tinyopt.nn.containers import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from tinyopt.nn.layers import __all__ as _layers
from tinyopt.nn.module import Module

if _typing.TYPE_CHECKING:  # imported on first use (``tinyopt.engine.lazy_exports``)
    from tinyopt.nn import functional, init, utils
    from tinyopt.nn.data_parallel import DataParallel
    from tinyopt.nn.layers import *  # noqa: F403

# a literal list, then the layers (``mypy --strict`` sees only a literal list's names as exports)
__all__ = ["Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "init", "functional", "utils", "DataParallel"]
__all__ += _layers

# a layer on first use; ``nn.parallel`` brings in tinyopt.distributed (not mpi4py)
_WHERE = dict.fromkeys(_layers, "tinyopt.nn.layers") | {"DataParallel": "tinyopt.nn.data_parallel"}
__getattr__, __dir__ = _exports(__name__, globals(), _WHERE,
                                submodules="attention functional init modules parallel utils")
