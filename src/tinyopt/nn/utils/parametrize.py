"""``torch.nn.utils.parametrize``: a parameter computed from others at every access.

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

    parametrize.register_parametrization(layer, "weight", Symmetric())
    layer.weight                           # Symmetric()(layer.parametrizations.weight.original)

As in PyTorch: the module's class is replaced by a subclass (``ParametrizedLinear``) whose
``weight`` is a property; the unconstrained tensor lives in ``module.parametrizations.weight``
(a :class:`ParametrizationList`) as ``original`` (the same Parameter object, so optimizers built
before keep working), or as ``original0``, ``original1``... when the parametrization's
``right_inverse`` returns several tensors (``weight_norm``'s g and v).  ``state_dict`` keys are
PyTorch's (``parametrizations.weight.original``).  Assigning ``module.weight = X`` stores
``right_inverse(X)``; ``cached()`` computes each parametrized tensor once inside the block;
``remove_parametrizations`` puts a plain Parameter back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.tensor import Parameter, Tensor, as_tensor
from tinyopt.nn.containers import ModuleDict, ModuleList
from tinyopt.nn.module import Module

__all__ = ["ParametrizationList", "cached", "is_parametrized", "register_parametrization",
           "remove_parametrizations", "type_before_parametrizations",
           "transfer_parametrizations_and_params"]

_cache: dict[tuple[int, str], Tensor] = {}
_cache_depth = [0]


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Inside, a parametrized tensor is computed once (at its first access) and reused."""
    _cache_depth[0] += 1
    try:
        yield
    finally:
        _cache_depth[0] -= 1
        if not _cache_depth[0]:
            _cache.clear()


def _set_data(p: Parameter, value: Tensor) -> None:
    """Write ``value`` into ``p`` (same shape and dtype), keeping the Parameter object."""
    with no_grad():
        p.copy_(value)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor and its unconstrained ``original`` tensor(s)."""

    def __init__(self, modules: list[Module], original: Tensor, unsafe: bool = False) -> None:
        if not modules:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        new: Any = original
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, (Tensor, tuple, list)):
            raise ValueError(f"'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        requires_grad = bool(getattr(original, "requires_grad", True))
        if self.is_tensor:
            if not unsafe and (new.shape != original.shape or new.dtype != original.dtype):
                raise ValueError(f"When `right_inverse` outputs one tensor, it may not change "
                                 f"the dtype or shape.\noriginal.dtype: {original.dtype}\n"
                                 f"right_inverse(original).dtype: {new.dtype}\noriginal.shape: "
                                 f"{original.shape}\nright_inverse(original).shape: {new.shape}")
            if isinstance(original, Parameter):
                if new is not original:
                    _set_data(original, new)
                self.register_parameter("original", original)
            else:
                self.register_buffer("original", as_tensor(np.array(new.numpy())))
        else:
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise ValueError(f"'right_inverse' must return a sequence of tensors. Got "
                                     f"element {i} of type {type(t).__name__}")
                if isinstance(original, Parameter):
                    self.register_parameter(f"original{i}",
                                            Parameter(np.array(t.numpy()), requires_grad))
                else:
                    self.register_buffer(f"original{i}", as_tensor(np.array(t.numpy())))

    def right_inverse(self, value: Tensor) -> None:
        """Store ``value`` as the parametrized tensor: the originals become right_inverse of
        it, through the parametrizations in reverse order."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                else:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       f"implement right_inverse.")
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                _set_data(self.original, value)
            else:
                if len(value) != self.ntensors:
                    raise ValueError(f"'right_inverse' must return a sequence of tensors of "
                                     f"length {self.ntensors}. Got a sequence of length "
                                     f"{len(value)}")
                for i, t in enumerate(value):
                    _set_data(getattr(self, f"original{i}"), t)

    def forward(self) -> Tensor:
        modules = list(self)
        if self.is_tensor:
            x = modules[0](self.original)
        else:
            x = modules[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in modules[1:]:
            x = module(x)
        return x


def _inject_new_class(module: Module) -> None:
    cls = module.__class__

    def getstate(self: Module) -> Any:
        raise RuntimeError("Serialization of parametrized modules is only supported through "
                           "state_dict(). See:\nhttps://pytorch.org/tutorials/beginner/"
                           "saving_loading_models.html#saving-loading-a-general-checkpoint-for-"
                           "inference-and-or-resuming-training")

    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"__getstate__": getstate})


def _inject_property(module: Module, tensor_name: str) -> None:
    def get_parametrized(self: Module) -> Tensor:
        parametrization = self.parametrizations[tensor_name]
        if _cache_depth[0]:
            key = (id(self), tensor_name)
            if key not in _cache:
                _cache[key] = parametrization()
            return _cache[key]
        return parametrization()

    def set_original(self: Module, value: Any) -> None:
        self.parametrizations[tensor_name].right_inverse(as_tensor(value))

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has parametrizations (for ``tensor_name``, when given)."""
    parametrizations = module.__dict__.get("_modules", {}).get("parametrizations")
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else \
        tensor_name in parametrizations


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` be ``parametrization(original)`` (see the module
    docstring); registering again chains the parametrizations."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            y = getattr(module, tensor_name)
            _check_unchanged(y, parametrization(y))
        plist.append(parametrization)
        plist.unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        plist = ParametrizationList([parametrization], original, unsafe=unsafe)
        if not unsafe:
            _check_unchanged(original, plist())
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        module.parametrizations[tensor_name] = plist
        _inject_property(module, tensor_name)
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def _check_unchanged(y: Tensor, x: Any) -> None:
    """PyTorch's check that a parametrization keeps its tensor's dtype and shape."""
    if not isinstance(x, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(x).__name__}.")
    if x.dtype != y.dtype or x.shape != y.shape:
        raise ValueError(f"Registering a parametrization may not change the shape of the "
                         f"tensor, unless `unsafe` flag is enabled.\nunparametrized dtype: "
                         f"{y.dtype}\nparametrized dtype: {x.dtype}\nunparametrized shape: "
                         f"{y.shape}\nparametrized shape: {x.shape}")


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Put a plain Parameter back for ``tensor_name``: the current parametrized value
    (``leave_parametrized``) or the original."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
            if t.shape != original.shape or t.dtype != original.dtype:
                raise ValueError("Cannot leave the parametrized value in place: it has another "
                                 "shape or dtype than the original tensor")
            _set_data(original, t)
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                             "that is parametrized in terms of a sequence of tensors.")
        with no_grad():
            t = getattr(module, tensor_name)
        original = Parameter(np.array(t.numpy()), requires_grad=True)
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(original, Parameter):
        module.register_parameter(tensor_name, original)
    else:
        module.register_buffer(tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module: Module) -> type:
    """The class ``module`` had before parametrizations replaced it."""
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def transfer_parametrizations_and_params(from_module: Module, to_module: Module,
                                         tensor_name: str | None = None) -> Module:
    """Copy ``from_module``'s parametrizations (and their originals' values) to ``to_module``."""
    if not is_parametrized(from_module):
        return to_module
    names = [tensor_name] if tensor_name else list(from_module.parametrizations.keys())
    for name in names:
        if not hasattr(to_module, name):
            to_module.register_parameter(name, Parameter(np.array(
                getattr(from_module, name).numpy())))
        for p in from_module.parametrizations[name]:
            if not is_parametrized(to_module, name) or \
                    p not in list(to_module.parametrizations[name]):
                register_parametrization(to_module, name, p)
        plist = from_module.parametrizations[name]
        for pname, param in plist.named_parameters(recurse=False):
            _set_data(getattr(to_module.parametrizations[name], pname), param)
    return to_module
