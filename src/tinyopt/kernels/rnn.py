"""Gate kernels of the recurrent layers in ``engine/ops/rnn.py``: one call per time step and
direction, forward and backward (BPTT), for a whole batch.

The op runs the recurrence; per step it does one BLAS GEMM (``pre = h_{t-1} W_hh^T``) and then one
of these kernels, which adds the step's input projection ``xw[t] = x_t W_ih^T + b_ih`` and the
recurrent bias ``b_hh``, applies the gates and writes the new state.  Backward, per step, one of
the ``*_backward_step`` kernels turns the gradient of the state into the gradient of the gate
pre-activations ``dg[t]`` (then one GEMM, ``rec = dg[t] W_hh``, carries it to the previous state).

Arrays are C-contiguous, one float dtype (float32 or float64), indices int64.  Shapes: batch B,
hidden size H; states ``hs[slot, b, :]`` and cells ``cs[slot, b, :]`` with T + 1 slots (the step at
time ``t`` reads slot ``p`` and writes slot ``q``: ``p, q = t, t + 1`` forward, ``t + 1, t`` in
reverse).  ``lengths[b]``: row ``b`` takes part in the steps ``t < lengths[b]`` (variable-length
batches); at the other steps its state is carried unchanged and its gate gradients are zero.

Gradient bookkeeping (every ``*_backward_step``): ``dh`` holds, on entry, the part of dL/dh_t
carried from the later step (``carry``); the kernel forms the whole gradient
``dh_t = gh[q] + carry + rec`` (``gh`` the gradient of the returned states, ``rec`` the recurrent
GEMM of the later step) and leaves in ``dh`` what flows to h_{t-1} other than through ``W_hh``:
0 for LSTM and RNN, ``dh_t * z`` for GRU, ``dh_t`` itself for rows that do not take part.

Equations (PyTorch's gate order and bias placement, https://pytorch.org/docs/stable/nn.html):

- LSTM (Hochreiter & Schmidhuber 1997): gates (i, f, g, o) = (sig, sig, tanh, sig)(xw + pre + b),
  c_t = f c_{t-1} + i g, h_t = o tanh(c_t).
- GRU (Cho et al. 2014, https://arxiv.org/abs/1406.1078): r, z = sig(xw_rz + pre_rz + b_rz),
  n = tanh(xw_n + r (pre_n + b_n)), h_t = (1 - z) n + z h_{t-1}.
- RNN (Elman): h_t = tanh or relu(xw + pre + b).

The forward kernels are specialized on ``fast`` (the op sets it for float32): the gate functions
are then the vectorizable ones of ``kernels/vecmath.py`` (an LSTM step of batch 20, hidden 200
(20k gate functions) took 500 us with libm's and 200 us with them, on a loaded 2-core machine).
BPTT computes no transcendental function (the forward pass saves tanh c_t with the gates), so the
backward kernels are plain.  The kernels index 1-D row views (``x[:H]`` per gate) in their inner
loops: with 3-D indexing LLVM does not vectorize them.  The backward per-row helpers are inlined
into their callers at numba's IR level (``jit.inline``): as subroutines (compiled apart) the LSTM
backward step kernel took ~0.3 s more of a cold first step (1.31 against 0.98 s of CPU, medians
of 4 interleaved runs) and ran 580-660 against 480 us a layer's 35 steps (batch 20, hidden 200).
The gate functions stay subroutines (``kernels/vecmath.py`` says why).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.native import blas
from tinyopt.kernels.native.instructions import select
from tinyopt.kernels import vecmath as _V
from tinyopt.kernels.jit import c_callback, inline, kernel, specialized, subroutine
from tinyopt.kernels.vecmath import sig as _sig
from tinyopt.kernels.vecmath import tanh as _tanh


_NO_TRANS = 111  # CblasNoTrans
_ptr = blas.pointer  # (the chunks' typed pointers: see the section on them)


@subroutine
def _sigmoid_libm(x):
    return 1.0 / (1.0 + math.exp(-x))


def _gate_functions(fast: bool):
    """The sigmoid and tanh a forward kernel specialized on ``fast`` calls: what
    ``kernels/vecmath.py``'s ``sig``/``tanh`` call, without their flag (three fewer functions
    for numba to compile into the kernel: the cold LSTM step kernel 2.46 -> 2.06 s of CPU), or
    libm's."""
    return (_V.sigmoid_fast, _V.tanh_fast) if fast else (_sigmoid_libm, math.tanh)


