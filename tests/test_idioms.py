"""Everyday PyTorch training idioms, each run unchanged under tinyopt (``import tinyopt as torch``)
and, when PyTorch is installed, compared with PyTorch's result.

Every snippet is ordinary user code written against ``torch`` (with ``nn``, ``F``, ``optim``,
``DataLoader``, ``TensorDataset`` and ``np`` in scope) that leaves its answer in ``result``.  The
harness runs it once with those names bound to tinyopt and once to PyTorch, and compares the
answers (numbers and arrays with a tolerance, shapes, dtypes and strings exactly).  Snippets that
start from random weights first call ``seed_weights(model)``, which writes the same
numpy-generated values into both libraries' parameters.

Snippets that fail only because the Tensor half of issue 11 (the "tensor" helper's work) has not
landed are marked ``xfail(strict=True)`` with the reason: they turn into failures — to fix, by
removing the mark — as soon as that work makes them pass.  The pass rate is in
/work/notes/issue-11-porting.md.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

import tinyopt

try:
    import torch as real_torch
except ImportError:  # pragma: no cover
    real_torch = None

TENSOR = "needs the Tensor half of issue 11 (tensor helper): "


@dataclass
class Idiom:
    name: str
    code: str
    xfail: str | None = None   # why it fails today (the tensor helper's part)
    compare: bool = True       # compare ``result`` with PyTorch's
    rtol: float = 1e-5


IDIOMS: list[Idiom] = []


def idiom(name: str, code: str, xfail: str | None = None, compare: bool = True,
          rtol: float = 1e-5) -> None:
    IDIOMS.append(Idiom(name, textwrap.dedent(code), xfail, compare, rtol))


# ---- the harness -------------------------------------------------------------------------------------
def _seed_weights(lib):
    def seed(model, seed=0):
        rng = np.random.default_rng(seed)
        state = {}
        for k, v in model.state_dict().items():
            arr = np.asarray(v.detach().numpy() if hasattr(v, "detach") else v)
            if arr.dtype.kind == "f":
                arr = (rng.standard_normal(arr.shape) * 0.3).astype(arr.dtype)
            state[k] = lib.tensor(arr) if lib is real_torch else arr
        model.load_state_dict(state)
        return model
    return seed


def namespace(lib) -> dict:
    if lib is tinyopt:
        import tinyopt.data as data
        import tinyopt.nn as nn
        import tinyopt.nn.functional as F
        import tinyopt.optim as optim
    else:
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.optim as optim
        import torch.utils.data as data
    return {"torch": lib, "nn": nn, "F": F, "optim": optim, "np": np, "math": math, "io": io,
            "os": os, "tempfile": tempfile, "DataLoader": data.DataLoader,
            "TensorDataset": data.TensorDataset, "Dataset": data.Dataset,
            "seed_weights": _seed_weights(lib), "X": np.random.default_rng(0).standard_normal(
                (16, 4)).astype(np.float32),
            "Y": np.random.default_rng(1).integers(0, 3, 16)}


def plain(v):
    """A result as plain Python/numpy, comparable across the two libraries."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        if type(v).__name__ == "Size":
            return tuple(int(s) for s in v)
        return type(v)(plain(x) for x in v) if isinstance(v, list) else tuple(plain(x) for x in v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if hasattr(v, "_fields"):
        return tuple(plain(x) for x in v)
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        return np.asarray(v)
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        return v.detach().numpy().copy()
    if isinstance(v, tinyopt.Tensor):
        return np.asarray(v.data if isinstance(v, tinyopt.Parameter) else v.numpy()).copy()
    s = str(v)
    return s.replace("torch.", "").replace("tinyopt.", "")


def same(a, b, rtol, where="result"):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{where}: shape {a.shape} vs torch {b.shape}"
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
            assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} vs torch {b.dtype}"
        return
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, rtol, f"{where}[{i}]")
        return
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a)} vs {set(b)}"
        for k in a:
            same(a[k], b[k], rtol, f"{where}[{k!r}]")
        return
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rtol, abs_tol=rtol) or (math.isnan(a) and math.isnan(b)),\
            f"{where}: {a!r} vs torch {b!r}"
        return
    assert a == b, f"{where}: {a!r} vs torch {b!r}"


def run(lib, code: str):
    ns = namespace(lib)
    grad = lib.is_grad_enabled()
    with tempfile.TemporaryDirectory() as d:
        cwd = os.getcwd()
        os.chdir(d)
        try:
            exec(compile(code, "<idiom>", "exec"), ns)
        finally:
            os.chdir(cwd)
            lib.set_grad_enabled(grad)  # a snippet that fails must not leave grad mode changed
    return plain(ns.get("result"))


def _params():
    out = []
    for i in IDIOMS:
        marks = [pytest.mark.xfail(strict=True, reason=i.xfail)] if i.xfail else []
        out.append(pytest.param(i, id=i.name, marks=marks))
    return out


# ---- the idioms ---------------------------------------------------------------------------------------
from idioms_list import register  # noqa: E402  (the snippets, kept in their own file)

register(idiom, TENSOR)


@pytest.mark.parametrize("case", _params())
def test_idiom(case: Idiom):
    ours = run(tinyopt, case.code)
    if real_torch is not None and case.compare:
        theirs = run(real_torch, case.code)
        same(ours, theirs, case.rtol)


def test_there_are_enough_idioms():
    assert len(IDIOMS) >= 150
    assert len({i.name for i in IDIOMS}) == len(IDIOMS)
