"""Norms and distances: ``vector_norm`` (one op, fused kernel and PyTorch's gradient, also at a zero
norm), and ``clamp_min_st``, a clamp whose gradient passes through unchanged (how PyTorch's
``cosine_similarity`` clamps the norms: in place under ``no_grad``)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.dtypes import is_float, scalar_type_name
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous
from tinyopt.engine.ops.elementwise import in_float32
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import distance as K


def _kind(p: float) -> tuple[str, float]:
    if p == 2:
        return "2", 2.0
    if p == 1:
        return "1", 1.0
    if p == 0:
        return "0", 0.0
    if p == math.inf:
        return "inf", 0.0
    if p == -math.inf:
        return "-inf", 0.0
    return "p", float(p)


def _norm_forward(t):
    (A, R, B), kind, p = t.attrs
    kernel = K.vector_norm[kind]
    return lambda out, x: kernel(c_contiguous(x).reshape(A, R, B), p, out.reshape(A, B))


def _norm_grad_forward(t):
    (A, R, B), kind, p = t.attrs
    kernel = K.vector_norm_grad[kind]
    return lambda out, g, x, n: kernel(c_contiguous(g).reshape(A, B), c_contiguous(x).reshape(A, R,
                                                                                              B),
                                       c_contiguous(n).reshape(A, B), p, out.reshape(A, R, B))


defop("vector_norm", forward=_norm_forward, backward=lambda t, g: (
    node("vector_norm_grad", (g, t.srcs[0], t), t.srcs[0].shape, g.dtype, t.attrs),))
defop("vector_norm_grad", forward=_norm_grad_forward)


@in_float32
def vector_norm(x, ord: float = 2, dim: int | tuple[int, ...] | None = None,
                keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (an int, a tuple, or None for all elements), as
    ``torch.linalg.vector_norm``: (sum |x|^ord)^(1/ord), max |x| for inf, min |x| for -inf, the
    count of nonzeros for 0.  The gradient at a zero norm is 0, as in PyTorch."""
    x = as_tensor(x)
    if dtype is not None:
        x = x.to(dtype)
    if not is_float(x.dtype):
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {scalar_type_name(x.dtype)}")
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    nd = max(x.ndim, 1)
    dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if dim is not None and not dims:
        dims = tuple(range(x.ndim))
    for d in dims:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                             f"{nd - 1}], but got {d})")
    dims = tuple(sorted({d % nd for d in dims})) if x.ndim else ()
    if ord < 0 and any(x.shape[d] == 0 for d in dims):
        raise RuntimeError(f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor "
                           f"because the operation does not have an identity")
    kept = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    src = x
    if dims and dims != tuple(range(dims[0], dims[-1] + 1)):  # scattered: move them last
        rest = tuple(i for i in range(x.ndim) if i not in dims)
        src = x.permute(rest + dims).contiguous()
        A = math.prod(x.shape[i] for i in rest)
        R, B = math.prod(x.shape[i] for i in dims), 1
    elif dims:
        A, R = math.prod(x.shape[:dims[0]]), math.prod(x.shape[dims[0]:dims[-1] + 1])
        B = math.prod(x.shape[dims[-1] + 1:])
    else:
        A, R, B = x.numel(), 1, 1
    kind, p = _kind(float(ord))
    shape = kept if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    # (the node is the result, of its shape, not a view of an (A, B) node: torch saves it)
    return node("vector_norm", (src,), shape, x.dtype, ((A, R, B), kind, p))


defop("clamp_min_st", forward=lambda t: (lambda out, x: np.maximum(x, t.attrs[0], out=out)),
      backward=lambda t, g: (g,), inplace=True)


def clamp_min_st(x: Tensor, eps: float) -> Tensor:
    """max(x, eps) whose gradient is that of x itself (a straight-through clamp)."""
    return node("clamp_min_st", (x,), x.shape, x.dtype, (float(eps),))
