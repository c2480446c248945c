"""``Module``: the base class of every layer and model, with ``torch.nn.Module``'s behaviour.

A module owns Parameters, buffers (Tensors that are not parameters, such as BatchNorm's running
statistics) and child modules, all registered by plain attribute assignment::

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 500)        # child module  -> "fc1.weight", "fc1.bias"
            self.scale = nn.Parameter(np.ones(1)) # parameter     -> "scale"
            self.register_buffer("steps", to.zeros((), dtype=to.int64))  # buffer -> "steps"

        def forward(self, x):
            self.steps += 1                        # buffers are Tensors: in-place ops work
            return self.fc1(x) * self.scale

    model = MLP()
    sd = model.state_dict()          # OrderedDict of Tensors sharing the storage (as PyTorch)
    model.load_state_dict(sd)        # validates every key, shape and dtype before copying anything

Names are dotted paths in registration order (``named_parameters()``), a parameter shared by two
modules is yielded once, and ``state_dict()``/``load_state_dict()`` follow PyTorch's key layout and
error messages.  Loading copies into each parameter's
existing storage, which the optimizers step where it is, so they keep working.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tinyopt.engine import shared_memory
from tinyopt.engine.device import check_device
from tinyopt.engine.device import device as device_type
from tinyopt.engine.dtypes import FLOATS, as_dtype, grad_dtype, is_low, torch_name
from tinyopt.engine.hooks import RemovableHandle
from tinyopt.engine.row_sparse import forget_rows
from tinyopt.engine.tensor import Parameter, Tensor, leaf

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Module", "RemovableHandle"]


class _IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` returns: the keys the module expected but did not get, and the
    keys it got but does not have."""

    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (f"_IncompatibleKeys(missing_keys={self.missing_keys!r}, "
                f"unexpected_keys={self.unexpected_keys!r})")

    __str__ = __repr__


class _StateDictMismatchError(ValueError, RuntimeError):
    """A value in a state dict has the wrong shape, dtype or type.

    A ``ValueError``; also a ``RuntimeError`` so code written for PyTorch (which raises
    RuntimeError for a size mismatch) still catches it.
    """


