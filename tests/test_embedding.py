"""nn.Embedding options (padding_idx, max_norm, norm_type, scale_grad_by_freq, from_pretrained,
sparse) and nn.EmbeddingBag / F.embedding_bag (sum, mean, max; 2-D input or offsets,
include_last_offset, per_sample_weights, padding_idx, max_norm): values, gradients and the
renormalized weights against torch 2.13, finite differences, index checks and errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F
from tinyopt import nn

rng = np.random.default_rng(0)
V, D = 10, 4


def _compare(om, tm, args, psw=None):
    torch = pytest.importorskip("torch")
    om.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    kw_o, kw_t = {}, {}
    if psw is not None:
        kw_o["per_sample_weights"] = po = to.Parameter(psw)
        kw_t["per_sample_weights"] = pt = torch.tensor(psw, requires_grad=True)
    oo = om(*args, **kw_o)
    ot = tm(*[torch.tensor(a) for a in args], **kw_t)
    np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(om.weight.data, tm.weight.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(ot.shape)
    (oo * to.tensor(g)).sum().backward()
    (ot * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(om.weight.grad, tm.weight.grad.numpy(), atol=1e-12)
    if psw is not None:
        np.testing.assert_allclose(po.grad, pt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("kw", [dict(padding_idx=2), dict(padding_idx=-1), dict(max_norm=1.0),
                                dict(max_norm=0.5, norm_type=1.0),
                                dict(scale_grad_by_freq=True)])
def test_embedding_options_match_torch(kw):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    x = rng.integers(0, V, (3, 5))
    x[0, :2] = V - 1
    x[1, 0] = 2
    _compare(nn.Embedding(V, D, **kw, dtype=np.float64), torch.nn.Embedding(V, D, **kw).double(),
             (x,))


def test_embedding_padding_row_starts_at_zero_and_sparse_max_bags_raise():
    m = nn.Embedding(V, D, padding_idx=3)
    np.testing.assert_array_equal(m.weight.data[3], 0)
    with pytest.raises(ValueError, match="^max mode does not support sparse weights$"):  # torch's
        nn.EmbeddingBag(V, D, mode="max", sparse=True)(np.array([[1]]))
    with pytest.raises(ValueError, match="^max mode does not support sparse weights$"):
        F.embedding_bag(np.array([[1]]), np.zeros((V, D)), mode="max", sparse=True)


BAGS = [dict(), dict(padding_idx=2), dict(max_norm=1.0), dict(include_last_offset=True)]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("kw", BAGS, ids=lambda kw: ",".join(kw) or "default")
def test_embedding_bag_matches_torch(mode, kw):
    torch = pytest.importorskip("torch")
    x2 = rng.integers(0, V, (3, 5))
    x2[0, :3] = 2
    x1 = rng.integers(0, V, 12)
    x1[3:7] = 2  # bag 1 is all padding when padding_idx=2
    off = np.array([0, 3, 3, 7] + ([12] if kw.get("include_last_offset") else []))
    cases = [(x1, off)] if kw.get("include_last_offset") else [(x2,), (x1, off)]
    for args in cases:
        torch.manual_seed(0)
        tm = torch.nn.EmbeddingBag(V, D, mode=mode, **kw).double()
        om = nn.EmbeddingBag(V, D, mode=mode, **kw, dtype=np.float64)
        _compare(om, tm, args)


def test_embedding_bag_per_sample_weights_match_torch():
    torch = pytest.importorskip("torch")
    x = rng.integers(0, V, 9)
    off = np.array([0, 2, 2, 5])
    tm = torch.nn.EmbeddingBag(V, D, mode="sum", padding_idx=0).double()
    om = nn.EmbeddingBag(V, D, mode="sum", padding_idx=0, dtype=np.float64)
    x[1] = 0
    _compare(om, tm, (x, off), psw=rng.standard_normal(9))


def test_embedding_bag_scale_grad_by_freq_divides_by_each_index_count():
    """Hand-computed: torch 2.13's CPU kernel divides by the wrong count here (pytorch#190063,
    fixed after 2.13); tinyopt gives the documented result, as torch's CUDA kernel does."""
    w = to.Parameter(np.ones((5, 1)))
    g = np.array([[1.0], [10.0], [100.0]])
    x, off = np.array([1, 1, 1, 2, 3, 3]), np.array([0, 2, 4])
    (F.embedding_bag(x, w, off, mode="sum", scale_grad_by_freq=True) * g).sum().backward()
    np.testing.assert_allclose(w.grad[:, 0], [0, (1 + 1 + 10) / 3, 10, 200 / 2, 0])
    w.grad = None
    (F.embedding_bag(x, w, off, mode="mean", scale_grad_by_freq=True) * g).sum().backward()
    np.testing.assert_allclose(w.grad[:, 0], [0, (0.5 + 0.5 + 5) / 3, 5, 100 / 2, 0])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_gradients(mode):
    x, off = np.array([1, 4, 4, 0, 2, 3]), np.array([0, 3, 3])
    gradcheck(lambda w: F.embedding_bag(x, w, off, mode=mode), rng.standard_normal((V, D)))
    if mode == "sum":
        w = rng.standard_normal((V, D))
        gradcheck(lambda p: F.embedding_bag(x, w, off, mode="sum", per_sample_weights=p),
                  rng.standard_normal(6))


