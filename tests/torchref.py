"""Compare a tinyopt expression with the same expression in PyTorch 2.13 (skipped without torch).

``compare(fn, *arrays)`` runs ``fn(lib, *tensors)`` with ``lib`` = tinyopt and torch on the same
float64 values, checks shapes, dtypes and values, then backpropagates a weighted sum of the
output through both and checks every input's gradient; finally ``gradcheck`` checks tinyopt's
gradient against finite differences.  ``fn`` may return a tuple (its first element is compared
for gradients; every element for values).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tinyopt as to
from gradcheck import gradcheck

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _np(t) -> np.ndarray:
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.numpy() if isinstance(t, to.Tensor) else t)


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def compare(fn: Callable, *arrays, grad: bool = True, fd: bool = True, rtol: float = 1e-10,
            atol: float = 1e-12) -> None:
    if torch is None:
        pytest.skip("torch is not installed")
    floats = [np.issubdtype(np.asarray(a).dtype, np.floating) for a in arrays]
    ours = [to.tensor(a, requires_grad=grad and f) for a, f in zip(arrays, floats)]
    theirs = [torch.tensor(np.asarray(a), requires_grad=grad and f) for a, f in zip(arrays, floats)]
    got, want = fn(to, *ours), fn(torch, *theirs)
    got_t = got if isinstance(got, tuple) else (got,)
    want_t = want if isinstance(want, tuple) else (want,)
    assert len(got_t) == len(want_t)
    for g, w in zip(got_t, want_t):
        assert tuple(g.shape) == tuple(w.shape), (g.shape, w.shape)
        assert _name(g.dtype) == _name(w.dtype), (g.dtype, w.dtype)
        np.testing.assert_allclose(_np(g), _np(w), rtol=rtol, atol=atol)
    if not grad or not any(floats) or not got_t[0].requires_grad:
        return
    weights = np.random.default_rng(0).uniform(0.5, 1.5, got_t[0].shape)
    (got_t[0] * to.tensor(weights)).sum().backward()
    (want_t[0] * torch.tensor(weights)).sum().backward()
    for o, t, f in zip(ours, theirs, floats):
        if f:
            assert (o.grad is None) == (t.grad is None)
            if o.grad is not None:
                np.testing.assert_allclose(_np(o.grad), _np(t.grad), rtol=1e-9, atol=1e-12)
    if fd:
        def f_of(*ps):
            it = iter(ps)
            args = [next(it) if fl else to.tensor(a) for a, fl in zip(arrays, floats)]
            r = fn(to, *args)
            return r[0] if isinstance(r, tuple) else r
        gradcheck(f_of, *[a for a, fl in zip(arrays, floats) if fl])
