"""nn.RNN, nn.LSTM, nn.GRU and the cells: PyTorch's parameter names, shapes, order and
initialisation (state dicts load both ways); outputs and gradients against torch 2.13 with the same
weights for each option (layers, bidirectional, batch_first, bias, projection, initial states,
packed sequences, unbatched input); dropout between layers; plan reuse; torch's errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.engine import cache_info
from tinyopt.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

rng = np.random.default_rng(0)


def _torch():
    return pytest.importorskip("torch")


def _pair(cls: str, *args, **kw):
    """The same layer in torch and tinyopt, float64, with torch's weights loaded into ours."""
    torch = _torch()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "LSTM with projections is not supported with..."
        tm = getattr(torch.nn, cls)(*args, **kw).double()
    om = getattr(nn, cls)(*args, **kw, dtype=np.float64)
    om.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, om


def _grads_match(tm, om, atol=1e-12):
    for (name, p), (tname, tp) in zip(om.named_parameters(), tm.named_parameters()):
        assert name == tname
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), atol=atol, err_msg=name)


def _value(out):
    return out.numpy() if isinstance(out, to.Tensor) else out.detach().numpy()


OPTIONS = [dict(), dict(num_layers=2), dict(num_layers=2, bidirectional=True),
           dict(batch_first=True), dict(bias=False), dict(bidirectional=True, batch_first=True)]


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: ",".join(kw) or "default")
def test_layers_match_torch(cls, kw):
    torch = _torch()
    T, B, I, H = 5, 3, 4, 6
    tm, om = _pair(cls, I, H, **kw)
    D, L = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
    x = rng.standard_normal((B, T, I) if kw.get("batch_first") else (T, B, I))
    h0 = rng.standard_normal((L * D, B, H))
    c0 = rng.standard_normal((L * D, B, H))
    hx_t = (torch.tensor(h0), torch.tensor(c0)) if cls == "LSTM" else torch.tensor(h0)
    hx_o = (h0, c0) if cls == "LSTM" else h0
    yt, ht = tm(torch.tensor(x), hx_t)
    yo, ho = om(x, hx_o)
    gy = rng.standard_normal(yt.shape)
    gh = rng.standard_normal(h0.shape)
    lt = (yt * torch.tensor(gy)).sum() + ((ht[0] if cls == "LSTM" else ht) * torch.tensor(gh)).sum()
    lo = (yo * to.tensor(gy)).sum() + ((ho[0] if cls == "LSTM" else ho) * to.tensor(gh)).sum()
    if cls == "LSTM":
        lt = lt + (ht[1] * ht[1]).sum()
        lo = lo + (ho[1] * ho[1]).sum()
        np.testing.assert_allclose(ho[1].numpy(), _value(ht[1]), atol=1e-12)
    np.testing.assert_allclose(yo.numpy(), _value(yt), atol=1e-12)
    lt.backward()
    lo.backward()
    _grads_match(tm, om)


@pytest.mark.parametrize("kw", [dict(proj_size=3), dict(proj_size=2, num_layers=2,
                                                         bidirectional=True)])
def test_lstm_projection_matches_torch(kw):
    torch = _torch()
    tm, om = _pair("LSTM", 4, 5, **kw)
    assert om.weight_hr_l0.shape == (kw["proj_size"], 5)
    x = rng.standard_normal((4, 2, 4))
    yt, (ht, ct) = tm(torch.tensor(x))
    yo, (ho, co) = om(x)
    assert yo.shape == tuple(yt.shape) and ho.shape == tuple(ht.shape)
    np.testing.assert_allclose(yo.numpy(), _value(yt), atol=1e-12)
    ((yt * yt).sum() + (ct * ct).sum()).backward()
    ((yo * yo).sum() + (co * co).sum()).backward()
    _grads_match(tm, om)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_packed_sequences_match_torch(cls):
    torch = _torch()
    from torch.nn.utils.rnn import pack_padded_sequence as tpack
    from torch.nn.utils.rnn import pad_packed_sequence as tpad
    tm, om = _pair(cls, 3, 4, num_layers=2, bidirectional=True)
    x = rng.standard_normal((5, 3, 3))
    lengths = [2, 5, 3]
    yt, ht = tm(tpack(torch.tensor(x), lengths, enforce_sorted=False))
    yo, ho = om(pack_padded_sequence(x, lengths, enforce_sorted=False))
    np.testing.assert_array_equal(yo.batch_sizes.numpy(), yt.batch_sizes.numpy())
    np.testing.assert_array_equal(yo.sorted_indices.numpy(), yt.sorted_indices.numpy())
    np.testing.assert_allclose(yo.data.numpy(), _value(yt.data), atol=1e-12)
    pt, _ = tpad(yt)
    po, lo_ = pad_packed_sequence(yo)
    np.testing.assert_array_equal(lo_.numpy(), lengths)
    ht, ho = (ht[0], ho[0]) if cls == "LSTM" else (ht, ho)
    np.testing.assert_allclose(ho.numpy(), _value(ht), atol=1e-12)
    ((pt * pt).sum() + (ht * ht).sum()).backward()
    ((po * po).sum() + (ho * ho).sum()).backward()
    _grads_match(tm, om)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_unbatched_input_matches_torch(cls):
    torch = _torch()
    tm, om = _pair(cls, 3, 4, batch_first=True)
    x = rng.standard_normal((5, 3))
    yt, ht = tm(torch.tensor(x))
    yo, ho = om(x)
    assert yo.shape == (5, 4)
    np.testing.assert_allclose(yo.numpy(), _value(yt), atol=1e-12)
    hn = ho[0] if cls == "LSTM" else ho
    assert hn.shape == (1, 4)