def test_embedding_bag_plan_reuse_with_new_offsets(compile_at_once):
    from tinyopt.engine import cache_info
    m = nn.EmbeddingBag(V, D)
    for x, off in (([1, 2, 3, 4], [0, 1]), ([5, 6, 7, 8], [0, 3])):
        hits = cache_info().hits
        out = m(np.array(x), np.array(off))
        out.sum().backward()
    assert cache_info().hits == hits + 1
    np.testing.assert_allclose(out.numpy()[1], m.weight.data[8], rtol=1e-6)


def test_embedding_bag_errors_and_index_checks():
    m = nn.EmbeddingBag(V, D)
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        m(np.array([[1, 2]]), np.array([0]))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        m(np.array([1, 2]))
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        m(np.array([1, 2]), np.array([1]))
    with pytest.raises(RuntimeError, match="offsets\\[-1\\] can not be greater than input's "
                                           "length 2"):
        m(np.array([1, 2]), np.array([0, 5]))
    with pytest.raises(RuntimeError, match="non-decreasing"):
        m(np.array([1, 2, 3]), np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="mode has to be one of sum, mean or max"):
        F.embedding_bag(np.array([[1]]), np.zeros((V, D)), mode="median")
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for "
                                                  "mode='sum'"):
        m(np.array([1, 2]), np.array([0]), per_sample_weights=np.ones(2))
    with pytest.raises(RuntimeError, match=r"^Index 1 of input takes value 20 which is not in "
                                           r"the valid range \[0, 10\)$"):  # (torch's words)
        m(np.array([1, 20]), np.array([0])).numpy()
    with pytest.raises(RuntimeError, match=r"^Index 0 of input takes value -1 which is not"):
        m(np.array([-1, 2]), np.array([0])).sum().backward()
    assert m.weight.grad is None


def test_embedding_bag_repr_and_from_pretrained():
    torch = pytest.importorskip("torch")
    for kw in (dict(), dict(mode="sum", padding_idx=1, max_norm=1.0)):
        assert repr(nn.EmbeddingBag(V, 3, **kw)) == repr(torch.nn.EmbeddingBag(V, 3, **kw))
    w = rng.standard_normal((V, 3))
    bag = nn.EmbeddingBag.from_pretrained(w, mode="max")
    assert not bag.weight.requires_grad
    np.testing.assert_array_equal(bag(np.array([[1, 2]])).numpy()[0], w[[1, 2]].max(0))


# ---- a tied embedding (nanoGPT's head): one gradient buffer, the same bits ------------------------
def _tied_loss(w, x, kw):
    return F.linear(F.embedding(x, w, **kw), w).square().sum()


@pytest.mark.parametrize("kw", [{}, dict(padding_idx=3), dict(scale_grad_by_freq=True)])
def test_tied_embedding_gradient_is_the_bits_of_the_two_contributions_added(kw):
    x = rng.integers(0, V, (4, 6))
    x[0, :3] = 3  # a repeated row (and the padding row)
    w0 = rng.standard_normal((V, D)).astype(np.float32)
    tied = to.Parameter(w0.copy())
    _tied_loss(tied, to.tensor(x), kw).backward()
    emb, head = to.Parameter(w0.copy()), to.Parameter(w0.copy())  # the same graph, untied
    F.linear(F.embedding(to.tensor(x), emb, **kw), head).square().sum().backward()
    np.testing.assert_array_equal(tied.grad, head.grad.numpy() + emb.grad.numpy())
    if not kw:  # (padding_idx and scale_grad_by_freq define a gradient that is not d/dw)
        gradcheck(lambda w: _tied_loss(w, to.tensor(x), kw), rng.standard_normal((V, D)))


def test_tied_embedding_plan_holds_no_weight_gradient_in_its_arena(compile_at_once):
    """The head's weight gradient is computed straight into ``.grad`` and the embedding's rows
    are added there in place (before: both in the arena, then added): the arena holds no
    (V, D) buffer, and the bits are the two contributions' sum, fresh or accumulated."""
    from tinyopt.engine import get_plan
    big_v, d = 4096, 64  # a (V, D) gradient: 1 MiB
    x = to.tensor(rng.integers(0, big_v, (2, 8)))
    w0 = rng.standard_normal((big_v, d)).astype(np.float32)
    w, emb, head = (to.Parameter(w0.copy()) for _ in range(3))
    tied = get_plan(loss=_tied_loss(w, x, {}))
    ops = {t.op for t in tied.nodes}
    assert "embedding_grad_add" in ops and "embedding_grad" not in ops
    untied = get_plan(loss=F.linear(F.embedding(x, emb), head).square().sum())
    assert tied.peak_bytes <= untied.peak_bytes  # (before: one or two (V, D) buffers more)
    _tied_loss(w, x, {}).backward()
    F.linear(F.embedding(x, emb), head).square().sum().backward()
    once = head.grad.numpy() + emb.grad.numpy()
    np.testing.assert_array_equal(w.grad, once)
    _tied_loss(w, x, {}).backward()  # accumulated: computed into scratch, then added
    np.testing.assert_array_equal(w.grad, once + once)
