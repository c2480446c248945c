"""``tinyopt.nn``: modules, parameters, containers and initialisation, as ``torch.nn``.

``nn.Parameter`` is the engine's ``Parameter``, re-exported.
"""
from tinyopt.engine.tensor import Parameter
from tinyopt.nn import functional, init
from tinyopt.nn.containers import ModuleDict, ModuleList, Sequential
from tinyopt.nn.module import Module

__all__ = ["Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "init", "functional"]
