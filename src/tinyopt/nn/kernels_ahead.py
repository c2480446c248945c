"""The big kernels a layer's training step will run, declared when the layer is built or first
called, so that a helper process compiles them while this one builds and runs the first step
(``kernels/compile_ahead.py``; nothing compiles here, and a warm process starts no helper).

Each declaration names the kernel the engine's op will call (``engine/ops/rnn.py``,
``nn.py``, ``attention.py``, ``loss.py``, an elementwise op's loop: ReLU's gradient) with the
argument types it will pass: C functions by their compile-time key alone, numba dispatchers
with example arguments of the dtypes, dimensions and layouts of the op's call.  A declaration
that does not match what the step runs (another batch size taking another path) only costs the
helper a compile; the step compiles its own kernel as before, with the same results.
``tests/test_kernels_compile_ahead.py`` checks that the declared kernels of the LSTM and GPT
language models are the ones their steps load.
"""

from __future__ import annotations

import weakref

import numpy as np

from tinyopt.kernels import compile_ahead as ahead
from tinyopt.kernels import jit
from tinyopt.kernels import norm as norm_kernels
from tinyopt.kernels import reduce as reduce_kernels

_F, _B, _LOSS = ahead.FORWARD, ahead.BACKWARD, ahead.LOSS
_I64 = np.dtype(np.int64)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_CROSS_ENTROPY: set[tuple] = set()  # the cross-entropy calls declared
_FIRST_CALLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layer -> its declarations


def at_build(layer, declare, *args) -> None:
    """A layer's kernels, declared when it is built (``declare(*args)``, one of the functions
    below) and again at its first call (:func:`called`), while a helper compiles them."""
    declare(*args)
    if ahead.helping():
        _FIRST_CALLS[layer] = (declare, args)


def called(layer) -> None:
    """``layer`` is called: at its first call, its backward kernels take their place in the
    helper's order (``compile_ahead.first_call``).  Cheap: a check of an empty dict once every
    layer built while a helper ran has been called."""
    if _FIRST_CALLS:
        declared = _FIRST_CALLS.pop(layer, None)
        if declared is not None:
            ahead.first_call(lambda: declared[0](*declared[1]))


def _c_function(module: str, name: str, key) -> tuple:
    """The recipe of ``kernels.<module>.<name>[key]``, a C function made on first use."""
    return (f"tinyopt.kernels.{module}", name, ("__getitem__", key))


def _arrays(dtype, *ndims: int, readonly: tuple[int, ...] = ()) -> tuple[np.ndarray, ...]:
    """Empty C-contiguous arrays of ``dtype`` and these dimensions (their numba types are the
    call's); the ones at positions ``readonly`` not writeable."""
    out = tuple(np.empty((0,) * n, dtype) for n in ndims)
    for i in readonly:
        out[i].flags.writeable = False
    return out


def lstm(dtype) -> None:
    """An LSTM layer without projection: its scan by chunks of batch rows and its gradient,
    and the sum of the initial state's gradient."""
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        return
    fast = dt == np.float32
    ahead.declare(_F, _c_function("rnn", "lstm_scan_chunks", fast))
    ahead.declare(_B, _c_function("rnn", "lstm_scan_grad_chunks", fast))
    gh, dh = _arrays(dt, 3, 2)
    ahead.declare(_B, ("tinyopt.kernels.rnn", "sum_grad_h"), (gh, 0, dh, dh, dh))


def linear(dtype, out_features: int) -> None:
    """A linear layer's bias gradient: the sum of its output's gradient over the rows (the
    kernel ``reduce.sum_kernel`` picks for ``out_features`` sums)."""
    dt = np.dtype(dtype)
    if dt in _FLOATS:
        kernel = reduce_kernels.sum_kernel(out_features).__name__
        ahead.declare(_B, ("tinyopt.kernels.reduce", kernel), _arrays(dt, 3, 2))


def relu(dtype) -> None:
    """ReLU's gradient (``kernels/elementwise.relu_grad`` of the gradient and the output): the
    flat loop a first step's call takes over C-contiguous arrays of one shape.  The step's last
    compile where no helper had it: the small GPT's (its feed-forward blocks) and the MLP's
    (0.06-0.07 s of CPU each, after the helper had ended)."""
    dt = np.dtype(dtype)
    if dt in _FLOATS:
        ahead.declare(_B, ("tinyopt.kernels.elementwise", "relu_grad", "flat_kernel"),
                      _arrays(dt, 1, 1, 1))


