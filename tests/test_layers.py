"""nn layers: outputs against PyTorch (weights copied across), gradients against finite
differences in float64, default initialisation, train/eval behaviour, running statistics, repr and
constructor errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import gradcheck
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt import nn

RNG = np.random.default_rng(1234)


def _torch():
    return pytest.importorskip("torch")


def _copy_to_torch(m: nn.Module, tm) -> None:
    """Copy parameters and buffers of ``m`` into the torch module ``tm`` by state-dict key."""
    torch = _torch()
    sd = m.state_dict()
    with torch.no_grad():
        for k, v in tm.state_dict().items():
            v.copy_(torch.from_numpy(np.asarray(sd[k])))


def _t(x):
    torch = _torch()
    return torch.from_numpy(np.ascontiguousarray(x))


def _grads_vs_torch(m: nn.Module, tm, x: np.ndarray, rtol: float = 1e-9) -> None:
    """The outputs, and the parameter gradients of sum(out * w), agree with torch."""
    out = m(x)
    w = RNG.normal(size=out.shape)
    tout = tm(_t(x))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=1e-12)
    if not list(m.parameters()):
        return
    m.zero_grad()
    tm.zero_grad()
    (out * w).sum().backward()
    (tout * _t(w)).sum().backward()
    named = dict(tm.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, named[name].grad.numpy(), rtol=rtol, atol=1e-12,
                                   err_msg=name)


# ---- Linear ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(bias):
    torch = _torch()
    m = nn.Linear(5, 3, bias=bias, dtype=np.float64)
    tm = torch.nn.Linear(5, 3, bias=bias, dtype=torch.float64)
    _copy_to_torch(m, tm)
    _grads_vs_torch(m, tm, RNG.normal(size=(2, 4, 5)))


def test_linear_gradcheck():
    m = nn.Linear(4, 3, dtype=np.float64)

    def f(x, w, b):
        m.weight, m.bias = w, b
        return m(x)
    gradcheck(f, RNG.normal(size=(3, 4)), m.weight.data, m.bias.data)


def test_linear_default_init_and_seed():
    to.manual_seed(0)
    m = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    assert m.weight.dtype == np.float32 and m.weight.shape == (300, 400)
    assert np.abs(m.weight.data).max() <= bound and np.abs(m.bias.data).max() <= bound
    # U(-b, b): std b / sqrt(3); kaiming_uniform_(a=sqrt(5)) gives exactly that bound.
    assert m.weight.data.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert abs(m.weight.data.mean()) < 0.01 * bound
    to.manual_seed(0)
    m2 = nn.Linear(400, 300)
    np.testing.assert_array_equal(m.weight.data, m2.weight.data)
    np.testing.assert_array_equal(m.bias.data, m2.bias.data)
    assert nn.Linear(3, 2, dtype="float64").weight.dtype == np.float64


def test_linear_accepts_numpy_and_rejects_bad_shapes():
    m = nn.Linear(3, 2)
    assert m(np.ones((4, 3), np.float32)).shape == (4, 2)
    with pytest.raises(RuntimeError, match="do not match"):
        m(np.ones((4, 5), np.float32))
    with pytest.raises(ValueError, match="in_features"):
        nn.Linear(-1, 2)
    with pytest.raises(ValueError, match="CPU only"):
        nn.Linear(3, 2, device="cuda")


def test_identity():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(nn.Identity(54, unused="x")(x).numpy(), x)


# ---- Conv2d ------------------------------------------------------------------------------------
CONV_CASES = [
    dict(kernel_size=3, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=3, groups=2, bias=False),
    dict(kernel_size=(2, 3), padding="same", dilation=2),
    dict(kernel_size=3, padding="valid", stride=2),
    dict(kernel_size=3, padding=2, padding_mode="reflect"),
    dict(kernel_size=3, padding=(1, 2), padding_mode="circular", stride=2),
    dict(kernel_size=4, padding="same", padding_mode="replicate"),
]


@pytest.mark.parametrize("kw", CONV_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                                    kw.items()))
def test_conv2d_matches_torch(kw):
    torch = _torch()
    m = nn.Conv2d(4, 6, dtype=np.float64, **kw)
    tm = torch.nn.Conv2d(4, 6, dtype=torch.float64, **kw)
    _copy_to_torch(m, tm)
    assert repr(m) == repr(tm)
    _grads_vs_torch(m, tm, RNG.normal(size=(2, 4, 7, 8)))


@settings(max_examples=15, deadline=None)
@given(k=st.tuples(st.integers(1, 4), st.integers(1, 4)), s=st.integers(1, 3),
       p=st.integers(0, 2), d=st.integers(1, 2), g=st.sampled_from([1, 2]),
       hw=st.tuples(st.integers(6, 10), st.integers(6, 10)), bias=st.booleans())
def test_conv2d_random_configs_match_torch(k, s, p, d, g, hw, bias):
    torch = _torch()
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
    m = nn.Conv2d(2, 4, dtype=np.float64, **kw)
    tm = torch.nn.Conv2d(2, 4, dtype=torch.float64, **kw)
    _copy_to_torch(m, tm)
    x = RNG.normal(size=(2, 2) + hw)
    try:
        ty = tm(_t(x)).detach().numpy()
    except RuntimeError:  # the dilated kernel is larger than the padded input: we raise too
        with pytest.raises(RuntimeError, match="Kernel size can't be greater"):
            m(x)
        return
    y = m(x)
    assert y.shape == ty.shape
    np.testing.assert_allclose(y.numpy(), ty, rtol=1e-10, atol=1e-12)


def test_conv2d_unbatched_input():
    m = nn.Conv2d(2, 3, 3, padding=1, dtype=np.float64)
    x = RNG.normal(size=(2, 5, 5))
    np.testing.assert_allclose(m(x).numpy(), m(x[None]).numpy()[0], rtol=1e-12)
    with pytest.raises(RuntimeError, match="3-D .* or 4-D"):
        m(np.ones((5, 5)))


def test_conv2d_gradcheck():
    m = nn.Conv2d(4, 2, 3, stride=2, padding=1, dilation=1, groups=2, dtype=np.float64)

    def f(x, w, b):
        m.weight, m.bias = w, b
        return m(x)
    gradcheck(f, RNG.normal(size=(2, 4, 5, 5)), m.weight.data, m.bias.data)


def test_conv2d_reflect_padding_gradcheck():
    m = nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect", bias=False, dtype=np.float64)

    def f(x, w):
        m.weight = w
        return m(x)
    gradcheck(f, RNG.normal(size=(1, 1, 4, 5)), m.weight.data)


def test_conv2d_default_init():
    to.manual_seed(1)
    m = nn.Conv2d(16, 32, 3)
    fan_in = 16 * 9
    bound = 1 / math.sqrt(fan_in)
    assert m.weight.shape == (32, 16, 3, 3)
    assert np.abs(m.weight.data).max() <= bound and np.abs(m.bias.data).max() <= bound
    assert m.weight.data.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    assert nn.Conv2d(4, 6, 3, groups=2).weight.shape == (6, 2, 3, 3)


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(groups=0), ValueError, "groups must be a positive integer"),
    (dict(groups=3), ValueError, "in_channels must be divisible by groups"),
    (dict(padding="full"), ValueError, "Invalid padding string 'full'"),
    (dict(padding="same", stride=2), ValueError, "not supported for strided convolutions"),
    (dict(padding_mode="mirror"), ValueError, "padding_mode must be one of"),
    (dict(kernel_size=(3, 3, 3)), TypeError, "kernel_size must be an int or a tuple of 2"),
])
def test_conv2d_constructor_errors(kwargs, exc, msg):
    args = dict(in_channels=4, out_channels=6, kernel_size=3)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        nn.Conv2d(**args)


def test_conv2d_out_channels_divisible_by_groups():
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        nn.Conv2d(4, 5, 3, groups=2)


# ---- pooling -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=(2, 3), stride=1, dilation=(2, 1)),
                                dict(kernel_size=3, stride=2, ceil_mode=True)])
def test_maxpool2d_matches_torch(kw):
    torch = _torch()
    x = RNG.normal(size=(2, 3, 7, 8))
    m, tm = nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw)
    assert repr(m) == repr(tm)
    xp, tx = to.Parameter(x), _t(x).requires_grad_()
    y, ty = m(xp), tm(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy())
    w = RNG.normal(size=y.shape)
    (y * w).sum().backward()
    (ty * _t(w)).sum().backward()
    np.testing.assert_allclose(xp.grad, tx.grad.numpy(), rtol=1e-12)


def test_maxpool2d_return_indices():
    torch = _torch()
    x = RNG.normal(size=(1, 2, 4, 4))
    y, idx = nn.MaxPool2d(2, return_indices=True)(x)
    ty, tidx = torch.nn.MaxPool2d(2, return_indices=True)(_t(x))
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_allclose(y.numpy(), ty.numpy())


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1,
                                     count_include_pad=False, ceil_mode=True),
                                dict(kernel_size=2, divisor_override=3)])
def test_avgpool2d_matches_torch(kw):
    torch = _torch()
    x = RNG.normal(size=(2, 3, 7, 8))
    m, tm = nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw)
    assert repr(m) == repr(tm)
    xp, tx = to.Parameter(x), _t(x).requires_grad_()
    y, ty = m(xp), tm(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    w = RNG.normal(size=y.shape)
    (y * w).sum().backward()
    (ty * _t(w)).sum().backward()
    np.testing.assert_allclose(xp.grad, tx.grad.numpy(), rtol=1e-12)


def test_pooling_numpy_reference():
    x = RNG.normal(size=(2, 3, 6, 4)).astype(np.float32)
    blocks = x.reshape(2, 3, 3, 2, 2, 2)
    np.testing.assert_allclose(nn.MaxPool2d(2)(x).numpy(), blocks.max(axis=(3, 5)))
    # float32 sums of four: relative error is unbounded where the mean nearly cancels to 0
    np.testing.assert_allclose(nn.AvgPool2d(2)(x).numpy(), blocks.mean(axis=(3, 5)), rtol=1e-6,
                               atol=1e-6)


# ---- Flatten -----------------------------------------------------------------------------------
def test_flatten_and_unflatten():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(nn.Flatten()(x).numpy(), x.reshape(2, -1))
    np.testing.assert_array_equal(nn.Flatten(0, 2)(x).numpy(), x.reshape(24, 5))
    np.testing.assert_array_equal(nn.Unflatten(1, (3, 4))(x.reshape(2, 12, 5)).numpy(), x)
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.Unflatten(1, (3, 4))) == "Unflatten(dim=1, unflattened_size=(3, 4))"


# ---- activations -------------------------------------------------------------------------------
ACTIVATIONS = [("ReLU", (), {}), ("ReLU", (True,), {}), ("LeakyReLU", (0.2,), {}),
               ("GELU", (), {}), ("GELU", ("tanh",), {}), ("Sigmoid", (), {}), ("Tanh", (), {}),
               ("SiLU", (), {}), ("Softplus", (), {"beta": 2.0, "threshold": 5.0}),
               ("Softmax", (1,), {}), ("LogSoftmax", (-1,), {}), ("Identity", (), {})]


@pytest.mark.parametrize("name, args, kwargs", ACTIVATIONS,
                         ids=[f"{a[0]}{a[1]}" for a in ACTIVATIONS])
def test_activations_match_torch(name, args, kwargs):
    torch = _torch()
    m, tm = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(m) == repr(tm)
    x = RNG.normal(scale=3.0, size=(4, 6))
    xp, tx = to.Parameter(x), _t(x).requires_grad_()
    y, ty = m(xp), tm(tx * 1.0)  # torch's inplace=True needs a non-leaf input
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    if name != "Identity":
        w = RNG.normal(size=y.shape)
        (y * w).sum().backward()
        (ty * _t(w)).sum().backward()
        np.testing.assert_allclose(xp.grad, tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_activations_numpy_reference_float32():
    x = np.linspace(-4, 4, 17, dtype=np.float32)
    np.testing.assert_allclose(nn.ReLU()(x).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(nn.LeakyReLU()(x).numpy(), np.where(x >= 0, x, 0.01 * x),
                               rtol=1e-6)
    np.testing.assert_allclose(nn.Sigmoid()(x).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_allclose(nn.Tanh()(x).numpy(), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(nn.SiLU()(x).numpy(), x / (1 + np.exp(-x)), rtol=1e-5,
                               atol=1e-7)
    s = nn.Softmax(dim=0)(x).numpy()
    np.testing.assert_allclose(s, np.exp(x) / np.exp(x).sum(), rtol=1e-6)
    assert nn.ReLU()(x).dtype == np.float32


def test_softmax_without_dim_warns_and_uses_legacy_dim():
    x = RNG.normal(size=(2, 3))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        y = nn.Softmax()(x).numpy()
    np.testing.assert_allclose(y.sum(1), 1.0)
    with pytest.warns(UserWarning, match="log_softmax"):
        y = nn.LogSoftmax()(x[0]).numpy()
    np.testing.assert_allclose(np.exp(y).sum(), 1.0)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        nn.GELU("erf")


# ---- Dropout -----------------------------------------------------------------------------------
def test_dropout_train_and_eval():
    d = nn.Dropout(0.25)
    assert repr(d) == "Dropout(p=0.25, inplace=False)"
    x = np.ones((200, 100), np.float32)
    y = d(x).numpy()
    dropped = (y == 0).mean()
    assert 0.23 < dropped < 0.27
    np.testing.assert_allclose(y[y != 0], 1 / 0.75, rtol=1e-6)
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x)
    d.train()
    assert (d(x).numpy() == 0).any()


def test_dropout_is_seeded_and_new_mask_each_call():
    x = np.ones((50, 40), np.float32)
    d = nn.Dropout(0.5)
    to.manual_seed(7)
    a, b = d(x).numpy(), d(x).numpy()
    to.manual_seed(7)
    np.testing.assert_array_equal(d(x).numpy(), a)
    assert not np.array_equal(a, b)


def test_dropout_gradient_uses_the_same_mask():
    d = nn.Dropout(0.5)
    p = to.Parameter(np.ones((30, 30)))
    y = d(p)
    (y * 1.0).sum().backward()
    np.testing.assert_array_equal(p.grad, y.numpy())
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            nn.Dropout(bad)


def test_dropout_inside_model_switches_with_train_eval():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.9))
    x = RNG.normal(size=(4, 8)).astype(np.float32)
    model.eval()
    a, b = model(x).numpy(), model(x).numpy()
    np.testing.assert_array_equal(a, b)
    model.train()
    assert (model(x).numpy() == 0).mean() > 0.5


# ---- Embedding ---------------------------------------------------------------------------------
def test_embedding_matches_torch_and_padding_row_gets_no_grad():
    torch = _torch()
    m = nn.Embedding(10, 4, padding_idx=1, dtype=np.float64)
    tm = torch.nn.Embedding(10, 4, padding_idx=1, dtype=torch.float64)
    _copy_to_torch(m, tm)
    assert repr(m) == repr(tm)
    np.testing.assert_array_equal(m.weight.data[1], 0)
    idx = np.array([[1, 2, 2], [3, 1, 9]])
    y, ty = m(idx), tm(_t(idx))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy())
    w = RNG.normal(size=y.shape)
    (y * w).sum().backward()
    (ty * _t(w)).sum().backward()
    np.testing.assert_allclose(m.weight.grad, tm.weight.grad.numpy(), rtol=1e-12)
    assert not m.weight.grad[1].any()


def test_embedding_gradcheck_and_init():
    to.manual_seed(3)
    m = nn.Embedding(300, 50)
    assert m.weight.data.mean() == pytest.approx(0, abs=0.02)
    assert m.weight.data.std() == pytest.approx(1, rel=0.02)
    e = nn.Embedding(6, 3, dtype=np.float64)
    idx = np.array([0, 2, 2, 5])

    def f(w):
        e.weight = w
        return e(idx)
    gradcheck(f, e.weight.data)


def test_embedding_max_norm_and_from_pretrained():
    torch = _torch()
    w = RNG.normal(scale=3.0, size=(5, 3))
    m = nn.Embedding.from_pretrained(w, max_norm=1.0)
    tm = torch.nn.Embedding.from_pretrained(_t(w.copy()), max_norm=1.0)
    assert repr(m) == repr(tm) and m.weight.dtype == np.float64
    assert not m.weight.requires_grad
    idx = np.array([0, 3])
    np.testing.assert_allclose(m(idx).numpy(), tm(_t(idx)).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(m.weight.data, tm.weight.detach().numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="2-dimensional"):
        nn.Embedding.from_pretrained(np.ones(3))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(4, 2, padding_idx=4)
    assert nn.Embedding(4, 2, padding_idx=-1).padding_idx == 3


# ---- LayerNorm ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(elementwise_affine=False)])
def test_layernorm_matches_torch(kw):
    torch = _torch()
    m = nn.LayerNorm((3, 4), dtype=np.float64, **kw)
    tm = torch.nn.LayerNorm((3, 4), dtype=torch.float64, **kw)
    if m.weight is not None:
        m.weight.data[:] = RNG.normal(size=(3, 4))
    if m.bias is not None:
        m.bias.data[:] = RNG.normal(size=(3, 4))
    _copy_to_torch(m, tm)
    assert repr(m) == repr(tm)
    _grads_vs_torch(m, tm, RNG.normal(2.0, 3.0, size=(2, 5, 3, 4)))


def test_layernorm_gradcheck_and_init():
    m = nn.LayerNorm(5, dtype=np.float64)
    np.testing.assert_array_equal(m.weight.data, 1)
    np.testing.assert_array_equal(m.bias.data, 0)

    def f(x, w, b):
        m.weight, m.bias = w, b
        return m(x)
    gradcheck(f, RNG.normal(size=(3, 5)), RNG.normal(size=5), RNG.normal(size=5))


# ---- BatchNorm ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, shape, kw", [
    ("BatchNorm2d", (4, 3, 5, 5), dict()),
    ("BatchNorm1d", (6, 3), dict(momentum=0.3)),
    ("BatchNorm1d", (4, 3, 7), dict(momentum=None)),
    ("BatchNorm2d", (4, 3, 2, 2), dict(affine=False)),
    ("BatchNorm2d", (4, 3, 2, 2), dict(track_running_stats=False)),
    ("BatchNorm1d", (5, 3), dict(bias=False)),
])
def test_batchnorm_running_stats_match_torch_over_steps(cls, shape, kw):
    torch = _torch()
    m = getattr(nn, cls)(3, dtype=np.float64, **kw)
    tm = getattr(torch.nn, cls)(3, dtype=torch.float64, **kw)
    if m.weight is not None:
        m.weight.data[:] = RNG.normal(size=3)
    if m.bias is not None:
        m.bias.data[:] = RNG.normal(size=3)
    _copy_to_torch(m, tm)
    assert repr(m) == repr(tm)
    assert list(m.state_dict()) == list(tm.state_dict())
    for _ in range(3):
        _grads_vs_torch(m, tm, RNG.normal(1.0, 2.0, size=shape))
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            mine, ref = getattr(m, name), getattr(tm, name)
            assert (mine is None) == (ref is None)
            if mine is not None:
                np.testing.assert_allclose(mine, ref.numpy(), rtol=1e-12, err_msg=name)
    m.eval()
    tm.eval()
    x = RNG.normal(size=shape)
    np.testing.assert_allclose(m(x).numpy(), tm(_t(x)).detach().numpy(), rtol=1e-10,
                               atol=1e-12)


def test_batchnorm_eval_does_not_touch_running_stats_and_reuses_plan():
    m = nn.BatchNorm2d(2)
    x = RNG.normal(size=(4, 2, 3, 3)).astype(np.float32)
    m(x).numpy()
    mean, var = m.running_mean.clone(), m.running_var.clone()
    assert int(m.num_batches_tracked) == 1
    m.eval()
    y = m(x).numpy()
    np.testing.assert_array_equal(m.running_mean, mean)
    np.testing.assert_array_equal(m.running_var, var)
    expect = (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    assert int(m.num_batches_tracked) == 1


def test_batchnorm_train_step_updates_stats_once_per_step():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    bn = model[1]
    x = RNG.normal(size=(8, 4)).astype(np.float32)
    for step in range(1, 4):
        model.zero_grad()
        out = model(x)
        h = model[0](x).numpy()
        expect = 0.9 * bn.running_mean + 0.1 * h.mean(0)
        out.sum().backward()
        np.testing.assert_allclose(bn.running_mean, expect, rtol=1e-5, atol=1e-7)
        assert int(bn.num_batches_tracked) == step


def test_batchnorm_gradcheck():
    m = nn.BatchNorm2d(2, dtype=np.float64)

    def f(x, w, b):
        m.weight, m.bias = w, b
        return m(x)
    gradcheck(f, RNG.normal(size=(3, 2, 2, 2)), RNG.normal(size=2), RNG.normal(size=2))


def test_batchnorm_input_checks_and_reset():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 2D input\)"):
        nn.BatchNorm2d(3)(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(np.ones((2, 3, 1, 1), np.float32))
    with pytest.raises(ValueError, match="expected 3 channels"):
        nn.BatchNorm1d(3)(np.ones((2, 4), np.float32))
    m = nn.BatchNorm1d(3)
    m(RNG.normal(size=(4, 3)).astype(np.float32)).numpy()
    m.reset_running_stats()
    np.testing.assert_array_equal(m.running_mean, 0)
    np.testing.assert_array_equal(m.running_var, 1)
    assert int(m.num_batches_tracked) == 0
    assert m.num_batches_tracked.dtype == np.int64


def test_batchnorm_state_dict_round_trip():
    a, b = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    for _ in range(2):
        a(RNG.normal(size=(5, 3)).astype(np.float32)).numpy()
    b.load_state_dict(a.state_dict())
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


# ---- repr of a whole model ---------------------------------------------------------------------
def test_model_repr_matches_torch():
    torch = _torch()

    def build(n):
        return n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.BatchNorm2d(8), n.ReLU(),
                            n.MaxPool2d(2), n.Dropout(0.1), n.Flatten(), n.Linear(8 * 14 * 14, 10),
                            n.LogSoftmax(dim=1))
    assert repr(build(nn)) == repr(build(torch.nn))


def test_linear_rejects_integer_and_bool_inputs_as_pytorch():
    m = nn.Linear(3, 2)
    for x, name in [(np.ones((4, 3), np.int64), "Long"), (np.ones((4, 3), bool), "Bool"),
                    (np.ones((4, 3), np.int32), "Int"), (np.ones(3, np.uint8), "Byte"),
                    (to.tensor(np.ones((2, 4, 3), np.int64)), "Long"), ([[1, 2, 3]], "Long")]:
        with pytest.raises(RuntimeError,
                           match=f"^mat1 and mat2 must have the same dtype, but got {name} and "
                                 f"Float$"):
            m(x)
    assert m(np.ones((4, 3), np.float32)).shape == (4, 2)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="but got Long and Float"):
        torch.nn.Linear(3, 2)(torch.ones(4, 3, dtype=torch.long))


@pytest.mark.parametrize("n_in, n_out", [(0, 2), (3, 0)])
@pytest.mark.parametrize("lead", [(), (2,), (0,), (3, 2)])
def test_linear_with_zero_features_is_pytorchs(n_in, n_out, lead):
    # found by tests/test_fuzz_api.py: a reshape(-1, 0) raised "cannot reshape array of size 0"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op"
        m = nn.Linear(n_in, n_out)
    x = to.tensor(np.ones(lead + (n_in,), np.float32), requires_grad=True)
    y = m(x)
    y.sum().backward()
    assert y.numpy().shape == lead + (n_out,)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(m.bias.data.numpy(), y.shape))
    assert x.grad.numpy().shape == x.shape and not x.grad.numpy().any()
    assert m.weight.grad.numpy().shape == (n_out, n_in)
    np.testing.assert_array_equal(m.bias.grad.numpy(), np.full(n_out, math.prod(lead)))
