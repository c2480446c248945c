"""Functions of the tensor API built from other ops (so their gradients come with them): the
cross product, the inner product over the last dimensions, pairwise distances ``cdist``, the
``std_mean``/``var_mean`` pairs and ``isin``."""

from __future__ import annotations

import warnings

from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.distance import vector_norm
from tinyopt.engine.ops.elementwise import promoted_operands, eq
from tinyopt.engine.ops.linalg import matmul
from tinyopt.engine.ops.movement import stack
from tinyopt.engine.ops.reduce import any as _any
from tinyopt.engine.ops.reduce import mean, std, var
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["cdist", "cross", "inner", "isin", "std_mean", "var_mean"]


def cross(input, other, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (without it: the first dimension of size 3,
    with PyTorch's deprecation warning), operands broadcast together."""
    a, b = promoted_operands("cross", input, other)
    shape = tuple(max(x, y) for x, y in zip((1,) * (b.ndim - a.ndim) + a.shape,
                                            (1,) * (a.ndim - b.ndim) + b.shape))
    a, b = a.expand(shape), b.expand(shape)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease "
                      "either pass the dim explicitly or simply use torch.linalg.cross.\nThe "
                      "default value of dim will change to agree with that of linalg.cross in a "
                      "future release.", UserWarning, stacklevel=2)
        dim = next((i for i, n in enumerate(shape) if n == 3), -1)
    d = dim % len(shape)
    if shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[d]} and {b.shape[d]}")
    ai = [a.select(d, i) for i in range(3)]
    bi = [b.select(d, i) for i in range(3)]
    return stack([ai[1] * bi[2] - ai[2] * bi[1], ai[2] * bi[0] - ai[0] * bi[2],
                  ai[0] * bi[1] - ai[1] * bi[0]], d)


def inner(input, other) -> Tensor:
    """sum_k a[..., k] b[..., k] for every pair of leading indices: shape ``a.shape[:-1] +
    b.shape[:-1]`` (a 0-d operand multiplies instead)."""
    a, b = promoted_operands("inner", input, other)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got "
                           f"shapes {list(a.shape)} and {list(b.shape)}")
    n = a.shape[-1]
    out = matmul(a.reshape(-1, n), b.reshape(-1, n).transpose(0, 1))
    return out.reshape(*a.shape[:-1], *b.shape[:-1])


def cdist(x1, x2, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """out[..., i, j] = ||x1[..., i, :] - x2[..., j, :]||_p (batches broadcast)."""
    a, b = as_tensor(x1), as_tensor(x2)
    require_float("cdist", a, b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"cdist only supports at least 2D tensors with the same number of "
                           f"columns, got {list(a.shape)} and {list(b.shape)}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p}")
    return vector_norm(a.unsqueeze(-2) - b.unsqueeze(-3), p, -1)


def var_mean(input, dim=None, *, correction: float = 1, keepdim: bool = False,
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``dim``."""
    return (var(input, dim, unbiased, keepdim, correction=None if unbiased is not None
                else correction), mean(input, dim, keepdim))


def std_mean(input, dim=None, *, correction: float = 1, keepdim: bool = False,
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """``(std, mean)`` over ``dim``."""
    return (std(input, dim, unbiased, keepdim, correction=None if unbiased is not None
                else correction), mean(input, dim, keepdim))


def isin(elements, test_elements, *, assume_unique: bool = False,
         invert: bool = False) -> Tensor:
    """Whether each element of ``elements`` is among ``test_elements`` (a bool tensor)."""
    x, t = as_tensor(elements), as_tensor(test_elements)
    hit = _any(eq(x.unsqueeze(-1), t.reshape(-1)), -1) if t.numel() else eq(x, x) & False
    return ~hit if invert else hit
