"""Containers of modules: ``Sequential``, ``ModuleList`` and ``ModuleDict``, and of parameters:
``ParameterList`` and ``ParameterDict`` (as in ``torch.nn``).

::

    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
    model[1]            # the first Linear; model[-1] the last
    model[:2]           # a new Sequential sharing the first two modules
    blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))   # registered, unlike a list
    heads = nn.ModuleDict({"cls": nn.Linear(8, 10), "box": nn.Linear(8, 4)})

Modules in a container are registered children, so their parameters appear in
``parameters()``/``state_dict()`` under the keys ``"0.weight"``, ``"cls.bias"`` and so on.
Operations that take several modules check them all before changing anything.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from tinyopt.engine.tensor import Parameter, Tensor
from tinyopt.nn.module import Module, _addindent, _typename

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _check_modules(modules: list[Any]) -> None:
    for module in modules:
        if not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")


def _renumber(container: Module) -> None:
    """Re-key a list-like container's children as "0", "1", ... in their current order."""
    values = list(container._modules.values())
    container._modules.clear()
    container._modules.update((str(i), m) for i, m in enumerate(values))


class Sequential(Module):
    """Modules applied one after another: ``forward(x)`` is ``m_n(...m_2(m_1(x)))``.

    ``Sequential(m1, m2, ...)`` names the children ``"0"``, ``"1"``, ...;
    ``Sequential(OrderedDict([("fc", m1), ("act", m2)]))`` uses the given names.
    """

    def __init__(self, *args: Module) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            items = list(args[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(args)]
        _check_modules([m for _, m in items])
        for key, module in items:
            self.add_module(key, module)

    def _get_item_by_idx(self, iterator: Iterable, idx: int) -> Any:
        size = len(self)
        idx = operator.index(idx)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range")
        return next(islice(iterator, idx % size, None))

    def __getitem__(self, idx: int | slice) -> Module:
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[idx]))
        return self._get_item_by_idx(self._modules.values(), idx)

    def __setitem__(self, idx: int, module: Module) -> None:
        key = self._get_item_by_idx(self._modules.keys(), idx)
        _check_modules([module])
        setattr(self, key, module)

    def __delitem__(self, idx: int | slice) -> None:
        if isinstance(idx, slice):
            keys = list(self._modules.keys())[idx]
        else:
            keys = [self._get_item_by_idx(self._modules.keys(), idx)]
        for key in keys:
            delattr(self, key)
        _renumber(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __dir__(self) -> list[str]:
        return [k for k in super().__dir__() if not k.isdigit()]

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return Sequential(*self, *other)

    def __iadd__(self, other: Sequential) -> Self:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return self.extend(list(other))

    def __mul__(self, other: int) -> Sequential:
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        return Sequential(*(list(self) * other))

    __rmul__ = __mul__

    def __imul__(self, other: int) -> Self:
        repeated = self * other
        return self.extend(list(repeated)[len(self):])

    def append(self, module: Module) -> Self:
        """Add ``module`` at the end."""
        _check_modules([module])
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module: Module) -> Self:
        """Insert ``module`` before position ``index`` (negative counts from the end)."""
        _check_modules([module])
        n = len(self._modules)
        index = operator.index(index)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        values = list(self._modules.values())
        values.insert(index, module)
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(values))
        return self

    def extend(self, sequential: Iterable[Module]) -> Self:
        """Append every module of ``sequential`` (any iterable of modules)."""
        modules = list(sequential)
        _check_modules(modules)
        for module in modules:
            self.append(module)
        return self

    def pop(self, key: int | slice) -> Module:
        """Remove and return the module at ``key`` (the later ones move up)."""
        value = self[key]
        del self[key]
        return value

    def forward(self, input):
        """Each module applied in order to the output of the one before."""
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules that registers them (so their parameters are found), indexable like a
    list.  It has no ``forward``: the owner decides how to call them."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _get_abs_string_index(self, idx: int) -> str:
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        if idx < 0:
            idx += len(self)
        return str(idx)

    def __getitem__(self, idx: int | slice) -> Module:
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[self._get_abs_string_index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = self._get_abs_string_index(idx)
        _check_modules([module])
        setattr(self, key, module)

    def __delitem__(self, idx: int | slice) -> None:
        if isinstance(idx, slice):
            keys = [str(k) for k in range(len(self._modules))[idx]]
        else:
            keys = [self._get_abs_string_index(idx)]
        for key in keys:
            delattr(self, key)
        _renumber(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> Self:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        modules = list(chain(self, other))
        _check_modules(modules)
        return ModuleList(modules)

    def __dir__(self) -> list[str]:
        return [k for k in super().__dir__() if not k.isdigit()]

    def __repr__(self) -> str:
        """Like PyTorch's: a run of identical children is shown once, ``(0-2): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks: list[list] = []  # [start, end, repr]
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = []
        for start, end, r in blocks:
            if start == end:
                line = f"({start}): {r}"
            else:
                line = f"({start}-{end}): {end - start + 1} x {r}"
            lines.append(_addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index`` (like ``list.insert``)."""
        _check_modules([module])
        values = list(self._modules.values())
        values.insert(operator.index(index), module)
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(values))

    def append(self, module: Module) -> Self:
        """Add ``module`` at the end; returns the list."""
        _check_modules([module])
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key: int | slice) -> Module:
        """Remove and return the module at ``key`` (the later ones move up)."""
        value = self[key]
        del self[key]
        return value

    def extend(self, modules: Iterable[Module]) -> Self:
        """Add every module of ``modules`` at the end; returns the list."""
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got "
                            + type(modules).__name__)
        modules = list(modules)
        _check_modules(modules)
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self