@inline
def _gather_grad(d, g, r, H):
    """d += g + r over one row of H: the whole gradient of a state (see the module docstring);
    1-d arrays or typed pointers."""
    for j in range(H):
        d[j] += g[j] + r[j]


@inline
def _copy_row(d, s):
    """d[:] = s[:] for two 1-d arrays of one length, as a loop: numba compiles an array's slice
    assignment from another with its shape check's error message (string formatting), ~1.5 s of
    CPU of a cold compile (the LSTM's projected backward step kernel: 2.1-2.6 -> 0.45-0.5 s)."""
    for j in range(d.shape[0]):
        d[j] = s[j]


# ---- LSTM ---------------------------------------------------------------------------------------
@specialized
def _lstm_cell(fast: bool):
    """``cell(xi, xf, xg, xo, pi, pf, pg, po, bi, bf, bg, bo, cp, cq, gi, gf, gg, go, gt, ho,
    H)``: one row of :func:`lstm_step` that takes part in the step (inlined into its callers),
    each argument H entries: per gate (i, f, g, o) of the row, its xw[t], pre and bias; the
    cells read and written (``cp``, ``cq``); the activated gates and tanh c_t written (``gi`` ..
    ``gt``); the new state ``ho``.

    The arguments are only indexed: 1-d arrays (:func:`lstm_step`) or typed pointers (the
    chunks, where compile time counts: see the section on them).  One argument per gate, not the
    row with the gates at offsets H, 2H, ...: LLVM checks that a loop's stores do not overlap
    its other accesses once for all the rows of the loop around it where it can follow the
    addresses (arrays), and the ranges of a row's gates over all rows do overlap: the kernel
    then never took its vectorized loop (an LSTM layer's 35 steps of batch 20, hidden 200: 7.7
    ms against 1.05)."""
    sg, th = _gate_functions(fast)

    @inline
    def cell(xi, xf, xg, xo, pi, pf, pg, po, bi, bf, bg, bo, cp, cq, gi, gf, gg, go, gt, ho, H):
        for j in range(H):
            i_ = sg(xi[j] + pi[j] + bi[j])
            f_ = sg(xf[j] + pf[j] + bf[j])
            g_ = th(xg[j] + pg[j] + bg[j])
            o_ = sg(xo[j] + po[j] + bo[j])
            gi[j] = i_
            gf[j] = f_
            gg[j] = g_
            go[j] = o_
            c = f_ * cp[j] + i_ * g_
            cq[j] = c
            tc = th(c)
            gt[j] = tc
            ho[j] = o_ * tc
    return cell


@specialized
def lstm_step(fast: bool):
    """One LSTM step at time ``t``: xw (T, B, 4H), pre (B, 4H), bias (4H,), cs (T+1, B, H),
    gates (T, B, 5H) gets the activated (i, f, g, o) and tanh(c_t) (so that BPTT computes no
    transcendental function); ``hout[o]`` (B, H) gets o tanh(c_t).

    Rows past their length copy cs[p] to cs[q] and, when ``carry``, hs[p] to hout[o]; else (with
    a projection, whose caller carries the projected state itself) they zero hout[o]."""
    cell = _lstm_cell[fast]

    @kernel
    def lstm_step_kernel(xw, t, pre, bias, cs, p, q, gates, hout, o, hs, lengths, carry):
        H = cs.shape[2]
        bi, bf, bg, bo = bias[:H], bias[H:2 * H], bias[2 * H:3 * H], bias[3 * H:]
        for b in range(cs.shape[1]):
            cp, cq, ho = cs[p, b], cs[q, b], hout[o, b]
            if t < lengths[b]:
                x, pr, g = xw[t, b], pre[b], gates[t, b]
                cell(x[:H], x[H:2 * H], x[2 * H:3 * H], x[3 * H:],
                     pr[:H], pr[H:2 * H], pr[2 * H:3 * H], pr[3 * H:], bi, bf, bg, bo, cp, cq,
                     g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:4 * H], g[4 * H:], ho, H)
            else:
                hp = hs[p, b]
                for j in range(H):
                    cq[j] = cp[j]
                for j in range(ho.shape[0]):
                    ho[j] = hp[j] if carry else 0.0
    return lstm_step_kernel