@pytest.mark.parametrize("cls, kw", [("RNNCell", dict()), ("RNNCell", dict(nonlinearity="relu")),
                                     ("LSTMCell", dict()), ("GRUCell", dict()),
                                     ("GRUCell", dict(bias=False))])
def test_cells_match_torch(cls, kw):
    torch = _torch()
    tm, om = _pair(cls, 3, 4, **kw)
    xs = rng.standard_normal((3, 2, 3))
    ht = ho = None
    lt = lo = 0.0
    for x in xs:  # a loop over time, each step's state feeding the next
        ht = tm(torch.tensor(x), ht)
        ho = om(x, ho)
        h_t, h_o = (ht[0], ho[0]) if cls == "LSTMCell" else (ht, ho)
        lt = lt + (h_t * h_t).sum()
        lo = lo + (h_o * h_o).sum()
    np.testing.assert_allclose(h_o.numpy(), _value(h_t), atol=1e-12)
    lt.backward()
    lo.backward()
    _grads_match(tm, om)
    assert om(xs[0][0]).__class__ is not None  # unbatched (I,) input


def test_state_dicts_load_both_ways_and_keep_torchs_order():
    torch = _torch()
    om = nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)
    sd = om.state_dict()
    assert list(sd) == list(tm.state_dict())
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()})
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(sd[k], v.numpy())
    assert [list(w) for w in om._all_weights] == tm._all_weights


@pytest.mark.parametrize("cls, G", [("RNN", 1), ("LSTM", 4), ("GRU", 3), ("LSTMCell", 4)])
def test_initialisation_is_uniform_in_one_over_sqrt_hidden(cls, G):
    to.manual_seed(0)
    m = getattr(nn, cls)(30, 40)
    bound = 1 / math.sqrt(40)
    for name, p in m.named_parameters():
        w = np.asarray(p.data)
        assert w.shape[0] == G * 40, name
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
        sd = bound / math.sqrt(3)  # of U(-bound, bound)
        assert abs(w.mean()) < 4 * sd / math.sqrt(w.size)
        assert abs(w.std() / sd - 1) < 4 / math.sqrt(w.size)


def test_dropout_between_layers_only_in_training():
    to.manual_seed(0)
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    a, b = m(x)[0].numpy(), m(x)[0].numpy()
    assert not np.allclose(a, b)  # a new mask each step
    m.eval()
    np.testing.assert_array_equal(m(x)[0].numpy(), m(x)[0].numpy())
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)


def test_a_training_step_reuses_its_plan(compile_at_once):
    m = nn.LSTM(3, 4, 2)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    m(x)[0].sum().backward()
    hits = cache_info().hits
    for _ in range(3):
        m(x)[0].sum().backward()
    assert cache_info().hits == hits + 3


def test_repr_and_flatten_parameters():
    torch = _torch()
    for kw in (dict(), dict(num_layers=2, bias=False, batch_first=True, dropout=0.5,
                            bidirectional=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert repr(nn.LSTM(3, 4, **kw)) == repr(torch.nn.LSTM(3, 4, **kw))
    assert repr(nn.RNN(3, 4, nonlinearity="relu")) == repr(torch.nn.RNN(3, 4,
                                                                       nonlinearity="relu"))
    assert repr(nn.GRUCell(3, 4, bias=False)) == repr(torch.nn.GRUCell(3, 4, bias=False))
    nn.LSTM(3, 4).flatten_parameters()


def test_errors_follow_torch():
    m = nn.LSTM(4, 3)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. "
                                           "Expected 4, got 6"):
        m(np.zeros((5, 2, 6), np.float32))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 3\), got "
                                           r"\[1, 3, 3\]"):
        m(np.zeros((5, 2, 4), np.float32), (np.zeros((1, 3, 3), np.float32),
                                            np.zeros((1, 2, 3), np.float32)))
    with pytest.raises(ValueError, match="RNN input dtype"):
        m(np.zeros((5, 2, 4), np.float64))
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D"):
        m(np.zeros((5, 2, 4, 1), np.float32))
    with pytest.raises(RuntimeError, match="Expected hidden size \\(1, 2, 3\\), got \\[1, 3, 3\\]"):
        nn.GRU(4, 3)(np.zeros((5, 2, 4), np.float32), np.zeros((1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="Unknown nonlinearity 'x'"):
        nn.RNN(4, 3, nonlinearity="x")
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(4, 3, proj_size=3)
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.GRU(4, 3, dropout=2)
    cell = nn.LSTMCell(4, 3)
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 5 expected 4"):
        cell(np.zeros((2, 5), np.float32))
    with pytest.raises(RuntimeError, match="Input batch size 2 doesn't match hidden0 batch "
                                           "size 3"):
        cell(np.zeros((2, 4), np.float32), (np.zeros((3, 3), np.float32),
                                            np.zeros((2, 3), np.float32)))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 4, "
                                           "expected 3"):
        nn.GRUCell(4, 3)(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32))
