"""dropout, layer_norm, batch_norm, embedding: values against numpy references (and torch when
installed), finite-difference gradients in float64, running statistics, errors, plan reuse."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt.engine import cache_info
from tinyopt.engine.ops.nn import batch_norm, dropout, embedding, layer_norm

rng = np.random.default_rng(0)


# ---- dropout -------------------------------------------------------------------------------------
def test_dropout_statistics_scale_and_gradient():
    to.manual_seed(0)
    x = to.Parameter(np.ones((200, 500), np.float32))
    y = dropout(x, 0.3)
    out = y.numpy()
    zeros = (out == 0).mean()
    assert abs(zeros - 0.3) < 0.005                          # 100k Bernoulli draws: sd 0.0015
    np.testing.assert_allclose(out[out != 0], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, out)               # d(x * mask)/dx = mask


def test_dropout_is_seeded_and_draws_a_new_mask_each_step_from_one_plan(compile_at_once):
    x = to.Parameter(np.ones((4, 64), np.float32), requires_grad=False)  # a graph, not values
    to.manual_seed(7)
    a = dropout(x, 0.5).numpy()
    hits = cache_info().hits
    b = dropout(x, 0.5).numpy()
    assert cache_info().hits == hits + 1
    assert not np.array_equal(a, b)
    to.manual_seed(7)
    np.testing.assert_array_equal(dropout(x, 0.5).numpy(), a)


def test_dropout_eval_p0_p1_and_validation():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = to.tensor(x)
    assert dropout(t, 0.5, training=False) is t
    np.testing.assert_array_equal(dropout(x, 0.0).numpy(), x)
    np.testing.assert_array_equal(dropout(x, 1.0).numpy(), np.zeros_like(x))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, "
                                             f"but got {p}"):
            dropout(x, p)


@pytest.mark.parametrize("kind", ["dropout", "Dropout", "dropout1d", "dropout2d", "dropout3d",
                                  "attention"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_dropout_works_on_16_bit_tensors_with_the_float32_mask(kind, dtype):
    """Issue 25.12: dropout crashed on float16/bfloat16 (numpy draws no 16-bit floats).  The
    mask is the one a float32 tensor gets from the same seed; 1/(1-p) rounds to 16 bits, as
    torch's mask does."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    F = to.nn.functional
    d = getattr(to, dtype)
    p = 0.3
    shape = (2, 3, 4, 5, 2) if kind == "dropout3d" else (2, 3, 4, 5)
    run = {"dropout": lambda x: F.dropout(x, p), "Dropout": lambda x: to.nn.Dropout(p)(x),
           "dropout1d": lambda x: F.dropout1d(x[0], p), "dropout2d": lambda x: F.dropout2d(x, p),
           "dropout3d": lambda x: F.dropout3d(x, p),
           "attention": lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=p)}[kind]
    x = rng.standard_normal(shape).astype(np.float32)
    outs = {}
    for dt in (to.float32, d):
        t = to.tensor(x).to(dt).requires_grad_()
        to.manual_seed(3)
        y = run(t)
        assert y.dtype == dt
        y.float().sum().backward()
        assert t.grad.dtype == to.float32
        outs[dt] = y.float().numpy()
    if kind == "attention":  # the same mask as float32's: the same weights, to 16-bit rounding
        np.testing.assert_allclose(outs[d], outs[to.float32], rtol=0.05, atol=0.05)
    else:  # x * mask, rounded once
        kept = outs[to.float32] != 0
        assert 0 < kept.mean() < 1
        np.testing.assert_array_equal(outs[d] != 0, kept)  # the same draws
        scale = np.float32(np.array(1 / (1 - p), np.float32).astype(d))
        wide = to.tensor(x[0] if kind == "dropout1d" else x).to(d).float().numpy()
        expect = (wide * np.where(kept, scale, np.float32(0))).astype(d).astype(np.float32)
        np.testing.assert_array_equal(outs[d], expect)


# ---- layer_norm ----------------------------------------------------------------------------------
def ref_layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_forward_and_gradients(affine):
    x = rng.standard_normal((3, 4, 5)) * 3 + 1
    w, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    args = [a for a, on in zip((w, b), affine) if on]

    def f(x, *wb):
        it = iter(wb)
        return layer_norm(x, (4, 5), next(it) if affine[0] else None,
                          next(it) if affine[1] else None)
    np.testing.assert_allclose(f(x, *args).numpy(),
                               ref_layer_norm(x, 2, *(w if affine[0] else None,
                                                      b if affine[1] else None)), atol=1e-12)
    gradcheck(f, x, *args, max_elems=25)


