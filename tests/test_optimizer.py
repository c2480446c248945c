"""The Optimizer base class: construction rules, param groups, hooks, state_dict and its validation."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyopt import Parameter, is_grad_enabled, no_grad, optim
from tinyopt.optim.optimizer import Optimizer, call_closure, required

ALL = [optim.SGD, optim.Adam, optim.AdamW, optim.Adagrad, optim.RMSprop, optim.Adadelta,
       optim.Adamax, optim.NAdam, optim.RAdam, optim.ASGD, optim.Rprop]


def _params(*shapes, dtype=np.float32):
    return [Parameter(np.arange(np.prod(s), dtype=dtype).reshape(s) / 10) for s in shapes]


def _snapshot(opt):
    sd = opt.state_dict()
    return sd, [p.data.numpy().copy() for g in opt.param_groups for p in g["params"]]


def _assert_same(a, b):
    (sd1, d1), (sd2, d2) = a, b
    assert sd1["param_groups"] == sd2["param_groups"]
    assert sd1["state"].keys() == sd2["state"].keys()
    for k in sd1["state"]:
        assert sd1["state"][k].keys() == sd2["state"][k].keys()
        for name in sd1["state"][k]:
            np.testing.assert_array_equal(sd1["state"][k][name], sd2["state"][k][name])
    for x, y in zip(d1, d2):
        np.testing.assert_array_equal(x, y)


# ---- construction -----------------------------------------------------------------------------------
def test_construction_errors_match_pytorch():
    p, q = _params((2,), (3,))
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        optim.SGD(p, lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD({p}, lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD([{"params": {p}}], lr=0.1)
    with pytest.raises(ValueError, match="^optimizer got an empty parameter list$"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the params "
                                        "is float"):
        optim.SGD([1.0], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p, q]}], lr=0.1)
    with pytest.raises(ValueError, match="Some param names are missing"):
        optim.SGD([("a", p), q], lr=0.1)
    with pytest.raises(ValueError, match="cannot add param group with names"):
        optim.SGD([{"params": [p]}, {"params": [("b", q)]}], lr=0.1)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optim.SGD([p, p], lr=0.1)
    with pytest.raises(TypeError, match="floating point"):
        optim.Adam([Parameter(np.arange(3), requires_grad=False)])


def test_required_hyperparameter():
    class Plain(Optimizer):
        def __init__(self, params, lr=required):
            super().__init__(params, dict(lr=lr))

    p, q = _params((2,), (2,))
    with pytest.raises(ValueError, match="didn't specify a value of required optimization "
                                         "parameter lr"):
        Plain([p])
    opt = Plain([{"params": [p], "lr": 0.1}])
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        opt.add_param_group({"params": [q]})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("cls,kw,msg", [
    (optim.SGD, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (optim.SGD, dict(momentum=-0.5), "Invalid momentum value: -0.5"),
    (optim.SGD, dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    (optim.SGD, dict(nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    (optim.SGD, dict(nesterov=True, momentum=0.9, dampening=0.1), "Nesterov momentum requires"),
    (optim.Adam, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (optim.Adam, dict(eps=-1e-8), "Invalid epsilon value: -1e-08"),
    (optim.Adam, dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
    (optim.Adam, dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    (optim.AdamW, dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    (optim.Adagrad, dict(lr_decay=-1), "Invalid lr_decay value: -1"),
    (optim.Adagrad, dict(initial_accumulator_value=-1),
     "Invalid initial_accumulator_value value: -1"),
    (optim.Adagrad, dict(eps=-1), "Invalid epsilon value: -1"),
    (optim.RMSprop, dict(alpha=-1), "Invalid alpha value: -1"),
    (optim.RMSprop, dict(momentum=-1), "Invalid momentum value: -1"),
    (optim.Adadelta, dict(rho=1.5), "Invalid rho value: 1.5"),
    (optim.Adadelta, dict(eps=-1), "Invalid epsilon value: -1"),
    (optim.Adamax, dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (optim.NAdam, dict(momentum_decay=-1), "Invalid momentum_decay value: -1"),
    (optim.NAdam, dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    (optim.RAdam, dict(betas=(-0.1, 0.9)), "Invalid beta parameter at index 0: -0.1"),
    (optim.ASGD, dict(lr=-1), "Invalid learning rate: -1"),
    (optim.ASGD, dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    (optim.Rprop, dict(etas=(1.5, 1.2)), "Invalid eta values: 1.5, 1.2"),
    (optim.Rprop, dict(lr=-0.5), "Invalid learning rate: -0.5"),
])
def test_hyperparameter_validation_messages(cls, kw, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(")):
        cls(_params((2,)), **kw)


@pytest.mark.parametrize("cls", ALL)
def test_foreach_fused_accepted_capturable_differentiable_rejected(cls):
    p = _params((2,))
    if "fused" in cls.__init__.__code__.co_varnames:
        cls(p, foreach=True, fused=True)
    else:
        cls(p, foreach=True)
    with pytest.raises(ValueError, match="differentiable=True is not supported"):
        cls(_params((2,)), differentiable=True)
    if "capturable" in cls.__init__.__code__.co_varnames:
        with pytest.raises(ValueError, match="capturable=True is not supported"):
            cls(_params((2,)), capturable=True)


@pytest.mark.parametrize("cls", ALL)
def test_signature_and_defaults_are_pytorchs(cls):
    """Same parameters (names, order, defaults, keyword-only marks) and the same defaults dict, key
    order included (it is the key order of saved param groups)."""
    import inspect
    torch = pytest.importorskip("torch")
    tcls = getattr(torch.optim, cls.__name__)
    ours, theirs = inspect.signature(cls.__init__), inspect.signature(tcls.__init__)
    # tinyopt's own keywords, last: stochastic_rounding (bfloat16 copies) and, for Adam, AdamW
    # and SGD, cautious (issue 31); in the defaults only when True
    extras = [n for n in ("cautious", "stochastic_rounding") if n in ours.parameters]
    assert list(ours.parameters)[-len(extras):] == extras and "stochastic_rounding" in extras
    for name in extras:
        extra = ours.parameters[name]
        assert (extra.kind, extra.default) == (inspect.Parameter.KEYWORD_ONLY, False)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()][:-len(extras)] == \
        [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
    assert list(cls(_params((2,))).defaults.items()) == \
        list(tcls([torch.nn.Parameter(torch.zeros(2))]).defaults.items())


def test_defaults_match_pytorch():
    p = _params((2,))
    assert optim.SGD(p).defaults == dict(lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                                         nesterov=False, maximize=False, foreach=None,
                                         differentiable=False, fused=None)
    a = optim.AdamW(_params((2,))).defaults
    assert a["weight_decay"] == 1e-2 and a["decoupled_weight_decay"] and a["betas"] == (0.9, 0.999)
    assert optim.Adagrad(_params((2,))).defaults["eps"] == 1e-10
    r = optim.RMSprop(_params((2,))).defaults
    assert (r["lr"], r["alpha"], r["eps"]) == (1e-2, 0.99, 1e-8)


# ---- packing: .data / .grad are views, assignment copies --------------------------------------------
def test_packed_parameters_behave_like_arrays():
    p, q = _params((2, 3), (4,))
    before = p.data.numpy().copy()
    opt = optim.SGD([p, q], lr=0.5)
    np.testing.assert_array_equal(p.data, before)
    assert p.grad is None
    p.grad = np.ones((2, 3))
    assert p.grad.dtype == np.float32
    p.data = np.zeros((2, 3))
    opt.step()
    np.testing.assert_array_equal(p.data, -0.5)
    np.testing.assert_array_equal(q.data, (np.arange(4) / 10).astype(np.float32))  # no grad
    with pytest.raises(ValueError, match="whose storage an optimizer manages"):
        p.data = np.zeros(7)


def test_two_optimizers_over_one_parameter_both_update_it():
    """As in PyTorch, each optimizer's step updates the parameter itself (the second one to pack
    it does not leave the first one updating a stale copy)."""
    p, q = _params((2, 3), (4,))
    p0 = p.data.numpy().copy()
    fast = optim.SGD([p, q], lr=0.1, momentum=0.5)
    slow = optim.SGD([p], lr=0.01)
    g = np.full((2, 3), 2.0, np.float32)
    buf = None  # fast's momentum buffer
    want = p0.copy()
    for _ in range(3):
        for opt in (fast, slow, fast):
            p.grad = g
            opt.step()
            if opt is fast:
                buf = g.copy() if buf is None else np.float32(0.5) * buf + g
                want = want - np.float32(0.1) * buf
            else:
                want = want - np.float32(0.01) * g
        np.testing.assert_allclose(p.data, want, rtol=1e-6)
    np.testing.assert_allclose(fast.state[p]["momentum_buffer"], buf, rtol=1e-6)
    p.grad = None  # zero_grad through either optimizer reaches the parameter
    fast.step()
    np.testing.assert_allclose(p.data, want, rtol=1e-6)


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW, optim.Adagrad, optim.RMSprop])
def test_zero_over_zero_gives_nan_as_in_pytorch(cls):
    """eps=0 and a zero gradient divide 0 by 0: NaN, as PyTorch gives, not ZeroDivisionError."""
    p = Parameter(np.ones(3, np.float32))
    opt = cls([p], lr=0.1, eps=0.0)
    p.grad = np.zeros(3, np.float32)
    opt.step()
    assert np.isnan(p.data).all()


def test_mixed_dtypes_in_one_group():
    p32, p64 = _params((3,))[0], _params((3,), dtype=np.float64)[0]
    opt = optim.Adam([p32, p64], lr=0.1)
    p32.grad = np.ones(3, np.float32)
    p64.grad = np.ones(3)
    opt.step()
    assert p32.data.dtype == np.float32 and p64.data.dtype == np.float64
    np.testing.assert_allclose(p32.data, np.arange(3) / 10 - 0.1, atol=1e-6)
    np.testing.assert_allclose(p64.data, np.arange(3) / 10 - 0.1, atol=1e-8)
    assert opt.state[p64]["exp_avg"].dtype == np.float64


def test_add_param_group_packs_new_group_and_keeps_old():
    p, q = _params((3,), (2,))
    opt = optim.Adam([p], lr=0.1)
    p.grad = np.ones(3)
    opt.step()
    state_p = {k: v.clone() for k, v in opt.state[p].items()}
    opt.add_param_group({"params": q, "lr": 0.2})
    assert opt.param_groups[1]["lr"] == 0.2 and opt.param_groups[1]["betas"] == (0.9, 0.999)
    for k, v in state_p.items():
        np.testing.assert_array_equal(opt.state[p][k], v)
    q.grad = np.ones(2)
    opt.step()
    np.testing.assert_allclose(q.data, np.arange(2) / 10 - 0.2, rtol=1e-5)
    assert float(opt.state[p]["step"]) == 2 and float(opt.state[q]["step"]) == 1
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [p]})
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.add_param_group({"params": _params((2,)), "lr": -1})
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([q])
    assert len(opt.param_groups) == 2


def test_zero_grad():
    p, q = _params((2,), (3,))
    opt = optim.SGD([p, q])
    p.grad = np.ones(2)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad, 0)
    assert q.grad is None
    opt.zero_grad()
    assert p.grad is None and q.grad is None
    opt.step()  # no grads: nothing changes, no state
    assert len(opt.state) == 0


def test_step_closure_runs_with_grad_enabled_and_returns_loss():
    (p,) = _params((2,))
    opt = optim.SGD([p], lr=0.1)
    seen = []

    def closure():
        seen.append(is_grad_enabled())
        p.grad = 2 * p.data
        return 3.5

    with no_grad():
        assert opt.step(closure) == 3.5
    assert seen == [True]
    np.testing.assert_allclose(p.data, np.arange(2) / 10 * 0.8, rtol=1e-6)
    assert opt.step() is None


def test_hyperparameters_are_read_every_step():
    (p,) = _params((1,))
    opt = optim.SGD([p], lr=1.0)
    for lr in (1.0, 0.5, 0.0, 2.0):
        opt.param_groups[0]["lr"] = lr
        before = p.data.numpy().copy()
        p.grad = np.ones(1)
        opt.step()
        np.testing.assert_allclose(before - p.data, lr)


def test_group_edits_between_steps_take_effect_though_unchanged_groups_skip_the_host():
    """step() keeps a group's host scalars while the group holds the same immutable values;
    every kind of edit -- a new number, new betas, a switch, a key added, a value changed in
    place (an array: never kept) -- takes effect at the next step, as a fresh optimizer's."""
    edits = [{}, {"lr": 0.5}, {}, {"betas": (0.8, 0.9)}, {"amsgrad": True}, {"weight_decay": 0.1},
             {"lr": np.array(0.25)}, "in place", {"lr": 1e-3}]
    (p,) = _params((5,))
    opt = optim.Adam([p], lr=1e-2)
    rng = np.random.default_rng(0)
    for edit in edits:
        ref_p = Parameter(p.data.numpy().copy())
        ref = optim.Adam([ref_p])
        ref.load_state_dict(opt.state_dict())
        group = opt.param_groups[0]
        if edit == "in place":
            group["lr"][...] = 0.125  # the array assigned at the step before
            ref.param_groups[0]["lr"] = 0.125
        else:
            group.update(edit)
            ref.param_groups[0].update(edit)
        g = rng.standard_normal(5).astype(np.float32)
        p.grad, ref_p.grad = g.copy(), g.copy()
        opt.step()
        ref.step()
        np.testing.assert_array_equal(p.data.numpy(), ref_p.data.numpy())


