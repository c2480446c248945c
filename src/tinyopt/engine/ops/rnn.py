"""Recurrent layers as single ops: one direction of one RNN/LSTM/GRU layer over a whole sequence.

``rnn_scan`` records a handful of nodes however long the sequence is::

    xw   = linear(x, W_ih, b_ih)                (T, B, G)   every step's input projection, one GEMM
    ws   = rnn_scan(xw, W_hh, b_hh, ...)         workspace   the recurrence, T x (GEMM + gate kernel)
    out  = rnn_out(ws, xw, W_hh, ...)            (S,)        a view of ws: the states h (and c)
    y, h_n, c_n = views of out

``ws`` holds the states ``hs`` (T+1 slots), the cells ``cs`` (LSTM), the activated gates and, with
a projection, ``m_t = o_t tanh(c_t)``; ``out`` is its first part (the states a user can see), so
the gradient arriving at ``out`` is only as large as those.  The backward rule of ``rnn_out``
runs BPTT in one node (``rnn_scan_grad``: per step one gate kernel and one GEMM, in reverse) that
yields the gradient of the gate pre-activations for all steps; the weight gradients are then single
GEMMs over all steps (``dW_hh = dG^T H_prev``, ``db_hh = sum dG``, ``dW_hr = dH^T M``), and the
gradient of ``xw`` flows into ``linear``'s own backward (``dx``, ``dW_ih``, ``db_ih``).

Variable-length batches: ``lengths`` (B,) int64, an input leaf bound per run, makes row ``b`` take
part in the steps ``t < lengths[b]`` only (its state is carried past them), which is what PyTorch
computes for a PackedSequence; the reverse direction then starts at each row's own last step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinyopt.engine.dtypes import FLOATS, int64
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous
from tinyopt.engine.ops.linalg import linear
from tinyopt.engine.ops.workspace import Layout, region
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels.native import blas, shared_threads
from tinyopt.kernels import rnn as K
from tinyopt.kernels.native.blas import single_threaded

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@dataclass(frozen=True)
class _Sizes:
    """A layer's sizes, and the parts of its workspace and of its gradient buffer."""
    mode: str
    T: int
    B: int
    H: int
    P: int          # the state size: proj_size, or H without a projection
    reverse: bool

    @property
    def G(self) -> int:
        return _GATES[self.mode] * self.H

    @property
    def proj(self) -> bool:
        return self.P != self.H

    @property
    def lstm(self) -> bool:
        return self.mode == "lstm"

    # ---- the forward workspace: [hs | cs | gates | ms | pre] -----------------------------------
    def ws_parts(self) -> list[tuple[str, tuple[int, ...]]]:
        T, B, H, P = self.T, self.B, self.H, self.P
        parts = [("hs", (T + 1, B, P))]
        if self.lstm:
            parts.append(("cs", (T + 1, B, H)))
        if self.mode in ("lstm", "gru"):  # LSTM: i, f, g, o, tanh c; GRU: r, z, n, pre_n + b_n
            parts.append(("gates", (T, B, (5 if self.lstm else 4) * H)))
        if self.proj:
            parts.append(("ms", (T, B, H)))
        parts.append(("pre", (B, self.G)))
        return parts

    # ---- the gradient buffer: [dxw | dpre | dht | dh0 | dc0 | rec | dm] ------------------------
    def grad_parts(self) -> list[tuple[str, tuple[int, ...]]]:
        T, B, H, P = self.T, self.B, self.H, self.P
        parts = [("dxw", (T, B, self.G))]
        if self.mode == "gru":  # the n block of d(pre) is r * d(xw_n)
            parts.append(("dpre", (T, B, self.G)))
        if self.proj:
            parts.append(("dht", (T, B, P)))
        parts.append(("dh0", (B, P)))
        if self.lstm:
            parts.append(("dc0", (B, H)))
        parts.append(("rec", (B, P)))
        if self.proj:
            parts.append(("dm", (B, H)))
        return parts

    def ws(self) -> Layout:
        return Layout(self.ws_parts())

    def grads(self) -> Layout:
        return Layout(self.grad_parts())

    @property
    def visible(self) -> int:
        """Elements of the states a user can see (hs, and cs for LSTM): the start of ws."""
        n = (self.T + 1) * self.B * self.P
        return n + ((self.T + 1) * self.B * self.H if self.lstm else 0)

    def slots(self, k: int) -> tuple[int, int, int]:
        """(time, slot read, slot written) of the k-th step processed."""
        if self.reverse:
            t = self.T - 1 - k
            return t, t + 1, t
        return k, k, k + 1

    @property
    def first_slot(self) -> int:
        return self.T if self.reverse else 0

    @property
    def last_slot(self) -> int:
        return 0 if self.reverse else self.T


