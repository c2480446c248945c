"""Importing tinyopt compiles no kernel: numba compiles each kernel on first use."""

import subprocess
import sys

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
