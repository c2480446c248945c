"""A central-finite-difference gradient checker for tinyopt ops, in float64.

``gradcheck(f, *arrays)`` makes a float64 Parameter of each array, builds the scalar
``L = sum(f(*params) * W)`` with fixed random weights ``W`` (so every output element matters with a
different weight), runs ``L.backward()`` and compares each ``p.grad`` with

    dL/dp_i ~ (L(p + h e_i) - L(p - h e_i)) / 2h

over every element of ``p`` (or a random subset of ``max_elems`` of them for bigger tensors).
Forward evaluations reuse one cached plan: only ``p.data`` changes between them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import tinyopt as to


def _weights(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    # Away from zero, so no element's gradient is hidden by a tiny weight.
    return rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def gradcheck(f: Callable[..., to.Tensor], *arrays, h: float = 1e-6, rtol: float = 1e-5,
              atol: float = 1e-7, max_elems: int = 40, seed: int = 0) -> list[np.ndarray]:
    """Assert that tinyopt's gradients of ``f`` match central finite differences.

    ``f`` takes one Parameter per array and returns a Tensor of any shape.  Returns the analytic
    gradients (one array per input) so callers can add their own checks.
    """
    rng = np.random.default_rng(seed)
    params = [to.Parameter(np.array(a, dtype=np.float64)) for a in arrays]
    out = f(*params)
    assert out.dtype == np.float64, f"f returned {out.dtype}, expected float64"
    w = to.tensor(_weights(out.shape, rng), dtype=to.float64)

    def loss() -> float:
        return float((f(*params) * w).sum().item())

    (f(*params) * w).sum().backward()
    grads = [p.grad.numpy().copy() if p.grad is not None else np.zeros(p.shape) for p in params]
    for k, (p, g) in enumerate(zip(params, grads)):
        assert g.shape == p.shape, f"grad {k} has shape {g.shape}, expected {p.shape}"
        n = p.numel()
        idx = np.arange(n) if n <= max_elems else rng.choice(n, size=max_elems, replace=False)
        flat = p.data.numpy().reshape(-1)
        num = np.empty(len(idx))
        for j, i in enumerate(idx):
            old = flat[i]
            flat[i] = old + h
            lp = loss()
            flat[i] = old - h
            lm = loss()
            flat[i] = old
            num[j] = (lp - lm) / (2 * h)
        ana = g.reshape(-1)[idx]
        np.testing.assert_allclose(ana, num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k} (shape {p.shape})")
    return grads
