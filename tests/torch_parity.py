"""Forward and backward of a tinyopt function against the same PyTorch function.

``against_torch(ours, theirs, *arrays)`` runs ``ours`` on float Parameters (and ``theirs`` on torch
tensors that require grad) made from the same arrays, compares the outputs, then backpropagates
the same random weights ``W`` through ``sum(out * W)`` in both and compares every input's
gradient.  Skips the calling test when PyTorch is not installed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tinyopt as to


def torch_or_skip():
    return pytest.importorskip("torch")


def against_torch(ours: Callable, theirs: Callable, *arrays, rtol: float = 1e-5,
                  atol: float = 1e-6, grad: bool = True, seed: int = 0) -> None:
    torch = torch_or_skip()
    rng = np.random.default_rng(seed)
    params = [to.Parameter(np.array(a)) if np.asarray(a).dtype.kind == "f"
              else to.tensor(np.array(a)) for a in arrays]
    tens = [torch.tensor(np.array(a), requires_grad=np.asarray(a).dtype.kind == "f")
            for a in arrays]
    out = ours(*params)
    ref = theirs(*tens)
    got = out.numpy()
    want = ref.detach().numpy()
    assert got.shape == want.shape, f"shape {got.shape}, torch {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype}, torch {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg="forward")
    if not grad:
        return
    w = rng.uniform(0.5, 1.5, size=got.shape).astype(got.dtype)
    (out * to.tensor(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for k, (p, t) in enumerate(zip(params, tens)):
        if t.grad is None:
            continue
        g = p.grad if p.grad is not None else np.zeros(p.shape, p.dtype)
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k}")
