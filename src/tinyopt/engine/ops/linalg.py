"""Matrix products through numpy's BLAS: matmul (2-D and batched) and linear (x W^T + b)."""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.dtypes import FLOATS, result_type
from tinyopt.engine.op_fusion import fusion_rule
from tinyopt.engine.op import defop, node, own_reshape
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.elementwise import promoted_operands, sum_to
from tinyopt.engine.sparse import SparseCOOTensor, spmm
from tinyopt.engine.tensor import Tensor, make_node, as_tensor
from tinyopt.kernels import elementwise as EK
from tinyopt.kernels import linalg as LK
from tinyopt.kernels import reduce as RK
from tinyopt.kernels.native.blas import single_threaded


def _matmul_backward(t, g):
    a, b = t.srcs
    ga = sum_to(matmul(g, b.transpose(-1, -2)), a.shape) if a.requires_grad else None
    gb = sum_to(matmul(a.transpose(-1, -2), g), b.shape) if b.requires_grad else None
    return ga, gb


# A float32 product whose inner dimension is this small is a rank-k update, bound by writing its
# output: OpenBLAS's split of it between threads costs more than it saves (the MLP's input
# gradient (256 x 10) @ (10 x 500): 84 us on 2 threads, 52 us on one; its weight gradient at
# batch 8, (500 x 8) @ (8 x 784): 234 us against 131) and, on a loaded machine, waits for a core
# (11-24 ms, a time slice).  So matmul and linear (forward, weight gradient) run it on one BLAS
# thread, from the size where OpenBLAS would split it (m n k above 65536 x its
# GEMM_MULTITHREAD_THRESHOLD of 4; below, it keeps one thread itself).  float32 only: there
# sgemm's split is over rows and columns and gives the same bits, while dgemm's edge columns
# round differently on one thread (~30 of 128000).  (engine/eager_grad.py's linear rule calls
# np.dot itself: the same bits.)
RANK_K_MAX = 16
_BLAS_SPLIT_MIN = 1 << 18


def _dot_2d(m: int, k: int, n: int, dtype):
    """``np.dot(a, b, out=out)`` of 2-D operands (m x k) @ (k x n), on one BLAS thread where
    ``RANK_K_MAX`` says."""
    if not (dtype == np.float32 and k <= RANK_K_MAX and m * k * n > _BLAS_SPLIT_MIN):
        return lambda out, a, b: np.dot(a, b, out=out)

    def dot(out, a, b):
        with single_threaded():
            np.dot(a, b, out=out)
    return dot


def _matmul_forward(t):
    # np.dot takes BLAS's fast path with ``out=``; np.matmul with ``out=`` may not.
    if t.ndim == 2 and t.srcs[0].shape[1] == 1:  # an outer product: batch-1 weight gradients
        return lambda out, a, b: LK.outer(a[:, 0], b[0], out)
    if t.ndim == 2:
        return _dot_2d(*t.srcs[0].shape, t.shape[1], t.dtype)
    if t.srcs[1].ndim == 2:  # (..., k) @ (k, n), e.g. linear's input gradient: one GEMM, not a
        k, n = t.srcs[1].shape  # stack of small ones (35x20x5000 @ 5000x200: 1.3 s -> 0.1 s)
        rows = math.prod(t.shape[:-1])
        dot = _dot_2d(rows, k, n, t.dtype)
        return lambda out, a, b: dot(out.reshape(rows, n), np.ascontiguousarray(a).reshape(rows, k),
                                     b)
    return lambda out, a, b: np.matmul(a, b, out=out)


defop("matmul", forward=_matmul_forward, backward=_matmul_backward)


