"""optim.SparseAdam with nn.Embedding(sparse=True): row-sparse gradients, only the rows looked up
updated; against a numpy reference of torch's equations and against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.nn.utils import sparse_grad

V, D = 9, 4


def _batches(n: int, seed: int = 0, padding_idx: int | None = None):
    """n (indices (2, 5) with repeats and, with padding_idx, padding; upstream gradient)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.integers(0, 6, (2, 5))  # rows 6.. are never looked up
        x[1, :3] = x[0, 0]  # a row looked up four times
        if padding_idx is not None:
            x[0, 4] = padding_idx
        out.append((x, rng.standard_normal((2, 5, D))))
    return out


def _reference(w0, batches, lr, betas, eps, maximize, padding_idx, dtype):
    """numpy SparseAdam on the coalesced gradient (torch's equations, in ``dtype``)."""
    w = w0.astype(dtype)
    m, v = np.zeros_like(w), np.zeros_like(w)
    b1, b2 = betas
    f = np.dtype(dtype).type
    for t, (x, up) in enumerate(batches, 1):
        g = np.zeros_like(w)
        np.add.at(g, x.reshape(-1), up.reshape(-1, D).astype(dtype))
        rows = np.unique(x[x != padding_idx] if padding_idx is not None else x)
        gr = -g[rows] if maximize else g[rows]
        u1 = (gr - m[rows]) * f(1 - b1)
        u2 = (gr * gr - v[rows]) * f(1 - b2)
        numer = u1 + m[rows]
        denom = np.sqrt(u2 + v[rows]) + f(eps)
        m[rows] += u1
        v[rows] += u2
        step_size = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        w[rows] += f(-step_size) * (numer / denom)
    return w, m, v