# ---- lazy state ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ALL)
def test_state_is_created_lazily_like_pytorch(cls):
    p, q = _params((2,), (3,))
    kw = dict(momentum=0.9) if cls in (optim.SGD,) else {}
    opt = cls([p, q], **kw)
    if cls is optim.Adagrad:  # created at construction
        assert set(opt.state[p]) == {"step", "sum"} and float(opt.state[q]["step"]) == 0
    else:
        assert len(opt.state) == 0
    p.grad = np.ones(2)
    opt.step()
    assert p in opt.state
    assert (q in opt.state) == (cls is optim.Adagrad)
    if "step" in opt.state[p]:
        assert opt.state[p]["step"].shape == () and opt.state[p]["step"].dtype == np.float32
        assert float(opt.state[p]["step"]) == 1
    sd = opt.state_dict()
    assert sorted(sd["state"]) == ([0, 1] if cls is optim.Adagrad else [0])


def test_sgd_without_momentum_keeps_no_state():
    (p,) = _params((2,))
    opt = optim.SGD([p], lr=0.1)
    p.grad = np.ones(2)
    for _ in range(3):
        opt.step()
        assert opt.state_dict()["state"] == {} and len(opt.state) == 0
    opt.param_groups[0]["momentum"] = 0.9  # turned on later: first buffer is the gradient
    opt.step()
    np.testing.assert_array_equal(opt.state[p]["momentum_buffer"], 1)