def matmul(input, other) -> Tensor:
    """Matrix product with PyTorch's rules: 1-D operands are promoted to matrices and the added
    dimension removed afterwards; leading (batch) dimensions broadcast."""
    if isinstance(input, SparseCOOTensor):
        return spmm(input, other)
    a, b = promoted_operands("matmul", *autocast.lower(input, other))
    require_float("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                           f"{a.shape} and {b.shape}")
    # (the added dimension removed: the product's own tensor, not a view of it, as torch's)
    if a.ndim == 1:  # (1, k) @ b; with a 1-D b that is already (1,), a dot product
        r = matmul(a.reshape(1, -1), b)
        return own_reshape(r, r.shape[:-2] + r.shape[-1:] if b.ndim > 1 else ())
    if b.ndim == 1:
        r = matmul(a, b.reshape(-1, 1))
        return own_reshape(r, r.shape[:-1])
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                           f"({a.shape[-1]} != {b.shape[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise RuntimeError(f"matmul: batch dimensions of {a.shape} and {b.shape} cannot be "
                           f"broadcast") from None
    return node("matmul", (a, b), batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _linear_forward(t):
    n_in, n_out = t.srcs[1].shape[1], t.shape[-1]
    rows = math.prod(t.shape[:-1])  # (not -1: a reshape cannot infer it with 0 features)
    relu = t.op == "linear_relu"  # (float32/float64 only, one dtype: see _relu_into_linear)
    # the bias by a kernel where it compiles (float32/float64, the bias of out's dtype)
    kernel_bias = len(t.srcs) == 3 and t.dtype in (np.float32, np.float64) and \
        t.srcs[2].dtype == t.dtype
    dot = _dot_2d(rows, n_in, n_out, t.dtype)

    def fwd(out, x, w, b=None):
        out2 = out.reshape(rows, n_out)
        dot(out2, x.reshape(rows, n_in), w.T)
        if relu:
            if b is not None:
                LK.bias_add(out2, np.ascontiguousarray(b), True)
            else:
                EK.relu(out2, out=out2)
        elif b is not None:
            if kernel_bias:
                LK.bias_add(out2, np.ascontiguousarray(b), False)
            else:
                np.add(out2, b, out=out2)
    return fwd


def _linear_backward(t, g):
    x, w = t.srcs[0], t.srcs[1]
    gx = matmul(g, w) if x.requires_grad else None
    gw = node("linear_grad_weight", (g, x), w.shape, g.dtype) if w.requires_grad else None
    if len(t.srcs) == 2:
        return gx, gw
    b = t.srcs[2]
    gb = node("linear_grad_bias", (g,), b.shape, g.dtype) if b.requires_grad else None
    return gx, gw, gb


# The parameter gradients of linear as one node each (rather than reshape, transpose and matmul,
# and reshape and sum): fewer nodes to build and run on every step of a small model.
def _linear_grad_weight_forward(t):
    n_out, n_in = t.shape
    rows = math.prod(t.srcs[0].shape[:-1])
    dot = _dot_2d(n_out, rows, n_in, t.dtype)  # (a batch of <= RANK_K_MAX rows: one thread)

    def fwd(out, g, x):  # dW = g2^T x2 over the rows of g and x
        g2, x2 = g.reshape(rows, n_out), x.reshape(rows, n_in)
        if g2.shape[0] == 1:
            LK.outer(g2[0], x2[0], out)
        else:
            dot(out, g2.T, x2)
    return fwd


def _linear_grad_bias_forward(t):
    n_out = t.shape[0]
    rows = math.prod(t.srcs[0].shape[:-1])
    kernel = RK.sum_kernel(n_out)
    return lambda out, g: kernel(np.ascontiguousarray(g).reshape(1, rows, n_out),
                                 out.reshape(1, n_out))


defop("linear", forward=_linear_forward, backward=_linear_backward)
defop("linear_relu", forward=_linear_forward,
      backward=lambda t, g: _linear_backward(t, node("relu_grad", (g, t), t.shape, t.dtype)))


@fusion_rule("relu")
def _relu_into_linear(t: Tensor, uses) -> Tensor | None:
    """relu(linear(x, W, b)) as one ``linear_relu`` node when nothing else reads the linear's
    output: the GEMM, then the bias and the ReLU in one pass over the output (one pass less; the
    tiny GPT's feed-forward 1024 x 512: ~150 us a layer), the same values; its backward is
    relu's (relu_grad on the output) followed by linear's, the same nodes."""
    c = t.srcs[0]
    if c.op == "linear" and c.dtype in (np.float32, np.float64) and uses(c) == 1 and \
            all(s.dtype == c.dtype for s in c.srcs):
        return make_node("linear_relu", c.srcs, c.attrs, c.shape, c.dtype, t.requires_grad)
    return None
defop("linear_grad_weight", forward=_linear_grad_weight_forward)
defop("linear_grad_bias", forward=_linear_grad_bias_forward)


def linear(input, weight, bias=None) -> Tensor:
    """y = x W^T + b, with x of shape (..., in), W (out, in) and b (out,)."""
    if autocast.current.dtype is not None:
        input, weight, bias = autocast.lower(input, weight, bias)
    x = input if isinstance(input, Tensor) else as_tensor(input)
    w = weight if isinstance(weight, Tensor) else as_tensor(weight)
    if x.dtype != w.dtype:
        x, w = promoted_operands("linear", x, w)
    if x.dtype not in FLOATS:
        require_float("linear", x, w)
    ws, xs = w.shape, x.shape
    if len(ws) != 2 or not xs or xs[-1] != ws[1]:
        raise RuntimeError(f"linear: input of shape {x.shape} and weight of shape {w.shape} "
                           f"do not match (expected input (..., {w.shape[-1]}))")
    srcs = (x, w)
    if bias is not None:
        b = bias if isinstance(bias, Tensor) else as_tensor(bias)
        if b.shape != (ws[0],):
            raise RuntimeError(f"linear: bias has shape {b.shape}, expected ({w.shape[0]},)")
        srcs = (x, w, b if b.dtype is x.dtype else b.to(x.dtype))
    return node("linear", srcs, xs[:-1] + (ws[0],), x.dtype)


# ---- named products: mm, bmm, mv, dot, outer, addmm and friends ----------------------------------
def mm(input, mat2) -> Tensor:
    """The product of two matrices (2-D only, no broadcasting); ``input`` may be a sparse COO
    matrix (``torch.sparse.mm``)."""
    if isinstance(input, SparseCOOTensor):
        return spmm(input, mat2)
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {a.ndim}-D and {b.ndim}-D "
                           f"(shapes {a.shape} and {b.shape})")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} "
                           f"and {b.shape[0]}x{b.shape[1]})")
    return matmul(a, b)


