"""``tinyopt.utils``: PyTorch's ``torch.utils`` paths.  ``tinyopt.utils.data`` *is*
``tinyopt.data`` (the same module object, and ``tinyopt.utils.data.<submodule>`` the same
submodules), so ``from torch.utils.data import DataLoader`` ports by changing ``torch`` to
``tinyopt``.  ``collect_env()`` prints the environment report (``tinyopt.diagnostics``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

from tinyopt import data
from tinyopt.diagnostics import collect_env  # (imports nothing beyond the standard library)

_ALIAS = __name__ + ".data"
_TARGET = "tinyopt.data"


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``tinyopt.utils.data.X`` as the module ``tinyopt.data.X`` itself (no second copy,
    so classes keep one identity)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_ALIAS + "."):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(_TARGET + spec.name[len(_ALIAS):])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import machinery has set the alias's spec on the shared module: give its own back
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())
sys.modules[_ALIAS] = data

__all__ = ["collect_env", "data"]
