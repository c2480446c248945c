"""Neural-net ops: dropout, layer_norm, batch_norm, embedding.

layer_norm and batch_norm are fused: a statistics node (mean, rstd per row or channel), an apply
node, and backward nodes that compute dx in one pass and (dw, db) together in another, so a norm
layer costs a few kernel calls instead of a dozen elementwise nodes.

BatchNorm's running statistics are numpy arrays updated *in place* in training mode.  The engine is
lazy, so the update is an *effect* (see ``engine/realize.py``): a ``batch_norm_update`` node whose
sources are the batch statistics and the running arrays as input leaves (bound per run, never
captured by a plan), run once by the first realization that computes the batch-norm output.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tinyopt.engine.dtypes import FLOATS, int64
from tinyopt.engine.op import accumulate_rule, defop, node
from tinyopt.engine.ops.family import c_contiguous, require_float

from tinyopt.engine.random import Generator, default_generator
from tinyopt.engine.realize import add_effect
from tinyopt.engine.row_sparse import row_mask
from tinyopt.engine.tensor import LEAF_OPS, Tensor, as_tensor, leaf
from tinyopt.kernels import norm as K
from tinyopt.kernels.native import shared_threads
from tinyopt.kernels import row_sparse as R


_ONE = np.ones(1)  # stands in for an absent weight or bias (the kernels skip it)


# ---- dropout (Srivastava et al. 2014, https://jmlr.org/papers/v15/srivastava14a.html) -----------
def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False,
            generator: Generator | None = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p) in training.

    The keep mask is drawn from tinyopt's generator (``manual_seed``) when the graph is built and
    enters it as an input leaf, so the cached plan is reused with a new mask every step.
    """
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    x = as_tensor(input)
    if not training or p == 0.0 or x.numel() == 0:  # (torch's: the input itself)
        return x
    require_float("dropout", x)
    return x * leaf(dropout_mask(generator, x.shape, p, x.dtype))


def dropout_mask(generator: Generator | None, shape: tuple[int, ...], p: float,
                 dtype: np.dtype) -> np.ndarray:
    """The scaled keep mask of dropout with probability ``p``: 1 / (1 - p) where a uniform draw
    from ``generator`` (tinyopt's global one if None) is >= p, else 0, of ``dtype``.  A 16-bit
    mask is drawn in float32 (numpy draws no 16-bit floats: the same draws as a float32 tensor's)
    and holds 1 / (1 - p) rounded to 16 bits, as torch's mask does."""
    if p == 1.0:
        return np.zeros(shape, dtype)
    rng = (generator or default_generator).numpy
    keep = rng.random(shape, dtype=np.float64 if dtype == np.float64 else np.float32) >= p
    mask = keep.astype(dtype)
    mask *= dtype.type(1.0 / (1.0 - p))
    return mask


# ---- layer norm ---------------------------------------------------------------------------------
# Rows per chunk on the shared threads: ~8k elements (64 rows of the tiny GPT's 128), a multiple of
# the statistics kernel's 4-row blocks; inputs below _LN_CHUNK_MIN elements run on one thread.
_LN_CHUNK_ELEMENTS = 1 << 13
_LN_CHUNK_MIN = 1 << 15


