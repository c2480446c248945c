"""Losses: cross_entropy, nll_loss (fused row kernels), mse_loss, l1_loss,
binary_cross_entropy_with_logits, and one_hot."""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine import autocast, grad_mode
from tinyopt.engine.dtypes import FLOATS, int64, is_float, scalar_type_name
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous, require_float
from tinyopt.engine.ops.elementwise import promoted_operands, softplus
from tinyopt.engine.ops.reduce import log_softmax
from tinyopt.engine.ops.workspace import region
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import loss as K
from tinyopt.kernels.native import shared_threads

_REDUCTIONS = ("none", "mean", "sum")


def check_reduction(op: str, reduction: str) -> None:
    """torch's ``ValueError`` for a ``reduction`` that is not ``"none"``, ``"mean"`` or ``"sum"``
    (every loss function checks it first)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: {reduction!r} is not a valid value for reduction "
                         f"(expected one of {_REDUCTIONS})")


def apply_reduction(loss: Tensor, reduction: str) -> Tensor:
    """The per-element ``loss`` reduced as ``reduction`` says: its mean, its sum, or itself
    (``"none"``)."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _targets(op: str, input: Tensor, target, ignore_index: int) -> tuple[Tensor, Tensor, int]:
    """Logits as (rows, C) and class-index targets as (rows,), with shape checks."""
    y = as_tensor(target)
    if y.dtype != int64:
        raise TypeError(f"{op}: expected class-index targets of dtype int64, got {y.dtype} "
                        f"(for class probabilities use a float loss)")
    nd = len(input.shape)
    if nd < 1 or nd > 1 and y.shape != (input.shape[0],) + input.shape[2:] \
            or nd == 1 and y.shape != ():
        raise ValueError(f"{op}: input of shape {input.shape} needs targets of shape "
                         f"{(input.shape[0],) + input.shape[2:] if input.ndim > 1 else ()}, "
                         f"got {y.shape}")
    C = input.shape[1] if input.ndim > 1 else input.shape[0]
    # the range of the targets is checked by the kernels, where they read them
    if input.ndim == 1:
        return input.reshape(1, C), y.reshape(1), C
    if input.ndim > 2:
        perm = (0,) + tuple(range(2, input.ndim)) + (1,)
        input = input.permute(perm).contiguous().reshape(-1, C)
        y = y.reshape(-1)
    return input, y, C


_UNIT_WEIGHTS: dict[tuple[int, np.dtype], np.ndarray] = {}


def _weight(op: str, weight, C: int, dtype) -> Tensor:
    if weight is None:
        w = _UNIT_WEIGHTS.get((C, dtype))
        if w is None:
            w = _UNIT_WEIGHTS[C, dtype] = np.ones(C, dtype=dtype)
            w.flags.writeable = False
        return as_tensor(w)
    w = as_tensor(weight)
    if w.shape != (C,):
        raise ValueError(f"{op}: weight has shape {w.shape}, expected ({C},) for {C} classes")
    return w.to(dtype)


def _unflatten(loss: Tensor, input_shape: tuple[int, ...], reduction: str) -> Tensor:
    if reduction == "none":
        return loss.reshape((input_shape[0],) + input_shape[2:] if len(input_shape) > 1 else ())
    return loss


def _check_targets(err: np.ndarray, y: np.ndarray) -> None:
    """Raise PyTorch's error for the target a kernel found out of range (``err[0]``, its row)."""
    if err[0] >= 0:
        raise IndexError(f"Target {int(y[err[0]])} is out of bounds.")


# Cross-entropy over many rows runs its rows in parallel (``kernels/loss.py``: each row alone,
# the 'mean' summed in row order, so threads change no bit).  When it will be differentiated and
# is large, a node of its own computes the shifted exponentials and each row's max and sum once
# for both ways (``_with_exp``): a source after x, y, w, flat, the rows' statistics (N x 2
# float64) then the exponentials (N, C) (``_exp_parts``).
def _exp_parts(buf: np.ndarray, N: int, C: int) -> tuple[np.ndarray, np.ndarray]:
    """The exponentials (N, C) and the row statistics (N, 2) float64 in ``ce_exp``'s buffer."""
    k = K.exp_stats_size(N, buf.itemsize)
    flat = buf.reshape(-1)
    return flat[k:].reshape(N, C), flat[:k].view(np.float64).reshape(N, 2)


