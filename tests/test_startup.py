"""Importing tinyopt is fast and compiles no kernel: numba compiles each kernel on first use, and\nthe op families, layers, optimizers and drivers are imported on first use."""

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

CHECK = r"""
import sys, importlib, pkgutil
import tinyopt, tinyopt.kernels
from tinyopt.kernels.jit import _LazyUfunc
compiled = []
for info in pkgutil.iter_modules(tinyopt.kernels.__path__):
    mod = importlib.import_module("tinyopt.kernels." + info.name)
    for name, obj in vars(mod).items():
        if isinstance(obj, _LazyUfunc) and obj._ufunc is not None:
            compiled.append(name)
        if hasattr(obj, "signatures") and hasattr(obj, "py_func") and obj.signatures:
            compiled.append(name)
print("COMPILED", compiled)
sys.exit(1 if compiled else 0)
"""


def test_import_compiles_no_kernel():
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


LAZY = r"""
import sys, threading
import numpy as np
import tinyopt as to
heavy = sorted(m for m in sys.modules if m == "numba" or m.startswith((
    "tinyopt.kernels", "tinyopt.engine.ops.", "tinyopt.engine.plan", "tinyopt.nn",
    "tinyopt.optim", "tinyopt.data", "tinyopt.checkpoint", "tinyopt.train", "tinyopt.amp",
    "tinyopt.distributions", "tinyopt.distributed")))
assert not heavy, f"import tinyopt imported {heavy}"
# a layer loads its own family, not the others
assert to.nn.LSTM.__name__ == "LSTM"
assert "tinyopt.nn.layers.rnn" in sys.modules
assert "tinyopt.nn.layers.transformer" not in sys.modules, "nn.LSTM imported the transformer"
# threads that use different op families for the first time at once
barrier = threading.Barrier(4)
x = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
jobs = {"exp": lambda t: to.exp(t), "sum": lambda t: t.sum(1), "mm": lambda t: t @ t.T,
        "cat": lambda t: to.cat([t, t])}
got = {}
def run(name):
    barrier.wait()
    got[name] = jobs[name](to.tensor(x)).numpy()
threads = [threading.Thread(target=run, args=(n,)) for n in jobs]
for t in threads: t.start()
for t in threads: t.join()
expected = {"exp": np.exp(x), "sum": x.sum(1), "mm": x @ x.T, "cat": np.concatenate([x, x])}
for name, value in expected.items():
    np.testing.assert_allclose(got[name], value, rtol=1e-6)
print("OK")
"""


def test_import_tinyopt_loads_no_kernel_layer_or_driver():
    """``import tinyopt`` is fast: numba, the op families, layers, optimizers and drivers load on
    first use (each public name still resolves, from several threads at once too)."""
    r = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def _eager(path):
    """The names a module binds when it is imported (outside ``if TYPE_CHECKING:``)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _type_checking_imports(path):
    """``(module, name, alias)`` of every import under the module's ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    for a in imp.names:
                        yield imp.module, a.name, a.asname or a.name


@pytest.mark.parametrize("package", ["tinyopt", "tinyopt.engine", "tinyopt.engine.ops",
                                     "tinyopt.nn", "tinyopt.nn.layers"])
def test_lazy_names_are_what_type_checkers_see(package):
    """The names a package resolves on first use are the objects its ``TYPE_CHECKING`` imports
    name (what mypy and pyright see), and every one of them resolves."""
    module = importlib.import_module(package)
    seen = set()
    for source, name, alias in _type_checking_imports(Path(module.__file__)):
        origin = importlib.import_module(source)
        names = origin.__all__ if name == "*" else [name]
        for n in names:
            a = n if name == "*" else alias
            assert getattr(module, a) is getattr(origin, n), (package, a)
            seen.add(a)
    lazy = {n for n in dir(module) if not n.startswith("_")} - _eager(Path(module.__file__))
    untyped = {n for n in lazy - seen if not isinstance(getattr(module, n), types.ModuleType)}
    assert not untyped, f"{package} resolves {sorted(untyped)} that type checkers do not see"