def test_option_turned_on_mid_run_adds_state():
    (p,) = _params((2,))
    opt = optim.RMSprop([p])
    p.grad = np.ones(2)
    opt.step()
    opt.param_groups[0]["centered"] = True
    opt.step()
    assert set(opt.state[p]) == {"step", "square_avg", "grad_avg"}


# ---- hooks -----------------------------------------------------------------------------------------
def test_step_hooks():
    (p,) = _params((2,))
    opt = optim.SGD([p], lr=0.1)
    calls = []
    h1 = opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", a, k)))
    opt.register_step_post_hook(lambda o, a, k: calls.append(("post", a, k)))
    opt.step()
    assert calls == [("pre", (), {}), ("post", (), {})]
    h1.remove()
    calls.clear()
    opt.register_step_pre_hook(lambda o, a, k: ((), {"closure": lambda: 7}))
    assert opt.step() == 7
    assert [c[0] for c in calls] == ["post"] and list(calls[0][2]) == ["closure"]
    opt.register_step_pre_hook(lambda o, a, k: 5)
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        opt.step()


def test_step_hooks_run_once_for_a_subclass_calling_super():
    class Counting(optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    (p,) = _params((2,))
    opt = Counting([p])
    n = []
    opt.register_step_pre_hook(lambda *a: n.append(1))
    opt.step()
    assert n == [1]


def test_state_dict_hooks():
    (p,) = _params((2,))
    opt = optim.Adam([p])
    order = []
    opt.register_state_dict_pre_hook(lambda o: order.append("a"))
    opt.register_state_dict_pre_hook(lambda o: order.append("b"), prepend=True)
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    sd = opt.state_dict()
    assert order == ["b", "a"] and sd["extra"] == 1

    loaded = []
    opt.register_load_state_dict_pre_hook(
        lambda o, sd: {**sd, "param_groups": [dict(sd["param_groups"][0], lr=0.5)]})
    opt.register_load_state_dict_post_hook(lambda o: loaded.append(o.param_groups[0]["lr"]))
    h = opt.register_load_state_dict_post_hook(lambda o: loaded.append("first"), prepend=True)
    opt.load_state_dict(sd)
    assert loaded == ["first", 0.5]
    h.remove()
    loaded.clear()
    opt.load_state_dict(sd)
    assert loaded == [0.5]


# ---- state_dict ------------------------------------------------------------------------------------
def test_state_dict_layout_and_names():
    a, b, c = _params((2, 3), (3,), (4,))
    opt = optim.Adam([{"params": [("fc.w", a), ("fc.b", b)], "weight_decay": 0.0},
                      {"params": [("out.w", c)], "lr": 0.1}], weight_decay=0.01)
    for p in (a, c):
        p.grad = np.ones(p.shape)
    opt.step()
    sd = opt.state_dict()
    assert list(sd) == ["state", "param_groups"]
    g0, g1 = sd["param_groups"]
    assert g0["params"] == [0, 1] and g1["params"] == [2]
    assert g0["param_names"] == ["fc.w", "fc.b"] and g1["param_names"] == ["out.w"]
    assert g0["weight_decay"] == 0.0 and g1["weight_decay"] == 0.01 and g1["lr"] == 0.1
    assert list(sd["state"]) == [0, 2]
    s0 = sd["state"][0]
    assert list(s0) == ["step", "exp_avg", "exp_avg_sq"]
    assert s0["step"].dtype == np.float32 and s0["step"].shape == () and s0["step"] == 1
    assert s0["exp_avg"].shape == (2, 3)


def test_state_dict_never_aliases_live_state():
    (p,) = _params((3,))
    opt = optim.Adam([p])
    p.grad = np.ones(3)
    opt.step()
    sd = opt.state_dict()
    saved = copy.deepcopy(sd)
    opt.step()  # training continues: the saved dict does not change
    for k, v in saved["state"][0].items():
        np.testing.assert_array_equal(sd["state"][0][k], v)
    sd["state"][0]["exp_avg"][...] = 123  # editing the saved dict does not touch the optimizer
    assert not (opt.state[p]["exp_avg"] == 123).any()
    sd["param_groups"][0]["betas"] = (0.1, 0.2)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)
    loaded = optim.Adam(_params((3,)))
    loaded.load_state_dict(saved)
    saved["state"][0]["exp_avg"][...] = 7  # nor does editing a dict after loading it
    assert not (loaded.state_dict()["state"][0]["exp_avg"] == 7).any()