def test_layer_norm_matches_torch_float32():
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((6, 10)).astype(np.float32)
    w, b = rng.standard_normal(10).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    want = torch.nn.functional.layer_norm(torch.tensor(x), (10,), torch.tensor(w),
                                          torch.tensor(b), eps=1e-3)
    np.testing.assert_allclose(layer_norm(x, 10, w, b, eps=1e-3).numpy(), want.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_layer_norm_shape_errors():
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[4\].*input of size \[3, 5\]"):
        layer_norm(np.zeros((3, 5)), 4)
    with pytest.raises(RuntimeError, match=r"weight has shape \(4,\), expected"):
        layer_norm(np.zeros((3, 5)), 5, weight=np.ones(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("has_w", [True, False])
def test_layer_norm_rows_as_chunks_on_the_shared_threads_give_the_kernels_bits(dtype, has_w):
    from tinyopt.engine.ops.nn import _LayerNormChunks
    from tinyopt.kernels import norm as K
    from tinyopt.kernels.native import shared_threads
    if not shared_threads.chunk_runner().parallel:
        pytest.skip("no shared threads here (one thread, or BLAS not shared)")
    M, D = 1021, 40  # rows not a multiple of a chunk's nor of the 4-row blocks
    x = (rng.standard_normal((M, D)) * 5 + 3).astype(dtype)
    x[7, 3] = np.nan
    g = rng.standard_normal((M, D)).astype(dtype)
    w = rng.standard_normal(D).astype(dtype) if has_w else None
    stats, want_stats = np.empty((M, 2), dtype), np.empty((M, 2), dtype)
    assert _LayerNormChunks(K.LN_STATS, np.dtype(dtype), 1e-3).run(x, stats)
    K.layer_norm_stats(x, want_stats, 1e-3)
    np.testing.assert_array_equal(stats.view(np.uint8), want_stats.view(np.uint8))
    out, want = np.empty((M, D), dtype), np.empty((M, D), dtype)
    assert _LayerNormChunks(K.LN_GRAD_X, np.dtype(dtype)).run(x, stats, out, g=g, w=w)
    K.layer_norm_grad_x(g, x, stats, w if has_w else np.ones(1), has_w, want)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_without_weight_or_bias_applies_the_rest_to_the_bit(dtype, affine):
    """The apply pass, each row's (x - mu) * rstd, times the weight, plus the bias, in x's dtype
    (a float32 row's sum with the bias in float64, rounded once: as the kernel types it); an
    absent weight or bias changes no bit, a negative zero's sign included (a row of -0s)."""
    from tinyopt.kernels import norm as K
    has_w, has_b = affine
    x = (rng.standard_normal((6, 7)) * 3).astype(dtype)
    x[0] = -0.0  # (mu = +0: each (x - mu) * rstd is -0)
    x[1, 2] = np.nan
    w = rng.standard_normal(7).astype(dtype) if has_w else None
    b = rng.standard_normal(7).astype(dtype) if has_b else None
    stats = np.empty((6, 2), dtype)
    K.layer_norm_stats(x, stats, 1e-5)
    want = (x - stats[:, :1]) * stats[:, 1:]
    if has_w:
        want = want * w
    if has_b:
        want = (want.astype(np.float64) + b).astype(dtype)
    got = layer_norm(x, 7, w, b).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# ---- batch_norm ----------------------------------------------------------------------------------
def ref_batch_norm_train(x, rm, rv, w, b, momentum, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, var = x.mean(axes), x.var(axes)
    n = x.size // x.shape[1]
    rm[...] = (1 - momentum) * rm + momentum * mu
    rv[...] = (1 - momentum) * rv + momentum * var * n / (n - 1)
    return (x - mu.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * w.reshape(shape) \
        + b.reshape(shape)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 2, 5)])
def test_batch_norm_training_updates_running_stats_once_per_step(shape):
    C = shape[1]
    w, b = to.Parameter(rng.standard_normal(C)), to.Parameter(rng.standard_normal(C))
    rm, rv = np.zeros(C), np.ones(C)
    rm_ref, rv_ref = rm.copy(), rv.copy()
    for step, momentum in enumerate((0.1, 0.1, 0.5)):
        x = rng.standard_normal(shape) * 2 + 3
        want = ref_batch_norm_train(x, rm_ref, rv_ref, w.data, b.data, momentum)
        y = batch_norm(x, rm, rv, w, b, training=True, momentum=momentum)
        np.testing.assert_allclose(y.numpy(), want, atol=1e-12)    # realizes: updates once
        (y * y).sum().backward()                                   # same graph again: no update
        y.numpy()
        np.testing.assert_allclose(rm, rm_ref, atol=1e-14)
        np.testing.assert_allclose(rv, rv_ref, atol=1e-14)


def test_batch_norm_plan_is_reused_with_new_buffers_and_momentum(compile_at_once):
    """Plans bind the running arrays per run: a second model of the same structure updates its
    own buffers from the cached plan."""
    x = to.Parameter(rng.standard_normal((6, 2)), requires_grad=False)  # a graph, not values
    bufs = [(np.zeros(2), np.ones(2)) for _ in range(2)]
    batch_norm(x, *bufs[0], training=True, momentum=0.1).numpy()
    hits = cache_info().hits
    batch_norm(x, *bufs[1], training=True, momentum=0.3).numpy()
    assert cache_info().hits == hits + 1
    np.testing.assert_allclose(bufs[1][0], 3 * bufs[0][0], atol=1e-14)
    np.testing.assert_allclose(bufs[0][1] - 0.9, (bufs[1][1] - 0.7) / 3, atol=1e-14)


def test_batch_norm_unrealized_graph_has_no_effect():
    rm, rv = np.zeros(2), np.ones(2)
    batch_norm(to.Parameter(rng.standard_normal((5, 2))), rm, rv, training=True)
    import gc
    gc.collect()
    np.testing.assert_array_equal(rm, 0)
    from tinyopt.engine import realize
    assert not realize._PENDING


def test_batch_norm_matches_torch_over_steps():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    trm, trv = torch.zeros(3), torch.ones(3)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    for _ in range(3):
        x = (rng.standard_normal((4, 3, 3, 3)) * 2 + 1).astype(np.float32)
        y = batch_norm(x, rm, rv, w, b, training=True).numpy()
        ty = F.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), True)
        np.testing.assert_allclose(y, ty.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm, trm.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rv, trv.numpy(), rtol=1e-6, atol=1e-6)
    y = batch_norm(x, rm, rv, w, b, training=False).numpy()
    ty = F.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), False)
    np.testing.assert_allclose(y, ty.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradients(training):
    x = rng.standard_normal((4, 3, 2, 2))
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    gradcheck(lambda x, w, b: batch_norm(x, rm.copy(), rv.copy(), w, b, training), x, w, b,
              max_elems=25)
    gradcheck(lambda x: batch_norm(x[:, :, 0, 0], None if training else rm,
                                   None if training else rv, training=training), x, max_elems=20)


def test_batch_norm_eval_uses_running_stats():
    x = rng.standard_normal((5, 2, 3))
    rm, rv = np.array([1.0, -1.0]), np.array([4.0, 0.25])
    w, b = np.array([2.0, 3.0]), np.array([0.5, -0.5])
    want = (x - rm[:, None]) / np.sqrt(rv[:, None] + 1e-5) * w[:, None] + b[:, None]
    np.testing.assert_allclose(batch_norm(x, rm, rv, w, b).numpy(), want, atol=1e-12)
    np.testing.assert_array_equal(rm, [1.0, -1.0])


@pytest.mark.parametrize("args, kwargs, exc, msg", [
    ((np.zeros((4, 3)), np.zeros(2), np.ones(2)), dict(training=True), RuntimeError,
     "running_mean should contain 3 elements not 2"),
    ((np.zeros((1, 3)), None, None), dict(training=True), ValueError,
     r"Expected more than 1 value per channel when training, got input size \[1, 3\]"),
    ((np.zeros((4, 3)), None, None), dict(training=False), ValueError, "evaluation mode"),
    ((np.zeros((4, 3)), None, None), dict(training=True, weight=np.ones(2)), RuntimeError,
     r"weight has shape \(2,\), expected \(3,\)"),
])
def test_batch_norm_errors(args, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        batch_norm(*args, **kwargs)


# ---- embedding -----------------------------------------------------------------------------------
def test_embedding_forward_and_scatter_add_gradient():
    W = rng.standard_normal((6, 3))
    idx = np.array([[1, 2, 1], [5, 0, 1]])
    y = embedding(idx, W)
    assert y.shape == (2, 3, 3)
    np.testing.assert_array_equal(y.numpy(), W[idx])
    gradcheck(lambda W: embedding(idx, W), W)
    p = to.Parameter(W)
    embedding(idx, p, padding_idx=1).sum().backward()
    counts = np.bincount(idx.reshape(-1), minlength=6)
    counts[1] = 0
    np.testing.assert_array_equal(p.grad, np.repeat(counts[:, None], 3, 1))


def test_embedding_padding_idx_gradient_is_zero_elsewhere_finite_differences():
    W = rng.standard_normal((5, 2))
    idx = np.array([0, 3, 3, 4])
    p = to.Parameter(W.copy())
    g = rng.standard_normal((4, 2))
    (embedding(idx, p, padding_idx=-2) * g).sum().backward()   # -2 is row 3
    want = np.zeros_like(W)
    np.add.at(want, idx, g)
    want[3] = 0
    np.testing.assert_allclose(p.grad, want, atol=1e-14)


def test_embedding_matches_torch_scale_grad_and_max_norm():
    torch = pytest.importorskip("torch")
    W = rng.standard_normal((7, 4)).astype(np.float32) * 2
    idx = np.array([[0, 2, 2], [6, 2, 5]])
    g = rng.standard_normal((2, 3, 4)).astype(np.float32)
    p, tw = to.Parameter(W.copy()), torch.tensor(W.copy(), requires_grad=True)
    y = embedding(idx, p, padding_idx=5, max_norm=1.5, scale_grad_by_freq=True)
    ty = torch.nn.functional.embedding(torch.tensor(idx), tw, padding_idx=5, max_norm=1.5,
                                       scale_grad_by_freq=True)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(p.data, tw.detach().numpy(), rtol=1e-6)   # renormed in place
    (y * g).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(p.grad, tw.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_embedding_errors():
    W = np.zeros((4, 2))
    with pytest.raises(IndexError, match="index out of range in self"):
        embedding(np.array([0, 4]), W).numpy()
    with pytest.raises(TypeError, match="expected int64 indices"):
        embedding(np.array([0.0, 1.0]), W)
    with pytest.raises(RuntimeError, match="weight must be 2-D"):
        embedding(np.array([0]), np.zeros(4))


def test_embedding_checks_indices_where_it_reads_them():
    # computed indices (issue 9.1): -1 must not take the last row, 4 must not be clipped, and the
    # backward scatter must never write out of bounds
    W = to.Parameter(np.arange(8.0).reshape(4, 2))
    for bad in (-1, 4, 10**11):
        idx = to.tensor(np.array([0, bad])) + 0
        with pytest.raises(IndexError, match="^index out of range in self$"):
            embedding(idx, W).numpy()
        with pytest.raises(IndexError, match="^index out of range in self$"):
            embedding(idx, W).sum().backward()
        assert W.grad is None
    idx = np.array([[1, 3]])
    y = embedding(idx, W).sum()
    idx[0, 1] = 4  # refilled before backward
    with pytest.raises(IndexError, match="index out of range in self"):
        y.backward()
    idx[0, 1] = 3
    embedding(idx, W).sum().backward()
    np.testing.assert_array_equal(W.grad, [[0, 0], [1, 1], [0, 0], [1, 1]])
    # a strided weight view reads the right rows
    Wt = to.tensor(np.arange(8.0).reshape(2, 4)).T
    np.testing.assert_array_equal(embedding(np.array([3, 0]), Wt).numpy(), [[3, 7], [0, 4]])


def test_embedding_padding_idx_zero_with_no_embeddings_is_accepted_as_by_pytorch():
    # found by tests/test_fuzz_api.py: torch accepts padding_idx=0 for an empty table
    out = embedding(np.zeros((0,), np.int64), np.zeros((0, 2), np.float32), padding_idx=0)
    assert out.numpy().shape == (0, 2)
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        embedding(np.zeros((0,), np.int64), np.zeros((0, 2), np.float32), padding_idx=-1)
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        embedding(np.zeros((1,), np.int64), np.zeros((3, 2), np.float32), padding_idx=3)
    np.testing.assert_array_equal(
        embedding(np.array([2, 1]), np.eye(3), padding_idx=-1).numpy(), np.eye(3)[[2, 1]])