# ---- a whole LSTM layer (no projection) in chunks of batch rows, on the shared threads ----------
#
# A row's recurrence reads only that row: h_t[b] = f(xw[t, b], h_{t-1}[b] W_hh^T, c_{t-1}[b]),
# and backward dL/dh_{t-1}[b] = dg[t, b] W_hh.  So the batch splits into chunks of rows that run
# all T steps each, independently, with no synchronisation between steps: ``lstm_scan_chunks``
# and ``lstm_scan_grad_chunks`` are C functions ``void chunk(int64 c, int64 *args)`` for
# ``shared_threads.chunk_runner``.  Chunk c is the rows c R .. c R + R - 1; per step it makes the
# GEMM of its rows (numpy's own ``cblas_?gemm``, ``kernels/native/blas.py``; the op runs the chunks
# under ``blas.single_threaded``, which in numpy's OpenBLAS sets the count of the whole process:
# ``openblas_set_num_threads_local`` calls ``openblas_set_num_threads``, so calling it from the
# chunks themselves raced and left the process at one thread, its other GEMMs 2x slower) and
# runs the step kernels' rows (``_lstm_cell``, ``_lstm_rows``).  R is fixed by the batch size
# (the op's ``_scan_chunk_rows``), never by the threads: a GEMM's rows can round differently
# with the number of rows OpenBLAS is given, and the chunks are the same whoever runs them.
#
# The chunks read their arguments and reach their rows through typed pointers (``blas.pointer``
# at the row's address), not arrays: numba lowers an array access to ~30 lines of LLVM IR (the
# array's structure copied, a negative index wrapped) and a slice to more, a pointer's access
# to a GEP and a load, and every line costs numba's front end and LLVM.  The time, slots and
# chunk bounds are ``select``s (no branches: fewer blocks to build).  LLVM IR before
# optimisation, forward 9650 -> 1400 lines, backward 7700 -> 1600; cold compile CPU (fresh
# processes, numba warmed, loaded 2-core machine, medians of 4): forward 1.09 -> 0.71 s (with
# the gate functions it compiles, ~0.2 s), backward 0.65 -> 0.39 s; in the word-level LSTM's
# cold first step (``benchmarks/bench_startup.py --floors``) 0.83-1.02 -> 0.55-0.56 s and
# 0.49-0.71 -> 0.29-0.33 s; the same bits.

SCAN_ARGS = 15
"""The args of :func:`lstm_scan_chunks` and :func:`lstm_scan_grad_chunks`, int64: [the address
of ``cblas_?gemm``, T, B, H, R, reverse, then addresses of: forward xw (T, B, 4H), W_hh^T (H, 4H), bias (4H,), hs (T+1, B, H), cs
(T+1, B, H), gates (T, B, 5H), pre (B, 4H), lengths (B,) int64; backward gh (T+1, B, H), W_hh (4H,
H), dh (B, H), dc (B, H), gates, cs, dg (T, B, 4H), rec (B, H), lengths]."""