def test_load_state_dict_validation_and_unchanged_on_reject():
    a, b = _params((2, 3), (3,))
    opt = optim.Adam([("w", a), ("b", b)], lr=0.1)
    for p in (a, b):
        p.grad = np.ones(p.shape)
    opt.step()
    good = opt.state_dict()
    before = _snapshot(opt)

    def bad(edit):
        sd = copy.deepcopy(good)
        edit(sd)
        return sd

    cases = [
        (bad(lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0]))),
         "different number of parameter groups"),
        (bad(lambda sd: sd["param_groups"][0]["params"].append(9)),
         "doesn't match the size of optimizer's group"),
        (bad(lambda sd: sd["state"][0].__setitem__("exp_avg", np.zeros((3, 2)))),
         r"parameter 'w' has state 'exp_avg' of shape \(3, 2\), expected \(2, 3\)"),
        (bad(lambda sd: sd["state"][1].pop("exp_avg_sq")), "parameter 'b' has no state 'exp_avg_sq'"),
        (bad(lambda sd: sd["state"][1].__setitem__("step", np.zeros(3))), "'step' of shape"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("lr", -1.0)), "Invalid learning rate"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("capturable", True)), "capturable"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("param_names", ["w", "zz"])),
         r"parameters \['zz'\]"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("amsgrad", True)),
         "has no state 'max_exp_avg_sq'"),
    ]
    for sd, msg in cases:
        with pytest.raises(ValueError, match=msg):
            opt.load_state_dict(sd)
        _assert_same(_snapshot(opt), before)
    # unnamed parameters are named by their id in the message
    opt2 = optim.Adam(_params((2, 3), (3,)))
    sd = bad(lambda sd: [g.pop("param_names") for g in sd["param_groups"]])
    sd["state"][1]["exp_avg"] = np.zeros(4)
    with pytest.raises(ValueError, match=r"parameter 1 has state 'exp_avg' of shape \(4,\), "
                                         r"expected \(3,\)"):
        opt2.load_state_dict(sd)