class _LayerNormChunks:
    """A layer-norm kernel's rows as chunks on the shared threads (``kernels/norm.py``
    ``layer_norm_chunks``: the kernel's own row loop, so the same bits), for float32/float64
    arrays of one dtype; ``run`` returns False (nothing done) where that does not apply.  One per
    plan step, so runs in flight at the same time have their own argument block."""

    def __init__(self, part: int, dtype: np.dtype, eps: float = 0.0):
        self._part, self._dtype = part, dtype
        self._args = np.zeros(K.LN_ARGS, np.int64)
        self._eps = np.array([eps])
        self._fn = None

    def run(self, x: np.ndarray, stats: np.ndarray, out=None, g=None, w=None) -> bool:
        M, D = x.shape
        if M * D < _LN_CHUNK_MIN or self._dtype not in (np.float32, np.float64):
            return False
        arrays = [a for a in (x, stats, out, g, w) if a is not None]
        if any(a.dtype != self._dtype or not a.flags.c_contiguous for a in arrays):
            return False
        runner = shared_threads.chunk_runner()
        if not runner.parallel:
            return False
        if self._fn is None:
            self._fn = K.layer_norm_chunks[self._dtype == np.float32, self._part, w is not None]
        rows = max(4, _LN_CHUNK_ELEMENTS // D // 4 * 4)
        chunks = -(-M // rows)
        # (the gradient's lane sums, a block a chunk)
        lanes = np.empty((chunks if self._part == K.LN_GRAD_X else 0, 2, K.LN_LANES))
        self._args[:] = [0 if a is None else a.ctypes.data for a in (x, stats, out, g, w)] + [
            M, D, rows, w is not None, self._eps.ctypes.data, lanes.ctypes.data]
        runner(self._fn.address, chunks, self._args.ctypes.data)
        return True


def _ln_stats_forward(t):
    D, eps = t.attrs[0], t.attrs[1]
    chunks = _LayerNormChunks(K.LN_STATS, t.dtype, eps)

    def fwd(out, x):
        x = c_contiguous(x).reshape(-1, D)
        if not chunks.run(x, out):
            K.layer_norm_stats(x, out, eps)
    return fwd


def _ln_apply_forward(t):
    D, _, has_w, has_b = t.attrs
    # an absent weight or bias: the identities of * and + (see the kernel)
    ones, negative_zeros = np.ones(D), np.full(D, -0.0)

    def fwd(out, x, stats, *wb):
        w = wb[0] if has_w else ones
        b = wb[-1] if has_b else negative_zeros
        K.layer_norm_apply(c_contiguous(x).reshape(-1, D), stats, c_contiguous(w).reshape(-1),
                           c_contiguous(b).reshape(-1), out.reshape(-1, D))
    return fwd


def _ln_grad_x_forward(t):
    D, _, has_w, _ = t.attrs
    chunks = _LayerNormChunks(K.LN_GRAD_X, t.dtype)

    def fwd(out, g, x, stats, *w):
        g, x, out = c_contiguous(g).reshape(-1, D), c_contiguous(x).reshape(-1, D), out.reshape(-1,
                                                                                                D)
        w = c_contiguous(w[0]).reshape(-1) if has_w else _ONE
        if not chunks.run(x, stats, out, g=g, w=w if has_w else None):
            K.layer_norm_grad_x(g, x, stats, w, has_w, out)
    return fwd


def _ln_backward(t, g):
    x, stats = t.srcs[0], t.srcs[1]
    D, _, has_w, has_b = t.attrs
    w = t.srcs[2] if has_w else None
    gx = node("layer_norm_grad_x", (g, x, stats) + ((w,) if has_w else ()), x.shape, g.dtype,
              t.attrs) if x.requires_grad else None
    grads = [gx, None]
    if any(s.requires_grad for s in t.srcs[2:]):
        wb = node("layer_norm_grad_wb", (g, x, stats), (2, D), g.dtype, t.attrs)
        nshape = t.srcs[2].shape
        if has_w:
            grads.append(wb[0].reshape(nshape) if w.requires_grad else None)
        if has_b:
            grads.append(wb[1].reshape(nshape) if t.srcs[-1].requires_grad else None)
    else:
        grads += [None] * (has_w + has_b)
    return tuple(grads)


defop("layer_norm_stats", forward=_ln_stats_forward)
defop("layer_norm", forward=_ln_apply_forward, backward=_ln_backward)
defop("layer_norm_grad_x", forward=_ln_grad_x_forward)
defop("layer_norm_grad_wb", forward=lambda t: (lambda out, g, x, stats: K.layer_norm_grad_wb(
    c_contiguous(g).reshape(-1, t.attrs[0]), c_contiguous(x).reshape(-1, t.attrs[0]), stats, out)))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Layer normalization over the last ``len(normalized_shape)`` dimensions:
    y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias, with the biased variance."""
    x = as_tensor(input)
    require_float("layer_norm", x)
    if type(normalized_shape) is tuple:  # (LayerNorm's: no ABC instance check on every call)
        ns = tuple([int(s) for s in normalized_shape])
    else:
        ns = (int(normalized_shape),) if isinstance(normalized_shape, numbers.Integral) \
            else tuple(int(s) for s in normalized_shape)
    k = len(ns)
    if k == 0 or x.ndim < k or x.shape[x.ndim - k:] != ns:
        raise RuntimeError(f"layer_norm: given normalized_shape={list(ns)}, expected input with "
                           f"shape [*, {', '.join(map(str, ns))}], but got input of size "
                           f"{list(x.shape)}")
    D = int(np.prod(ns))
    M = x.numel() // D if D else 0
    srcs = [x]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            p = as_tensor(p)
            if p.shape != ns:
                raise RuntimeError(f"layer_norm: {name} has shape {p.shape}, expected "
                                   f"normalized_shape {ns}")
            srcs.append(p.to(x.dtype))
    stats = node("layer_norm_stats", (x,), (M, 2), x.dtype, (D, float(eps)))
    attrs = (D, float(eps), weight is not None, bias is not None)
    return node("layer_norm", (x, stats, *srcs[1:]), x.shape, x.dtype, attrs)


# ---- batch norm ---------------------------------------------------------------------------------
def _ncs(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return shape[0], shape[1], math.prod(shape[2:])


defop("batch_norm_stats", forward=lambda t: (
    lambda out, x: K.batch_norm_stats(c_contiguous(x).reshape(_ncs(t.srcs[0].shape)), out,
                                      t.attrs[0])))
defop("batch_norm_eval_stats", forward=lambda t: (
    lambda out, rm, rv: K.batch_norm_eval_stats(rm, rv, out, t.attrs[0])))
defop("batch_norm_update", forward=lambda t: (
    lambda out, stats, rm, rv, m: K.batch_norm_update(stats, rm, rv, float(m), t.attrs[0])))


def _bn_apply_forward(t):
    _, has_w, has_b = t.attrs
    ncs = _ncs(t.shape)

    def fwd(out, x, stats, *wb):
        w = wb[0] if has_w else _ONE
        b = wb[-1] if has_b else _ONE
        K.batch_norm_apply(c_contiguous(x).reshape(ncs), stats, w, b, has_w, has_b,
                           out.reshape(ncs))
    return fwd


def _bn_grad_x_forward(t):
    training, has_w = t.attrs
    ncs = _ncs(t.shape)

    def fwd(out, g, x, stats, sums, *w):
        K.batch_norm_grad_x(c_contiguous(g).reshape(ncs), c_contiguous(x).reshape(ncs), stats, sums,
                            w[0] if has_w else _ONE, has_w, training, out.reshape(ncs))
    return fwd


def _bn_backward(t, g):
    x, stats = t.srcs[0], t.srcs[1]
    training, has_w, has_b = t.attrs
    C = x.shape[1]
    sums = node("batch_norm_grad_wb", (g, x, stats), (2, C), g.dtype)
    w = (t.srcs[2],) if has_w else ()
    gx = node("batch_norm_grad_x", (g, x, stats, sums) + w, x.shape, g.dtype,
              (training, has_w)) if x.requires_grad else None
    grads = [gx, None]
    if has_w:
        grads.append(sums[0] if t.srcs[2].requires_grad else None)
    if has_b:
        grads.append(sums[1] if t.srcs[-1].requires_grad else None)
    return tuple(grads)


defop("batch_norm", forward=_bn_apply_forward, backward=_bn_backward)
defop("batch_norm_grad_wb", forward=lambda t: (lambda out, g, x, stats: K.batch_norm_grad_wb(
    c_contiguous(g).reshape(_ncs(t.srcs[0].shape)),
    c_contiguous(x).reshape(_ncs(t.srcs[0].shape)), stats, out)))
defop("batch_norm_grad_x", forward=_bn_grad_x_forward)


def running_stat(name: str, arr, C: int) -> np.ndarray:
    """The storage of a running statistic (a module buffer: a concrete Tensor or an array) that
    the plan updates in place."""
    if isinstance(arr, Tensor) and arr.op in LEAF_OPS and not arr.requires_grad:
        arr = arr.numpy()
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"batch_norm: {name} must be a tensor holding values that does not "
                        f"require grad (a module buffer) or a numpy array, got "
                        f"{'a graph node' if isinstance(arr, Tensor) else type(arr).__name__}")
    if arr.shape != (C,):
        raise RuntimeError(f"batch_norm: {name} should contain {C} elements not "
                           f"{arr.size} (shape {arr.shape})")
    if arr.dtype not in FLOATS or not arr.flags.c_contiguous or not arr.flags.writeable:
        raise TypeError(f"batch_norm: {name} must be a writable contiguous float32/float64 array, "
                        f"got dtype {arr.dtype}")
    return arr


def batch_norm(input, running_mean: Tensor | np.ndarray | None,
               running_var: Tensor | np.ndarray | None,
               weight=None, bias=None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Batch normalization of (N, C, *) inputs per channel C:
    y = (x - mean) / sqrt(var + eps) * weight + bias.

    Training uses the batch mean and biased variance and, when running arrays are given, updates
    them in place when the output is realized: r = (1 - momentum) r + momentum * stat, with the
    *unbiased* batch variance for ``running_var`` (PyTorch's rule).  Evaluation uses the running
    statistics.  ``momentum`` may change every step without recompiling (it is bound per run).
    """
    x = as_tensor(input)
    require_float("batch_norm", x)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C, *), got {x.shape}")
    N, C, S = _ncs(x.shape)
    rm = None if running_mean is None else running_stat("running_mean", running_mean, C)
    rv = None if running_var is None else running_stat("running_var", running_var, C)
    if (rm is None) != (rv is None):
        raise ValueError("batch_norm: give both running_mean and running_var, or neither")
    if not training and rm is None:
        raise ValueError("batch_norm: running_mean and running_var must be defined in "
                         "evaluation mode")
    if training and N * S <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{list(x.shape)}")
    srcs = [x]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            p = as_tensor(p)
            if p.shape != (C,):
                raise RuntimeError(f"batch_norm: {name} has shape {p.shape}, expected ({C},) for "
                                   f"input of shape {x.shape}")
            srcs.append(p.to(x.dtype))
    if training:
        stats = node("batch_norm_stats", (x,), (3, C), x.dtype, (float(eps),))
    else:
        stats = node("batch_norm_eval_stats", (leaf(rm), leaf(rv)), (3, C), x.dtype,
                     (float(eps),))
    y = node("batch_norm", (x, stats, *srcs[1:]), x.shape, x.dtype,
             (bool(training), weight is not None, bias is not None))
    if training and rm is not None:
        m = leaf(np.array(float(momentum)))
        effect = node("batch_norm_update", (stats, leaf(rm), leaf(rv), m), (0,), x.dtype,
                      (N * S,))
        add_effect(y, effect)
    return y


# ---- embedding ----------------------------------------------------------------------------------
def _check_indices(err: np.ndarray) -> None:
    if err[0] >= 0:  # a kernel found an index out of range
        raise IndexError("index out of range in self")


def _embedding_grad_forward(t):
    padding_idx, scale = t.attrs
    V, D = t.shape
    counts = np.empty(V, np.int64)
    err = np.empty(1, np.int64)

    def fwd(out, g, idx):
        K.embedding_grad(c_contiguous(g).reshape(-1, D), c_contiguous(idx).reshape(-1),
                         padding_idx, scale, counts,
                         out, err)
        _check_indices(err)
    return fwd


def _embedding_forward(t):
    D = t.shape[-1]
    err = np.empty(1, np.int64)

    def fwd(out, w, idx, mask=None):  # a sparse lookup's mask is for its backward
        K.embedding_rows(w, c_contiguous(idx).reshape(-1), out.reshape(-1, D), err)
        _check_indices(err)
    return fwd


def _embedding_sparse_grad_forward(t):
    """The dense gradient, and the rows looked up marked in the weight's row mask
    (``engine/row_sparse.py``)."""
    dense = _embedding_grad_forward(t)
    padding_idx = t.attrs[0]

    def fwd(out, g, idx, mask):
        dense(out, g, idx)
        R.mark_rows(mask, c_contiguous(idx).reshape(-1), padding_idx)
    return fwd


def _embedding_backward(t, g):
    w, idx = t.srcs[0], t.srcs[1]
    if len(t.srcs) == 3:  # sparse=True: srcs[2] is the weight's row mask
        return node("embedding_sparse_grad", (g, idx, t.srcs[2]), w.shape, g.dtype, t.attrs), \
            None, None
    return node("embedding_grad", (g, idx), w.shape, g.dtype, t.attrs), None


def _embedding_grad_add_forward(t):
    padding_idx, scale = t.attrs
    V, D = t.shape
    head, nxt = np.empty(V, np.int64), np.empty(math.prod(t.srcs[2].shape), np.int64)
    row = np.empty(D, t.dtype)
    err = np.empty(1, np.int64)

    def fwd(out, base, g, idx):
        K.embedding_grad_add(base, c_contiguous(g).reshape(-1, D), c_contiguous(idx).reshape(-1),
                             padding_idx, scale, head, nxt, row, out, err)
        _check_indices(err)
    return fwd


@accumulate_rule("embedding_grad")
def _add_embedding_grad(prev: Tensor, gs: Tensor) -> Tensor | None:
    """``prev + embedding_grad(g, idx)`` as one node that adds each looked-up row's sum into
    ``prev`` (in place when ``prev`` dies there): a tied embedding (nanoGPT's head) holds one
    (V, D) gradient, not two (GPT-2 small: 147 MiB less), with the same bits."""
    if prev.dtype != gs.dtype or gs.dtype not in (np.float32, np.float64):
        return None
    return node("embedding_grad_add", (prev,) + gs.srcs, gs.shape, gs.dtype, gs.attrs)


defop("embedding", forward=_embedding_forward, backward=_embedding_backward)
defop("embedding_grad", forward=_embedding_grad_forward)
defop("embedding_grad_add", forward=_embedding_grad_add_forward, inplace=True)
defop("embedding_sparse_grad", forward=_embedding_sparse_grad_forward)


def embedding(input, weight, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (V, D) picked by int64 indices of any shape: out[..., :] = W[idx[...]].

    The gradient scatter-adds into W's rows (row ``padding_idx`` gets none; with
    ``scale_grad_by_freq`` each row's gradient is divided by its count in the batch).  With
    ``max_norm``, the picked rows of W whose ``norm_type``-norm exceeds it are rescaled in place
    first, as PyTorch does.  ``sparse=True`` (W a Parameter): W's gradient is row-sparse -- its
    dense layout plus a record of the rows looked up (``engine/row_sparse.py``), which
    ``optim.SparseAdam`` updates alone.
    """
    idx = as_tensor(input)
    w = as_tensor(weight)
    if idx.dtype != int64:
        raise TypeError(f"embedding: expected int64 indices, got {idx.dtype} (shape {idx.shape})")
    if w.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
                           f"shape {w.shape}")
    V = w.shape[0]
    if padding_idx is not None:  # PyTorch's test: 0 is accepted even with no embeddings
        if padding_idx > 0 and padding_idx >= V or padding_idx < 0 and padding_idx < -V:
            raise AssertionError(f"embedding: padding_idx must be within num_embeddings, got "
                                 f"{padding_idx} for {V} embeddings")
        padding_idx = padding_idx + V if padding_idx < 0 else padding_idx
    # the range of the indices is checked by the kernels, where they read them
    if max_norm is not None:
        if not (idx.op == "input" and w.op in ("param", "input")):
            raise RuntimeError("embedding: max_norm needs concrete indices and a leaf weight")
        if idx.value.size and (idx.value.min() < 0 or idx.value.max() >= V):
            raise IndexError("index out of range in self")  # before renormalizing any row
        renorm_rows(w.value, idx.value, float(max_norm), float(norm_type))
    attrs = (-1 if padding_idx is None else int(padding_idx), bool(scale_grad_by_freq))
    srcs = (w, idx)
    if sparse and w.op == "param" and w.requires_grad:
        srcs += (leaf(row_mask(w)),)
    return node("embedding", srcs, idx.shape + (w.shape[1],), w.dtype, attrs)


def renorm_rows(w: np.ndarray, idx: np.ndarray, max_norm: float, norm_type: float) -> None:
    """PyTorch's embedding_renorm_: rows whose norm exceeds max_norm are scaled to max_norm."""
    rows = np.unique(idx)
    norms = np.linalg.norm(w[rows], ord=norm_type, axis=1)
    big = norms > max_norm
    w[rows[big]] *= (max_norm / (norms[big] + 1e-7))[:, None].astype(w.dtype)
