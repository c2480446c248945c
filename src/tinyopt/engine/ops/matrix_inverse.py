"""Matrix inverses and linear solves (``torch.linalg.inv``/``solve``, ``torch.inverse``): LAPACK's
LU (through numpy) in the forward, gradients as graphs of these ops and matrix products.

Over batches of square float32/float64 matrices in the last two dimensions:

- ``inv(A)``: A^{-1}; gradient -A^{-T} G A^{-T}.
- ``solve(A, B)``: X with A X = B (B a matrix ``(*, n, k)``, or a vector ``(*, n)`` when it has
  one dimension fewer than A); batch dimensions broadcast.  Gradients: G_B = solve(A^T, G),
  G_A = -G_B X^T.

A singular matrix (a zero pivot in the LU factorisation) raises ``LinAlgError``, a
``RuntimeError`` as PyTorch's is, when the op runs.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import float32, float64, is_low, scalar_type_name
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.linalg import matmul
from tinyopt.engine.ops.movement import broadcast_shapes
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["LinAlgError", "inv", "inverse", "solve"]


class LinAlgError(RuntimeError):
    """A linear algebra routine failed on its input (a singular matrix): ``torch.linalg.
    LinAlgError``."""


def _singular(op: str) -> LinAlgError:
    return LinAlgError(f"linalg.{op}: The input matrix is singular (a zero pivot in its LU "
                       f"factorization), so the {'inversion' if op == 'inv' else 'solve'} could "
                       f"not be completed.")


def _square(op: str, a: Tensor) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{op}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2] if a.ndim > 1 else 1} by {a.shape[-1] if a.ndim else 1} "
                           f"matrices")
    if a.dtype not in (float32, float64):
        name = scalar_type_name(a.dtype)
        raise RuntimeError(f"linalg.{op}: Low precision dtypes not supported. Got {name}"
                           if is_low(a.dtype) else f"linalg.{op}: Expected a floating point or "
                           f"complex tensor as input. Got {name}")


def _inv_forward(t):
    def run(out, a):
        try:
            out[...] = np.linalg.inv(a)
        except np.linalg.LinAlgError:
            raise _singular("inv") from None
    return run


def _solve_forward(t):
    def run(out, a, b):
        try:
            out[...] = np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            raise _singular("solve") from None
    return run


def _mT(x: Tensor) -> Tensor:
    return x.transpose(-2, -1)


defop("linalg_inv", forward=_inv_forward,
      backward=lambda t, g: (-matmul(_mT(t), matmul(g, _mT(t))),))
defop("linalg_solve", forward=_solve_forward,
      backward=lambda t, g: _solve_backward(t, g))


def _solve_backward(t, g):
    a, b = t.srcs
    gb = _solve(_mT(a), g)
    return (-matmul(gb, _mT(t)) if a.requires_grad else None), gb


def inv(A) -> Tensor:
    """A^{-1} of the square matrices in A's last two dimensions (``torch.linalg.inv``)."""
    a = as_tensor(A)
    _square("inv", a)
    return node("linalg_inv", (a,), a.shape, a.dtype)


def inverse(input) -> Tensor:
    """``torch.inverse``: ``linalg.inv`` of ``input``."""
    return inv(input)


def _solve(a: Tensor, b: Tensor) -> Tensor:
    """``solve`` of matrices ``b`` whose batch dimensions are ``a``'s."""
    return node("linalg_solve", (a, b), b.shape, a.dtype)


def solve(A, B, *, left: bool = True) -> Tensor:
    """X with A X = B (``left=False``: X A = B), A batches of square matrices, B of matrices
    ``(*, n, k)`` or, with one dimension fewer than A, of vectors ``(*, n)``
    (``torch.linalg.solve``)."""
    a, b = as_tensor(A), as_tensor(B)
    _square("solve", a)
    if b.dtype != a.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found "
                           f"A of type {scalar_type_name(a.dtype)} and B of type "
                           f"{scalar_type_name(b.dtype)} instead")
    if not left:
        return _mT(solve(_mT(a), _mT(b)))
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector:
        b = b.unsqueeze(-1)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX = "
                           f"B ({a.shape[-2]}x{a.shape[-1]} and {b.shape[-2]}x{b.shape[-1]})")
    batch = tuple(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = a.expand(*batch, *a.shape[-2:]) if a.shape[:-2] != batch else a
    b = b.expand(*batch, *b.shape[-2:]) if b.shape[:-2] != batch else b
    x = _solve(a, b)
    return x.squeeze(-1) if vector else x
