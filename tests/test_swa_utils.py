"""tinyopt.optim.swa_utils: AveragedModel, SWALR, update_bn and the averaging functions, against
a numpy reference of PyTorch's equations and against torch 2.13 itself (values bit for bit)."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.kernels import averaging
from tinyopt.optim.swa_utils import (SWALR, AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn,
                                     get_swa_avg_fn, get_swa_multi_avg_fn, update_bn)

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _model(dtype=np.float32, bn=False):
    layers = [nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)]
    if bn:
        layers.insert(1, nn.BatchNorm1d(3))
    return nn.Sequential(*layers).to(dtype)


def _perturb(model, rng, k):
    for p in model.parameters():
        p.data = np.asarray(p._data + rng.standard_normal(p.shape).astype(p.dtype) * (k + 1))


def _torch_model(model):
    layers = []
    for m in model:
        if isinstance(m, nn.Linear):
            layers.append(torch.nn.Linear(m.in_features, m.out_features))
        elif isinstance(m, nn.BatchNorm1d):
            layers.append(torch.nn.BatchNorm1d(m.num_features))
        else:
            layers.append(torch.nn.Tanh())
    tm = torch.nn.Sequential(*layers).to(torch.float64 if model[0].weight.dtype == np.float64
                                         else torch.float32)
    tm.load_state_dict({k: torch.from_numpy(np.array(np.asarray(v))) for k, v in
                        model.state_dict().items()})
    return tm


def _sync(tm, model):
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), model.parameters()):
            tp.copy_(torch.from_numpy(np.array(p._data)))
        for tb, (_, b) in zip(tm.buffers(), model.named_buffers()):
            tb.copy_(torch.from_numpy(np.array(b)))


# ---- numpy reference of torch's equations ---------------------------------------------------------
def _ref_lerp(a, b, w):
    """torch's CPU lerp (AVX2 kernels: one fused multiply-add), exactly, via a wider type."""
    wide = np.longdouble
    d = (b - a).astype(wide)
    w = a.dtype.type(w)
    if abs(w) < 0.5:
        return (a.astype(wide) + wide(w) * d).astype(a.dtype)
    return (b.astype(wide) + wide(w - a.dtype.type(1)) * d).astype(a.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ema_and_swa_match_a_numpy_reference(dtype):
    rng = np.random.default_rng(0)
    model = _model(dtype)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    swa = AveragedModel(model)
    swa_lerp = AveragedModel(model, multi_avg_fn=get_swa_multi_avg_fn())
    ref = {k: None for k in ("ema", "swa", "lerp")}
    for step in range(5):
        _perturb(model, rng, step)
        cur = [np.array(p._data) for p in model.parameters()]
        if step == 0:
            ref = {k: [c.copy() for c in cur] for k in ref}
        else:
            ref["ema"] = [_ref_lerp(a, b, 1 - 0.9) for a, b in zip(ref["ema"], cur)]
            ref["swa"] = [a + (b - a) / dtype(step + 1) for a, b in zip(ref["swa"], cur)]
            w = float(np.float32(1) / np.float32(step + 1))
            ref["lerp"] = [_ref_lerp(a, b, w) for a, b in zip(ref["lerp"], cur)]
        for m in (ema, swa, swa_lerp):
            m.update_parameters(model)
        for key, m in (("ema", ema), ("swa", swa), ("lerp", swa_lerp)):
            for r, p in zip(ref[key], m.parameters()):
                np.testing.assert_array_equal(p._data, r, err_msg=f"{key} step {step}")
    assert int(ema.n_averaged) == 5


def _compare_with_torch(make, dtype, bn, steps=4):
    rng = np.random.default_rng(1)
    model = _model(dtype, bn)
    tm = _torch_model(model)
    ours, theirs = make(AveragedModel, model, False), make(torch.optim.swa_utils.AveragedModel,
                                                             tm, True)
    opt = optim.SGD(model.parameters(), lr=0.1)  # packs the model: read in place
    for step in range(steps):
        _perturb(model, rng, step)
        if bn:
            model.train()
            x = rng.standard_normal((5, 4)).astype(dtype)
            model(to.tensor(x)).sum().backward()
            opt.zero_grad()
        _sync(tm, model)
        ours.update_parameters(model)
        theirs.update_parameters(tm)
        sd, tsd = ours.state_dict(), theirs.state_dict()
        assert list(sd) == list(tsd)
        for k in sd:
            np.testing.assert_array_equal(np.asarray(sd[k]), tsd[k].numpy(), err_msg=k)
            assert np.asarray(sd[k]).dtype == tsd[k].numpy().dtype, k


MAKERS = {
    "default": lambda cls, m, t: cls(m),
    "ema_multi": lambda cls, m, t: cls(m, multi_avg_fn=(torch.optim.swa_utils if t else
                                                        to.optim.swa_utils).get_ema_multi_avg_fn(0.8)),
    "swa_multi": lambda cls, m, t: cls(m, multi_avg_fn=(torch.optim.swa_utils if t else
                                                        to.optim.swa_utils).get_swa_multi_avg_fn()),
    "ema_single": lambda cls, m, t: cls(m, avg_fn=(torch.optim.swa_utils if t else
                                                   to.optim.swa_utils).get_ema_avg_fn(0.7)),
    "swa_single": lambda cls, m, t: cls(m, avg_fn=(torch.optim.swa_utils if t else
                                                   to.optim.swa_utils).get_swa_avg_fn()),
    "ema_buffers": lambda cls, m, t: cls(m, multi_avg_fn=(torch.optim.swa_utils if t else
                                                          to.optim.swa_utils).get_ema_multi_avg_fn(0.6),
                                         use_buffers=True),
    "default_buffers": lambda cls, m, t: cls(m, use_buffers=True),
}


@needs_torch
@pytest.mark.parametrize("name", list(MAKERS))
def test_averaged_model_matches_torch_bit_for_bit(name):
    bn = name.endswith("buffers")
    _compare_with_torch(MAKERS[name], np.float32, bn=bn or name == "default")


@needs_torch
@pytest.mark.parametrize("name", ["ema_multi", "swa_multi", "default"])
def test_averaged_model_matches_torch_float64(name):
    _compare_with_torch(MAKERS[name], np.float64, bn=False, steps=3)


@needs_torch
def test_custom_multi_avg_fn_gets_lists_per_dtype_and_a_count():
    seen = []

    def halfway(avg, cur, n):
        seen.append((len(avg), int(np.asarray(n.numpy() if isinstance(n, to.Tensor) else n))))
        for a, c in zip(avg, cur):
            a.copy_((a + c) / 2)

    model = _model()
    ema = AveragedModel(model, multi_avg_fn=halfway)
    for k in range(3):
        ema.update_parameters(model)
        _perturb(model, np.random.default_rng(k), k)
    assert seen == [(4, 1), (4, 2)]


def test_one_fused_kernel_call_per_update(monkeypatch):
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(10)])
    flat = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    at = 0
    with to.no_grad():  # the 20 parameters end to end in one array (the layers' usual layout)
        for p in model.parameters():
            p.set_(to.from_numpy(flat[at:at + p.numel()].reshape(p.shape)))
            at += p.numel()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
    ema.update_parameters(model)
    calls = []
    real = averaging.lerp_

    class Spy:
        def __call__(self, a, b, w, c):
            calls.append((a.size, b.base is not None))
            return real(a, b, w, c)

    monkeypatch.setattr(averaging, "lerp_", Spy())
    ema.update_parameters(model)
    n = sum(p.numel() for p in model.parameters())
    assert calls == [(n, True)]
    # a model whose parameters are not end to end (no optimizer) is gathered: still one call
    other = nn.Sequential(*[nn.Linear(8, 8) for _ in range(10)])
    calls.clear()
    ema.update_parameters(other)
    assert [c[0] for c in calls] == [n]
    ref = copy.deepcopy(ema)  # a deep copy averages on its own storage
    ref.update_parameters(model)
    assert not np.shares_memory(ref.module[0].weight._data, ema.module[0].weight._data)