def _typename(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _as_buffer(value: Any, name: str) -> Tensor | None:
    """The Tensor a module stores for a buffer value: a concrete tensor itself (as PyTorch keeps
    the object), a numpy array wrapped without a copy, a Parameter's or graph node's value."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return leaf(value)
    if isinstance(value, Tensor):
        if value.op == "input" and not isinstance(value, Parameter):
            return value
        return leaf(value.numpy())
    raise TypeError(f"cannot assign '{_typename(value)}' object to buffer '{name}' "
                    f"(numpy.ndarray, tinyopt Tensor or None required)")


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(num_spaces * " " + line for line in lines)


def _check_member_name(kind: str, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\", got: {name}")
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")


class Module:
    """Base class for all neural network modules (``torch.nn.Module``).

    Subclasses call ``super().__init__()`` first, assign Parameters, submodules and buffers as
    attributes, and define ``forward``.  Calling the module runs forward pre-hooks, ``forward``
    and forward hooks.
    """

    training: bool
    _version: int = 1

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments: "
                            f"{args!r} {kwargs!r}")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}
        d["_forward_pre_hooks"] = {}
        d["_forward_hooks"] = {}

    # ---- forward ------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """The computation of this module; every subclass defines it.  Call the module
        (``module(x)``), not ``forward``, so that hooks run."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  f'"forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        """Run forward pre-hooks, ``forward`` and forward hooks.  Typed as returning a Tensor
        (what ``model(x)`` is in training code); a module whose ``forward`` returns a tuple or
        a dict still returns it, and a Tensor unpacks and indexes the same way for type
        checkers."""
        d = self.__dict__
        pre_hooks = d.get("_forward_pre_hooks")
        hooks = d.get("_forward_hooks")
        if not pre_hooks and not hooks:
            return self.forward(*args, **kwargs)
        for hook in list(pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook in list(hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    def register_forward_pre_hook(self, hook: Callable, *,
                                  prepend: bool = False) -> RemovableHandle:
        """``hook(module, args) -> None | new_args`` runs before every ``forward``."""
        return self._add_hook("_forward_pre_hooks", hook, prepend)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False) -> RemovableHandle:
        """``hook(module, args, output) -> None | new_output`` runs after every ``forward``."""
        return self._add_hook("_forward_hooks", hook, prepend)

    def _add_hook(self, registry: str, hook: Callable, prepend: bool) -> RemovableHandle:
        hooks = self.__dict__[registry]
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        if prepend:
            items = [(handle.id, hook)] + [(k, v) for k, v in hooks.items() if k != handle.id]
            hooks.clear()
            hooks.update(items)
        return handle

    # ---- registration -------------------------------------------------------------------------
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a None placeholder) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_member_name("parameter", name)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            f"(tinyopt.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: np.ndarray | Tensor | None,
                        persistent: bool = True) -> None:
        """Add a buffer: state that is not a parameter (e.g. BatchNorm's running mean).

        Buffers are Tensors: a concrete Tensor is stored as it is, a numpy array as a Tensor
        sharing its memory, so ``self.name.add_(...)``, ``self.name[idx] = v`` and
        ``self.name += 1`` write into the buffer.  Persistent buffers are part of
        ``state_dict()``; non-persistent ones are not.
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_member_name("buffer", name)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        array = _as_buffer(tensor, name)
        self._buffers[name] = array
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under ``name`` (also available as the attribute ``name``)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        _check_member_name("module", name)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__  # (unrolled: a layer reads its parameters this way on every call)
        members = d.get("_parameters")
        if members is not None and name in members:
            return members[name]
        members = d.get("_buffers")
        if members is not None and name in members:
            return members[name]
        members = d.get("_modules")
        if members is not None and name in members:
            return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*registries):
            for registry in registries:
                if name in registry:
                    if isinstance(registry, set):
                        registry.discard(name)
                    else:
                        del registry[name]

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                f"(tinyopt.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(d, self._parameters, self._buffers, self._non_persistent_buffers_set)
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    f"(tinyopt.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = d.get("_buffers")
                if buffers is not None and name in buffers:
                    buffers[name] = _as_buffer(value, name)
                else:
                    object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        keys = list(object.__dir__(self))
        keys += list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # ---- lookup -------------------------------------------------------------------------------
    def get_submodule(self, target: str) -> Module:
        """The submodule at the dotted path ``target`` (``""`` is the module itself)."""
        _check_dotted("get_submodule", target)
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at the dotted path ``target`` (e.g. ``"fc1.weight"``)."""
        _check_dotted("get_parameter", target)
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at the dotted path ``target``."""
        _check_dotted("get_buffer", target)
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # ---- iteration ----------------------------------------------------------------------------
    def named_modules(self, memo: set[int] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """``(dotted_name, module)`` for this module and every descendant, pre-order."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """Every module of the tree, this one first, each module object once (as ``named_modules``
        without the names)."""
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Immediate children (each module object once)."""
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        """The immediate child modules, each object once."""
        for _, module in self.named_children():
            yield module

    def _named_members(self, get_members: Callable, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        memo: set[int] = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or id(value) in memo:
                    continue
                if remove_duplicate:
                    memo.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted_name, parameter)`` in registration order; a shared parameter is yielded once,
        under the first name that reaches it."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter of this module (and its submodules with ``recurse``), each object once:
        what an optimizer is given."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(name, buffer)`` for every buffer (persistent or not), names as in ``state_dict``
        (``"bn.running_mean"``)."""
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer of this module (and its submodules with ``recurse``)."""
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    # ---- modes and bulk operations ------------------------------------------------------------
    def train(self, mode: bool = True) -> Self:
        """Set training mode on this module and all descendants (Dropout, BatchNorm read it)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Self:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Set ``requires_grad`` on every parameter (False freezes the module); returns
        the module."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (the default), or to zeros in place."""
        for p in self.parameters():
            if p._grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p._grad.fill(0)
                    forget_rows(p)  # a sparse Embedding's gradient has no rows looked up now

    def apply(self, fn: Callable[[Module], Any]) -> Self:
        """Call ``fn`` on every descendant (children first, then self), e.g. to initialise."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs) -> Self:
        """``to(dtype)``, ``to(device)`` or ``to(device, dtype)``: cast floating-point parameters
        and buffers (float16 and bfloat16 included) in place, rounding to nearest even (the
        Parameter objects stay the same; integer ones keep their dtype).  The only device is
        ``"cpu"``.  The gradient of a float16 or bfloat16 parameter is float32
        (``docs/low_precision.md``)."""
        device, dtype = _parse_to(args, kwargs)
        check_device(device)
        if dtype is None:
            return self
        if not _floating(dtype):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={torch_name(dtype)}")
        params = [(n, p) for n, p in self.named_parameters() if _floating(p.dtype)
                  and p.dtype != dtype]
        for name, p in params:
            if p.slot is not None:
                raise RuntimeError(f"cannot change the dtype of parameter '{name}': an optimizer "
                                   f"manages its storage (convert the model before creating the "
                                   f"optimizer)")
        with np.errstate(over="ignore"):  # (a value beyond float16's range becomes inf)
            for _, p in params:
                p._data = p._data.astype(dtype)
                p.dtype = dtype
                if p._grad is not None:
                    p._grad = p._grad.astype(grad_dtype(dtype))
            for module in self.modules():
                for name, buf in module._buffers.items():
                    if buf is not None and _floating(buf.dtype) and buf.dtype != dtype:
                        module._buffers[name] = leaf(buf.numpy().astype(dtype))
        return self

    def float(self) -> Self:
        """Cast floating-point parameters and buffers to float32; returns the module."""
        return self.to(np.float32)

    def double(self) -> Self:
        """Cast floating-point parameters and buffers to float64; returns the module."""
        return self.to(np.float64)

    def half(self) -> Self:
        """Cast floating-point parameters and buffers to float16."""
        return self.to(np.float16)

    def bfloat16(self) -> Self:
        """Cast floating-point parameters and buffers to bfloat16 (needs ml_dtypes)."""
        return self.to("bfloat16")

    def cpu(self) -> Self:
        """This module itself (everything is on the CPU)."""
        return self

    def share_memory(self) -> Self:
        """Move every parameter (and its gradient) and buffer to shared memory
        (``Tensor.share_memory_``): processes forked afterwards train this very model, as in
        pytorch/examples' ``mnist_hogwild``."""
        for p in self.parameters():
            p.share_memory_()
            g = p.grad
            if g is not None and not g.is_shared():  # (the gradient becomes that tensor)
                p.grad = leaf(shared_memory.shared_copy(g.numpy()))
        for b in self.buffers():
            b.share_memory_()
        return self

    def cuda(self, device: Any = None) -> Self:
        """Refused: tinyopt runs on the CPU only (the error says so, and what to do instead)."""
        check_device("cuda" if device is None else device)
        return self

    def xpu(self, device: Any = None) -> Self:
        """Refused: tinyopt runs on the CPU only."""
        check_device("xpu" if device is None else device)
        return self

    # ---- state dict ---------------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        """Put this module's own parameters and persistent buffers (not its children's) into
        ``destination``: Tensors sharing their storage, or the objects themselves with
        ``keep_vars``."""
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else leaf(buf.numpy())

    def state_dict(self, *, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Any]:
        """An ``OrderedDict`` from dotted names to Tensors: every parameter and persistent
        buffer, in ``named_modules`` order (a shared parameter appears under each of its names).

        As in PyTorch the Tensors share the parameters' storage (no copy): training after the
        call changes them; ``copy.deepcopy(sd)`` or ``{k: v.clone() ...}`` keeps a snapshot.
        ``np.asarray(v)`` gives the array.  With ``keep_vars=True`` the values are the Parameters
        and buffer Tensors themselves.
        """
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def _local_state(self) -> dict[str, np.ndarray]:
        """Name -> the array ``load_state_dict`` copies into (parameters, persistent buffers)."""
        state = {n: p.value for n, p in self._parameters.items() if p is not None}
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                state[name] = buf.numpy()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True
                        ) -> _IncompatibleKeys:
        """Copy arrays from ``state_dict`` into this module's parameters and persistent buffers.

        Every value is checked first (type, shape and dtype must match exactly); only when all
        pass is anything copied, into the existing storage (``np.copyto``).  Returns
        ``(missing_keys, unexpected_keys)``.  With ``strict=True`` a missing or unexpected key
        raises ``RuntimeError``; a wrong shape, dtype or value type always raises ``ValueError``
        naming the key and both shapes/dtypes, and the module is left unchanged.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        for key in state_dict:
            if not isinstance(key, str):
                raise TypeError(f"Error(s) in loading state_dict for {type(self).__name__}: keys "
                                f"must be strings (dotted parameter and buffer names), got "
                                f"{key!r} of type {type(key).__name__}")
        missing: list[str] = []
        unexpected: list[str] = []
        errors: list[str] = []
        copies: list[tuple[np.ndarray, np.ndarray]] = []

        for prefix_dot, module in self.named_modules(remove_duplicate=False):
            prefix = prefix_dot + "." if prefix_dot else ""
            local = module._local_state()
            for name, target in local.items():
                key = prefix + name
                if key not in state_dict:
                    missing.append(key)
                    continue
                value = state_dict[key]
                if isinstance(value, Parameter):
                    value = value.value
                elif isinstance(value, Tensor):
                    value = value.numpy()
                elif isinstance(value, np.generic):
                    value = np.asarray(value)
                if not isinstance(value, np.ndarray):
                    errors.append(f'While copying the parameter named "{key}", expected a numpy '
                                  f'array or tinyopt Tensor from checkpoint but received '
                                  f'{type(value)}')
                elif value.shape != target.shape:
                    errors.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{value.shape} from checkpoint, the shape in current model is "
                                  f"{target.shape}.")
                elif value.dtype != target.dtype:
                    errors.append(f"dtype mismatch for {key}: copying a param with dtype "
                                  f"{value.dtype} from checkpoint, the dtype in current model is "
                                  f"{target.dtype}.")
                elif not target.flags.writeable:
                    errors.append(f"cannot load {key}: the module's array is read-only")
                else:
                    copies.append((target, value))
            for key in state_dict:
                if not key.startswith(prefix):
                    continue
                head, dot, _ = key[len(prefix):].partition(".")
                if dot:
                    if head not in module._modules:
                        unexpected.append(key)
                elif head not in local:
                    unexpected.append(key)

        key_errors = []
        if strict and missing:
            key_errors.append("Missing key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in missing)))
        if strict and unexpected:
            key_errors.append("Unexpected key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in unexpected)))
        if key_errors or errors:
            message = "Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(key_errors + errors))
            raise RuntimeError(message) if key_errors else _StateDictMismatchError(message)
        for target, value in copies:
            np.copyto(target, value)
        return _IncompatibleKeys(missing, unexpected)

    # ---- repr ---------------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Extra text inside this module's repr (e.g. ``in_features=784, out_features=500``)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2)
                       for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "meta")


def _floating(d: np.dtype) -> bool:
    return d in FLOATS or is_low(d)


def _parse_to(args: tuple, kwargs: dict) -> tuple[str | None, np.dtype | None]:
    """``Module.to``'s arguments as ``(device, dtype)``."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    if len(args) > 2:
        raise TypeError(f"to() takes at most 2 positional arguments ({len(args)} given)")
    for arg in args:
        if isinstance(arg, device_type) or isinstance(arg, int) and not isinstance(arg, bool):
            device = str(device_type("cuda", arg) if isinstance(arg, int) else arg)
        elif isinstance(arg, str) and arg.split(":")[0] in _DEVICE_TYPES:
            device = arg
        elif isinstance(arg, (Tensor, np.ndarray)):
            dtype = arg.dtype
        else:
            dtype = arg
    if dtype is not None:
        dtype = as_dtype(dtype)
    return device, dtype


def _check_dotted(where: str, target: Any) -> None:
    if not isinstance(target, str):
        raise TypeError(f"{where}: target must be a dotted name (str), got {target!r} of type "
                        f"{type(target).__name__}")
