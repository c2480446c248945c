"""nn.MultiheadAttention and the Transformer layers against torch 2.13 with the same weights:
outputs, attention weights and gradients for each option (batch_first, bias, kdim/vdim,
add_bias_kv, add_zero_attn, self/cross attention, masks bool and float, key padding, need_weights,
average_attn_weights, unbatched; norm_first, activations, stacks, nn.Transformer); state-dict
names and order; initialisation; the causal mask; dropout; errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt import nn

rng = np.random.default_rng(0)
E, H, L, S, N = 8, 2, 5, 6, 3
pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
              pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")]


def _torch():
    return pytest.importorskip("torch")


def _load(om, tm):
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    om.load_state_dict(sd)
    assert list(om.state_dict()) == list(sd)


def _grads_match(om, tm, atol=1e-11):
    for (name, p), (tname, tp) in zip(om.named_parameters(), tm.named_parameters()):
        assert name == tname
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), atol=atol, err_msg=name)


MHA_OPTIONS = [dict(), dict(batch_first=True), dict(bias=False), dict(kdim=5, vdim=7),
               dict(add_bias_kv=True), dict(add_zero_attn=True, batch_first=True)]


@pytest.mark.parametrize("kw", MHA_OPTIONS, ids=lambda kw: ",".join(kw) or "default")
@pytest.mark.parametrize("case", ["self", "cross"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_matches_torch(kw, case, need_weights):
    torch = _torch()
    if case == "self" and "kdim" in kw:
        pytest.skip("self-attention needs kdim = vdim = embed_dim")
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, **kw).double()
    om = nn.MultiheadAttention(E, H, **kw, dtype=np.float64)
    _load(om, tm)
    bf = kw.get("batch_first", False)
    shape = lambda T, D: (N, T, D) if bf else (T, N, D)  # noqa: E731
    q = rng.standard_normal(shape(L, E))
    if case == "self":
        k = v = q
    else:
        k, v = rng.standard_normal(shape(S, kw.get("kdim", E))), \
            rng.standard_normal(shape(S, kw.get("vdim", E)))
    Sk = L if case == "self" else S
    kpm = rng.random((N, Sk)) < 0.3
    kpm[:, 0] = False
    am = rng.standard_normal((L, Sk))
    tq = torch.tensor(q)
    tk, tv = (tq, tq) if case == "self" else (torch.tensor(k), torch.tensor(v))
    for masks in (dict(), dict(key_padding_mask=kpm), dict(attn_mask=am, key_padding_mask=kpm),
                  dict(attn_mask=am < -0.5)):
        om.zero_grad()
        tm.zero_grad()
        ot, wt = tm(tq, tk, tv, need_weights=need_weights,
                    **{n: torch.tensor(m) for n, m in masks.items()})
        oo, wo = om(q, k, v, need_weights=need_weights, **masks)
        np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
        g = rng.standard_normal(ot.shape)
        lt, lo = (ot * torch.tensor(g)).sum(), (oo * to.tensor(g)).sum()
        if need_weights:
            np.testing.assert_allclose(wo.numpy(), wt.detach().numpy(), atol=1e-12)
            gw = rng.standard_normal(wt.shape)
            lt, lo = lt + (wt * torch.tensor(gw)).sum(), lo + (wo * to.tensor(gw)).sum()
        else:
            assert wo is None
        lt.backward()
        lo.backward()
        _grads_match(om, tm)


def test_per_head_weights_3d_mask_and_unbatched_input():
    torch = _torch()
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H).double()
    om = nn.MultiheadAttention(E, H, dtype=np.float64)
    _load(om, tm)
    x = rng.standard_normal((L, N, E))
    am = rng.standard_normal((N * H, L, L))
    ot, wt = tm(*(torch.tensor(x),) * 3, attn_mask=torch.tensor(am), average_attn_weights=False)
    oo, wo = om(x, x, x, attn_mask=am, average_attn_weights=False)
    assert wo.shape == (N, H, L, L)
    np.testing.assert_allclose(wo.numpy(), wt.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
    xu = x[:, 0]
    ot, wt = tm(*(torch.tensor(xu),) * 3, key_padding_mask=torch.tensor([False] * 4 + [True]))
    oo, wo = om(xu, xu, xu, key_padding_mask=np.array([False] * 4 + [True]))
    assert oo.shape == (L, E) and wo.shape == (L, L)
    np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)


def test_fully_masked_rows_as_torch():
    """torch gives NaN rows when it returns the weights and zeros when it does not."""
    m = nn.MultiheadAttention(E, 1, batch_first=True, dtype=np.float64)
    x = rng.standard_normal((1, 3, E))
    kpm = np.ones((1, 3), bool)
    out, w = m(x, x, x, key_padding_mask=kpm)
    assert np.isnan(out.numpy()).all() and np.isnan(w.numpy()).all()
    out, _ = m(x, x, x, key_padding_mask=kpm, need_weights=False)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(m.out_proj.bias.data, out.shape))


LEARNED_MASKS = [dict(mask=(L, S), need_weights=True),
                 dict(mask=(N * H, L, S), need_weights=False, batch_first=True),
                 dict(mask=(L, S), kpm=True, need_weights=True, average_attn_weights=False,
                      kdim=5, vdim=7),
                 dict(kpm=True, need_weights=False, batch_first=True, add_bias_kv=True)]


@pytest.mark.parametrize("case", LEARNED_MASKS, ids=lambda c: ",".join(c))
def test_a_learned_float_mask_gets_its_gradient_as_torchs(case):
    """A float attn_mask (2-D or per head) or key_padding_mask that requires grad (a learned
    bias) is differentiated, as torch: output, weights and the gradients of the masks, the
    inputs and the weights."""
    torch = _torch()
    case = dict(case)
    mask, kpm = case.pop("mask", None), case.pop("kpm", False)
    call = {n: case.pop(n) for n in ("need_weights", "average_attn_weights") if n in case}
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, **case).double()
    om = nn.MultiheadAttention(E, H, **case, dtype=np.float64)
    _load(om, tm)
    shape = (lambda T, D: (N, T, D)) if case.get("batch_first") else (lambda T, D: (T, N, D))
    arrays = {"query": rng.standard_normal(shape(L, E)),
              "key": rng.standard_normal(shape(S, case.get("kdim", E))),
              "value": rng.standard_normal(shape(S, case.get("vdim", E)))}
    if mask is not None:
        arrays["attn_mask"] = rng.standard_normal(mask)
    if kpm:
        arrays["key_padding_mask"] = rng.standard_normal((N, S))
    got = []
    for lib, m in ((torch, tm), (to, om)):
        ts = {n: lib.tensor(a, requires_grad=True) for n, a in arrays.items()}
        out, w = m(**ts, **call)
        loss = (out * lib.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape))).sum()
        if call["need_weights"]:
            loss = loss + (w * lib.tensor(np.cos(np.arange(w.numel())).reshape(w.shape))).sum()
        loss.backward()
        got.append([out.detach().numpy()] + [None if w is None else w.detach().numpy()]
                   + [t.grad.numpy() for t in ts.values()])
    for ours, theirs in zip(got[1], got[0]):
        if theirs is None:
            assert ours is None
        else:
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    _grads_match(om, tm)


def test_a_learned_mask_against_finite_differences():
    m = nn.MultiheadAttention(4, 2, batch_first=True, dtype=np.float64)
    x = rng.standard_normal((1, 3, 4))
    gradcheck(lambda q, b: m(q, q, q, attn_mask=b)[0], x, rng.standard_normal((3, 3)))
    gradcheck(lambda b: m(x[0], x[0], x[0], attn_mask=b, average_attn_weights=False)[1],
              rng.standard_normal((2, 3, 3)))  # unbatched, a bias per head


def _ops(t: to.Tensor) -> set[str]:
    seen, todo = {}, [t]
    while todo:
        t = todo.pop()
        if id(t) not in seen:
            seen[id(t)] = t.op
            todo.extend(t.srcs)
    return set(seen.values())


def test_a_mask_that_does_not_require_grad_keeps_the_fused_op():
    """A learned mask is composed of matmul and softmax only when a gradient is taken; any
    other mask runs the fused attention op, with the same bits; dropout in training runs."""
    m = nn.MultiheadAttention(E, H, dtype=np.float64)
    x = rng.standard_normal((L, N, E))
    bias = rng.standard_normal((L, L))
    fused = m(x, x, x, attn_mask=bias)
    learned = m(x, x, x, attn_mask=to.tensor(bias, requires_grad=True))
    assert _ops(fused[0]) == {"param", "input", "linear", "attention", "attention_out"}
    assert "attention" not in _ops(learned[0]) and "softmax_run" in _ops(learned[0])
    with to.no_grad():
        frozen = m(x, x, x, attn_mask=to.tensor(bias, requires_grad=True))
    assert "attention_out" in _ops(frozen[0])
    for a, b in zip(frozen, fused):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(learned, fused):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    # a learned mask holding the causal mask's values is read, not taken for the causal hint
    causal = to.tensor(np.triu(np.full((L, L), -np.inf), 1), requires_grad=True)
    m(x, x, x, attn_mask=causal, need_weights=False)[0].sum().backward()
    g = causal.grad.numpy()
    assert g[np.tril_indices(L, -1)].all() and not np.triu(g, 1).any()
    m.dropout = 0.5
    to.manual_seed(0)
    bias = to.tensor(bias, requires_grad=True)
    out, w = m(x, x, x, attn_mask=bias, average_attn_weights=False)
    assert out.shape == (L, N, E) and w.shape == (N, H, L, L)
    assert set(np.unique(w.numpy() == 0)) == {False, True}
    out.sum().backward()
    assert bias.grad.shape == (L, L) and np.isfinite(bias.grad.numpy()).all()
    m.dropout = 1.0  # deterministic, as torch: every weight dropped, the output the bias
    out, w = m(x, x, x, attn_mask=bias)
    assert not w.numpy().any()
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(m.out_proj.bias.data, out.shape))


def test_layers_with_learned_masks_match_torch():
    """The encoder and decoder layers pass a learned float mask (and key padding) on to their
    attention: values and every gradient, masks' included, as torch's."""
    torch = _torch()
    torch.manual_seed(0)
    pairs = [(torch.nn.TransformerEncoderLayer(E, H, 16, dropout=0.0).double(),
              nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, dtype=np.float64)),
             (torch.nn.TransformerDecoderLayer(E, H, 16, dropout=0.0, batch_first=True).double(),
              nn.TransformerDecoderLayer(E, H, 16, dropout=0.0, batch_first=True,
                                         dtype=np.float64))]
    inputs = [dict(src=(L, N, E), src_mask=(L, L), src_key_padding_mask=(N, L)),
              dict(tgt=(N, L, E), memory=(N, S, E), tgt_mask=(L, L), memory_mask=(L, S),
                   memory_key_padding_mask=(N, S))]
    for (tl, ol), shapes in zip(pairs, inputs):
        _load(ol, tl)
        arrays = {n: rng.standard_normal(s) for n, s in shapes.items()}
        got = []
        for lib, layer in ((torch, tl), (to, ol)):
            ts = {n: lib.tensor(a, requires_grad=True) for n, a in arrays.items()}
            out = layer(**ts)
            (out * out).sum().backward()
            got.append([out.detach().numpy()] + [t.grad.numpy() for t in ts.values()])
        for ours, theirs in zip(got[1], got[0]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-11)
        _grads_match(ol, tl)


LAYER_OPTIONS = [dict(), dict(norm_first=True), dict(activation="gelu", batch_first=True),
                 dict(bias=False)]


@pytest.mark.parametrize("kw", LAYER_OPTIONS, ids=lambda kw: ",".join(kw) or "default")
def test_encoder_layer_and_stack_match_torch(kw):
    torch = _torch()
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, **kw).double()
    ol = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, **kw, dtype=np.float64)
    _load(ol, tl)
    bf = kw.get("batch_first", False)
    x = rng.standard_normal((N, L, E) if bf else (L, N, E))
    mask_t = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    mask_o = nn.Transformer.generate_square_subsequent_mask(L, dtype=np.float64)
    kpm = rng.random((N, L)) < 0.3
    kpm[:, 0] = False
    for mo, mt in ((dict(src_mask=mask_o, is_causal=True), dict(src_mask=mask_t, is_causal=True)),
                   (dict(src_key_padding_mask=kpm), dict(src_key_padding_mask=torch.tensor(kpm)))):
        ol.zero_grad()
        tl.zero_grad()
        ot, oo = tl(torch.tensor(x), **mt), ol(x, **mo)
        np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
        (ot * ot).sum().backward()
        (oo * oo).sum().backward()
        _grads_match(ol, tl)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's nested-tensor notice
        te = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(E).double())
    oe = nn.TransformerEncoder(ol, 2, norm=nn.LayerNorm(E, dtype=np.float64))
    _load(oe, te)
    ot, oo = te(torch.tensor(x), mask=mask_t), oe(x, mask=mask_o)
    np.testing.assert_allclose(oo.numpy(), ot.detach().numpy(), atol=1e-12)
    (ot * ot).sum().backward()
    (oo * oo).sum().backward()
    _grads_match(oe, te)


def test_callable_activation():
    torch = _torch()
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(E, H, 16, dropout=0.0,
                                          activation=torch.nn.functional.silu).double()
    ol = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, activation=nn.functional.silu,
                                    dtype=np.float64)
    _load(ol, tl)
    x = rng.standard_normal((L, N, E))
    np.testing.assert_allclose(ol(x).numpy(), tl(torch.tensor(x)).detach().numpy(), atol=1e-12)
    assert ol.activation_relu_or_gelu == 0
    assert nn.TransformerEncoderLayer(E, H, activation=nn.GELU()).activation_relu_or_gelu == 2


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True, batch_first=True)])
def test_decoder_and_transformer_match_torch(kw):
    torch = _torch()
    torch.manual_seed(0)
    tt = torch.nn.Transformer(E, H, 2, 2, 16, dropout=0.0, **kw).double()
    ot = nn.Transformer(E, H, 2, 2, 16, dropout=0.0, **kw, dtype=np.float64)
    _load(ot, tt)
    bf = kw.get("batch_first", False)
    src = rng.standard_normal((N, S, E) if bf else (S, N, E))
    tgt = rng.standard_normal((N, L, E) if bf else (L, N, E))
    mkpm = np.zeros((N, S), bool)
    mkpm[:, -1] = True
    yt = tt(torch.tensor(src), torch.tensor(tgt),
            tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64),
            memory_key_padding_mask=torch.tensor(mkpm))
    yo = ot(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(L, dtype=np.float64),
            memory_key_padding_mask=mkpm)
    np.testing.assert_allclose(yo.numpy(), yt.detach().numpy(), atol=1e-12)
    (yt * yt).sum().backward()
    (yo * yo).sum().backward()
    _grads_match(ot, tt)


def test_state_dict_names_order_and_loading_into_torch():
    torch = _torch()
    om = nn.Transformer(E, H, 1, 1, 16, dropout=0.0)
    tm = torch.nn.Transformer(E, H, 1, 1, 16, dropout=0.0)
    sd = om.state_dict()
    assert list(sd) == list(tm.state_dict())
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()})
    mha = nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True)
    tmha = torch.nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True)
    assert list(mha.state_dict()) == list(tmha.state_dict())
    assert repr(mha.out_proj).startswith("NonDynamicallyQuantizableLinear(")


def test_initialisation():
    to.manual_seed(0)
    m = nn.MultiheadAttention(64, 4)
    bound = np.sqrt(6 / (64 + 3 * 64))  # xavier_uniform over (3E, E)
    w = m.in_proj_weight.data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    np.testing.assert_array_equal(m.in_proj_bias.data, 0)
    np.testing.assert_array_equal(m.out_proj.bias.data, 0)


def test_generate_square_subsequent_mask_and_the_causal_path():
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype == np.float32
    np.testing.assert_array_equal(mask.numpy(), np.triu(np.full((4, 4), -np.inf), 1))
    layer = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, dtype=np.float64)
    x = rng.standard_normal((4, 2, E))
    m64 = nn.Transformer.generate_square_subsequent_mask(4, dtype=np.float64)
    # recognised causal mask (run as the causal flag) == the same mask given as numbers
    almost = m64.numpy().copy()
    almost[3, 0] = -1e-9  # not the causal mask: read as a mask
    a = layer(x, src_mask=m64).numpy()
    b = layer(x, src_mask=almost).numpy()
    np.testing.assert_allclose(a, b, atol=1e-8)
    np.testing.assert_array_equal(layer(x, src_mask=m64, is_causal=True).numpy(), a)


def test_dropout_in_training_only():
    to.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, 16, dropout=0.5)
    x = rng.standard_normal((4, 2, E)).astype(np.float32)
    assert not np.allclose(layer(x).numpy(), layer(x).numpy())
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())


def test_errors():
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
        nn.MultiheadAttention(0, 1)
    m = nn.MultiheadAttention(E, H)
    x = rng.standard_normal((L, N, E)).astype(np.float32)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask is"):
        m(x, x, x, attn_mask=np.zeros((L, L + 1), np.float32))
    with pytest.raises(AssertionError, match="query should be unbatched 2D or batched 3D"):
        m(x[None], x[None], x[None])
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(E, H, activation="tanh")
    t = nn.Transformer(E, H, 1, 1, 16)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        t(x, x[:, :2])