# attrs of every node of the family: (mode, T, B, H, P, reverse, has_bias, has_h0, has_c0, packed)
def _sizes(attrs) -> _Sizes:
    return _Sizes(*attrs[:6])


def _flags(attrs):
    return attrs[6:]


def _optional(attrs, srcs) -> dict:
    """The optional sources (or arrays) that follow xw and w_hh, by name."""
    has_bias, has_h0, has_c0, packed = _flags(attrs)
    names = [n for n, on in (("b_hh", has_bias), ("w_hr", _sizes(attrs).proj), ("h0", has_h0),
                             ("c0", has_c0), ("lengths", packed)) if on]
    return dict(zip(names, srcs))


# A layer's batch rows as chunks on the shared threads (``kernels/rnn.py``: each chunk runs all
# steps of its rows, GEMMs included), from this many rows, always in two chunks of ceil(B / 2)
# rows: a number fixed by the batch, so the bits do not depend on the threads (a GEMM's rows may
# round differently with the rows it is given).  Below it, the whole batch per step on this thread.
_CHUNK_MIN_ROWS = 8
_SCAN_CHUNKS = 2


def _scan_chunk_rows(B: int) -> int | None:
    """Rows per chunk of a batch of B, or None (no chunks)."""
    return -(-B // _SCAN_CHUNKS) if B >= _CHUNK_MIN_ROWS else None


class _ScanChunks:
    """An LSTM layer (no projection) as chunks of batch rows (see ``kernels/rnn.py``), where numpy's
    OpenBLAS gives ``cblas_?gemm``."""

    def __init__(self, L: _Sizes, dtype):
        self._L, self._fast = L, dtype == np.float32
        self._R = _scan_chunk_rows(L.B)
        self._gemm = blas.gemm_address(dtype)
        self._args = np.zeros(K.SCAN_ARGS, np.int64)
        self.on = self._R is not None and self._gemm is not None

    def _run(self, make, arrays) -> None:
        L, a = self._L, self._args
        a[:6] = self._gemm, L.T, L.B, L.H, self._R, L.reverse
        a[6:6 + len(arrays)] = [x.ctypes.data for x in arrays]
        with single_threaded():  # each chunk's GEMMs on its own thread (kernels/rnn.py)
            shared_threads.chunk_runner()(make[self._fast].address, -(-L.B // self._R),
                                          a.ctypes.data)

    def forward(self, xw, w_hhT, bias, hs, cs, gates, pre, lengths) -> bool:
        if not self.on:
            return False
        self._run(K.lstm_scan_chunks, (c_contiguous(xw), c_contiguous(w_hhT), c_contiguous(bias),
                                       hs, cs, gates, pre,
                                       c_contiguous(lengths)))
        return True

    def backward(self, gh, w_hh, dh, dc, gates, cs, dg, rec, lengths) -> bool:
        if not self.on:
            return False
        self._run(K.lstm_scan_grad_chunks, (gh, c_contiguous(w_hh), dh, dc, gates, cs, dg, rec,
                                            c_contiguous(lengths)))
        return True


def _scan_forward(t):
    L = _sizes(t.attrs)
    packed = _flags(t.attrs)[3]
    layout = L.ws()
    zeros_bias = np.zeros(L.G, t.dtype)
    full = np.full(L.B, L.T, np.int64)
    fast = t.dtype == np.float32
    lstm_step, gru_step = K.lstm_step[fast], K.gru_step[fast]
    rnn_step = K.rnn_step[fast, L.mode == "rnn_relu"]
    # W_hh^T copied contiguous once per call: the per-step GEMM then reads B untransposed, the
    # same bits (OpenBLAS packs either into the same panels) ~15% faster (20 x 200 @ 200 x 800
    # float32: 136 against 160 us); not for a batch of 1, where numpy takes gemv, whose
    # transposed and plain forms sum in different orders
    wT = np.empty(t.srcs[1].shape[::-1], t.dtype) if L.B > 1 else None

    chunks = _ScanChunks(L, t.dtype) if L.lstm and not L.proj else None

    def _recur(hs, pre, W, xw, w_hhT, w_hr, bias, lengths):
        if chunks is not None and chunks.forward(xw, w_hhT, bias, hs, W["cs"], W["gates"], pre,
                                                 lengths):
            return
        if L.mode == "lstm":
            cs, gates = W["cs"], W["gates"]
            hout = W["ms"] if L.proj else hs
            for k in range(L.T):
                tt, p, q = L.slots(k)
                np.dot(hs[p], w_hhT, out=pre)
                lstm_step(xw, tt, pre, bias, cs, p, q, gates, hout, tt if L.proj else q, hs,
                          lengths, not L.proj)
                if L.proj:
                    np.dot(hout[tt], w_hr.T, out=hs[q])
                    if packed:
                        K.carry_rows(hs, p, q, tt, lengths)
        elif L.mode == "gru":
            gates = W["gates"]
            for k in range(L.T):
                tt, p, q = L.slots(k)
                np.dot(hs[p], w_hhT, out=pre)
                gru_step(xw, tt, pre, bias, hs, p, q, gates, lengths)
        else:
            for k in range(L.T):
                tt, p, q = L.slots(k)
                np.dot(hs[p], w_hhT, out=pre)
                rnn_step(xw, tt, pre, bias, hs, p, q, lengths)

    def fwd(out, xw, w_hh, *rest):
        opt = _optional(t.attrs, rest)
        bias = opt.get("b_hh", zeros_bias)
        h0, c0 = opt.get("h0"), opt.get("c0")
        lengths = c_contiguous(opt["lengths"]) if packed else full
        xw = c_contiguous(xw)
        W = layout.views(out)
        hs, pre = W["hs"], W["pre"]
        hs[L.first_slot] = 0 if h0 is None else h0
        if L.lstm:
            W["cs"][L.first_slot] = 0 if c0 is None else c0
        with single_threaded():  # many small dependent GEMMs (kernels/native/blas.py)
            if wT is not None:
                np.copyto(wT, w_hh.T)
            _recur(hs, pre, W, xw, w_hh.T if wT is None else wT, opt.get("w_hr"), bias,
                   lengths)
    return fwd


def _scan_grad_forward(t):
    L = _sizes(t.attrs)
    packed = _flags(t.attrs)[3]
    wso, go = L.ws(), L.grads()
    full = np.full(L.B, L.T, np.int64)
    lstm_back, lstm_back_proj = K.lstm_backward_step, K.lstm_backward_step_proj
    gru_back, rnn_back = K.gru_backward_step, K.rnn_backward_step[L.mode == "rnn_relu"]
    S = (L.T + 1) * L.B * L.P
    chunks = _ScanChunks(L, t.dtype) if L.lstm and not L.proj else None

    def fwd(out, g, ws, w_hh, *rest):
        w_hr = rest[0] if L.proj else None
        lengths = c_contiguous(rest[-1]) if packed else full
        g = c_contiguous(g)
        gh = g[:S].reshape(L.T + 1, L.B, L.P)
        W = wso.views(ws)
        D = go.views(out)
        hs, dxw, dh, rec = W["hs"], D["dxw"], D["dh0"], D["rec"]
        dpre = D.get("dpre", dxw)
        dh[...] = 0
        rec[...] = 0
        if L.lstm:
            cs, gates, dc = W["cs"], W["gates"], D["dc0"]
            dc[...] = g[S:].reshape(L.T + 1, L.B, L.H)[L.last_slot]
        elif L.mode == "gru":
            gates = W["gates"]
        if chunks is not None and chunks.backward(gh, w_hh, dh, dc, gates, cs, dxw, rec,
                                                  lengths):
            K.sum_grad_h(gh, L.first_slot, dh, rec, dh)  # dL/dh0
            return
        with single_threaded():  # many small dependent GEMMs (kernels/native/blas.py)
            for k in range(L.T - 1, -1, -1):
                tt, p, q = L.slots(k)
                if L.mode == "lstm" and L.proj:
                    dht = D["dht"][tt]
                    K.sum_grad_h(gh, q, dh, rec, dht)
                    np.dot(dht, w_hr, out=D["dm"])
                    lstm_back_proj(D["dm"], dht, dh, dc, gates, tt, cs, p, q, dxw, lengths)
                elif L.mode == "lstm":
                    lstm_back(gh, rec, dh, dc, gates, tt, cs, p, q, dxw, lengths)
                elif L.mode == "gru":
                    gru_back(gh, rec, dh, gates, tt, hs, p, q, dxw, dpre, lengths)
                else:
                    rnn_back(gh, rec, dh, tt, hs, q, dxw, lengths)
                np.dot(dpre[tt], w_hh, out=rec)
        K.sum_grad_h(gh, L.first_slot, dh, rec, dh)  # dL/dh0
    return fwd


def _out_view(t):
    n = t.shape[0]
    return lambda ws, *_: ws.reshape(-1)[:n]


def _out_backward(t, g):
    ws, xw, w_hh = t.srcs[:3]
    L = _sizes(t.attrs)
    opt = _optional(t.attrs, t.srcs[3:])
    b_hh, w_hr, h0, c0 = (opt.get(n) for n in ("b_hh", "w_hr", "h0", "c0"))
    gsrcs = (g, ws, w_hh) + tuple(opt[n] for n in ("w_hr", "lengths") if n in opt)
    go = L.grads()
    d = node("rnn_scan_grad", gsrcs, (go.size,), g.dtype, t.attrs)
    dxw = go.region(d, "dxw")
    dpre = go.region(d, "dpre") if L.mode == "gru" else dxw
    wso = L.ws()
    grads: list[Tensor | None] = [None, dxw if xw.requires_grad else None]
    if w_hh.requires_grad:
        hoff = wso.offset("hs") + (L.B * L.P if L.reverse else 0)  # h_{t-1} of every step
        hprev = region(ws, hoff, (L.T, L.B, L.P))
        grads.append(node("linear_grad_weight", (dpre, hprev), w_hh.shape, g.dtype))
    else:
        grads.append(None)
    if b_hh is not None:
        grads.append(node("linear_grad_bias", (dpre,), b_hh.shape, g.dtype)
                     if b_hh.requires_grad else None)
    if w_hr is not None:
        grads.append(node("linear_grad_weight", (go.region(d, "dht"), wso.region(ws, "ms")),
                          w_hr.shape, g.dtype) if w_hr.requires_grad else None)
    if h0 is not None:
        grads.append(go.region(d, "dh0") if h0.requires_grad else None)
    if c0 is not None:
        grads.append(go.region(d, "dc0") if c0.requires_grad else None)
    if "lengths" in opt:
        grads.append(None)
    return tuple(grads)


defop("rnn_scan", forward=_scan_forward)
defop("rnn_scan_grad", forward=_scan_grad_forward)
defop("rnn_out", view=_out_view, backward=_out_backward)


def _check(name: str, x: Tensor | None, shape: tuple[int, ...], dtype) -> Tensor | None:
    if x is None:
        return None
    x = as_tensor(x)
    if x.shape != shape:
        raise RuntimeError(f"rnn_scan: {name} has shape {x.shape}, expected {shape}")
    if x.dtype != dtype:
        raise RuntimeError(f"rnn_scan: {name} has dtype {x.dtype}, expected {dtype}")
    return x


def rnn_scan(mode: str, input, w_ih, w_hh, b_ih=None, b_hh=None, w_hr=None, h0=None, c0=None,
             lengths=None, reverse: bool = False
             ) -> tuple[Tensor, Tensor, Tensor | None]:
    """One direction of one recurrent layer over a whole sequence, as PyTorch computes it.

    ``mode`` is 'lstm', 'gru', 'rnn_tanh' or 'rnn_relu'; ``input`` (T, B, I); weights with
    PyTorch's shapes and gate order (``w_ih`` (G*H, I), ``w_hh`` (G*H, P), biases (G*H,),
    ``w_hr`` (P, H) for an LSTM with projection, P = H without); ``h0`` (B, P) and ``c0`` (B, H)
    default to zeros; ``lengths`` (B,) int64 (a numpy array or a tensor) limits row ``b`` to the
    steps ``t < lengths[b]``; ``reverse`` runs from the last step to the first.

    Returns ``(y, h_n, c_n)``: y (T, B, P) the states at every step (rows past their length hold
    their carried state), h_n (B, P) and c_n (B, H) the final ones (c_n is None but for LSTM).
    """
    if mode not in MODES:
        raise ValueError(f"rnn_scan: mode must be one of {MODES}, got {mode!r}")
    x, w_ih, w_hh = as_tensor(input), as_tensor(w_ih), as_tensor(w_hh)
    if x.dtype not in FLOATS:
        raise TypeError(f"rnn_scan: expected a floating point input, got {x.dtype}")
    if x.ndim != 3:
        raise RuntimeError(f"rnn_scan: input must be 3-D (T, B, I), got shape {x.shape}")
    T, B, _ = x.shape
    if T == 0:
        raise RuntimeError("rnn_scan: the input has no time steps (shape "
                           f"{x.shape})")
    G, P = w_hh.shape if w_hh.ndim == 2 else (0, 0)
    H = G // _GATES[mode]
    if w_hh.ndim != 2 or G % _GATES[mode] or H == 0:
        raise RuntimeError(f"rnn_scan: weight_hh has shape {w_hh.shape}, expected "
                           f"({_GATES[mode]} * hidden_size, state size)")
    dt = x.dtype
    _check("weight_ih", w_ih, (G, x.shape[2]), dt)
    _check("weight_hh", w_hh, (G, P), dt)
    b_ih, b_hh = _check("bias_ih", b_ih, (G,), dt), _check("bias_hh", b_hh, (G,), dt)
    if (b_ih is None) != (b_hh is None):
        raise ValueError("rnn_scan: give both biases or neither")
    if w_hr is not None:
        if mode != "lstm":
            raise ValueError("rnn_scan: a projection (w_hr) is for LSTM only")
        w_hr = _check("weight_hr", w_hr, (P, H), dt)
    elif P != H:
        raise RuntimeError(f"rnn_scan: weight_hh has shape {w_hh.shape}: without a projection "
                           f"its second dimension must be the hidden size {H}")
    h0 = _check("h0", h0, (B, P), dt)
    c0 = _check("c0", c0, (B, H), dt) if mode == "lstm" else None
    if lengths is not None:
        lengths = as_tensor(np.asarray(lengths, dtype=np.int64)
                            if not isinstance(lengths, Tensor) else lengths)
        if lengths.dtype != int64 or lengths.shape != (B,):
            raise RuntimeError(f"rnn_scan: lengths must be int64 of shape ({B},), got "
                               f"{lengths.dtype} {lengths.shape}")
    xw = linear(x, w_ih, b_ih)
    attrs = (mode, T, B, H, P, bool(reverse), b_hh is not None, h0 is not None,
             c0 is not None, lengths is not None)
    L = _sizes(attrs)
    extra = tuple(s for s in (b_hh, w_hr, h0, c0, lengths) if s is not None)
    ws = node("rnn_scan", (xw, w_hh) + extra, (L.ws().size,), dt, attrs)
    out = node("rnn_out", (ws, xw, w_hh) + extra, (L.visible,), dt, attrs)
    S = (T + 1) * B * P
    y = region(out, 0 if reverse else B * P, (T, B, P))
    h_n = region(out, L.last_slot * B * P, (B, P))
    c_n = region(out, S + L.last_slot * B * H, (B, H)) if mode == "lstm" else None
    return y, h_n, c_n


# ---- variable-length batches: rows gathered from and scattered into a padded batch -------------
def _rows(a: np.ndarray, n: int) -> np.ndarray:
    return c_contiguous(a).reshape(n, -1)


def _gather_rows_forward(t):
    n_in, n_out = t.srcs[0].shape[0], t.shape[0]
    # indices were checked when the node was built; "clip" keeps np.take from buffering
    return lambda out, x, idx: np.take(_rows(x, n_in), idx, axis=0, out=_rows(out, n_out),
                                       mode="clip")


def _scatter_rows_forward(t):
    n_in, n_out = t.srcs[0].shape[0], t.shape[0]

    def fwd(out, x, idx):
        o = _rows(out, n_out)
        o[...] = 0
        o[idx] = _rows(x, n_in)
    return fwd


defop("gather_rows", forward=_gather_rows_forward, backward=lambda t, g: (
    node("scatter_rows", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))
defop("scatter_rows", forward=_scatter_rows_forward, backward=lambda t, g: (
    node("gather_rows", (g, t.srcs[1]), t.srcs[0].shape, g.dtype), None))


def _row_index(name: str, idx: np.ndarray, n: int) -> Tensor:
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= n)):
        raise IndexError(f"{name}: row indices must be a 1-D array in [0, {n}), got "
                         f"{idx if idx.size < 20 else idx.shape}")
    if np.unique(idx).size != idx.size:
        raise IndexError(f"{name}: row indices must be distinct")
    return leaf(idx)


def gather_rows(x, idx: np.ndarray) -> Tensor:
    """out[i] = x[idx[i]] along dimension 0, for distinct indices ``idx`` (a numpy int64 array
    bound per run, so one plan serves every batch of the same shapes)."""
    x = as_tensor(x)
    return node("gather_rows", (x, _row_index("gather_rows", idx, x.shape[0])),
                (len(idx),) + x.shape[1:], x.dtype)


def scatter_rows(x, idx: np.ndarray, n: int) -> Tensor:
    """A tensor of ``n`` rows, zero but for out[idx[i]] = x[i] (distinct indices)."""
    x = as_tensor(x)
    if len(idx) != x.shape[0]:
        raise IndexError(f"scatter_rows: {len(idx)} indices for {x.shape[0]} rows")
    return node("scatter_rows", (x, _row_index("scatter_rows", idx, n)), (n,) + x.shape[1:],
                x.dtype)