def _ce_forward(t, mean: bool):
    ignore, eps = t.attrs
    x = t.srcs[0]
    N, C = x.shape
    from_exp = len(t.srcs) == 4
    kernel = K.ce_rows[from_exp, x.dtype == np.float32]
    err = np.empty(1, np.int64)  # per run: the plan compiles each run's closures
    no_vec, no_mat = np.empty(0, t.dtype), np.empty((0, 0), t.dtype)  # (what only backward reads)
    no_stats = np.empty((0, 2), np.float64)
    scratch = K.ce_scratch(N, C, x.dtype, from_exp)
    rows = np.empty(N, t.dtype) if mean else None

    def fwd(out, x, y, w, e=None):
        r, total = (rows, out.reshape(1)) if mean else (c_contiguous(out), no_vec)
        stats = no_stats if e is None else _exp_parts(e, N, C)[1]
        # (ce_rows reads C layouts through pointers: a transposed or sliced view is copied)
        x, y, w = (c_contiguous(a) for a in (x, y, w))
        kernel(False, no_vec, x, y, w, ignore, eps, total, r, no_mat, err, no_mat, stats,
               *scratch)
        if r is not out and not mean:
            out[...] = r
        _check_targets(err, y)
    return fwd


def _ce_grad_forward(t, mean: bool):
    ignore, eps = t.attrs
    from_exp = len(t.shape) == 1  # (ce_exp's buffer: see _ce_grad)
    N, C = (t.srcs[2].shape[0], t.srcs[3].shape[0]) if from_exp else t.shape
    kernel = K.ce_rows[from_exp, t.dtype == np.float32]
    err = np.empty(1, np.int64)
    share = np.empty(1 if mean else 0, t.dtype)
    no_rows = np.empty(0, t.dtype)
    no_exp = np.empty((0, 0), t.dtype), np.empty((0, 2), np.float64)
    scratch = K.ce_scratch(N, C, t.dtype, from_exp)
    rows_g = np.empty(0 if mean else N, t.dtype)

    def fwd(out, *srcs):
        if from_exp:  # (e, g, y, w): the logits' gradient into out's exponentials part
            e, g, y, w = srcs
            exp = _exp_parts(e, N, C)
            x = out = _exp_parts(out, N, C)[0]  # (x: only its shape is read, as the exp's)
        else:
            x, g, y, w = srcs
            exp = no_exp
        if mean:
            g = g.reshape(1)
        elif not g.flags.c_contiguous and g.dtype == rows_g.dtype:
            # (a broadcast gradient, as loss.sum() gives) contiguous, as the forward's: the
            # kernel's one compile then serves both ways
            np.copyto(rows_g, g)
            g = rows_g
        # (C layouts, as the forward's; a strided out's copy is written back: x's copy is read)
        g, x, y, w = (c_contiguous(a) for a in (g, x, y, w))
        dst = c_contiguous(out)
        kernel(True, g, x, y, w, ignore, eps, share, no_rows, dst, err, *exp, *scratch)
        if dst is not out:
            out[...] = dst
        _check_targets(err, y)
    return fwd


# rows of the shifted exponentials per chunk on the shared threads
_EXP_ROWS = 16


