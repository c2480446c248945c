"""State dicts move between PyTorch and tinyopt in both directions and training continues alike."""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt import Parameter, optim
from tinyopt.optim.torch_compat import from_torch, to_torch

torch = pytest.importorskip("torch")

CASES = [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01, amsgrad=True)),
         ("AdamW", dict(lr=0.01)), ("Adagrad", dict(lr=0.1)),
         ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)), ("Adadelta", {}),
         ("Adamax", dict(lr=0.01)), ("NAdam", dict(lr=0.01)), ("RAdam", dict(lr=0.01)),
         ("ASGD", dict(lr=0.01, t0=3)), ("Rprop", dict(lr=0.01))]
SHAPES = [(4, 3), (3,), (2,)]


def _grads(t):
    rng = np.random.default_rng(t)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _torch_setup(name, kw, names=False):
    tps = [torch.nn.Parameter(torch.linspace(-1, 1, int(np.prod(s))).reshape(s)) for s in SHAPES]
    items = [(f"p{i}", p) for i, p in enumerate(tps)] if names else tps
    return tps, getattr(torch.optim, name)(items, **kw)


def _tiny_setup(name, kw, tps, names=False):
    ps = [Parameter(tp.detach().numpy().copy()) for tp in tps]
    items = [(f"p{i}", p) for i, p in enumerate(ps)] if names else ps
    return ps, getattr(optim, name)(items, **kw)


def _torch_step(tps, topt, t):
    for tp, g in zip(tps, _grads(t)):
        tp.grad = torch.from_numpy(g)
    topt.step()


def _tiny_step(ps, opt, t):
    for p, g in zip(ps, _grads(t)):
        p.grad = g
    opt.step()


@pytest.mark.parametrize("name,kw", CASES)
def test_torch_state_dict_loads_into_tinyopt(name, kw):
    tps, topt = _torch_setup(name, kw)
    for t in range(5):
        _torch_step(tps, topt, t)
    ps, opt = _tiny_setup(name, kw, tps)
    opt.load_state_dict(from_torch(topt.state_dict()))
    assert opt.state[ps[0]].keys() == topt.state[tps[0]].keys()
    for t in range(5, 10):
        _torch_step(tps, topt, t)
        _tiny_step(ps, opt, t)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,kw", CASES)
def test_tinyopt_state_dict_loads_into_torch(name, kw):
    tps, _ = _torch_setup(name, kw, names=True)
    ps, opt = _tiny_setup(name, kw, tps, names=True)
    for t in range(5):
        _tiny_step(ps, opt, t)
    with torch.no_grad():
        for tp, p in zip(tps, ps):
            tp.copy_(torch.from_numpy(p.data.numpy()))
    topt = getattr(torch.optim, name)([(f"p{i}", p) for i, p in enumerate(tps)], **kw)
    topt.load_state_dict(to_torch(opt.state_dict()))
    st = topt.state[tps[0]]
    if "step" in st:
        assert st["step"].dtype == torch.float32 and st["step"].shape == ()
    for t in range(5, 10):
        _torch_step(tps, topt, t)
        _tiny_step(ps, opt, t)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_from_torch_converts_tensors_and_keeps_layout():
    tps, topt = _torch_setup("Adam", dict(lr=torch.tensor(0.01)))
    _torch_step(tps, topt, 0)
    sd = from_torch(topt.state_dict())
    assert isinstance(sd["param_groups"][0]["lr"], float)
    st = sd["state"][0]
    assert st["step"].dtype == np.float32 and st["step"].shape == ()
    assert isinstance(st["exp_avg"], np.ndarray) and st["exp_avg"].shape == SHAPES[0]
    st["exp_avg"][...] = 0  # a copy: the torch optimizer is untouched
    assert float(topt.state[tps[0]]["exp_avg"].abs().sum()) > 0


def test_to_torch_does_not_alias_numpy():
    ps = [Parameter(np.ones(3, np.float32))]
    opt = optim.Adam(ps)
    ps[0].grad = np.ones(3, np.float32)
    opt.step()
    sd = opt.state_dict()
    tsd = to_torch(sd)
    tsd["state"][0]["exp_avg"].zero_()
    assert sd["state"][0]["exp_avg"].sum() > 0