def test_averaged_model_state_dict_and_errors():
    model = _model(bn=True)
    swa = AveragedModel(model)
    assert list(swa.state_dict())[0] == "n_averaged"
    assert all(k.startswith("module.") for k in list(swa.state_dict())[1:])
    swa.update_parameters(model)
    swa.update_parameters(model)
    other = AveragedModel(_model(bn=True))
    other.load_state_dict(swa.state_dict())
    assert int(other.n_averaged) == 2
    for a, b in zip(other.parameters(), swa.parameters()):
        np.testing.assert_array_equal(a._data, b._data)
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
        AveragedModel(model, avg_fn=get_swa_avg_fn(), multi_avg_fn=get_swa_multi_avg_fn())
    with pytest.raises(ValueError, match=r"Invalid decay value 1.5 provided"):
        get_ema_multi_avg_fn(1.5)
    with pytest.raises(ValueError, match=r"Invalid decay value -0.1 provided"):
        get_ema_avg_fn(-0.1)
    with pytest.raises(ValueError, match="the model has 4 parameters, the averaged model 6"):
        swa.update_parameters(_model())


@needs_torch
def test_torch_state_dict_loads():
    model = _model()
    tm = _torch_model(model)
    tswa = torch.optim.swa_utils.AveragedModel(tm)
    tswa.update_parameters(tm)
    tswa.update_parameters(tm)
    swa = AveragedModel(model)
    swa.load_state_dict({k: v.numpy() for k, v in tswa.state_dict().items()})
    assert int(swa.n_averaged) == 2