def test_load_state_dict_matches_parameters_by_name():
    a, b = _params((2, 3), (3,))
    opt = optim.Adam([("w", a), ("b", b)], lr=0.1)
    a.grad, b.grad = np.ones((2, 3)), 2 * np.ones(3)
    opt.step()
    sd = opt.state_dict()
    a2, b2 = _params((2, 3), (3,))
    opt2 = optim.Adam([("b", b2), ("w", a2)], lr=0.1)  # reordered model
    opt2.load_state_dict(sd)
    np.testing.assert_array_equal(opt2.state[a2]["exp_avg"], opt.state[a]["exp_avg"])
    np.testing.assert_array_equal(opt2.state[b2]["exp_avg"], opt.state[b]["exp_avg"])
    assert opt2.param_groups[0]["param_names"] == ["b", "w"]
    assert opt2.state_dict()["param_groups"][0]["params"] == [0, 1]


def test_load_casts_to_parameter_dtype_and_accepts_python_step():
    (p,) = _params((3,))
    opt = optim.Adam([p])
    sd = {"state": {0: {"step": 4, "exp_avg": np.ones(3), "exp_avg_sq": [1.0, 1.0, 1.0]}},
          "param_groups": [dict(opt.state_dict()["param_groups"][0])]}
    opt.load_state_dict(sd)
    assert opt.state[p]["exp_avg"].dtype == np.float32
    assert opt.state[p]["step"].dtype == np.float32 and float(opt.state[p]["step"]) == 4
    p.grad = np.ones(3)
    opt.step()
    assert float(opt.state[p]["step"]) == 5


def test_load_resets_parameters_absent_from_the_dict():
    p, q = _params((2,), (2,))
    opt = optim.Adam([p, q])
    fresh = opt.state_dict()
    for x in (p, q):
        x.grad = np.ones(2)
    opt.step()
    opt.load_state_dict(fresh)
    assert len(opt.state) == 0
    opt.step()  # moments start from zero again
    np.testing.assert_allclose(opt.state[p]["exp_avg"], 0.1, rtol=1e-6)


def test_pytorch_style_subclass_of_the_base_class():
    class SignSGD(Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, dict(lr=lr))

        def step(self, closure=None):
            loss = call_closure(closure)
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self.state[p]
                    st["n"] = st.get("n", 0) + 1
                    p.data -= group["lr"] * np.sign(p.grad)
            return loss

    (p,) = _params((3,))
    opt = SignSGD([p])
    hooks = []
    opt.register_step_post_hook(lambda *a: hooks.append(1))
    p.grad = np.array([1.0, -1.0, 0.0])
    opt.step()
    np.testing.assert_allclose(p.data, [-0.1, 0.2, 0.2], rtol=1e-6)
    assert hooks == [1]
    sd = opt.state_dict()
    assert sd["state"] == {0: {"n": 1}}
    opt2 = SignSGD(_params((3,)))
    opt2.load_state_dict(sd)
    assert opt2.state[opt2.param_groups[0]["params"][0]] == {"n": 1}


@settings(max_examples=15, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(0, 4), max_size=3).map(tuple), min_size=1, max_size=5),
       have_grad=st.lists(st.booleans(), min_size=5, max_size=5),
       cls=st.sampled_from(ALL))
def test_state_dict_round_trip_property(shapes, have_grad, cls):
    ps = _params(*shapes)
    opt = cls(ps)
    for _ in range(2):
        for p, g in zip(ps, have_grad):
            p.grad = np.full(p.shape, 0.5) if g else None
        opt.step()
    sd = opt.state_dict()
    qs = _params(*shapes)
    opt2 = cls(qs)
    opt2.load_state_dict(sd)
    _assert_same((opt2.state_dict(), []), (sd, []))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt2.step()


