"""``tinyopt.nn``: modules, parameters, layers, losses, containers and initialisation, as
``torch.nn``.

``nn.Parameter`` is the engine's ``Parameter``, re-exported.
"""
from tinyopt.engine.tensor import Parameter
from tinyopt.nn import functional, init, utils
from tinyopt.nn.containers import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from tinyopt.nn.layers import *  # noqa: F403
from tinyopt.nn.layers import __all__ as _layers
from tinyopt.nn.module import Module

__all__ = ["Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "init", "functional", "utils"] + _layers


def __getattr__(name: str):
    if name == "parallel":  # on first use: it brings in tinyopt.distributed (not mpi4py)
        import importlib
        return importlib.import_module("tinyopt.nn.parallel")
    raise AttributeError(f"module 'tinyopt.nn' has no attribute {name!r}")
