"""Lazy package attributes (PEP 562): a name is imported from its module on first use.

``import tinyopt`` must stay fast (issue 14: <= 0.35 s, numba's own import is most of it), but the
packages re-export hundreds of names from modules that build numba kernels, layers and drivers.
A package lists where each name lives and gets a module ``__getattr__``/``__dir__`` from
:func:`exports`; the first ``tinyopt.nn.LSTM`` imports ``tinyopt.nn.layers.rnn`` and stores the
class in the package's namespace, so every later lookup is a plain attribute read.  Type checkers
do not run ``__getattr__``: each package also imports the same names under ``TYPE_CHECKING``
(``tests/test_startup.py`` checks that both lists agree).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, namespace: dict[str, Any], where: dict[str, str],
            submodules: str = "") -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose globals are ``namespace``.

    ``where`` maps a public name to ``"module"`` (the same name in that module) or
    ``"module:attr"``; a name not in it that is a submodule of ``package`` is imported as one
    (``submodules``: the public ones, which ``dir()`` lists).
    """

    def __getattr__(name: str) -> Any:
        target = where.get(name)
        if target is None:
            if name.startswith("_"):
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            full = f"{package}.{name}"
            try:
                return importlib.import_module(full)  # (the import sets it on the package)
            except ModuleNotFoundError as e:
                if e.name != full:
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where) | set(submodules.split()))

    return __getattr__, __dir__


def table(groups: dict[str, str]) -> dict[str, str]:
    """``{"pkg.mod": "a b c"}`` -> ``{"a": "pkg.mod", "b": "pkg.mod", "c": "pkg.mod"}``."""
    return {name: module for module, names in groups.items() for name in names.split()}