# ---- hostile but well-formed state dicts (issue 9.4, 9.8) -------------------------------------------
def _stepped_adam():
    a, b = _params((2, 3), (3,))
    opt = optim.Adam([a, b], lr=0.1)
    for _ in range(2):
        for p in (a, b):
            p.grad = np.ones(p.shape)
        opt.step()
    return opt


@pytest.mark.parametrize("edit,msg", [
    (lambda sd: sd["state"][0].__setitem__("step", "abc"), r"'step' of type str, expected a number"),
    (lambda sd: sd["state"][0].__setitem__("step", 10**400), "expected a finite float32 number"),
    (lambda sd: sd["state"][0].__setitem__("step", np.float64(np.inf)), "expected a finite"),
    (lambda sd: sd["state"][0].__setitem__("step", np.nan), "expected a finite"),
    (lambda sd: sd["state"][0].__setitem__("step", 1e39), "expected a finite float32 number"),
    (lambda sd: sd["state"][1].__setitem__("step", -5), r"'step' = -5.0, expected a whole number >= 0"),
    (lambda sd: sd["state"][1].__setitem__("step", 2.5), "expected a whole number"),
    (lambda sd: sd["state"][1].__setitem__("step", True), "of type bool"),
    (lambda sd: sd["state"][1].__setitem__("step", None), "of type NoneType"),
    (lambda sd: sd["state"].__setitem__(7, sd["state"].pop(1)),
     r"state for parameter 7, which is not in its param_groups"),
    (lambda sd: sd.__setitem__("state", [1, 2]), "'state' must be a dict"),
    (lambda sd: sd["param_groups"].__setitem__(0, "lr"), r"param_groups\[0\] must be a dict"),
])
def test_hostile_state_values_are_rejected_before_anything_changes(edit, msg):
    """Issue 9.4/9.8: a state dict that cannot be installed raises a clear error and changes
    nothing (it used to replace param_groups and wipe the state, then raise, or to accept
    step=-5 and give NaN parameters two steps later, or to drop the state of unknown ids)."""
    opt = _stepped_adam()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["lr"] = 0.5  # would be installed first if the load were not atomic
    before = _snapshot(opt)
    edit(sd)
    with pytest.raises(ValueError, match=msg):
        opt.load_state_dict(sd)
    _assert_same(_snapshot(opt), before)
    assert opt.param_groups[0]["lr"] == 0.1


def test_loaded_step_is_the_number_given():
    opt = _stepped_adam()
    sd = opt.state_dict()
    sd["state"][0]["step"] = np.array(7, np.int64)
    sd["state"][1]["step"] = 3.0
    opt.load_state_dict(sd)
    steps = [opt.state[p]["step"] for p in opt.param_groups[0]["params"]]
    assert [s.dtype for s in steps] == [np.float32] * 2 and [float(s) for s in steps] == [7, 3]


# ---- hyperparameters beyond the parameters' float range (issue 9.9) --------------------------------
@pytest.mark.parametrize("cls,kw", [
    (optim.Adam, dict(lr=1e39)),
    (optim.Adam, dict(lr=1e36, betas=(0.999, 0.999))),  # lr / (1 - beta1) overflows at step 1
    (optim.Adam, dict(weight_decay=1e39)),
    (optim.AdamW, dict(lr=1e20, weight_decay=1e20)),
    (optim.SGD, dict(lr=1e39)),
    (optim.SGD, dict(lr=0.1, momentum=0.5, dampening=-1e39)),
    (optim.Adagrad, dict(lr=1e39)),
    (optim.RMSprop, dict(lr=1e39)),
    (optim.RMSprop, dict(lr=0.1, weight_decay=1e39)),
])
def test_float32_overflowing_hyperparameters_raise_like_pytorch(cls, kw):
    """PyTorch refuses a scalar that a float32 op cannot hold ("value cannot be converted to type
    float without overflow"); tinyopt's float32 kernels used to make it inf and write inf/NaN
    parameters.  Nothing changes (PyTorch advances the step count first; tinyopt does not)."""
    p, q = _params((3,), (2,))
    opt = cls([p, q], **kw)
    for x in (p, q):
        x.grad = np.ones(x.shape, np.float32)
    before = _snapshot(opt)
    with pytest.raises(RuntimeError, match="value cannot be converted to type float without "
                                           "overflow"):
        opt.step()
    _assert_same(_snapshot(opt), before)
    assert len(opt.state) == (2 if cls is optim.Adagrad else 0)
    # the same hyperparameters are fine for float64 parameters, as in PyTorch
    p64 = _params((3,), dtype=np.float64)[0]
    opt64 = cls([p64], **kw)
    p64.grad = np.ones(3)
    opt64.step()


# ---- state values are Tensors on the flat buffers; assigning takes effect (issue 10 §4) -------------
def test_state_values_are_tensors_sharing_the_buffers():
    from tinyopt import Tensor

    p, q = _params((2, 3), (4,))
    opt = optim.Adam([p, q], lr=0.1)
    p.grad, q.grad = np.ones((2, 3)), np.ones(4)
    opt.step()
    st = opt.state[p]
    assert all(isinstance(v, Tensor) for v in st.values())
    assert st["step"].shape == () and st["step"].dtype == np.float32 and float(st["step"]) == 1
    (fb,) = opt._flat[0]
    assert np.shares_memory(np.asarray(st["exp_avg"]), fb.vectors["exp_avg"])
    st["exp_avg"].mul_(0)  # in place on the Tensor: the kernel sees it
    assert not fb.view(fb.vectors["exp_avg"], 0).any()
    sd = opt.state_dict()
    assert all(isinstance(v, Tensor) for v in sd["state"][0].values())
    assert not np.shares_memory(np.asarray(sd["state"][0]["exp_avg"]), fb.vectors["exp_avg"])


