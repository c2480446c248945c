"""engine/ops/attention.py: scaled_dot_product_attention as one op -- values against a numpy
reference, gradients against finite differences in float64 (masks bool and float, broadcast
masks, causal, scale, q = k = v, heads read out of a packed projection), against torch 2.13,
fully masked rows, NaN, dropout, plan reuse, and errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F
from tinyopt.engine import cache_info
from tinyopt.engine.ops.attention import attention

rng = np.random.default_rng(0)


def ref(q, k, v, mask=None, causal=False, scale=None):
    s = (q @ np.swapaxes(k, -1, -2)) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


CASES = [
    dict(q=(2, 3, 5, 4), k=(2, 3, 6, 4), v=(2, 3, 6, 2)),
    dict(q=(2, 3, 5, 4), k=(2, 3, 6, 4), v=(2, 3, 6, 2), causal=True),
    dict(q=(5, 4), k=(6, 4), v=(6, 3), scale=0.7),
    dict(q=(3, 5, 4), k=(3, 6, 4), v=(3, 6, 4), mask=(5, 6), bool_mask=True),
    dict(q=(2, 3, 5, 4), k=(2, 3, 6, 4), v=(2, 3, 6, 2), mask=(2, 1, 5, 6)),
    dict(q=(2, 2, 3, 5, 4), k=(2, 2, 3, 6, 4), v=(2, 2, 3, 6, 2), mask=(2, 2, 1, 5, 6)),
    dict(q=(2, 2, 5, 4), k=(2, 2, 6, 4), v=(2, 2, 6, 2), mask=(2, 2, 5, 1)),
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_values_gradients_and_torch(case):
    q, k, v = (rng.standard_normal(case[n]) for n in "qkv")
    mask = None
    if "mask" in case:
        mask = rng.random(case["mask"]) > 0.3 if case.get("bool_mask") else \
            rng.standard_normal(case["mask"])
        if mask.dtype == bool:
            mask[..., 0] = True  # no fully masked row: the reference would give NaN
    kw = dict(attn_mask=mask, is_causal=case.get("causal", False), scale=case.get("scale"))
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
    out = f(*[to.tensor(a, dtype=to.float64) for a in (q, k, v)]).numpy()
    np.testing.assert_allclose(out, ref(q, k, v, mask, kw["is_causal"], kw["scale"]),
                               rtol=1e-12, atol=1e-12)
    gradcheck(f, q, k, v, max_elems=24)
    try:
        import torch
    except ImportError:
        return
    tq, tk, tv = (torch.tensor(a) for a in (q, k, v))
    tmask = None if mask is None else torch.tensor(mask)
    want = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tmask, is_causal=kw["is_causal"], scale=kw["scale"])
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-12, atol=1e-12)


def test_query_key_value_one_tensor():
    x = rng.standard_normal((2, 2, 4, 3))
    gradcheck(lambda a: F.scaled_dot_product_attention(a, a, a), x)


@pytest.mark.parametrize("kind", ["nlc", "lnc"])
def test_heads_read_from_a_packed_projection(kind):
    """q, k, v as column blocks of one (N, T, 3E) or (T, N, 3E) tensor, output heads merged."""
    N, T, H, D = 2, 4, 2, 3
    E = H * D
    x = rng.standard_normal((N, T, 3 * E) if kind == "nlc" else (T, N, 3 * E))

    def split(a):  # (N, H, T, D) views of the three blocks, in numpy
        a = a if kind == "nlc" else np.swapaxes(a, 0, 1)
        return [a[..., i * E:(i + 1) * E].reshape(N, T, H, D).transpose(0, 2, 1, 3)
                for i in range(3)]

    def f(a):
        out, _ = attention([a], [(0, kind, 0), (0, kind, E), (0, kind, 2 * E)], N, H, T, T, D,
                           D, kind, causal=True)
        return out

    o = ref(*split(x), causal=True).transpose(0, 2, 1, 3).reshape(N, T, E)
    want = o if kind == "nlc" else np.swapaxes(o, 0, 1)
    np.testing.assert_allclose(f(to.tensor(x, dtype=to.float64)).numpy(), want, rtol=1e-12)
    gradcheck(f, x, max_elems=40)


@pytest.mark.parametrize("packed", [True, False])
def test_nanogpt_heads_are_read_where_they_are(packed):
    """q, k, v made as nanoGPT makes them (a packed projection split in three, or projections
    of their own, each viewed as heads and transposed): the attention op reads them in place
    (``"nlc"`` parts of the projections, no copies) with the values and gradients of the
    reference, and an unusual view (a slice with a step) still works, as a ``"4d"`` part."""
    N, T, H, D = 2, 5, 2, 3
    E = H * D
    xs = [rng.standard_normal((N, T, 3 * E))] if packed else \
        [rng.standard_normal((N, T, E)) for _ in range(3)]

    def heads(*arrs):
        parts = arrs[0].split(E, dim=2) if packed else arrs
        return [p.view(N, T, H, D).transpose(1, 2) for p in parts]

    def f(*arrs):
        return F.scaled_dot_product_attention(*heads(*arrs), is_causal=True)

    ts = [to.tensor(x, dtype=to.float64, requires_grad=True) for x in xs]
    y = f(*ts)
    att = y.srcs[0] if y.op == "reshape" else y  # (attention_out: the op's attrs)
    assert [kind for _, kind, _ in att.attrs[6]] == ["nlc"] * 3
    assert [off for _, _, off in att.attrs[6]] == ([0, E, 2 * E] if packed else [0, 0, 0])
    npx = [np.asarray(x) for x in xs]
    qkv = np.split(npx[0], 3, axis=2) if packed else npx
    want = ref(*[a.reshape(N, T, H, D).transpose(0, 2, 1, 3) for a in qkv], causal=True)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-13)
    gradcheck(f, *xs, max_elems=30)
    strided = to.tensor(rng.standard_normal((N, T, 2 * E)))[:, :, ::2]
    q = strided.reshape(N, T, H, D).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q).numpy()
    qn = strided.numpy().reshape(N, T, H, D).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out, ref(qn, qn, qn), rtol=1e-12)


def test_fully_masked_rows_give_zero_and_nan_scores_give_nan():
    q, k, v = (rng.standard_normal((1, 3, 4)) for _ in range(3))
    mask = np.ones((3, 3), bool)
    mask[1] = False
    qp = to.Parameter(q)
    out = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask)
    np.testing.assert_array_equal(out.numpy()[0, 1], 0)
    out.sum().backward()
    np.testing.assert_array_equal(qp.grad[0, 1], 0)
    q[0, 2, 0] = np.nan
    out = F.scaled_dot_product_attention(q, k, v).numpy()
    assert np.isnan(out[0, 2]).all() and not np.isnan(out[0, :2]).any()


def test_float32_and_plan_reuse(compile_at_once):
    q, k, v = (rng.standard_normal((2, 4, 8, 16)).astype(np.float32) for _ in range(3))
    p = to.Parameter(q)
    for _ in range(2):
        hits = cache_info().hits
        out = F.scaled_dot_product_attention(p, k, v, is_causal=True)
        out.sum().backward()
    assert cache_info().hits == hits + 1
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), ref(q, k, v, causal=True), atol=2e-6)


def test_dropout_drops_probabilities_and_is_seeded():
    q, k = (rng.standard_normal((1, 1, 64, 8)) for _ in range(2))
    v = np.eye(64)[None, None]  # out = the (dropped-out) attention probabilities themselves
    to.manual_seed(3)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.25).numpy()
    base = F.scaled_dot_product_attention(q, k, v).numpy()
    kept = a != 0
    assert abs(1 - kept.mean() - 0.25) < 0.03
    np.testing.assert_allclose(a[kept], base[kept] / 0.75, rtol=1e-12)
    to.manual_seed(3)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v, dropout_p=0.25).numpy(),
                                  a)
    x = rng.standard_normal((1, 1, 4, 3))

    def f(q):  # the mask is drawn when the graph is built: the same one for every evaluation
        to.manual_seed(5)
        return F.scaled_dot_product_attention(q, x, x, dropout_p=0.5)
    gradcheck(f, x)


def test_errors():
    q = rng.standard_normal((2, 3, 4))
    with pytest.raises(RuntimeError, match="Expected query, key, and value to have the same "
                                           "dtype"):
        F.scaled_dot_product_attention(q, q.astype(np.float32), q)
    with pytest.raises(RuntimeError, match="shapes do not match"):
        F.scaled_dot_product_attention(q, q[..., :3], q)
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when "
                                           "is_causal=True"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=np.zeros((3, 3)), is_causal=True)
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=np.zeros((3, 3), np.int64))
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=np.zeros((4, 3)))
    with pytest.raises(RuntimeError, match="^Number of heads in key and value must divide the "
                                           "number of heads in $"):
        F.scaled_dot_product_attention(q, np.zeros((3, 3, 4)), np.zeros((3, 3, 4)),
                                       enable_gqa=True)
    with pytest.raises(IndexError, match=r"got -3\)$"):
        F.scaled_dot_product_attention(q[0], q[0], q[0], enable_gqa=True)


def test_a_learned_float_mask_gets_its_gradient_as_torchs():
    """A float attn_mask that requires grad (a learned relative-position bias), broadcast over
    the batch, with a row masked out entirely (0, and no gradient, as torch's): values and the
    gradients of q, k, v and the mask; and against finite differences."""
    torch = pytest.importorskip("torch")
    arrays = [rng.standard_normal(s) for s in ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 2), (3, 4, 6))]
    arrays[3][0, 1] = -np.inf
    got = []
    for lib in (torch, to):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = lib.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3], scale=0.4)
        (out * lib.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape))).sum().backward()
        got.append([out.detach().numpy()] + [t.grad.numpy() for t in ts])
    for ours, theirs in zip(got[1], got[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert not got[1][4][0, 1].any() and not got[1][0][:, 0, 1].any()
    gradcheck(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m),
              arrays[0][0, :2], arrays[3][1:3, :, :4])


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_torch(causal):
    """``enable_gqa``: key and value with fewer heads than query (each its own number), every
    head of theirs serving consecutive query heads; values and all three gradients."""
    torch = pytest.importorskip("torch")
    arrays = [rng.standard_normal(s) for s in ((2, 6, 5, 4), (2, 2, 7, 4), (2, 3, 7, 3))]
    ours = [to.Parameter(a) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = F.scaled_dot_product_attention(*ours, is_causal=causal, enable_gqa=True)
    ref_out = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal,
                                                               enable_gqa=True)
    np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(out.shape)
    (out * to.tensor(g)).sum().backward()
    (ref_out * torch.tensor(g)).sum().backward()
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-10, atol=1e-12)
    if not causal:
        gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                  arrays[0][:1, :4, :3], arrays[1][:1, :, :4], arrays[2][:1, :2, :4])


@pytest.mark.parametrize("q_shape, k_shape", [((0, 1, 1), (0, 0, 1)), ((0, 2, 1, 3), (0, 2, 2, 3)),
                                              ((1, 0, 2, 3), (1, 0, 2, 3))])
def test_empty_batch_or_heads_give_an_empty_result(q_shape, k_shape):
    # found by tests/test_fuzz_api.py: reshape(A, B, -1, D) cannot infer -1 when A or B is 0
    q = to.tensor(np.ones(q_shape, np.float32), requires_grad=True)
    k = np.ones(k_shape, np.float32)
    out = F.scaled_dot_product_attention(q, k, k)
    out.sum().backward()
    assert out.numpy().shape == q_shape and q.grad.numpy().shape == q_shape


def _chunked_and_batched(run, monkeypatch):
    """``run()``'s arrays with attention's (batch, head) pairs as chunks on the shared threads,
    then with the batched path, and how many op calls took the chunks."""
    from tinyopt.engine.ops import attention as ops
    from tinyopt.kernels.native import shared_threads
    if not shared_threads.chunk_runner().parallel:
        pytest.skip("no shared OpenMP threads here")
    took = []
    chunked_run = ops._Chunks.run

    def counted(self, *a):
        took.append(chunked_run(self, *a))
        return took[-1]
    monkeypatch.setattr(ops._Chunks, "run", counted)
    chunked = run()
    monkeypatch.setattr(ops._Chunks, "run", lambda self, *a: False)
    return chunked, run(), sum(took)


@pytest.mark.parametrize("big", [False, True], ids=["pairs", "large-pairs"])
@pytest.mark.parametrize("kind", ["nlc", "4d"])
def test_pairs_as_chunks_on_the_shared_threads_give_the_batched_bits(kind, big, monkeypatch):
    """Forward and backward, each pair's GEMMs and softmax rows as one chunk (``big``: GEMMs
    that OpenBLAS would split between threads, run on one thread each): the same bits as the
    batched GEMMs and kernels (float32 heads read from a packed projection with a mask, a fully
    masked row and a NaN, causal; float64 4-d q, k, v, L != S, Dv != D, nan_rows)."""
    if big:
        from tinyopt.engine.ops import attention as ops
        monkeypatch.setattr(ops, "_CHUNK_GEMM_MAX", 0)
    N, H, L = 3, 2, 6
    if kind == "nlc":
        D = Dv = 4
        S, dt = L, np.float32
        x = rng.standard_normal((N, L, 3 * H * D)).astype(dt)
        x[1, 2, 5] = np.nan
        mask = np.zeros((1, 1, L, S), dt)
        mask[0, 0, 3] = -np.inf
        srcs, parts = [x], [(0, "nlc", 0), (0, "nlc", H * D), (0, "nlc", 2 * H * D)]
        kw = dict(out_kind="nlc", causal=True, mask=mask)
    else:
        D, Dv, S, dt = 4, 3, 5, np.float64
        srcs = [rng.standard_normal(s) for s in ((N, H, L, D), (N, H, S, D), (N, H, S, Dv))]
        mask = rng.standard_normal((N, 1, L, S))
        mask[2, 0, 1] = -np.inf
        parts = [(0, "4d", 0), (1, "4d", 0), (2, "4d", 0)]
        kw = dict(mask=mask, nan_rows=True)
    w = rng.standard_normal((N, L, H * Dv) if kind == "nlc" else (N, H, L, Dv)).astype(dt)

    def run():
        ps = [to.Parameter(a.copy()) for a in srcs]
        out, _ = attention(ps, parts, N, H, L, S, D, Dv, **{**kw, "mask": to.tensor(kw["mask"])})
        (out * to.tensor(w)).sum().backward()
        return [out.numpy().tobytes()] + [p.grad.numpy().tobytes() for p in ps]
    chunked, batched, took = _chunked_and_batched(run, monkeypatch)
    assert took == 2  # forward and backward
    assert chunked == batched


def test_a_query_that_is_its_own_key_takes_the_batched_path(monkeypatch):
    """np.matmul multiplies a matrix by its own transpose with syrk: the chunks, which call gemm,
    are not used there."""
    a = rng.standard_normal((2, 3, 4, 5))
    chunked, batched, took = _chunked_and_batched(
        lambda: [F.scaled_dot_product_attention(a, a, a).numpy().tobytes()], monkeypatch)
    assert took == 0 and chunked == batched



@pytest.mark.parametrize("tile", [1, 5])
@pytest.mark.parametrize("L, S", [(13, 13), (13, 9), (9, 13), (1, 4)],
                         ids=["square", "fewer-keys", "more-keys", "one-row"])
def test_causal_chunks_skip_the_masked_tiles(L, S, tile, monkeypatch):
    """Causal chunks in tiles of ``tile`` query rows (lengths not a multiple of it; more keys
    than queries, whose backward takes the whole products; one query row, which takes the
    batched path): the values and gradients of the batched path (which computes every score)
    to rounding, of the reference and of torch, finite differences, and probabilities above the
    diagonal exactly 0."""
    from tinyopt.engine.ops import attention as ops
    monkeypatch.setattr(ops, "_causal_tile", lambda L: tile)
    N, H, D, Dv = 2, 3, 4, 3
    q, k, v = (rng.standard_normal(s) for s in ((N, H, L, D), (N, H, S, D), (N, H, S, Dv)))
    parts = [(0, "4d", 0), (1, "4d", 0), (2, "4d", 0)]
    w = rng.standard_normal((N, H, L, Dv))

    def run():
        ps = [to.Parameter(a.copy()) for a in (q, k, v)]
        out, probs = attention(ps, parts, N, H, L, S, D, Dv, causal=True, need_weights=True)
        (out * to.tensor(w)).sum().backward()
        return [out.numpy(), probs.numpy()] + [p.grad.numpy() for p in ps]
    chunked, batched, took = _chunked_and_batched(run, monkeypatch)
    assert took == (0 if L == 1 else 2)  # forward and backward
    for c, b in zip(chunked, batched):
        np.testing.assert_allclose(c, b, rtol=1e-13, atol=1e-15)
    assert (chunked[1][..., np.triu_indices(L, 1, S)[0], np.triu_indices(L, 1, S)[1]] == 0).all()
    np.testing.assert_allclose(chunked[0], ref(q, k, v, causal=True), rtol=1e-12, atol=1e-13)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = gradcheck(f, q, k, v, max_elems=30)
    try:
        import torch
    except ImportError:
        return
    ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
    np.testing.assert_allclose(f(q, k, v).numpy(), out.detach().numpy(), rtol=1e-12, atol=1e-13)
    out.backward(torch.ones_like(out))
    ps = [to.Parameter(a) for a in (q, k, v)]
    f(*ps).sum().backward()
    for p, t in zip(ps, ts):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-13)
    del grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_causal_nan_query_reaches_only_the_keys_it_sees(dtype):
    """Masked probabilities are the constant 0: a NaN in query 2 makes the gradients of keys
    0-2 and values 0-2 NaN, and of the later keys only the NaN's column (dk = sum_i dS_ij q_i
    with dS_2j = 0), as PyTorch's causal attention gives."""
    q, k, v = (rng.standard_normal((2, 2, 6, 4)).astype(dtype) for _ in range(3))
    q[1, 0, 2, 1] = np.nan
    ps = [to.Parameter(a) for a in (q, k, v)]
    F.scaled_dot_product_attention(*ps, is_causal=True).sum().backward()
    dk, dv = (np.isnan(p.grad.numpy()[1, 0]) for p in ps[1:])
    assert dk[:3].all() and dv[:3].all() and not dv[3:].any()
    assert (dk[3:] == [False, True, False, False]).all()
    assert not np.isnan(ps[1].grad.numpy()[0]).any()
    assert not np.isnan(ps[1].grad.numpy()[1, 1]).any()
    try:
        import torch
    except ImportError:
        return
    ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True).sum().backward()
    for p, t in zip(ps[1:], ts[1:]):
        np.testing.assert_array_equal(np.isnan(p.grad.numpy()), np.isnan(t.grad.numpy()))
