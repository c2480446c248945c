"""``embedding_bag``: sums, means or maxima of bags of embedding rows, without materializing the
rows (``kernels/embedding_bag.py``).

Bags are given by ``starts``/``ends`` index arrays (input leaves bound per run), so a new batch of
the same number of indices and bags reuses the plan.  'sum'/'mean' are one node each way (plus one
for the gradient of per-sample weights); 'max' is an index node (the row giving each maximum, as
max pooling does) and a gather, whose backward scatters through the same indices.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import FLOATS, int64
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.engine.row_sparse import row_mask
from tinyopt.kernels import embedding_bag as K
from tinyopt.kernels import row_sparse as R

MODES = ("sum", "mean", "max")
_ONE = {np.dtype(np.float32): np.ones(1, np.float32), np.dtype(np.float64): np.ones(1, np.float64)}


def _check(err: np.ndarray, idx: np.ndarray, rows: int) -> None:
    if err[0] >= 0:  # (torch's words)
        k = int(err[0])
        raise RuntimeError(f"Index {k} of input takes value {int(idx[k])} which is not in the "
                           f"valid range [0, {rows})")
    if err[1] >= 0:
        raise RuntimeError(f"embedding_bag: bag {int(err[1])} has bounds outside the input "
                           f"(offsets must be non-decreasing and at most the input's length)")


# attrs: (mode, padding_idx, scale_grad_by_freq, has_psw)
def _reduce_forward(t):
    mode, padding_idx, _, has_psw, _ = t.attrs
    err = np.empty(2, np.int64)
    one = _ONE[t.dtype]

    def fwd(out, w, idx, starts, ends, *psw):  # (a sparse weight's row mask is for the backward)
        K.bag_reduce(c_contiguous(w), c_contiguous(idx), starts, ends,
                     c_contiguous(psw[0]) if has_psw else one, has_psw,
                     mode == "mean", padding_idx, out, err)
        _check(err, idx, w.shape[0])
    return fwd


def _reduce_grad_forward(t):
    mode, padding_idx, scale, has_psw, sparse = t.attrs
    err = np.empty(2, np.int64)
    counts = np.empty(t.shape[0], np.int64)
    one = _ONE[t.dtype]

    def fwd(out, g, idx, starts, ends, *rest):
        K.bag_reduce_grad(c_contiguous(g), c_contiguous(idx), starts, ends,
                          c_contiguous(rest[0]) if has_psw else one,
                          has_psw, mode == "mean", padding_idx, scale, counts, out, err)
        _check(err, idx, out.shape[0])
        if sparse:  # sparse=True: every index's row (as torch's, also past the last offset)
            R.mark_rows(rest[-1], c_contiguous(idx), padding_idx)  # marked in the weight's row mask
    return fwd


def _psw_grad_forward(t):
    padding_idx = t.attrs[1]
    err = np.empty(2, np.int64)

    def fwd(out, g, w, idx, starts, ends):
        K.bag_psw_grad(c_contiguous(g), c_contiguous(w), c_contiguous(idx), starts, ends,
                       padding_idx, out, err)
        _check(err, idx, w.shape[0])
    return fwd


def _reduce_backward(t, g):
    w, idx, starts, ends = t.srcs[:4]
    has_psw, sparse = t.attrs[3], t.attrs[4]
    psw = t.srcs[4:5] if has_psw else ()
    mask = t.srcs[4 + has_psw:]  # sparse=True: the weight's row mask (engine/row_sparse.py)
    gw = node("embedding_bag_grad", (g, idx, starts, ends) + psw + mask, w.shape, g.dtype,
              t.attrs) if w.requires_grad else None
    gp = node("embedding_bag_psw_grad", (g, w, idx, starts, ends), psw[0].shape, g.dtype,
              t.attrs) if has_psw and psw[0].requires_grad else None
    return (gw, None, None, None) + ((gp,) if has_psw else ()) + ((None,) if sparse else ())


def _argmax_forward(t):
    padding_idx = t.attrs[1]
    err = np.empty(2, np.int64)

    def fwd(out, w, idx, starts, ends):
        K.bag_argmax(c_contiguous(w), c_contiguous(idx), starts, ends, padding_idx, out, err)
        _check(err, idx, w.shape[0])
    return fwd


defop("embedding_bag", forward=_reduce_forward, backward=_reduce_backward)
defop("embedding_bag_grad", forward=_reduce_grad_forward)
defop("embedding_bag_psw_grad", forward=_psw_grad_forward)
defop("embedding_bag_argmax", forward=_argmax_forward)
defop("embedding_bag_gather", forward=lambda t: (lambda out, w, arg: K.bag_gather(c_contiguous(w),
                                                                                  arg,
                                                                                    out)),
      backward=lambda t, g: (node("embedding_bag_scatter", (g, t.srcs[1]), t.srcs[0].shape,
                                  g.dtype), None))
defop("embedding_bag_scatter", forward=lambda t: (lambda out, g,
                                                  arg: K.bag_scatter(c_contiguous(g), arg,
                                                                                      out)))


def _leaf(a: np.ndarray) -> Tensor:
    a = np.ascontiguousarray(a, dtype=np.int64)
    return leaf(a)


def _ints(x) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    return np.asarray(x)


def embedding_bag(input, weight, offsets=None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx: int | None = None) -> Tensor:
    """Reduce bags of rows of ``weight`` (V, D), as ``torch.nn.functional.embedding_bag``.

    ``input`` (B, N) is B bags of N indices; or ``input`` (K,) with ``offsets`` (B,) the start of
    each bag (with ``include_last_offset``, (B + 1,) whose last entry ends the last bag).
    ``mode`` 'sum' (optionally weighting entry k by ``per_sample_weights[k]``), 'mean' or
    'max'; entries equal to ``padding_idx`` are left out; empty bags give zeros.  ``max_norm``
    renormalizes the rows used, in place, as ``embedding`` does."""
    from tinyopt.engine.ops.nn import renorm_rows
    if mode not in MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if sparse and mode == "max":
        raise ValueError("max mode does not support sparse weights")
    w = as_tensor(weight)
    if w.ndim != 2 or w.dtype not in FLOATS:
        raise RuntimeError(f"embedding_bag: weight must be a 2-D floating point tensor, got "
                           f"{w.dtype} of shape {w.shape}")
    V = w.shape[0]
    x = _ints(input)
    if x.dtype.kind not in "iu":
        raise TypeError(f"embedding_bag: expected int64 indices, got {x.dtype}")
    if x.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated "
                             f"is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
        B, N = x.shape
        starts = np.arange(B, dtype=np.int64) * N
        ends = starts + N
    elif x.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        off = _ints(offsets).astype(np.int64)
        if off.ndim != 1:
            raise ValueError(f"offsets has to be a 1D Tensor, but got Tensor of dimension "
                             f"{off.ndim}")
        if off.size and off[0] != 0:
            raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                               f"mini-batch has to start from position 0. However, got {off[0]}")
        if off.size and off[-1] > x.size:
            raise RuntimeError(f"offsets[-1] can not be greater than input's length {x.size} "
                               f"but got offsets[-1] of {off[-1]}")
        if include_last_offset:
            starts, ends = off[:-1], off[1:]
        else:
            starts, ends = off, np.append(off[1:], x.size)
        if np.any(starts > ends):
            raise RuntimeError("embedding_bag: offsets must be non-decreasing")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{x.ndim}")
    if padding_idx is not None:
        if not -V <= padding_idx < V:
            raise AssertionError("padding_idx must be within num_embeddings")
        padding_idx %= V
    idx = x.reshape(-1).astype(np.int64)
    if max_norm is not None:
        if not w.is_leaf:
            raise RuntimeError("embedding_bag: max_norm needs a leaf weight")
        if idx.size and (idx.min() < 0 or idx.max() >= V):  # (before renormalizing any row)
            k = int(np.argmax((idx < 0) | (idx >= V)))
            raise RuntimeError(f"Index {k} of input takes value {int(idx[k])} which is not in "
                               f"the valid range [0, {V})")
        renorm_rows(w.value, idx, float(max_norm),
                float(norm_type))
    srcs = (w, _leaf(idx), _leaf(starts), _leaf(ends))
    B = len(starts)
    sparse = bool(sparse) and w.op == "param" and w.requires_grad
    attrs = (mode, -1 if padding_idx is None else int(padding_idx), bool(scale_grad_by_freq),
             per_sample_weights is not None, sparse)
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for mode='sum' (got "
                                      f"mode='{mode}'). Please open a feature request on GitHub.")
        psw = as_tensor(per_sample_weights)
        if psw.shape != x.shape:
            raise ValueError(f"embedding_bag: per_sample_weights has shape {psw.shape}, expected "
                             f"the input's {x.shape}")
        srcs += (psw.reshape(-1).to(w.dtype),)
    if mode == "max":
        if scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        arg = node("embedding_bag_argmax", srcs, (B, w.shape[1]), int64, attrs)
        return node("embedding_bag_gather", (w, arg), (B, w.shape[1]), w.dtype)
    if sparse:  # the weight's gradient is row-sparse: its dense layout and the rows of the bags
        srcs += (leaf(row_mask(w)),)
    return node("embedding_bag", srcs, (B, w.shape[1]), w.dtype, attrs)