def _ce_exp_forward(t):
    x_node = t.srcs[0]
    N, C = x_node.shape
    chunk = K.ce_exp[x_node.dtype == np.float32]
    args = np.zeros(K.EXP_ARGS, np.int64)
    chunks = max(1, -(-N // _EXP_ROWS))  # (the most: one chunk of N rows on this thread)
    work = np.empty((chunks, K.LANES), x_node.dtype)
    lanes = np.empty((chunks, K.LANES), np.float64)

    def fwd(out, x):
        x = np.ascontiguousarray(x)
        e, stats = _exp_parts(out, N, C)
        run = shared_threads.chunk_runner()
        rows = _EXP_ROWS if run.parallel else max(N, 1)
        args[:] = (x.ctypes.data, e.ctypes.data, stats.ctypes.data, N, C, rows,
                   work.ctypes.data, lanes.ctypes.data)
        run(chunk.address, -(-N // rows), args.ctypes.data)
    return fwd


def _with_exp(x: Tensor, srcs: tuple) -> tuple:
    """``srcs`` (x, y, w), and the node of x's shifted exponentials and row statistics after them
    when the loss will be differentiated and x holds at least ``PARALLEL_ROWS_MIN`` elements."""
    if x.requires_grad and grad_mode.current.enabled and x.dtype in FLOATS and \
            x.shape[0] * x.shape[1] >= K.PARALLEL_ROWS_MIN:  # (its kernel: float32/float64)
        N, C = x.shape
        size = K.exp_stats_size(N, np.dtype(x.dtype).itemsize) + N * C
        return srcs + (node("ce_exp", (x,), (size,), x.dtype),)
    return srcs


def _rows_forward(kernel):
    def compile(t):
        ignore, *rest = t.attrs
        err = np.empty(1, np.int64)  # per run: the plan compiles each run's closures
        no_total = np.empty(0, t.dtype)

        def fwd(out, x, y, w):
            kernel(x, y, w, ignore, *rest, out, no_total, err)
            _check_targets(err, y)
        return fwd
    return compile


def _ce_grad(op: str, t: Tensor, g: Tensor, dtype) -> Tensor:
    """The logits' gradient node of cross-entropy node ``t``, written in place over its source
    0 when that is its last reader, as in training (the kernel reads a row's values before it
    writes them).  With the exponentials (``ce_exp``, srcs (x, y, w, e)) its sources are
    (e, g, y, w): the gradient goes over the exponentials in their node's buffer and is read
    out as a region, and the logits die with the forward loss (their shape is all the gradient
    reads of them): GPT-2 small's 512 x 50304 logits, two 98 MiB arrays less at the peak.
    Else (x, g, y, w): over the logits."""
    x = t.srcs[0]
    if len(t.srcs) == 4:  # (by count, as _ce_forward: an eager run may have made e a value)
        e = t.srcs[3]
        ws = node(op, (e, g) + t.srcs[1:3], e.shape, dtype, t.attrs)
        return region(ws, K.exp_stats_size(x.shape[0], np.dtype(dtype).itemsize), x.shape)
    return node(op, (x, g) + t.srcs[1:], x.shape, dtype, t.attrs)


def _ce_backward(t, g):
    return (_ce_grad("ce_rows_grad", t, g, t.srcs[0].dtype),) + (None,) * (len(t.srcs) - 1)


def _nll_backward(t, g):
    x, y, w = t.srcs
    return node("nll_rows_grad", (g, y, w), x.shape, x.dtype, t.attrs), None, None


def _rows_grad_forward(kernel):
    def compile(t):
        ignore, *rest = t.attrs
        err = np.empty(1, np.int64)
        no_share = np.empty(0, t.dtype)

        def fwd(out, g, y, w):
            kernel(g, y, w, ignore, *rest, no_share, out, err)
            _check_targets(err, y)
        return fwd
    return compile


defop("ce_rows", forward=lambda t: _ce_forward(t, False), backward=_ce_backward)
defop("ce_rows_grad", forward=lambda t: _ce_grad_forward(t, False), inplace=True)
defop("ce_exp", forward=_ce_exp_forward)
defop("nll_rows", forward=_rows_forward(K.nll_rows), backward=_nll_backward)
defop("nll_rows_grad", forward=_rows_grad_forward(K.nll_rows_grad))


# 'mean' reduction as one node each way: the row losses then their weighted mean (backward, every
# row's gradient scaled by g / the weight sum), with four fewer nodes than rows.sum() / weight_sum
# to build, sort and run each way, which is most of a batch-1 training step's loss.  The row
# kernels do the reduction themselves (see kernels/loss.py).
def _mean_forward(kernel):
    def compile(t):
        ignore, *rest = t.attrs
        rows = np.empty(t.srcs[0].shape[0], t.dtype)
        err = np.empty(1, np.int64)

        def fwd(out, x, y, w):
            kernel(x, y, w, ignore, *rest, rows, out.reshape(1), err)
            _check_targets(err, y)
        return fwd
    return compile


def _mean_grad_forward(kernel):
    def compile(t):
        ignore, *rest = t.attrs
        share = np.empty(1, t.dtype)
        err = np.empty(1, np.int64)

        def fwd(out, g, *xyw):
            kernel(g.reshape(1), *xyw, ignore, *rest, share, out, err)
            _check_targets(err, xyw[-2])
        return fwd
    return compile


defop("ce_mean", forward=lambda t: _ce_forward(t, True), backward=lambda t, g: (
    _ce_grad("ce_mean_grad", t, g, g.dtype),) + (None,) * (len(t.srcs) - 1))
defop("ce_mean_grad", forward=lambda t: _ce_grad_forward(t, True), inplace=True)
defop("nll_mean", forward=_mean_forward(K.nll_rows), backward=lambda t, g: (
    node("nll_mean_grad", (g,) + t.srcs[1:], t.srcs[0].shape, g.dtype, t.attrs), None, None))
defop("nll_mean_grad", forward=_mean_grad_forward(K.nll_rows_grad))


def _rows_loss(op: str, kind: str, input, target, weight, ignore_index: int, reduction: str,
               extra: tuple) -> Tensor:
    if reduction not in _REDUCTIONS:
        check_reduction(op, reduction)
    if autocast.current.dtype is not None:
        input, weight = autocast.fp32(input, weight)
    x = as_tensor(input)
    if x.dtype not in FLOATS:
        require_float(op, x)
    x2, y, C = _targets(op, x, target, ignore_index)
    w = _weight(op, weight, C, x.dtype)
    attrs = (int(ignore_index),) + extra
    srcs = _with_exp(x2, (x2, y, w)) if kind == "ce_rows" else (x2, y, w)
    if reduction == "mean":
        return node(kind.replace("_rows", "_mean"), srcs, (), x.dtype, attrs)
    rows = node(kind, srcs, (x2.shape[0],), x.dtype, attrs)
    return _unflatten(apply_reduction(rows, reduction), x.shape, reduction)


def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy between logits ``input`` (N, C), (N, C, d1, ...) or (C,) and class indices,
    or class probabilities (a float ``target`` of the input's shape: see
    ``_probability_cross_entropy``).

    Per row: (1-eps) w[y] (-log p[y]) + (eps/C) sum_c w_c (-log p[c]), p = softmax(input);
    'mean' divides the sum by sum_i w[y_i] over rows not ignored, as PyTorch does.
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got "
                         f"{label_smoothing}")
    t = as_tensor(target)
    if as_tensor(input).shape == t.shape:  # (torch's rule: a target of the input's shape)
        if not is_float(t.dtype):
            raise RuntimeError("Expected floating point type for target with class "
                               f"probabilities, got {scalar_type_name(t.dtype)}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _probability_cross_entropy(input, t, weight, reduction, float(label_smoothing))
    return _rows_loss("cross_entropy", "ce_rows", input, t, weight, ignore_index, reduction,
                      (float(label_smoothing),))


def _probability_cross_entropy(input, target: Tensor, weight, reduction: str,
                               eps: float) -> Tensor:
    """Cross-entropy against class probabilities ``target`` of the logits' shape, composed as
    torch's ATen does (``cross_entropy_loss_prob_target``), so both are differentiated:

        loss_i = -sum_c w_c q_ic log softmax(x_i)_c,   q = (1 - eps) target + eps / C

    summed over the class dim (1, or 0 for an unbatched (C,) input); 'mean' divides the sum by
    the number of rows N d1 ... (not by a weight sum), and is NaN for an empty input."""
    check_reduction("cross_entropy", reduction)
    input, target, weight = autocast.fp32(input, target, weight)
    x, q = as_tensor(input), as_tensor(target)
    require_float("cross_entropy", x)
    dim = 1 if x.ndim > 1 else 0
    C = x.shape[dim]
    if eps > 0.0:
        q = q * (1.0 - eps) + eps / C
    terms = log_softmax(x, dim) * q
    if weight is not None:
        w = as_tensor(weight)
        if w.shape != (C,):
            raise RuntimeError(f"cross_entropy: weight tensor should be defined either for all "
                               f"{C} classes or no classes but got weight tensor of shape: "
                               f"{list(w.shape)}")
        terms = terms * w.reshape((C,) + (1,) * (x.ndim - 2) if x.ndim > 1 else (C,))
    if reduction == "none":
        return -terms.sum(dim)
    total = -terms.sum()
    if reduction == "sum":
        return total
    return total * math.nan if x.numel() == 0 else total / (x.numel() // C)


def nll_loss(input, target, weight=None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices under log-probabilities ``input``."""
    return _rows_loss("nll_loss", "nll_rows", input, target, weight, ignore_index, reduction, ())


def mse_loss(input, target, reduction: str = "mean") -> Tensor:
    check_reduction("mse_loss", reduction)
    a, b = promoted_operands("mse_loss", *autocast.fp32(input, target))
    require_float("mse_loss", a, b)
    _same_shape("mse_loss", a, b)
    d = a - b
    return apply_reduction(d * d, reduction)


def l1_loss(input, target, reduction: str = "mean") -> Tensor:
    check_reduction("l1_loss", reduction)
    a, b = promoted_operands("l1_loss", *autocast.fp32(input, target))
    require_float("l1_loss", a, b)
    _same_shape("l1_loss", a, b)
    return apply_reduction((a - b).abs(), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean",
                                     pos_weight=None) -> Tensor:
    """-[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed stably as
    (1 - y) x + (1 + (pw - 1) y) softplus(-x)."""
    check_reduction("binary_cross_entropy_with_logits", reduction)
    input, target, weight, pos_weight = autocast.fp32(input, target, weight, pos_weight)
    x, y = promoted_operands("binary_cross_entropy_with_logits", input, target)
    require_float("binary_cross_entropy_with_logits", x, y)
    _same_shape("binary_cross_entropy_with_logits", x, y)
    sp = softplus(-x)
    if pos_weight is None:
        loss = (1.0 - y) * x + sp
    else:
        loss = (1.0 - y) * x + (1.0 + (as_tensor(pos_weight).to(x.dtype) - 1.0) * y) * sp
    if weight is not None:
        loss = loss * as_tensor(weight).to(x.dtype)
    return apply_reduction(loss, reduction)


def _same_shape(op: str, a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{op}: target size {b.shape} must be the same as input size {a.shape}")


def _one_hot_forward(t):
    err = np.empty(1, np.int64)

    def fwd(out, y):
        y = y.reshape(-1)
        K.one_hot(y, out.reshape(-1, t.shape[-1]), err)
        if err[0] >= 0:
            raise RuntimeError("Class values must be non-negative." if y[err[0]] < 0 else
                               "Class values must be smaller than num_classes.")
    return fwd


defop("one_hot", forward=_one_hot_forward)


def one_hot(tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding of class indices: shape ``tensor.shape + (num_classes,)``."""
    y = as_tensor(tensor)
    if y.dtype != int64:
        raise TypeError(f"one_hot: expected int64 class indices, got {y.dtype}")
    num_classes = int(num_classes)
    if y.numel() == 0 and num_classes <= 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    if num_classes == -1:
        if not (y.op == "input"):
            raise ValueError("one_hot: num_classes=-1 needs concrete indices; pass num_classes")
        if y.value.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        num_classes = int(y.value.max()) + 1
    elif num_classes < -1:
        raise RuntimeError("Class values must be smaller than num_classes.")
    # the range of the indices is checked by the kernel, where it reads them
    return node("one_hot", (y,), y.shape + (num_classes,), int64)