def _torch_pair(torch, cls, kw):
    a = np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)
    p, tp = Parameter(a.copy()), torch.nn.Parameter(torch.from_numpy(a.copy()))
    return p, cls([p], **kw), tp, getattr(torch.optim, cls.__name__)([tp], **kw)


@pytest.mark.parametrize("edit", ["assign_state", "assign_step", "replace_entry", "before_first",
                                  "reset_all"])
def test_assigning_state_takes_effect_as_in_pytorch(edit):
    """Assigning ``state[p][name]``, ``state[p]`` or ``state`` used to be ignored silently (the
    kernel kept its buffers); as in PyTorch it now changes the next steps."""
    torch = pytest.importorskip("torch")
    p, opt, tp, topt = _torch_pair(torch, optim.Adam, dict(lr=0.1, amsgrad=True))
    g = np.linspace(0.5, -0.3, 6).reshape(2, 3).astype(np.float32)

    def step(n=1):
        for _ in range(n):
            p.grad, tp.grad = g, torch.from_numpy(g.copy())
            opt.step()
            topt.step()

    if edit == "before_first":
        for o, x, arr in ((opt, p, np.full((2, 3), 0.25, np.float32)),
                          (topt, tp, torch.full((2, 3), 0.25))):
            o.state[x]["step"] = torch.tensor(4.0) if o is topt else 4.0
            for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                o.state[x][k] = arr.clone() if o is topt else arr.copy()
        step(2)
    else:
        step(3)
        if edit == "assign_state":
            opt.state[p]["exp_avg"] = np.zeros((2, 3), np.float32)
            topt.state[tp]["exp_avg"] = torch.zeros(2, 3)
        elif edit == "assign_step":
            opt.state[p]["step"] = 100
            topt.state[tp]["step"] = torch.tensor(100.0)
        elif edit == "replace_entry":
            new = {k: np.asarray(v) * 0.5 for k, v in opt.state[p].items() if k != "step"}
            opt.state[p] = dict(new, step=np.float32(7))
            topt.state[tp] = {k: torch.from_numpy(v.copy()) for k, v in new.items()}
            topt.state[tp]["step"] = torch.tensor(7.0)
        else:
            from collections import defaultdict
            opt.state = defaultdict(dict)
            topt.state = defaultdict(dict)
            assert len(opt.state) == 0
        step(3)
    np.testing.assert_allclose(np.asarray(p.data), tp.detach().numpy(), rtol=1e-6, atol=1e-7)
    for k, v in topt.state[tp].items():
        np.testing.assert_allclose(np.asarray(opt.state[p][k]), v.numpy(), rtol=1e-6, err_msg=k)


def test_state_assignments_that_cannot_take_effect_raise():
    (p,) = _params((3,))
    opt = optim.Adam([p])
    p.grad = np.ones(3)
    opt.step()
    with pytest.raises(ValueError, match=r"'exp_avg' has shape \(3,\); cannot assign a value of "
                                         r"shape \(4,\)"):
        opt.state[p]["exp_avg"] = np.zeros(4)
    with pytest.raises(ValueError, match="'step' = -1.0, expected a whole number"):
        opt.state[p]["step"] = -1
    with pytest.raises(TypeError, match="cannot delete the optimizer state 'exp_avg'"):
        del opt.state[p]["exp_avg"]
    with pytest.raises(ValueError, match="does not optimize"):
        opt.state = {Parameter(np.zeros(3)): {}}
    assert float(opt.state[p]["step"]) == 1


# ---- elementwise optimizers (what ZeRO-1 relies on) -----------------------------------------------
ELEMENTWISE = [(optim.Adadelta, {}), (optim.Adamax, {}), (optim.NAdam, {}), (optim.RAdam, {}),
               (optim.ASGD, {"t0": 1.0, "lambd": 0.1}), (optim.Rprop, {}),
               # issue 31's (options as in their own tests: no kernel compiled for this alone)
               (optim.Lion, {"lr": 0.01, "weight_decay": 0.5, "maximize": True}),
               (optim.ADOPT, {"lr": 0.01, "weight_decay": 0.1}),
               (optim.AdEMAMix, {"lr": 0.01, "t_alpha_beta3": 3, "weight_decay": 0.1,
                                 "weight_decouple": True, "maximize": True}),
               (optim.AdamWScheduleFree, {"lr": 0.02, "weight_decay": 0.05})]