class ModuleDict(Module):
    """An ordered dict of modules that registers them; keys are the child names."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None
                 ) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        _check_modules([module])
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove and return the module under ``key``."""
        value = self[key]
        del self[key]
        return value

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self):
        """The ``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace entries from a mapping or an iterable of ``(key, module)`` pairs,
        keeping their order.  Every pair is checked before any is added."""
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value "
                            "pairs, but got " + type(modules).__name__)
        if isinstance(modules, (Mapping, ModuleDict)):
            pairs = list(modules.items())
        else:
            pairs = []
            for j, m in enumerate(modules):
                if not isinstance(m, Iterable):
                    raise TypeError(f"ModuleDict update sequence element #{j} should be "
                                    f"Iterable; is {type(m).__name__}")
                m = list(m)
                if len(m) != 2:
                    raise ValueError(f"ModuleDict update sequence element #{j} has length "
                                     f"{len(m)}; 2 is required")
                pairs.append((m[0], m[1]))
        _check_modules([m for _, m in pairs])
        for key, module in pairs:
            if not isinstance(key, str):
                raise TypeError(f"module name should be a string. Got {_typename(key)}")
            if "." in key or key == "" or (hasattr(self, key) and key not in self._modules):
                raise KeyError(f"invalid ModuleDict key {key!r}: keys must be non-empty, contain "
                               f"no '.', and not shadow a ModuleDict attribute")
        for key, module in pairs:
            self[key] = module


def _as_parameter(value: Any) -> Any:
    """A Tensor that is not a Parameter becomes one (as PyTorch's parameter containers do)."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
        size = "x".join(map(str, value.shape))
        return f"{kind} containing: [{value.dtype} of size {size}]"
    return f"Object of type: {type(value).__name__}"


class ParameterList(Module):
    """A list of parameters that registers them (so ``parameters()`` and ``state_dict()`` find
    them as ``"0"``, ``"1"``, ...).  Tensors that are not Parameters are made Parameters; other
    values are kept as they are, unregistered."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _index(self, idx: int) -> int:
        idx = operator.index(idx)
        if not -self._size <= idx < self._size:
            raise IndexError(f"index {idx} is out of range")
        return idx % self._size if self._size else idx

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return self.__class__([self[i] for i in range(self._size)[idx]])
        return getattr(self, str(self._index(idx)))

    def __setitem__(self, idx: int, param: Any) -> None:
        setattr(self, str(self._index(idx)), _as_parameter(param))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def __iadd__(self, parameters: Iterable[Any]) -> Self:
        return self.extend(parameters)

    def __dir__(self) -> list[str]:
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value: Any) -> Self:
        """Add ``value`` (a Parameter, or a tensor or array made one) at the end; returns
        the list."""
        self._size += 1
        try:
            setattr(self, str(self._size - 1), _as_parameter(value))
        except BaseException:
            self._size -= 1
            raise
        return self

    def extend(self, values: Iterable[Any]) -> Self:
        """Add every value of ``values`` at the end; returns the list."""
        if not isinstance(values, Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            + type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): {_describe(v)}" for i, v in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """A dict of parameters that registers them under their (string) keys.  Tensors that are not
    Parameters are made Parameters.  ``update`` from a plain dict adds its keys in sorted order,
    from an ``OrderedDict`` or ``ParameterDict`` in their order (as PyTorch)."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _key(key: Any) -> str:
        if not isinstance(key, str):
            raise TypeError(f"Index given to ParameterDict cannot be used as a key as it is not a "
                            f"string (type is '{type(key).__name__}'). Open an issue on github if "
                            f"you need non-string keys.")
        return key

    def __getitem__(self, key: str) -> Any:
        return getattr(self, self._key(key))

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, self._key(key), _as_parameter(value))
        self._keys[key] = None

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __reversed__(self) -> Iterator[str]:
        return reversed(list(self._keys))

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self):
        """The keys, in insertion order."""
        return self._keys.keys()

    def items(self):
        """The ``(key, parameter)`` pairs, in insertion order."""
        return [(k, self[k]) for k in self._keys]

    def values(self):
        """The parameters, in insertion order."""
        return [self[k] for k in self._keys]

    def get(self, key: str, default: Any = None) -> Any:
        """The parameter under ``key``, or ``default``."""
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The parameter under ``key``, first set to ``default`` if there is none."""
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str) -> Any:
        """Remove and return the parameter under ``key``."""
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        """Remove and return the last inserted ``(key, parameter)`` pair."""
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def clear(self) -> None:
        """Remove every parameter."""
        for key in list(self._keys):
            del self[key]

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same parameter objects."""
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        """A new ParameterDict with ``keys``, each holding ``default``."""
        return ParameterDict((k, default) for k in keys)

    def update(self, parameters: Any) -> None:
        """Add or replace entries from a mapping or an iterable of ``(key, value)`` pairs (a plain
        dict is taken in sorted key order, as PyTorch does)."""
        if not isinstance(parameters, Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of key/value "
                            "pairs, but got " + type(parameters).__name__)
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = []
            for j, p in enumerate(parameters):
                if not isinstance(p, Iterable):
                    raise TypeError(f"ParameterDict update sequence element #{j} should be "
                                    f"Iterable; is {type(p).__name__}")
                p = list(p)
                if len(p) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} has length "
                                     f"{len(p)}; 2 is required")
                pairs.append((p[0], p[1]))
        for key, value in pairs:
            self[key] = value

    def __or__(self, other: ParameterDict) -> ParameterDict:
        out = self.copy()
        out.update(other)
        return out

    def __ior__(self, other: ParameterDict) -> Self:
        self.update(other)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): {_describe(v)}" for k, v in self.items())

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")