@specialized
def lstm_scan_chunks(fast: bool):
    """``lstm_scan_chunks[fast]``: chunk c of an LSTM layer's forward recurrence (see above;
    float32 iff ``fast``): for each step k (time t, slots p -> q: t, t -> t + 1, or t + 1 -> t
    in ``reverse``), pre[rows] = hs[p, rows] W_hh^T, then :func:`lstm_step`'s rows."""
    dt = np.float32 if fast else np.float64
    size = 4 if fast else 8  # bytes an element
    cell = _lstm_cell[fast]

    def lstm_scan_chunk(c, a):
        T, B, H, R, reverse = a[1], a[2], a[3], a[4], a[5] != 0
        G = 4 * H
        zero = dt(0.0)
        hb = H * size  # the bytes of a gate's H entries
        xw, hs, cs, gates, pre = a[6], a[9], a[10], a[11], a[12]
        bi, bf = _ptr(a[8], zero), _ptr(a[8] + hb, zero)
        bg, bo = _ptr(a[8] + 2 * hb, zero), _ptr(a[8] + 3 * hb, zero)
        lengths = _ptr(a[13], np.int64(0))
        b0 = c * R
        b1 = select(b0 + R < B, b0 + R, B)
        for k in range(T):
            t = select(reverse, T - 1 - k, k)
            p, q = select(reverse, t + 1, t), select(reverse, t, t + 1)
            blas.gemm(a[0], _NO_TRANS, _NO_TRANS, b1 - b0, G, H, dt(1.0),
                      hs + (p * B + b0) * hb, H, a[7], G, dt(0.0),
                      pre + (b0 * G) * size, G)
            for b in range(b0, b1):
                cp = _ptr(cs + (p * B + b) * hb, zero)
                cq = _ptr(cs + (q * B + b) * hb, zero)
                hq = _ptr(hs + (q * B + b) * hb, zero)
                if t < lengths[b]:
                    x = xw + ((t * B + b) * G) * size
                    r = pre + (b * G) * size
                    g = gates + ((t * B + b) * 5 * H) * size
                    cell(_ptr(x, zero), _ptr(x + hb, zero), _ptr(x + 2 * hb, zero),
                         _ptr(x + 3 * hb, zero), _ptr(r, zero), _ptr(r + hb, zero),
                         _ptr(r + 2 * hb, zero), _ptr(r + 3 * hb, zero), bi, bf, bg, bo, cp, cq,
                         _ptr(g, zero), _ptr(g + hb, zero), _ptr(g + 2 * hb, zero),
                         _ptr(g + 3 * hb, zero), _ptr(g + 4 * hb, zero), hq, H)
                else:
                    hp = _ptr(hs + (p * B + b) * hb, zero)
                    for j in range(H):
                        cq[j] = cp[j]
                        hq[j] = hp[j]
    return c_callback(lstm_scan_chunk, "void(int64, CPointer(int64))")


@kernel
def carry_rows(hs, p, q, t, lengths):
    """hs[q, b] = hs[p, b] for the rows ``b`` past their length at time ``t``."""
    for b in range(hs.shape[1]):
        if t >= lengths[b]:
            _copy_row(hs[q, b], hs[p, b])


@inline
def _lstm_rows(dm, dc, gi, gf, gg, go, gt, cp, di, df, dgg, do, H):
    """The LSTM gate gradients of one row, given dL/dm_t (``dm``, with m_t = o tanh(c_t) the
    state before any projection) and the step's saved gates (``gi``, ``gf``, ``gg``, ``go``,
    tanh c_t ``gt``): per gate ``di`` .. ``do``, and ``dc`` from dL/dc_t to dL/dc_{t-1}; each
    H entries, 1-d arrays or typed pointers, one per gate (see :func:`_lstm_cell`)."""
    for j in range(H):
        i_, f_, g_, o_, tc = gi[j], gf[j], gg[j], go[j], gt[j]
        dct = dc[j] + dm[j] * o_ * (1.0 - tc * tc)
        di[j] = dct * g_ * i_ * (1.0 - i_)
        df[j] = dct * cp[j] * f_ * (1.0 - f_)
        dgg[j] = dct * i_ * (1.0 - g_ * g_)
        do[j] = dm[j] * tc * o_ * (1.0 - o_)
        dc[j] = dct * f_


@inline
def _lstm_row_arrays(dm, dc, g, cp, dg, H):
    """:func:`_lstm_rows` of one row's arrays: ``g`` (5H) the saved gates, ``dg`` (4H)."""
    _lstm_rows(dm, dc, g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:4 * H], g[4 * H:], cp,
               dg[:H], dg[H:2 * H], dg[2 * H:3 * H], dg[3 * H:], H)


@kernel
def lstm_backward_step(gh, rec, dh, dc, gates, t, cs, p, q, dg, lengths):
    """BPTT through one LSTM step without projection (see the module docstring for ``gh``,
    ``rec`` and ``dh``): dg (T, B, 4H) gets dL/d(pre-activation gates) at ``t``, ``dc`` (B, H)
    goes from dL/dc_t to dL/dc_{t-1} in place."""
    H = dc.shape[1]
    for b in range(dc.shape[0]):
        d = dh[b]
        _gather_grad(d, gh[q, b], rec[b], H)
        if t < lengths[b]:
            _lstm_row_arrays(d, dc[b], gates[t, b], cs[p, b], dg[t, b], H)
            d[:] = 0.0
        else:
            dg[t, b, :] = 0.0


