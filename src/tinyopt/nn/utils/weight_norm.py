"""``torch.nn.utils.weight_norm``/``remove_weight_norm``: the deprecated hook-based weight norm
(parameters ``<name>_g`` and ``<name>_v``; ``<name>`` recomputed before every forward pass).
``nn.utils.parametrizations.weight_norm`` is the current form."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from tinyopt.engine.tensor import Parameter
from tinyopt.nn.module import Module
from tinyopt.nn.utils.parametrizations import norm_except_dim

__all__ = ["remove_weight_norm", "weight_norm"]


class _WeightNormHook:
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    def compute_weight(self, module: Module) -> Any:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, 2, self.dim))

    def __call__(self, module: Module, inputs: Any) -> None:
        object.__setattr__(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Replace ``module.<name>`` by g * v / ||v|| with parameters ``<name>_g`` and ``<name>_v``
    (deprecated in PyTorch, with its FutureWarning)."""
    warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                  "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=2)
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter "
                               f"{name}")
    dim = -1 if dim is None else dim
    hook = _WeightNormHook(name, dim)
    weight = getattr(module, name)
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(np.array(
        norm_except_dim(weight, 2, dim).detach().numpy())))
    module.register_parameter(name + "_v", Parameter(np.array(weight.detach().numpy())))
    object.__setattr__(module, name, hook.compute_weight(module))
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Put ``<name>`` back as a plain Parameter holding the current g * v / ||v||."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            weight = hook.compute_weight(module)
            module.__dict__.pop(name, None)
            del module._parameters[name + "_g"]
            del module._parameters[name + "_v"]
            module.register_parameter(name, Parameter(np.array(weight.detach().numpy())))
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