def _train(batches, dtype=np.float64, padding_idx=None, **kw):
    to.manual_seed(0)
    emb = nn.Embedding(V, D, padding_idx=padding_idx, sparse=True, dtype=dtype)
    w0 = emb.weight.numpy().copy()
    opt = optim.SparseAdam(emb.parameters(), **kw)
    for x, up in batches:
        opt.zero_grad()
        (emb(x) * up.astype(dtype)).sum().backward()
        opt.step()
    return emb, opt, w0


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3),
                                dict(lr=0.1, maximize=True)])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_matches_the_reference_and_only_rows_looked_up_move(kw, padding_idx):
    batches = _batches(4, padding_idx=padding_idx)
    emb, opt, w0 = _train(batches, padding_idx=padding_idx, **kw)
    full = dict(dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False), **kw)
    w, m, v = _reference(w0, batches, padding_idx=padding_idx, dtype=np.float64, **full)
    np.testing.assert_allclose(emb.weight.numpy(), w, rtol=1e-12, atol=1e-14)
    state = opt.state[emb.weight]
    assert state["step"] == 4 and isinstance(state["step"], int)
    np.testing.assert_allclose(state["exp_avg"], m, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(state["exp_avg_sq"], v, rtol=1e-12, atol=1e-14)
    untouched = [6, 7, 8] + ([padding_idx] if padding_idx is not None else [])
    np.testing.assert_array_equal(emb.weight.numpy()[untouched], w0[untouched])
    assert not state["exp_avg"][untouched].any()


def test_the_gradient_is_row_sparse_and_accumulates():
    emb = nn.Embedding(V, D, sparse=True, padding_idx=0)
    emb(np.array([3, 5, 3, 0])).sum().backward()
    rows, values = sparse_grad(emb.weight)
    np.testing.assert_array_equal(rows, [3, 5])
    np.testing.assert_array_equal(values, [[2.0] * D, [1.0] * D])
    np.testing.assert_array_equal(emb.weight.grad.numpy()[[1, 2, 4]], 0)  # the dense layout
    emb(np.array([7])).sum().backward()  # accumulates: rows of both backward passes
    np.testing.assert_array_equal(sparse_grad(emb.weight)[0], [3, 5, 7])
    emb.zero_grad(set_to_none=False)  # torch: an empty sparse gradient
    np.testing.assert_array_equal(sparse_grad(emb.weight)[0], [])
    emb(np.array([2])).sum().backward()
    np.testing.assert_array_equal(sparse_grad(emb.weight)[0], [2])
    emb.zero_grad()
    assert sparse_grad(emb.weight) is None
    with pytest.raises(ValueError, match="dense"):
        sparse_grad(_dense_grad_param())


def _dense_grad_param():
    p = to.nn.Parameter(np.zeros((3, 2), np.float32))
    p.grad = np.ones((3, 2), np.float32)
    return p


def test_a_step_without_rows_counts_and_changes_nothing():
    emb = nn.Embedding(V, D, sparse=True, padding_idx=2)
    opt = optim.SparseAdam(emb.parameters())
    w0 = emb.weight.numpy().copy()
    emb(np.array([2, 2])).sum().backward()  # only the padding row: no rows
    opt.step()
    assert opt.state[emb.weight]["step"] == 1
    np.testing.assert_array_equal(emb.weight.numpy(), w0)


def test_dense_gradients_raise_torchs_error():
    msg = "SparseAdam does not support dense gradients, please consider Adam instead"
    lin = nn.Linear(3, 2)
    opt = optim.SparseAdam(lin.parameters())
    lin(np.ones((1, 3), np.float32)).sum().backward()
    with pytest.raises(RuntimeError, match=msg):
        opt.step()
    # a sparse weight that also gets a dense gradient (tied to a decoder): torch's grad is dense
    emb = nn.Embedding(V, D, sparse=True)
    w0 = emb.weight.numpy().copy()
    opt = optim.SparseAdam(emb.parameters())
    x = emb(np.array([1, 2]))
    (x.sum() + (x @ emb.weight.t()).sum()).backward()
    with pytest.raises(RuntimeError, match=msg):
        opt.step()
    np.testing.assert_array_equal(emb.weight.numpy(), w0)
    # a gradient assigned by hand is dense
    emb.weight.grad = np.ones((V, D), np.float32)
    with pytest.raises(RuntimeError, match=msg):
        opt.step()


def test_constructor_checks_and_messages():
    p = [nn.Embedding(V, D, sparse=True).weight]
    for kw, msg in [(dict(lr=0.0), "Invalid learning rate: 0.0"),
                    (dict(eps=0.0), "Invalid epsilon value: 0.0"),
                    (dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
                    (dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
                    (dict(lr=np.array([0.1, 0.2])), "Tensor lr must be 1-element")]:
        with pytest.raises(ValueError, match=msg):
            optim.SparseAdam(p, **kw)
    assert optim.SparseAdam(p).defaults == dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                                maximize=False)


def test_state_dict_round_trip_resumes_exactly():
    batches = _batches(6, seed=3)
    emb, opt, _ = _train(batches, lr=0.1)
    to.manual_seed(0)
    emb2 = nn.Embedding(V, D, sparse=True, dtype=np.float64)
    opt2 = optim.SparseAdam(emb2.parameters(), lr=0.1)
    for x, up in batches[:3]:
        opt2.zero_grad()
        (emb2(x) * up).sum().backward()
        opt2.step()
    sd, msd = opt2.state_dict(), emb2.state_dict()
    assert sd["state"][0]["step"] == 3 and isinstance(sd["state"][0]["step"], int)
    to.manual_seed(1)
    emb3 = nn.Embedding(V, D, sparse=True, dtype=np.float64)
    emb3.load_state_dict(msd)
    opt3 = optim.SparseAdam(emb3.parameters(), lr=0.5)
    opt3.load_state_dict(sd)
    assert opt3.param_groups[0]["lr"] == 0.1
    for x, up in batches[3:]:
        opt3.zero_grad()
        (emb3(x) * up).sum().backward()
        opt3.step()
    np.testing.assert_array_equal(emb3.weight.numpy(), emb.weight.numpy())
    assert opt3.state[emb3.weight]["step"] == 6
    bad = {"state": {0: {"step": 1}}, "param_groups": sd["param_groups"]}
    with pytest.raises(ValueError, match="expected 'step', 'exp_avg' and 'exp_avg_sq'"):
        opt3.load_state_dict(bad)
    assert opt3.state[emb3.weight]["step"] == 6


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_torch_and_exchanges_state(dtype):
    batches = _batches(5, seed=1, padding_idx=4)
    kw = dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6)
    emb, opt, w0 = _train(batches, dtype=dtype, padding_idx=4, **kw)
    temb = torch.nn.Embedding(V, D, padding_idx=4, sparse=True,
                              _weight=torch.from_numpy(w0.copy()))
    topt = torch.optim.SparseAdam(temb.parameters(), **kw)
    for x, up in batches:
        topt.zero_grad()
        (temb(torch.from_numpy(x)) * torch.from_numpy(up.astype(dtype))).sum().backward()
        topt.step()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(emb.weight.numpy(), temb.weight.detach().numpy(), **tol)
    ts, s = topt.state_dict(), opt.state_dict()
    assert ts["state"][0]["step"] == s["state"][0]["step"] == 5
    assert ts["param_groups"][0].keys() == s["param_groups"][0].keys()
    for k in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_allclose(np.asarray(s["state"][0][k]), ts["state"][0][k].numpy(), **tol)
    # torch's state dict loads here, and ours in torch
    opt.load_state_dict({"state": {0: {k: (v if k == "step" else v.numpy())
                                       for k, v in ts["state"][0].items()}},
                         "param_groups": ts["param_groups"]})
    assert opt.state[emb.weight]["step"] == 5
    topt.load_state_dict({"state": {0: {k: (v if k == "step" else torch.from_numpy(np.asarray(v)))
                                        for k, v in s["state"][0].items()}},
                          "param_groups": s["param_groups"]})


REFUSING = [("Adam", {}), ("AdamW", {}), ("Adamax", {}), ("NAdam", {}), ("RAdam", {}),
            ("RMSprop", {}), ("Rprop", {}), ("Adadelta", {}), ("ASGD", {}), ("Adafactor", {}),
            ("Adagrad", dict(weight_decay=0.1)), ("SGD", dict(lr=0.1, weight_decay=0.1))]


def test_optimizers_torch_refuses_sparse_gradients_for_raise_its_error():
    """(and SGD/Adagrad with weight decay, which torch refuses with its errors)"""
    torch = pytest.importorskip("torch")
    for name, kw in REFUSING:
        emb, temb = nn.Embedding(V, D, sparse=True), torch.nn.Embedding(V, D, sparse=True)
        opt, topt = getattr(optim, name)(emb.parameters(), **kw), \
            getattr(torch.optim, name)(temb.parameters(), **kw)
        emb(to.tensor([[1, 2]])).sum().backward()
        temb(torch.tensor([[1, 2]])).sum().backward()
        with pytest.raises(RuntimeError) as theirs:
            topt.step()
        w = emb.weight.numpy().copy()
        with pytest.raises(RuntimeError) as ours:
            opt.step()
        assert str(ours.value) == str(theirs.value), name
        assert np.array_equal(emb.weight.numpy(), w), name  # nothing changed


@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.1, maximize=True)),
    ("Adagrad", dict(lr=0.1)), ("Adagrad", dict(lr=0.1, lr_decay=0.01, maximize=True))])