@specialized
def lstm_scan_grad_chunks(single: bool):
    """``lstm_scan_grad_chunks[single]``: chunk c of an LSTM layer's BPTT (see above; float32
    iff ``single``): for each step in reverse, :func:`lstm_backward_step`'s rows, then
    rec[rows] = dg[t, rows] W_hh.  ``dh``, ``rec`` and ``dc`` hold their values before the
    last step (as the op sets them)."""
    dt = np.float32 if single else np.float64
    size = 4 if single else 8  # bytes an element

    def lstm_scan_grad_chunk(c, a):
        T, B, H, R, reverse = a[1], a[2], a[3], a[4], a[5] != 0
        G = 4 * H
        zero = dt(0.0)
        hb = H * size  # the bytes of a gate's H entries
        gh, dh, dc, gates, cs, dg, rec = a[6], a[8], a[9], a[10], a[11], a[12], a[13]
        lengths = _ptr(a[14], np.int64(0))
        b0 = c * R
        b1 = select(b0 + R < B, b0 + R, B)
        for k in range(T - 1, -1, -1):
            t = select(reverse, T - 1 - k, k)
            p, q = select(reverse, t + 1, t), select(reverse, t, t + 1)
            for b in range(b0, b1):
                d = _ptr(dh + b * hb, zero)
                _gather_grad(d, _ptr(gh + (q * B + b) * hb, zero), _ptr(rec + b * hb, zero), H)
                e = dg + ((t * B + b) * G) * size
                if t < lengths[b]:
                    g = gates + ((t * B + b) * 5 * H) * size
                    _lstm_rows(d, _ptr(dc + b * hb, zero), _ptr(g, zero), _ptr(g + hb, zero),
                               _ptr(g + 2 * hb, zero), _ptr(g + 3 * hb, zero),
                               _ptr(g + 4 * hb, zero), _ptr(cs + (p * B + b) * hb, zero),
                               _ptr(e, zero), _ptr(e + hb, zero), _ptr(e + 2 * hb, zero),
                               _ptr(e + 3 * hb, zero), H)
                    for j in range(H):
                        d[j] = zero
                else:
                    de = _ptr(e, zero)
                    for j in range(G):
                        de[j] = zero
            blas.gemm(a[0], _NO_TRANS, _NO_TRANS, b1 - b0, H, G, dt(1.0),
                      dg + ((t * B + b0) * G) * size, G, a[7], H, dt(0.0),
                      rec + b0 * hb, H)
    return c_callback(lstm_scan_grad_chunk, "void(int64, CPointer(int64))")


@kernel(nrt=False)
def sum_grad_h(gh, s, carry, rec, out):
    """out[b, j] = gh[s, b, j] + carry[b, j] + rec[b, j]: the whole gradient of a state."""
    for b in range(out.shape[0]):
        g, c, r, o = gh[s, b], carry[b], rec[b], out[b]
        for j in range(out.shape[1]):
            o[j] = g[j] + c[j] + r[j]


@kernel
def lstm_backward_step_proj(dm, dht, carry, dc, gates, t, cs, p, q, dg, lengths):
    """BPTT through one LSTM step with a projection h_t = W_hr m_t: ``dm`` (B, H) is
    dL/dm_t = dht W_hr, ``dht`` (B, P) the whole dL/dh_t; ``carry`` (B, P) gets what flows to
    h_{t-1} other than through W_hh (0, or ``dht`` for rows past their length)."""
    H = dc.shape[1]
    for b in range(dc.shape[0]):
        if t < lengths[b]:
            _lstm_row_arrays(dm[b], dc[b], gates[t, b], cs[p, b], dg[t, b], H)
            carry[b, :] = 0.0
        else:
            dg[t, b, :] = 0.0
            _copy_row(carry[b], dht[b])