def bmm(input, mat2) -> Tensor:
    """Batched matrix products of two 3-D tensors (b, n, m) @ (b, m, p)."""
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor (bmm got shapes {a.shape} and {b.shape})")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return matmul(a, b)


def mv(input, vec) -> Tensor:
    """Matrix times vector."""
    a, v = as_tensor(input), as_tensor(vec)
    if a.ndim != 2 or v.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {a.ndim}, {v.ndim}")
    return matmul(a, v)


def dot(input, tensor) -> Tensor:
    """The dot product of two 1-D tensors."""
    a, b = as_tensor(input), as_tensor(tensor)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src "
                           f"[{b.shape[0]}] to have the same number of elements, but got "
                           f"{a.shape[0]} and {b.shape[0]} elements respectively")
    return matmul(a, b)


def outer(input, vec2) -> Tensor:
    """a b^T of two 1-D tensors (one BLAS-free kernel pass, ``kernels/linalg.outer``)."""
    a, b = as_tensor(input), as_tensor(vec2)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, got shapes {a.shape} and {b.shape}")
    return matmul(a.reshape(-1, 1), b.reshape(1, -1))


ger = outer


def _scaled_sum(input, product, beta, alpha) -> Tensor:
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # PyTorch ignores input then (NaN in it does not propagate)
        return product
    inp = as_tensor(autocast.lower(input)[0])
    return (inp * beta if beta != 1 else inp) + product


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2)."""
    return _scaled_sum(input, mm(mat1, mat2), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat @ vec)."""
    return _scaled_sum(input, mv(mat, vec), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (batch1 @ batch2), batch by batch."""
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * sum_b batch1[b] @ batch2[b]."""
    return _scaled_sum(input, bmm(batch1, batch2).sum(0), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * outer(vec1, vec2)."""
    return _scaled_sum(input, outer(vec1, vec2), beta, alpha)


# ---- einsum --------------------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _parse_einsum(equation: str, ops: list[Tensor]) -> tuple[list[str], str]:
    """Explicit subscripts for each operand and the output, with ``...`` replaced by letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise RuntimeError(f"einsum(): {len(terms)} subscripts for {len(ops)} operands")
    used = set(eq) - set(".,->")
    free = [c for c in _LETTERS if c not in used]
    n_ell = 0
    for term, t in zip(terms, ops):
        if "..." in term:
            n_ell = max(n_ell, t.ndim - (len(term) - 3))
    ell = "".join(free[:n_ell])
    subs = []
    for term, t in zip(terms, ops):
        if "..." in term:
            k = t.ndim - (len(term) - 3)
            term = term.replace("...", ell[n_ell - k:])
        if len(term) != t.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                               f"({len(term)}) does not match the number of dimensions "
                               f"({t.ndim}) for operand {len(subs)}")
        subs.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit: the letters that appear once, in alphabetical order, after the ellipsis
        counts = {c: "".join(subs).count(c) for c in set("".join(subs))}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return subs, out


def _einsum_backward(t, g):
    subs, out = t.attrs
    grads = []
    for k, (s, x) in enumerate(zip(subs, t.srcs)):
        if not x.requires_grad:
            grads.append(None)
            continue
        if len(set(s)) != len(s):
            raise NotImplementedError(f"einsum: the gradient for a repeated subscript ({s!r}) is "
                                      f"not supported")
        others = [(subs[j], t.srcs[j]) for j in range(len(subs)) if j != k]
        have = set(out) | {c for o, _ in others for c in o}
        target = "".join(c for c in s if c in have)  # letters summed only here: broadcast later
        eq = ",".join([out] + [o for o, _ in others]) + "->" + target
        gk = einsum(eq, g, *[x_ for _, x_ in others])
        if target != s:
            shape = [x.shape[s.index(c)] if c in target else 1 for c in s]
            gk = gk.reshape(tuple(shape)).expand(x.shape)
        elif gk.shape != x.shape:  # broadcast size-1 dimensions
            gk = sum_to(gk, x.shape)
        grads.append(gk)
    return tuple(grads)


def _einsum_forward(t):
    subs, out = t.attrs
    eq = ",".join(subs) + "->" + out
    return lambda out_arr, *xs: np.copyto(out_arr, np.einsum(eq, *xs, optimize=len(xs) > 2))


defop("einsum", forward=_einsum_forward, backward=_einsum_backward)


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation (``torch.einsum``): ``"ij,jk->ik"``, implicit output, ``...``."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops = [as_tensor(o) for o in autocast.lower(*operands)]
    if len({o.dtype for o in ops}) > 1:
        d = result_type(*ops)
        ops = [o.to(d) for o in ops]
    subs, out = _parse_einsum(equation, ops)
    sizes: dict[str, int] = {}
    for s, o in zip(subs, ops):
        for c, n in zip(s, o.shape):
            if sizes.get(c, n) != n and n != 1 and sizes.get(c) != 1:
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes "
                                   f"(subscript {c!r}: {sizes[c]} and {n})")
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    shape = tuple(sizes[c] for c in out)
    return node("einsum", tuple(ops), shape, ops[0].dtype, (tuple(subs), out))
