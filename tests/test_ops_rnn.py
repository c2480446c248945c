"""engine/ops/rnn.py: one recurrent layer direction as one op -- values against a numpy reference
of PyTorch's equations, gradients against finite differences in float64 (every mode, reverse,
projection, variable lengths, given or zero initial states), the graph size independent of the
sequence length, plan reuse, packed-row gather/scatter, and errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck
from test_native_address import LOGGED, compiles_no_message_formatting

import tinyopt as to
from tinyopt.engine import cache_info
from tinyopt.engine.graph import toposort
from tinyopt.engine.ops.movement import cat
from tinyopt.engine.ops.rnn import gather_rows, rnn_scan, scatter_rows

rng = np.random.default_rng(0)
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def sig(x):
    return 1 / (1 + np.exp(-x))


def ref_scan(mode, x, w_ih, w_hh, b_ih, b_hh, w_hr=None, h0=None, c0=None, lengths=None,
             reverse=False):
    """PyTorch's equations, step by step in numpy (rows past their length keep their state)."""
    T, B, _ = x.shape
    G, P = w_hh.shape
    H = G // GATES[mode]
    h = np.zeros((B, P)) if h0 is None else h0.copy()
    c = np.zeros((B, H)) if c0 is None else c0.copy()
    lengths = np.full(B, T) if lengths is None else np.asarray(lengths)
    ys = np.zeros((T, B, P))
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        gi = x[t] @ w_ih.T + (0 if b_ih is None else b_ih)
        gh = h @ w_hh.T + (0 if b_hh is None else b_hh)
        if mode == "lstm":
            i, f, g, o = np.split(gi + gh, 4, axis=1)
            c_new = sig(f) * c + sig(i) * np.tanh(g)
            m = sig(o) * np.tanh(c_new)
            h_new = m @ w_hr.T if w_hr is not None else m
        elif mode == "gru":
            r = sig(gi[:, :H] + gh[:, :H])
            z = sig(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h_new, c_new = (1 - z) * n + z * h, c
        else:
            v = gi + gh
            h_new, c_new = (np.tanh(v) if mode == "rnn_tanh" else np.maximum(v, 0)), c
        act = (t < lengths)[:, None]
        h, c = np.where(act, h_new, h), np.where(act, c_new, c)
        ys[t] = h
    return ys, h, c


def weights(mode, I, H, P, bias=True, proj=False):
    G = GATES[mode] * H
    w = [rng.standard_normal((G, I)) * 0.5, rng.standard_normal((G, P)) * 0.5]
    w += [rng.standard_normal(G) * 0.5, rng.standard_normal(G) * 0.5] if bias else [None, None]
    w.append(rng.standard_normal((P, H)) * 0.5 if proj else None)
    return w


CASES = [(m, rev, proj, lens) for m in GATES for rev in (False, True) for proj in (False, True)
         for lens in (None, [4, 1, 3]) if not (proj and m != "lstm")]


@pytest.mark.parametrize("mode, reverse, proj, lengths", CASES)
def test_values_and_gradients(mode, reverse, proj, lengths):
    T, B, I, H = 4, 3, 3, 4
    P = 2 if proj else H
    w_ih, w_hh, b_ih, b_hh, w_hr = weights(mode, I, H, P, proj=proj)
    x = rng.standard_normal((T, B, I))
    h0, c0 = rng.standard_normal((B, P)), rng.standard_normal((B, H))
    lstm = mode == "lstm"
    arrays = [x, w_ih, w_hh, b_ih, b_hh, h0] + ([c0] if lstm else []) + ([w_hr] if proj else [])

    def f(x, w_ih, w_hh, b_ih, b_hh, h0, *rest):
        c0 = rest[0] if lstm else None
        w_hr = rest[-1] if proj else None
        y, h_n, c_n = rnn_scan(mode, x, w_ih, w_hh, b_ih, b_hh, w_hr, h0, c0, lengths, reverse)
        parts = [y.reshape(-1), h_n.reshape(-1)] + ([c_n.reshape(-1)] if lstm else [])
        return cat(parts)

    ys, hn, cn = ref_scan(mode, x, w_ih, w_hh, b_ih, b_hh, w_hr, h0, c0, lengths, reverse)
    want = np.concatenate([ys.reshape(-1), hn.reshape(-1)] + ([cn.reshape(-1)] if lstm else []))
    got = f(*[to.tensor(a, dtype=to.float64) for a in arrays]).numpy()
    if lengths is not None:  # rows past their length hold their carried state
        np.testing.assert_allclose(got[ys.size:], want[ys.size:], rtol=1e-12, atol=1e-12)
        mask = (np.arange(T)[:, None] < np.array(lengths)[None])[..., None]
        np.testing.assert_allclose((got[:ys.size].reshape(ys.shape) * mask), ys * mask,
                                   rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    gradcheck(f, *arrays, max_elems=24)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_zero_initial_state_and_no_bias(mode):
    T, B, I, H = 3, 2, 3, 2
    w_ih, w_hh, _, _, _ = weights(mode, I, H, H, bias=False)
    x = rng.standard_normal((T, B, I))

    def f(x, w_ih, w_hh):
        y, h_n, _ = rnn_scan(mode, x, w_ih, w_hh)
        return cat([y.reshape(-1), h_n.reshape(-1)])

    ys, hn, _ = ref_scan(mode, x, w_ih, w_hh, None, None)
    got = f(*[to.tensor(a, dtype=to.float64) for a in (x, w_ih, w_hh)]).numpy()
    np.testing.assert_allclose(got, np.concatenate([ys.reshape(-1), hn.reshape(-1)]),
                               rtol=1e-12)
    gradcheck(f, x, w_ih, w_hh)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lengths", [None, [4, 1, 3, 4, 2, 4, 1, 3, 2]])
def test_lstm_batch_rows_in_chunks(reverse, lengths):
    """A batch of 8 rows or more runs as two chunks of rows (engine/ops/rnn.py ``_ScanChunks``),
    here 5 + 4: PyTorch's equations, and the gradients, as the whole batch."""
    from tinyopt.engine.ops import rnn as R
    T, B, I, H = 4, 9, 3, 4
    assert R._scan_chunk_rows(B) == 5
    w_ih, w_hh, b_ih, b_hh, _ = weights("lstm", I, H, H)
    x = rng.standard_normal((T, B, I))
    h0, c0 = rng.standard_normal((B, H)), rng.standard_normal((B, H))

    def f(x, w_ih, w_hh, b_ih, b_hh, h0, c0):
        y, h_n, c_n = rnn_scan("lstm", x, w_ih, w_hh, b_ih, b_hh, None, h0, c0, lengths,
                               reverse)
        return cat([y.reshape(-1), h_n.reshape(-1), c_n.reshape(-1)])

    arrays = (x, w_ih, w_hh, b_ih, b_hh, h0, c0)
    ys, hn, cn = ref_scan("lstm", *arrays[:5], None, h0, c0, lengths, reverse)
    got = f(*[to.tensor(a, dtype=to.float64) for a in arrays]).numpy()
    mask = np.ones(ys.shape) if lengths is None else \
        (np.arange(T)[:, None] < np.array(lengths)[None])[..., None]
    np.testing.assert_allclose(got[:ys.size].reshape(ys.shape) * mask, ys * mask, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(got[ys.size:], np.concatenate([hn.reshape(-1), cn.reshape(-1)]),
                               rtol=1e-12, atol=1e-12)
    gradcheck(f, *arrays, max_elems=24)


def test_lstm_chunks_give_the_same_bits_on_the_shared_threads_and_one_after_the_other(
        monkeypatch):
    """The chunks of batch rows are fixed by the batch size, so the threads that run them
    change no bit (float32, forward and backward)."""
    from tinyopt.engine import cache_clear
    from tinyopt.kernels.native import shared_threads
    T, B, I, H = 7, 20, 6, 16
    w = [a.astype(np.float32) for a in weights("lstm", I, H, H)[:4]]
    x = rng.standard_normal((T, B, I)).astype(np.float32)

    def run():
        cache_clear()
        out = []
        for reverse in (False, True):
            ps = [to.tensor(a, requires_grad=True) for a in [x] + w]
            y, h_n, c_n = rnn_scan("lstm", *ps, reverse=reverse)
            ((y * y).sum() + (c_n * h_n).sum()).backward()
            out += [y.numpy().tobytes()] + [p.grad.numpy().tobytes() for p in ps]
        return out

    shared = run()
    monkeypatch.setattr(shared_threads, "chunk_runner", lambda: shared_threads._SERIAL)
    assert run() == shared


def test_float32_matches_the_float64_reference():
    T, B, I, H = 6, 3, 5, 8
    w_ih, w_hh, b_ih, b_hh, _ = weights("lstm", I, H, H)
    x = rng.standard_normal((T, B, I))
    y, h_n, c_n = rnn_scan("lstm", *[to.tensor(a.astype(np.float32)) for a in
                                     (x, w_ih, w_hh, b_ih, b_hh)])
    ys, hn, cn = ref_scan("lstm", x, w_ih, w_hh, b_ih, b_hh)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), ys, atol=2e-6)
    np.testing.assert_allclose(c_n.numpy(), cn, atol=2e-6)


def test_the_graph_does_not_grow_with_the_sequence_and_the_plan_is_reused(compile_at_once):
    w_ih, w_hh, b_ih, b_hh, _ = weights("lstm", 3, 4, 4)
    params = [to.Parameter(a.astype(np.float32)) for a in (w_ih, w_hh, b_ih, b_hh)]

    def loss(T):
        y, _, _ = rnn_scan("lstm", rng.standard_normal((T, 2, 3)).astype(np.float32), *params)
        return (y * y).sum()

    assert len(toposort([loss(5)])) == len(toposort([loss(50)]))
    loss(7).backward()
    hits = cache_info().hits
    loss(7).backward()
    assert cache_info().hits == hits + 1


def test_gather_and_scatter_rows():
    x = rng.standard_normal((5, 2))
    idx = np.array([4, 0, 2])
    np.testing.assert_array_equal(gather_rows(x, idx).numpy(), x[idx])
    out = scatter_rows(x[:3], idx, 6).numpy()
    want = np.zeros((6, 2))
    want[idx] = x[:3]
    np.testing.assert_array_equal(out, want)
    gradcheck(lambda a: gather_rows(a, idx), x)
    gradcheck(lambda a: scatter_rows(a, idx, 6), x[:3])
    with pytest.raises(IndexError, match="in \\[0, 5\\)"):
        gather_rows(x, np.array([5]))
    with pytest.raises(IndexError, match="distinct"):
        gather_rows(x, np.array([1, 1]))


def test_errors():
    w_ih, w_hh, b_ih, b_hh, _ = weights("lstm", 3, 4, 4)
    x = rng.standard_normal((2, 2, 3))
    with pytest.raises(ValueError, match="mode must be one of"):
        rnn_scan("lstmx", x, w_ih, w_hh)
    with pytest.raises(RuntimeError, match="weight_ih has shape"):
        rnn_scan("lstm", x, w_ih[:, :2], w_hh)
    with pytest.raises(RuntimeError, match="h0 has shape"):
        rnn_scan("lstm", x, w_ih, w_hh, h0=np.zeros((3, 4)))
    with pytest.raises(RuntimeError, match="must be 3-D"):
        rnn_scan("lstm", x[0], w_ih, w_hh)
    with pytest.raises(ValueError, match="both biases or neither"):
        rnn_scan("lstm", x, w_ih, w_hh, b_ih)
    with pytest.raises(RuntimeError, match="dtype"):
        rnn_scan("lstm", x.astype(np.float32), w_ih, w_hh)


PROJ_COLD = LOGGED + """
import numpy as np
from tinyopt.kernels import rnn
B, H, P = 2, 3, 2
dm, dc, dht = np.ones((B, H)), np.ones((B, H)), np.ones((B, P))
carry, gates, cs = np.zeros((B, P)), np.ones((1, B, 5 * H)), np.ones((2, B, H))
dg = np.zeros((1, B, 4 * H))
rnn.lstm_backward_step_proj(dm, dht, carry, dc, gates, 0, cs, 0, 1, dg, np.array([1, 0]))
assert (carry == np.array([[0, 0], [1, 1]])).all(), carry  # row 1 past its length: dht
print(compiled)
"""


def test_projected_backward_step_compiles_no_message_formatting():
    """The projected LSTM's backward step kernel copies a row past its length as a loop: a slice
    assignment from another array compiles numba's shape check with its formatted error message
    (int to str, concatenation): 2.1-2.4 s of CPU of its cold compile, 0.45 s without."""
    compiles_no_message_formatting(PROJ_COLD, "lstm_backward_step_proj")
