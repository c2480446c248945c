"""The nn modules issue 11 adds, against ``torch.nn``: constructor arguments and defaults, parameter
names, shapes and initial distributions, ``repr``, and forward/backward with the same weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn

torch = pytest.importorskip("torch")
rng = np.random.default_rng(6)


def copy_weights(ours: nn.Module, theirs) -> None:
    """Give ``ours`` the parameters and buffers of ``theirs`` (same names and shapes)."""
    sd = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    ours.load_state_dict(sd)


def run_both(ours: nn.Module, theirs, *inputs, train: bool = True, rtol: float = 1e-5,
             atol: float = 1e-6) -> None:
    """Forward and backward of both modules on the same float64 inputs; compare outputs, input
    gradients, parameter gradients and buffers."""
    ours.double().train(train)
    theirs.double().train(train)
    copy_weights(ours, theirs)
    params = [to.Parameter(np.array(x)) for x in inputs]
    tens = [torch.tensor(np.array(x), requires_grad=True) for x in inputs]
    out, ref = ours(*params), theirs(*tens)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    w = rng.uniform(0.5, 1.5, size=ref.shape)
    (out * to.tensor(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for p, t in zip(params, tens):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=rtol, atol=atol)
    ours_p = dict(ours.named_parameters())
    for name, tp in theirs.named_parameters():
        np.testing.assert_allclose(ours_p[name].grad, tp.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)
    ours_sd = ours.state_dict()
    for name, tb in theirs.named_buffers():
        np.testing.assert_allclose(np.asarray(ours_sd[name]), tb.numpy(), rtol=1e-10,
                                   err_msg=name)


X4 = rng.normal(size=(2, 4, 6, 6))


@pytest.mark.parametrize("make", [
    lambda m: m.ConvTranspose2d(4, 6, 3),
    lambda m: m.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, bias=False),
    lambda m: m.ConvTranspose2d(4, 6, 3, stride=2, groups=2, dilation=2),
    lambda m: m.GroupNorm(2, 4), lambda m: m.GroupNorm(4, 4, affine=False, eps=1e-3),
    lambda m: m.InstanceNorm2d(4), lambda m: m.InstanceNorm2d(4, affine=True),
    lambda m: m.InstanceNorm2d(4, track_running_stats=True, momentum=0.3),
    lambda m: m.Upsample(scale_factor=2), lambda m: m.Upsample(size=(5, 9), mode="bilinear"),
    lambda m: m.Upsample(scale_factor=1.5, mode="bilinear", align_corners=True),
    lambda m: m.UpsamplingNearest2d(scale_factor=3), lambda m: m.UpsamplingBilinear2d(size=7),
    lambda m: m.PixelShuffle(2), lambda m: m.PixelUnshuffle(2),
    lambda m: m.ZeroPad2d((1, 2, 0, 3)), lambda m: m.ZeroPad2d(2),
    lambda m: m.ConstantPad2d(1, 3.5), lambda m: m.ReflectionPad2d((1, 0, 2, 1)),
    lambda m: m.ReplicationPad2d(2), lambda m: m.AdaptiveAvgPool2d((2, 3)),
    lambda m: m.AdaptiveAvgPool2d(1), lambda m: m.PReLU(), lambda m: m.PReLU(4, init=0.1),
    lambda m: m.ELU(0.5), lambda m: m.SELU(), lambda m: m.CELU(2.0), lambda m: m.Hardtanh(-2, 1),
    lambda m: m.ReLU6(), lambda m: m.LogSigmoid(), lambda m: m.Mish(),
])
def test_module_against_torch(make):
    ours, theirs = make(nn), make(torch.nn)
    assert repr(ours) == repr(theirs)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    run_both(ours, theirs, X4)
    if any(True for _ in theirs.buffers()):  # and in eval mode, with the running statistics
        run_both(ours, theirs, X4, train=False)


def test_one_dimensional_modules_against_torch():
    x = rng.normal(size=(2, 3, 7))
    for make in (lambda m: m.ZeroPad1d((2, 1)), lambda m: m.ConstantPad1d(2, -1.0),
                 lambda m: m.ReflectionPad1d(3), lambda m: m.ReplicationPad1d((0, 2)),
                 lambda m: m.InstanceNorm1d(3), lambda m: m.AdaptiveAvgPool1d(3),
                 lambda m: m.Upsample(scale_factor=2, mode="linear")):
        ours, theirs = make(nn), make(torch.nn)
        assert repr(ours) == repr(theirs)
        run_both(ours, theirs, x)


@pytest.mark.parametrize("make, shape", [
    (lambda m: m.AdaptiveMaxPool1d(3), (2, 3, 7)), (lambda m: m.AdaptiveMaxPool1d(2), (3, 8)),
    (lambda m: m.AdaptiveMaxPool3d((2, None, 3)), (2, 2, 5, 4, 7)),
    (lambda m: m.AdaptiveMaxPool3d(2), (2, 5, 4, 7)),  # unbatched (C, D, H, W)
    (lambda m: m.LPPool1d(2, 3), (2, 3, 7)), (lambda m: m.LPPool1d(3, 2, stride=1), (3, 7)),
    (lambda m: m.LPPool2d(2, (2, 3), stride=2, ceil_mode=True), (2, 3, 5, 7)),
    (lambda m: m.LPPool2d(float("inf"), 2), (3, 4, 6)),
    (lambda m: m.LPPool3d(2, 2), (2, 2, 4, 4, 5)),
    (lambda m: m.LPPool3d(4, (2, 1, 2)), (2, 4, 3, 4)),
])
def test_pooling_modules_against_torch(make, shape):
    """The adaptive max and power-average pooling modules, batched and unbatched (inputs of
    both signs: an odd power's negative window means are clamped to 0, as torch's)."""
    ours, theirs = make(nn), make(torch.nn)
    assert repr(ours) == repr(theirs)
    run_both(ours, theirs, rng.permutation(np.prod(shape)).reshape(shape) / 10.0 - 0.5)


def test_conv_transpose_output_size():
    ours, theirs = nn.ConvTranspose2d(4, 2, 3, stride=2), torch.nn.ConvTranspose2d(4, 2, 3,
                                                                                   stride=2)
    ours.double(), theirs.double()
    copy_weights(ours, theirs)
    for size in ((13, 14), (2, 2, 14, 13)):
        y = ours(X4, output_size=size)
        ty = theirs(torch.from_numpy(X4), output_size=size)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="valid sizes range from"):
        ours(X4, output_size=(20, 20))
    with pytest.raises(ValueError, match='Only "zeros" padding mode'):
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")


@pytest.mark.parametrize("make", [lambda m: m.ConvTranspose2d(8, 16, 3),
                                  lambda m: m.ConvTranspose2d(8, 4, (5, 3), groups=4)])
def test_conv_transpose_initialisation_matches_torch(make):
    to.manual_seed(0)
    torch.manual_seed(0)
    ours, theirs = make(nn), make(torch.nn)
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        fan_in = tp.shape[1] * np.prod(tp.shape[2:]) if tp.ndim == 4 else \
            theirs.weight.shape[1] * np.prod(theirs.weight.shape[2:])
        bound = 1 / np.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) and the bias share this bound
        assert np.abs(p.data).max() <= bound + 1e-7 and np.abs(tp.detach().numpy()).max() <= bound
        assert np.abs(p.data).max() > 0.8 * bound  # uniform over the whole range
        assert p.dtype == np.float32


def test_dropout2d_zeroes_whole_channels():
    to.manual_seed(0)
    d = nn.Dropout2d(0.5)
    x = np.ones((8, 16, 3, 3), np.float32)
    y = d(x).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert ((per_channel == 0).all(2) | (per_channel == 2).all(2)).all()
    assert 0.3 < (per_channel[:, :, 0] == 0).mean() < 0.7
    assert (d.eval()(x).numpy() == x).all()
    assert repr(d) == repr(torch.nn.Dropout2d(0.5))
    p = to.Parameter(x.copy())
    out = d.train()(p)
    out.sum().backward()
    np.testing.assert_array_equal(p.grad, out.numpy())  # the gradient is the same mask
    for cls, shape in ((nn.Dropout1d, (4, 5, 6)), (nn.Dropout3d, (2, 3, 2, 2, 2))):
        out = cls(0.5)(np.ones(shape, np.float32)).numpy().reshape(shape[0], shape[1], -1)
        assert ((out == 0).all(2) | (out == 2).all(2)).all()
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        nn.Dropout2d()(np.ones((2, 3, 4), np.float32))


@pytest.mark.parametrize("make, n_inputs, target", [
    (lambda m: m.BCELoss(), 1, "prob"), (lambda m: m.BCELoss(reduction="sum"), 1, "prob"),
    (lambda m: m.KLDivLoss(reduction="batchmean"), 1, "prob"),
    (lambda m: m.KLDivLoss(reduction="sum", log_target=True), 1, "logprob"),
    (lambda m: m.SmoothL1Loss(beta=0.5), 1, "real"), (lambda m: m.HuberLoss(delta=0.3), 1, "real"),
    (lambda m: m.TripletMarginLoss(margin=0.5), 3, None),
    (lambda m: m.TripletMarginLoss(p=1, swap=True, reduction="none"), 3, None),
    (lambda m: m.CosineEmbeddingLoss(margin=0.2), 2, "sign"),
    (lambda m: m.MarginRankingLoss(margin=0.1), 2, "sign1"),
])
def test_loss_modules_against_torch(make, n_inputs, target):
    ours, theirs = make(nn), make(torch.nn)
    assert repr(ours) == repr(theirs)
    shape = (5,) if target == "sign1" else (5, 4)
    xs = [rng.normal(size=shape) for _ in range(n_inputs)]
    if target == "prob":
        xs = [1 / (1 + np.exp(-xs[0]))]
        if isinstance(ours, nn.KLDivLoss):
            xs = [np.log(xs[0] / xs[0].sum(1, keepdims=True))]
    extra = {"prob": lambda: rng.random(shape), "logprob": lambda: rng.normal(size=shape),
             "real": lambda: rng.normal(size=shape),
             "sign": lambda: np.array([1, -1, 1, 1, -1]),
             "sign1": lambda: np.array([1.0, -1.0, 1.0, 1.0, -1.0]), None: lambda: None}[target]()
    args = [to.Parameter(x.copy()) for x in xs]
    targs = [torch.tensor(x, requires_grad=True) for x in xs]
    if extra is not None:
        args.append(extra)
        targs.append(torch.from_numpy(extra))
    out, ref = ours(*args), theirs(*targs)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-8)
    out.sum().backward()
    ref.sum().backward()
    for a, t in zip(args, targs):
        if isinstance(a, to.Parameter):
            np.testing.assert_allclose(a.grad, t.grad.numpy(), rtol=1e-6, atol=1e-8)


def test_distance_modules_against_torch():
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    for make in (lambda m: m.CosineSimilarity(), lambda m: m.CosineSimilarity(dim=0, eps=1e-3),
                 lambda m: m.PairwiseDistance(), lambda m: m.PairwiseDistance(p=1, keepdim=True)):
        ours, theirs = make(nn), make(torch.nn)
        np.testing.assert_allclose(ours(a, b).numpy(),
                                   theirs(torch.from_numpy(a), torch.from_numpy(b)).numpy(),
                                   rtol=1e-10)


def test_constructor_errors_match_torch():
    for make in (lambda m: m.GroupNorm(3, 4), lambda m: m.Hardtanh(1, 0),
                 lambda m: m.TripletMarginLoss(margin=0.0)):
        with pytest.raises(Exception) as theirs, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make(torch.nn)
        with pytest.raises(type(theirs.value)):
            make(nn)


def test_instance_norm_checks():
    with pytest.raises(ValueError, match="expected 3D or 4D input"):
        nn.InstanceNorm2d(3)(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm2d(3, affine=True)(np.zeros((2, 4, 3, 3), np.float32))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm2d(3)(np.zeros((2, 4, 3, 3), np.float32))
    unbatched = nn.InstanceNorm2d(4)(X4[0].astype(np.float32))
    assert unbatched.shape == (4, 6, 6)


def test_rms_norm_and_batch_norm_3d_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float64)
    for shape, eps, affine in (((5,), None, True), ((4, 5), 1e-3, False)):
        tm = torch.nn.RMSNorm(shape, eps=eps, elementwise_affine=affine).double()
        om = to.nn.RMSNorm(shape, eps=eps, elementwise_affine=affine)
        om.to(np.float64)
        if affine:
            w = rng.standard_normal(shape)
            tm.weight.data = torch.tensor(w)
            om.weight.data[...] = w
        tx, ox = torch.tensor(x, requires_grad=True), to.tensor(x, requires_grad=True)
        tm(tx).pow(3).sum().backward()
        om(ox).pow(3).sum().backward()
        np.testing.assert_allclose(om(ox).numpy(), tm(tx).detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-10)
        if affine:
            np.testing.assert_allclose(om.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-10)
        assert repr(om) == repr(tm)
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 4\]"):
        to.nn.functional.rms_norm(to.ones(2, 3), (4,))
    x5 = rng.standard_normal((3, 2, 2, 3, 4)).astype(np.float32)
    tb, ob = torch.nn.BatchNorm3d(2), to.nn.BatchNorm3d(2)
    for train in (True, False):
        tb.train(train)
        ob.train(train)
        np.testing.assert_allclose(ob(x5).numpy(), tb(torch.tensor(x5)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ob.running_var.numpy(), tb.running_var.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="expected 5D input"):
        ob(to.ones(2, 2, 3))
