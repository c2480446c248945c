"""Behaviours torch's own optimizer test suite checks (issue 10, section 4): older state dicts,
global step hooks, deepcopy and pickle, param_groups edited in place, duplicate parameters,
Tensor hyperparameters, repr with param_names.  Each compares with torch 2.13 when installed."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.nn import Parameter
from tinyopt.optim import optimizer as optimizer_module
from tinyopt.optim.torch_compat import from_torch

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.1)),
]


def _values(n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(n)]


def _grads(step, n=2):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(n)]


def _pair(name, kwargs, values, groups=None):
    """The same optimizer over the same values in tinyopt and in torch."""
    ours = [Parameter(v.copy()) for v in values]
    theirs = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in values]
    make = groups or (lambda ps: ps)
    return (ours, getattr(optim, name)(make(ours), **kwargs),
            theirs, getattr(torch.optim, name)(make(theirs), **kwargs))


def _step_both(ours, opt, theirs, topt, step):
    for p, tp, g in zip(ours, theirs, _grads(step, len(ours))):
        p.grad = g
        tp.grad = torch.from_numpy(g.copy())
    opt.step()
    topt.step()


def _close(ours, theirs):
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(p._data, tp.detach().numpy(), rtol=2e-6, atol=1e-7)


# ---- state dicts of older torch versions ------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name,kwargs", CASES)
def test_older_state_dicts_get_the_defaults_torch_fills(name, kwargs):
    ours, opt, theirs, topt = _pair(name, kwargs, _values())
    _step_both(ours, opt, theirs, topt, 0)
    old = topt.state_dict()
    for g in old["param_groups"]:  # what torch 1.x did not save
        for key in ("maximize", "foreach", "capturable", "differentiable", "fused",
                    "decoupled_weight_decay", "amsgrad", "nesterov", "centered"):
            g.pop(key, None)
        if name == "RMSprop":
            g.pop("momentum")
    for st in old["state"].values():  # torch < 1.12 kept the step as a number
        if "step" in st:
            st["step"] = int(st["step"].item())
    fresh_ours, fresh, fresh_theirs, fresh_t = _pair(name, kwargs, [p._data for p in ours])
    fresh_t.load_state_dict(copy.deepcopy(old))
    converted = from_torch(old, optimizer=fresh)
    assert [sorted(g) for g in converted["param_groups"]] == \
        [sorted(g) for g in fresh_t.state_dict()["param_groups"]]
    fresh.load_state_dict(from_torch(old))
    for g, tg in zip(fresh.state_dict()["param_groups"], fresh_t.state_dict()["param_groups"]):
        assert {k: v for k, v in g.items() if k != "fused"} == \
            {k: v for k, v in tg.items() if k != "fused"}
    for step in range(1, 3):
        _step_both(fresh_ours, fresh, fresh_theirs, fresh_t, step)
    _close(fresh_ours, fresh_theirs)


# ---- step hooks -------------------------------------------------------------------------------------
def test_global_step_hooks_run_around_every_optimizer():
    calls = []
    p = Parameter(np.ones(2, np.float32))
    opt = optim.SGD([p], lr=0.1)
    local_pre = opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", o)))
    local_post = opt.register_step_post_hook(lambda o, a, k: calls.append(("post", o)))
    pre = optimizer_module.register_optimizer_step_pre_hook(
        lambda o, a, k: calls.append(("global pre", o)))
    post = optimizer_module.register_optimizer_step_post_hook(
        lambda o, a, k: calls.append(("global post", o)))
    try:
        p.grad = np.ones(2, np.float32)
        opt.step()
        assert calls == [("global pre", opt), ("pre", opt), ("post", opt), ("global post", opt)]
        other = optim.Adam([Parameter(np.ones(2, np.float32))])
        calls.clear()
        other.step()
        assert calls == [("global pre", other), ("global post", other)]
    finally:
        pre.remove()
        post.remove()
    local_pre.remove()
    local_post.remove()
    calls.clear()
    opt.step()
    assert calls == []


# ---- deepcopy and pickle ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,kwargs", CASES)
def test_deepcopy_with_the_model_forks_the_run(name, kwargs):
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    opt.register_step_post_hook(lambda *a: None)
    x = to.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))

    def train(m, o, steps):
        for _ in range(steps):
            o.zero_grad()
            (m(x) ** 2).mean().backward()
            o.step()

    train(model, opt, 2)
    model2, opt2 = copy.deepcopy((model, opt))
    assert [p for g in opt2.param_groups for p in g["params"]] == list(model2.parameters())
    assert not opt2._optimizer_step_post_hooks  # as torch: a copy keeps no hooks
    for a, b in zip(model.parameters(), model2.parameters()):
        assert not np.shares_memory(a._data, b._data)
    for key in opt.state_dict()["state"]:
        for k, v in opt.state_dict()["state"][key].items():
            np.testing.assert_array_equal(np.asarray(v), np.asarray(opt2.state_dict()["state"][key][k]))
    train(model2, opt2, 3)  # the fork trains on its own buffers...
    ref = [np.array(p._data) for p in model2.parameters()]
    train(model, opt, 3)  # ...and the original continues exactly as the fork did
    for p, r in zip(model.parameters(), ref):
        np.testing.assert_array_equal(p._data, r)
    alone = copy.deepcopy(opt)  # without the model: its own new parameters
    assert all(q is not p for q, p in zip(alone.param_groups[0]["params"], model.parameters()))


@pytest.mark.parametrize("name,kwargs", CASES[::2])
def test_pickle_round_trip(name, kwargs):
    ps = [Parameter(v) for v in _values()]
    ps[0].name = "fc.weight"  # (the label graphs and messages show)
    opt = getattr(optim, name)(ps, **kwargs)
    for step in range(2):
        for p, g in zip(ps, _grads(step)):
            p.grad = g
        opt.step()
    back = pickle.loads(pickle.dumps(opt))
    assert type(back) is type(opt)
    qs = back.param_groups[0]["params"]
    assert [q.name for q in qs] == [p.name for p in ps] and qs[0].name == "fc.weight"
    for p, q in zip(ps, qs):
        np.testing.assert_array_equal(p._data, q._data)
        np.testing.assert_array_equal(p._grad, q._grad)
    for p, q, g in zip(ps, qs, _grads(5)):
        p.grad, q.grad = g, g.copy()
    opt.step()
    back.step()
    for p, q in zip(ps, qs):
        np.testing.assert_array_equal(p._data, q._data)


# ---- param_groups edited in place -------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name,kwargs", CASES)
def test_appending_a_parameter_to_a_group_takes_effect(name, kwargs):
    values = _values(3)
    ours, opt, theirs, topt = _pair(name, kwargs, values[:2])
    extra, textra = Parameter(values[2].copy()), torch.nn.Parameter(torch.from_numpy(values[2]))
    _step_both(ours, opt, theirs, topt, 0)
    opt.param_groups[0]["params"].append(extra)
    topt.param_groups[0]["params"].append(textra)
    ours, theirs = ours + [extra], theirs + [textra]
    if name == "Adagrad":  # torch's Adagrad has no state for it (KeyError); tinyopt starts it
        opt.state[extra]  # noqa: B018 - (tinyopt: the state exists and starts from 0)
        topt.state[textra] = {"step": torch.tensor(0.0), "sum": torch.zeros(3, 2)}
    for step in range(1, 3):
        _step_both(ours, opt, theirs, topt, step)
    _close(ours, theirs)
    assert len(opt.state_dict()["state"]) == len(topt.state_dict()["state"])


@needs_torch
def test_replacing_and_appending_groups_directly_take_effect():
    values = _values(3)
    ours, opt, theirs, topt = _pair("Adam", dict(lr=0.05), values[:2])
    _step_both(ours, opt, theirs, topt, 0)
    extra, textra = Parameter(values[2].copy()), torch.nn.Parameter(torch.from_numpy(values[2]))
    opt.param_groups.append(dict(opt.param_groups[0], params=[extra], lr=0.2))
    topt.param_groups.append(dict(topt.param_groups[0], params=[textra], lr=0.2))
    opt.param_groups[0]["params"] = [ours[1]]  # the first parameter leaves the optimizer
    topt.param_groups[0]["params"] = [theirs[1]]
    _step_both([ours[1], extra], opt, [theirs[1], textra], topt, 1)
    _close(ours + [extra], theirs + [textra])
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        opt.param_groups[0]["params"].append(3.0)
        opt.step()
    opt.param_groups[0]["params"].pop()
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.param_groups[0]["params"].append(extra)
        opt.step()


@needs_torch
def test_assigning_state_takes_effect():
    ours, opt, theirs, topt = _pair("Adam", dict(lr=0.05), _values())
    _step_both(ours, opt, theirs, topt, 0)
    opt.state[ours[0]]["exp_avg"] = np.full((3, 2), 0.5, np.float32)
    topt.state[theirs[0]]["exp_avg"] = torch.full((3, 2), 0.5)
    _step_both(ours, opt, theirs, topt, 1)
    _close(ours, theirs)


# ---- duplicate parameters ---------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name,kwargs", CASES)
def test_a_parameter_listed_twice_is_updated_twice_as_torch(name, kwargs):
    def groups(ps):
        return [{"params": [ps[0], ps[1], ps[0]]}]

    with pytest.warns(UserWarning, match="duplicate parameters"):
        ours, opt, theirs, topt = _pair(name, kwargs, _values(), groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(3):
            _step_both(ours, opt, theirs, topt, step)
    _close(ours, theirs)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["param_groups"][0]["params"] == tsd["param_groups"][0]["params"] == [2, 1, 2]
    assert sorted(sd["state"]) == sorted(tsd["state"])
    for i, st in tsd["state"].items():
        assert sorted(sd["state"][i]) == sorted(st)
        for k, v in st.items():
            np.testing.assert_allclose(np.asarray(sd["state"][i][k]), v.numpy(), rtol=2e-6,
                                       atol=1e-7)


# ---- Tensor hyperparameters -------------------------------------------------------------------------
@needs_torch
def test_hyperparameter_tensors():
    p = Parameter(np.ones(2, np.float32))
    for bad in (np.array([0.1, 0.2]), to.tensor([0.1, 0.2])):
        with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
            optim.SGD([p], lr=bad)
        with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
            optim.Adam([p], lr=bad)
        with pytest.raises(ValueError, match=r"^Tensor betas\[0\] must be 1-element$"):
            optim.Adam([p], betas=(bad, 0.999))
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
        torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=torch.tensor([0.1, 0.2]))
    values = _values()
    a, opt_a, ta, topt = _pair("Adam", dict(lr=0.125, betas=(0.5, 0.75)), values)
    b = [Parameter(v.copy()) for v in values]
    opt_b = optim.Adam(b, lr=np.array(0.125), betas=(to.tensor(0.5), np.array([0.75])))
    for step in range(2):
        for p, q, g in zip(a, b, _grads(step)):
            p.grad, q.grad = g, g.copy()
        opt_a.step()
        opt_b.step()
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p._data, q._data)


# ---- repr -------------------------------------------------------------------------------------------
@needs_torch
def test_repr_shows_param_names_as_torch():
    opt = optim.SGD([("w", Parameter(np.ones(2, np.float32)))], lr=0.1)
    topt = torch.optim.SGD([("w", torch.nn.Parameter(torch.ones(2)))], lr=0.1)
    assert repr(opt) == repr(topt)
    assert "param_names: ['w']" in repr(opt)