def test_optimizers_torch_accepts_sparse_gradients_for_give_its_result(name, kw):
    """SGD and Adagrad take the row-sparse gradient as torch does: the rows not looked up keep
    their values (and Adagrad's sums), the others step as torch's sparse update."""
    torch = pytest.importorskip("torch")
    emb = nn.Embedding(V, D, sparse=True, dtype=np.float64)
    temb = torch.nn.Embedding(V, D, sparse=True, dtype=torch.float64)
    with torch.no_grad():
        temb.weight.copy_(torch.from_numpy(emb.weight.numpy()))
    opt, topt = getattr(optim, name)(emb.parameters(), **kw), \
        getattr(torch.optim, name)(temb.parameters(), **kw)
    for x, up in _batches(4, seed=3):
        opt.zero_grad()
        topt.zero_grad()
        (emb(x) * up).sum().backward()
        (temb(torch.from_numpy(x)) * torch.from_numpy(up)).sum().backward()
        assert temb.weight.grad.is_sparse
        opt.step()
        topt.step()
    np.testing.assert_allclose(emb.weight.numpy(), temb.weight.detach().numpy(), rtol=1e-12,
                               atol=1e-14)
    assert np.array_equal(emb.weight.numpy()[6:], temb.weight.detach().numpy()[6:])  # not looked up