# ---- GRU ----------------------------------------------------------------------------------------
@specialized
def gru_step(fast: bool):
    """One GRU step at time ``t``: xw (T, B, 3H), pre (B, 3H) = h_{t-1} W_hh^T (no bias),
    bias (3H,) = b_hh; gates (T, B, 4H) gets (r, z, n, pre_n + b_n) for the backward pass."""
    @kernel
    def gru_step_kernel(xw, t, pre, bias, hs, p, q, gates, lengths):
        B, H = hs.shape[1], hs.shape[2]
        br, bz, bn = bias[:H], bias[H:2 * H], bias[2 * H:]
        for b in range(B):
            hp, hq = hs[p, b], hs[q, b]
            if t < lengths[b]:
                x, pr, g = xw[t, b], pre[b], gates[t, b]
                xr, xz, xn = x[:H], x[H:2 * H], x[2 * H:]
                pr_, pz, pn = pr[:H], pr[H:2 * H], pr[2 * H:]
                gr, gz, gn, ghn = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
                for j in range(H):
                    r = _sig(xr[j] + pr_[j] + br[j], fast)
                    z = _sig(xz[j] + pz[j] + bz[j], fast)
                    hn = pn[j] + bn[j]
                    n = _tanh(xn[j] + r * hn, fast)
                    gr[j] = r
                    gz[j] = z
                    gn[j] = n
                    ghn[j] = hn
                    hq[j] = (1.0 - z) * n + z * hp[j]
            else:
                _copy_row(hq, hp)
    return gru_step_kernel


@kernel
def gru_backward_step(gh, rec, dh, gates, t, hs, p, q, dxw, dpre, lengths):
    """BPTT through one GRU step: dxw (T, B, 3H) gets dL/d(xw[t]) and dpre (T, B, 3H)
    dL/d(h_{t-1} W_hh^T + b_hh), which differ in the n block: d pre_n = r * d xw_n."""
    B, H = dh.shape
    for b in range(B):
        d = dh[b]
        _gather_grad(d, gh[q, b], rec[b], H)
        if t < lengths[b]:
            g, hp, dx, dp = gates[t, b], hs[p, b], dxw[t, b], dpre[t, b]
            gr, gz, gn, ghn = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
            dxr, dxz, dxn = dx[:H], dx[H:2 * H], dx[2 * H:]
            dpr, dpz, dpn = dp[:H], dp[H:2 * H], dp[2 * H:]
            for j in range(H):
                r, z, n, hn = gr[j], gz[j], gn[j], ghn[j]
                dht = d[j]
                dn = dht * (1.0 - z) * (1.0 - n * n)
                dr = dn * hn * r * (1.0 - r)
                dz = dht * (hp[j] - n) * z * (1.0 - z)
                dxr[j] = dr
                dxz[j] = dz
                dxn[j] = dn
                dpr[j] = dr
                dpz[j] = dz
                dpn[j] = dn * r
                d[j] = dht * z
        else:
            dxw[t, b, :] = 0.0
            dpre[t, b, :] = 0.0


# ---- Elman RNN ----------------------------------------------------------------------------------
@specialized
def rnn_step(fast: bool, relu: bool):
    """One Elman step at time ``t``: hs[q] = tanh (ReLU if ``relu``) of xw[t] + pre + bias."""
    @kernel
    def rnn_step_kernel(xw, t, pre, bias, hs, p, q, lengths):
        B, H = hs.shape[1], hs.shape[2]
        for b in range(B):
            hq = hs[q, b]
            if t < lengths[b]:
                x, pr = xw[t, b], pre[b]
                for j in range(H):
                    v = x[j] + pr[j] + bias[j]
                    if relu:  # NaN stays NaN, as torch.relu
                        hq[j] = v if v > 0.0 or v != v else 0.0
                    else:
                        hq[j] = _tanh(v, fast)
            else:
                _copy_row(hq, hs[p, b])
    return rnn_step_kernel


@specialized
def rnn_backward_step(relu: bool):
    """BPTT through one Elman step: dxw (T, B, H) gets dL/d(pre-activation) at ``t``."""
    @kernel
    def rnn_backward_step_kernel(gh, rec, dh, t, hs, q, dxw, lengths):
        B, H = dh.shape
        for b in range(B):
            d = dh[b]
            _gather_grad(d, gh[q, b], rec[b], H)
            if t < lengths[b]:
                h, dx = hs[q, b], dxw[t, b]
                for j in range(H):
                    if relu:
                        dx[j] = d[j] if h[j] > 0.0 else 0.0
                    else:
                        dx[j] = d[j] * (1.0 - h[j] * h[j])
                d[:] = 0.0
            else:
                dxw[t, b, :] = 0.0
    return rnn_backward_step_kernel