def layer_norm(dtype, has_w: bool, has_b: bool) -> None:
    """Layer norm: its statistics and its input's gradient by chunks of rows, its apply pass
    and its weight and bias gradients."""
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        return
    single = dt == np.float32
    ahead.declare(_F, _c_function("norm", "layer_norm_chunks",
                                  (single, norm_kernels.LN_STATS, False)))
    x, stats, out = _arrays(dt, 2, 2, 2)
    w = _arrays(dt if has_w else np.float64, 1)[0]  # (the engine's stand-in: float64)
    b = _arrays(dt if has_b else np.float64, 1)[0]
    ahead.declare(_F, ("tinyopt.kernels.norm", "layer_norm_apply", "serial_build"),
                  (x, stats, w, b, out))
    ahead.declare(_B, _c_function("norm", "layer_norm_chunks",
                                  (single, norm_kernels.LN_GRAD_X, has_w)))
    if has_w or has_b:
        ahead.declare(_B, ("tinyopt.kernels.norm", "layer_norm_grad_wb"), (x, x, stats, out))


def attention(dtype, has_mask: bool, causal: bool, nan_rows: bool, L: int, S: int) -> None:
    """Scaled dot-product attention without dropout of L queries and S keys: its (batch, head)
    pairs as chunks, both ways."""
    if dtype not in _FLOATS:
        return
    fast = dtype == np.float32
    ahead.declare(_F, _c_function("attention", "attention_chunks",
                                  (fast, has_mask, causal, nan_rows)))
    ahead.declare(_B, _c_function("attention", "attention_grad_chunks",
                                  (fast, causal and S <= L)))


def embedding(dtype, padding_idx: int, scale_grad_by_freq: bool) -> None:
    """An embedding lookup of int64 indices and its gradient."""
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        return
    w, out, g = _arrays(dt, 2, 2, 2)
    idx, err, counts = _arrays(_I64, 1, 1, 1)
    ahead.declare(_F, ("tinyopt.kernels.norm", "embedding_rows"), (w, idx, out, err))
    ahead.declare(_B, ("tinyopt.kernels.norm", "embedding_grad"),
                  (g, idx, padding_idx, scale_grad_by_freq, counts, out, err))


def cross_entropy(loss) -> None:
    """The cross-entropy node ``loss`` (a 'mean' reduction) will be computed and differentiated
    by ``ce_rows`` (one kernel both ways), and from large logits by ``ce_exp`` first."""
    if loss.op != "ce_mean" or loss.dtype not in _FLOATS:
        return
    x, y, w = loss.srcs[:3]
    if x.ndim != 2 or y.dtype != _I64 or (len(loss.srcs) == 3 and x.shape[0] * x.shape[1]
                                          >= jit.PARALLEL_MIN_ELEMENTS):  # (a parallel build)
        return
    value = getattr(w, "value", None)  # (the engine's unit weights are a read-only constant)
    readonly = isinstance(value, np.ndarray) and not value.flags.writeable
    key = (loss.dtype, len(loss.srcs) == 4, readonly)
    if key in _CROSS_ENTROPY:  # (called at every step: declared once)
        return
    _CROSS_ENTROPY.add(key)
    dt, from_exp, _ = key
    single = dt == np.float32
    if from_exp:
        ahead.declare(_LOSS, _c_function("loss", "ce_exp", single))
    vec, xs, mat, rows = _arrays(dt, 1, 2, 2, 1)
    ws = _arrays(dt, 1, readonly=(0,) if readonly else ())[0]
    stats, lanes = _arrays(np.float64, 2, 2)
    err, ys = _arrays(_I64, 1, 1)
    recipe = ("tinyopt.kernels.loss", "ce_rows", ("__getitem__", (from_exp, single)))
    ahead.declare(_LOSS, recipe if from_exp else recipe + ("serial_build",),
                  (False, vec, xs, ys, ws, 0, 0.0, vec, rows, mat, err, mat, stats, mat, lanes))