@pytest.mark.parametrize("kw,psw", [(dict(mode="sum"), True), (dict(mode="mean", padding_idx=2), False),
                                    (dict(mode="sum", include_last_offset=True), False)])
def test_embedding_bag_sparse_gives_torchs_row_sparse_gradient_and_trains_with_sparse_adam(kw, psw):
    """The rows of the bags (padding left out, an empty bag included) are the gradient's rows,
    as torch's coalesced sparse gradient; SparseAdam over them follows torch's."""
    torch = pytest.importorskip("torch")
    bag = nn.EmbeddingBag(V, D, sparse=True, dtype=np.float64, **kw)
    tbag = torch.nn.EmbeddingBag(V, D, sparse=True, dtype=torch.float64, **kw)
    with torch.no_grad():
        tbag.weight.copy_(torch.from_numpy(bag.weight.numpy()))
    opt = optim.SparseAdam(bag.parameters(), lr=0.05)
    topt = torch.optim.SparseAdam(tbag.parameters(), lr=0.05)
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.integers(0, 6, 7)  # rows 6.. never looked up
        x[4] = x[0]
        # bag 1 empty; with include_last_offset the last offset ends the input (torch's sparse
        # backward gives indices past it to the last bag, its dense backward to none)
        off = np.array([0, 3, 3, 5, 7] if kw.get("include_last_offset") else [0, 3, 3, 5])
        w = rng.standard_normal(7) if psw else None
        up = rng.standard_normal((4, D))
        opt.zero_grad()
        topt.zero_grad()
        (bag(x, off, w) * up).sum().backward()
        (tbag(torch.from_numpy(x), torch.from_numpy(off),
              None if w is None else torch.from_numpy(w)) * torch.from_numpy(up)).sum().backward()
        tg = tbag.weight.grad.coalesce()
        rows, values = sparse_grad(bag.weight)
        np.testing.assert_array_equal(rows, tg.indices()[0].numpy())
        np.testing.assert_allclose(values, tg.values().numpy(), rtol=1e-12, atol=1e-14)
        opt.step()
        topt.step()
    np.testing.assert_allclose(bag.weight.numpy(), tbag.weight.detach().numpy(), rtol=1e-12,
                               atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_rows_kernel_finds_the_first_nonzero_row_outside_the_mask(dtype):
    """kernels.row_sparse.dense_rows (the check before every SparseAdam update) against numpy,
    per chunk of rows: -0.0 counts as zero, NaN and the smallest subnormal as nonzero; D = 0."""
    from tinyopt.kernels import row_sparse as R
    rng = np.random.default_rng(3)
    uint = np.uint32 if dtype == np.float32 else np.uint64
    magnitude = uint(np.iinfo(uint).max >> 1)
    for V, D in ((1, 3), (300, 5), (3 * R.ROWS_PER_CHUNK + 7, 64), (10, 0)):
        mask = (rng.random(V) < 0.5).astype(np.uint8)
        g = np.where(mask[:, None] == 1, rng.standard_normal((V, D)), 0).astype(dtype)
        g[mask == 0] = -0.0 if V % 2 else 0.0
        bad = np.empty(-(-V // R.ROWS_PER_CHUNK), np.int64)
        R.dense_rows(mask, g.view(uint), magnitude, bad)
        assert (bad == -1).all()
        if D == 0:
            continue
        for value in (np.nan, np.finfo(dtype).smallest_subnormal, -1.0):
            h = g.copy()
            outside = np.flatnonzero(mask == 0)
            hit = rng.choice(outside, size=min(3, len(outside)), replace=False)
            h[hit, rng.integers(0, D, len(hit))] = value
            R.dense_rows(mask, h.view(uint), magnitude, bad)
            rows = np.flatnonzero((h.view(uint) & magnitude).any(axis=1) & (mask == 0))
            want = [rows[(rows // R.ROWS_PER_CHUNK) == c].min(initial=V) for c in range(len(bad))]
            assert bad.tolist() == [-1 if w == V else w for w in want]