@pytest.mark.parametrize("cls,kw", ELEMENTWISE, ids=lambda x: getattr(x, "__name__", ""))
def test_elementwise_optimizers_step_a_cut_parameter_as_the_whole(cls, kw):
    """A parameter cut in two pieces (as ZeRO-1 cuts a shard) steps bit for bit as the whole one,
    scalar state included; ZeroRedundancyOptimizer accepts the class (it then needs a process
    group) and rejects a subclass that does not declare itself elementwise."""
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    rng = np.random.default_rng(3)
    w = Parameter(rng.standard_normal((7, 5)).astype(np.float32))
    a, b = (Parameter(w.data.numpy().ravel()[s].copy()) for s in (slice(0, 13), slice(13, 35)))
    whole, cut = cls([w], **kw), cls([a, b], **kw)
    for o in (whole, cut):
        if hasattr(o, "train"):  # (Schedule-Free steps in train mode)
            o.train()
    for _ in range(4):
        g = rng.standard_normal(35).astype(np.float32)
        w.grad, a.grad, b.grad = g.reshape(7, 5), g[:13].copy(), g[13:].copy()
        whole.step()
        cut.step()
    np.testing.assert_array_equal(np.concatenate([a.data.numpy(), b.data.numpy()]),
                                  w.data.numpy().ravel())
    for key, value in whole.state[w].items():
        pieces = [np.asarray(cut.state[q][key]) for q in (a, b)]
        if np.ndim(value) == 0:
            assert pieces[0] == pieces[1] == np.asarray(value), key
        else:
            np.testing.assert_array_equal(np.concatenate(pieces), np.asarray(value).ravel())
    with pytest.raises(ValueError, match="process group has not been initialized"):
        ZeroRedundancyOptimizer([w], optimizer_class=cls)
    with pytest.raises(TypeError, match="elementwise"):
        ZeroRedundancyOptimizer([w], optimizer_class=type("Sub", (cls,), {}))


def test_adding_an_optimizer_page_shows_nadam_as_it_is():
    """docs/adding_an_optimizer.md quotes NAdam's two files (and its reference): they must be
    the code as it is, or the page teaches something else."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "adding_an_optimizer.md").read_text(encoding="utf-8")
    fragments = re.findall(r"^```py\n(.*?)^```", page, re.S | re.M)
    sources = [(root / "src/tinyopt/optim/nadam.py").read_text(encoding="utf-8"),
               (root / "src/tinyopt/kernels/optim.py").read_text(encoding="utf-8"),
               (root / "tests/test_optim_parity.py").read_text(encoding="utf-8")]
    assert len(fragments) == 3
    assert fragments[0] == sources[0]  # the whole declaration file
    for fragment, source in zip(fragments[1:], sources[1:]):
        assert fragment in source


@pytest.mark.parametrize("step_sizes", [(float("nan"), 50.0), (1e-6, float("nan"))])
def test_rprop_with_a_nan_step_size_bound_steps_to_nan_as_in_torch(step_sizes):
    """Issue 25.11: the step-size clamp ignored a NaN bound; torch.clamp makes the step NaN."""
    w = Parameter(np.ones(3, np.float32))
    opt = optim.Rprop([w], step_sizes=step_sizes)
    for _ in range(2):
        w.grad = Parameter(np.ones(3, np.float32)).detach()
        opt.step()
    assert np.isnan(w.detach().numpy()).all()


def test_a_subclass_declared_with_the_old_hook_names_steps_as_with_the_new():
    """Issue 26: the FusedOptimizer hooks are public (``validate``, ``state_names``,
    ``host_scalars``, ``switches``...); a subclass written against the underscored names that
    docs/adding_an_optimizer.md used to teach keeps its validation and its step."""
    from tinyopt.kernels import optim as kernels
    from tinyopt.optim.fused import FusedOptimizer

    class OldMomentum(FusedOptimizer):
        kernel = kernels.sgd
        scalar_state = ()

        def __init__(self, params, lr=0.1, momentum=0.9):
            super().__init__(params, dict(lr=lr, momentum=momentum, dampening=0.0,
                                          weight_decay=0.0, nesterov=False, maximize=False))

        def _validate(self, group):
            if group["lr"] < 0:
                raise ValueError(f"Invalid learning rate: {group['lr']}")

        def _state_names(self, group):
            return ("momentum_buffer",)

        def _host(self, group, r):
            return dict(neg_lr=-group["lr"], momentum=group["momentum"],
                        one_minus_dampening=1.0, weight_decay=0.0)

        def _switches(self, group, host):
            return (True, False, False, False)

    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        OldMomentum([Parameter(np.ones(2, np.float32))], lr=-1)
    ws = [Parameter(np.arange(4, dtype=np.float32)) for _ in range(2)]
    opts = [OldMomentum([ws[0]]), optim.SGD([ws[1]], lr=0.1, momentum=0.9)]
    for step in range(3):
        for w, opt in zip(ws, opts):
            w.grad = np.full(4, 0.5 + step, np.float32)
            opt.step()
    np.testing.assert_array_equal(ws[0].numpy(), ws[1].numpy())
    np.testing.assert_array_equal(opts[0].state[ws[0]]["momentum_buffer"].numpy(),
                                  opts[1].state[ws[1]]["momentum_buffer"].numpy())