# ---- update_bn --------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("wrap", [False, True])
def test_update_bn_matches_torch(wrap):
    rng = np.random.default_rng(3)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=0.3), nn.ReLU())
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3, momentum=0.3),
                             torch.nn.ReLU())
    tm.load_state_dict({k: torch.from_numpy(np.array(np.asarray(v)))
                        for k, v in model.state_dict().items()})
    batches = [rng.standard_normal((6, 4)).astype(np.float32) for _ in range(4)]
    model.eval()
    tm.eval()
    if wrap:
        loader = [(to.tensor(x), np.zeros(6)) for x in batches]
        tloader = [(torch.from_numpy(x), torch.zeros(6)) for x in batches]
    else:
        loader = [to.tensor(x) for x in batches]
        tloader = [torch.from_numpy(x) for x in batches]
    update_bn(loader, model)
    torch.optim.swa_utils.update_bn(tloader, tm)
    bn, tbn = model[1], tm[1]
    np.testing.assert_allclose(bn.running_mean, tbn.running_mean.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bn.running_var, tbn.running_var.numpy(), rtol=1e-6, atol=1e-7)
    assert int(bn.num_batches_tracked) == int(tbn.num_batches_tracked) == 4
    assert bn.momentum == 0.3 and not model.training
    # the statistics are the plain average over the batches (momentum None while it runs)
    h = [x @ np.asarray(model[0].weight._data).T + model[0].bias._data for x in batches]
    np.testing.assert_allclose(bn.running_mean, np.mean([x.mean(0) for x in h], axis=0),
                               rtol=1e-5, atol=1e-6)


def test_update_bn_without_batchnorm_leaves_the_model_alone():
    model = _model()
    model.eval()
    update_bn([np.zeros((2, 4), np.float32)], model)
    assert not model.training


# ---- SWALR -----------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("strategy,epochs", [("cos", 5), ("linear", 3), ("cos", 0), ("linear", 1)])
def test_swalr_lrs_match_torch_at_every_step(strategy, epochs):
    def make(lib, params):
        groups = [{"params": params[:1]}, {"params": params[1:], "lr": 0.2}]
        opt = lib.optim.SGD(groups, lr=0.5)
        return opt, lib.optim.swa_utils.SWALR(opt, swa_lr=[0.05, 0.01], anneal_epochs=epochs,
                                              anneal_strategy=strategy)

    opt, sched = make(to, [nn.Parameter(np.zeros(2, np.float32)) for _ in range(2)])
    topt, tsched = make(torch, [torch.nn.Parameter(torch.zeros(2)) for _ in range(2)])
    assert sched.get_last_lr() == tsched.get_last_lr()
    for _ in range(epochs + 3):
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert sched.get_last_lr() == tsched.get_last_lr()
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
    assert [g["swa_lr"] for g in opt.param_groups] == [0.05, 0.01]
    sd, tsd = sched.state_dict(), tsched.state_dict()
    assert sd == tsd
    fresh_opt, fresh = make(to, [nn.Parameter(np.zeros(2, np.float32)) for _ in range(2)])
    fresh.load_state_dict(tsd)
    assert fresh.anneal_func is fresh._cosine_anneal if strategy == "cos" else \
        fresh.anneal_func is fresh._linear_anneal


def test_swalr_reference_and_errors():
    p = nn.Parameter(np.zeros(2, np.float32))
    opt = optim.SGD([p], lr=1.0)
    sched = SWALR(opt, swa_lr=0.0, anneal_epochs=4, anneal_strategy="linear")
    lrs = []
    for _ in range(5):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(lrs, [0.75, 0.5, 0.25, 0.0, 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear', "
                                         "instead got exp"):
        SWALR(opt, swa_lr=0.1, anneal_strategy="exp")
    with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0, got -1"):
        SWALR(opt, swa_lr=0.1, anneal_epochs=-1)
    with pytest.raises(ValueError, match="swa_lr must have the same length as "
                                         "optimizer.param_groups"):
        SWALR(opt, swa_lr=[0.1, 0.2])
    with pytest.raises(ValueError, match="anneal_epochs"):
        sched.load_state_dict({**sched.state_dict(), "anneal_epochs": -3})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sched.get_lr()
    assert any("get_last_lr()" in str(x.message) for x in w)
    assert math.isclose(SWALR._cosine_anneal(0.5), 0.5)
