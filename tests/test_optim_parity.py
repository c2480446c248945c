"""Every optimizer against a plain-numpy reference of PyTorch's update equations (and PyTorch itself).

Each case: two param groups with different hyperparameters, parameters of several shapes, some
gradients None on some steps, lr changed mid-run, 100 steps, float32 and float64; halfway, a
state_dict is saved and loaded into a fresh optimizer that must continue bit for bit.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tinyopt import Parameter, optim

SHAPES = [(3, 4), (5,), (2, 3, 2), (1,), (0,), (7,)]
GROUP_OF = [0, 0, 1, 1, 0, 1]
STEPS = 100


# ---- the reference: PyTorch's single-tensor equations, one parameter at a time ----------------------
def _lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - a.dtype.type(w))


def ref_sgd(p, g, st, h):
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    if h["momentum"] != 0:
        if "momentum_buffer" not in st:
            buf = g.copy()
        else:
            buf = st["momentum_buffer"] * h["momentum"] + (1 - h["dampening"]) * g
        st["momentum_buffer"] = buf
        g = g + h["momentum"] * buf if h["nesterov"] else buf
    return p + (-h["lr"]) * g


def ref_adam(p, g, st, h):
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        if h["amsgrad"]:
            st["max_exp_avg_sq"] = np.zeros_like(p)
    b1, b2 = h["betas"]
    lr, wd = h["lr"], h["weight_decay"]
    g = -g if h["maximize"] else g
    st["step"] = float(np.float32(st["step"] + 1))
    if wd != 0:
        if h["decoupled_weight_decay"]:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    t = st["step"]
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    v = st["exp_avg_sq"]
    if h["amsgrad"]:
        st["max_exp_avg_sq"] = np.maximum(st["max_exp_avg_sq"], v)
        v = st["max_exp_avg_sq"]
    denom = np.sqrt(v) / (bc2 ** 0.5) + h["eps"]
    return p + (-(lr / bc1)) * st["exp_avg"] / denom


def ref_adagrad(p, g, st, h):
    st["step"] = float(np.float32(st["step"] + 1))
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    clr = h["lr"] / (1 + (st["step"] - 1) * h["lr_decay"])
    st["sum"] = st["sum"] + g * g
    return p + (-clr) * g / (np.sqrt(st["sum"]) + h["eps"])


def ref_rmsprop(p, g, st, h):
    if not st:
        st.update(step=0.0, square_avg=np.zeros_like(p))
        if h["momentum"] > 0:
            st["momentum_buffer"] = np.zeros_like(p)
        if h["centered"]:
            st["grad_avg"] = np.zeros_like(p)
    st["step"] = float(np.float32(st["step"] + 1))
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    a = h["alpha"]
    st["square_avg"] = st["square_avg"] * a + (1 - a) * g * g
    if h["centered"]:
        st["grad_avg"] = _lerp(st["grad_avg"], g, 1 - a)
        avg = np.sqrt(st["square_avg"] + (-1.0) * st["grad_avg"] * st["grad_avg"]) + h["eps"]
    else:
        avg = np.sqrt(st["square_avg"]) + h["eps"]
    if h["momentum"] > 0:
        st["momentum_buffer"] = st["momentum_buffer"] * h["momentum"] + g / avg
        return p + (-h["lr"]) * st["momentum_buffer"]
    return p + (-h["lr"]) * g / avg


def _decay_or_l2(p, g, h):
    """Weight decay as Adam/NAdam/RAdam apply it: decoupled (AdamW) or added to the gradient."""
    if h["weight_decay"] != 0:
        if h.get("decoupled_weight_decay"):
            p = p * (1 - h["lr"] * h["weight_decay"])
        else:
            g = g + h["weight_decay"] * p
    return p, g


def _next(st):
    st["step"] = float(np.float32(st["step"] + 1))
    return st["step"]


def ref_adadelta(p, g, st, h):
    if not st:
        st.update(step=0.0, square_avg=np.zeros_like(p), acc_delta=np.zeros_like(p))
    _next(st)
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    rho = h["rho"]
    st["square_avg"] = st["square_avg"] * rho + (1 - rho) * g * g
    delta = np.sqrt(st["acc_delta"] + h["eps"]) / np.sqrt(st["square_avg"] + h["eps"]) * g
    st["acc_delta"] = st["acc_delta"] * rho + (1 - rho) * delta * delta
    return p + (-h["lr"]) * delta


def ref_adamax(p, g, st, h):
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_inf=np.zeros_like(p))
    t = _next(st)
    b1, b2 = h["betas"]
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_inf"] = np.maximum(st["exp_inf"] * b2, np.abs(g) + h["eps"])
    return p + (-(h["lr"] / (1 - b1 ** t))) * st["exp_avg"] / st["exp_inf"]


def ref_nadam(p, g, st, h):
    if not st:
        st.update(step=0.0, mu_product=1.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    t = _next(st)
    b1, b2 = h["betas"]
    lr, psi = h["lr"], h["momentum_decay"]
    g = -g if h["maximize"] else g
    p, g = _decay_or_l2(p, g, h)
    mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
    mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
    st["mu_product"] = float(np.float32(st["mu_product"]) * np.float32(mu))
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    denom = np.sqrt(st["exp_avg_sq"] / (1 - b2 ** t)) + h["eps"]
    mp = st["mu_product"]
    p = p + (-lr * (1 - mu) / (1 - mp)) * g / denom
    return p + ((-lr * mu_next) / (1 - mp * mu_next)) * st["exp_avg"] / denom


def ref_radam(p, g, st, h):
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    t = _next(st)
    b1, b2 = h["betas"]
    g = -g if h["maximize"] else g
    p, g = _decay_or_l2(p, g, h)
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    mc = st["exp_avg"] / bc1
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * (b2 ** t) / bc2
    if rho_t > 5.0:
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        adaptive = (1 / (np.sqrt(st["exp_avg_sq"]) + h["eps"])) * (bc2 ** 0.5)  # float / tensor
        return p - mc * h["lr"] * adaptive * rect
    return p - mc * h["lr"]


def ref_asgd(p, g, st, h):
    if not st:
        st.update(step=0.0, eta=float(np.float32(h["lr"])), mu=1.0, ax=np.zeros_like(p))
    t = _next(st)
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    eta, mu, lr, lambd = st["eta"], st["mu"], h["lr"], h["lambd"]
    p = p * (1 - lambd * eta)
    p = p + (-eta) * g
    st["ax"] = st["ax"] + (p - st["ax"]) * np.float32(mu) if mu != 1 else p.copy()
    st["eta"] = float(np.float32(lr / ((1 + lambd * lr * t) ** h["alpha"])))
    st["mu"] = float(np.float32(1 / max(1, t - h["t0"])))
    return p


def _tsign(x):
    """torch.sign on the CPU (0 for NaN)."""
    return np.where(x > 0, 1, np.where(x < 0, -1, 0)).astype(x.dtype)


def ref_rprop(p, g, st, h):
    if not st:
        st.update(step=0.0, prev=np.zeros_like(p), step_size=np.full_like(p, h["lr"]))
    _next(st)
    (eta_minus, eta_plus), (lo, hi) = h["etas"], h["step_sizes"]
    g = -g if h["maximize"] else g
    s = _tsign(g * st["prev"])
    f = np.where(s > 0, eta_plus, np.where(s < 0, eta_minus, 1)).astype(p.dtype)
    st["step_size"] = np.clip(st["step_size"] * f, lo, hi)
    g = np.where(f == p.dtype.type(eta_minus), 0, g).astype(p.dtype)
    st["prev"] = g
    return p + (-1) * _tsign(g) * st["step_size"]


REF_FIRST_FIVE = (optim.SGD, optim.Adam, optim.AdamW, optim.Adagrad, optim.RMSprop)
REF = {optim.SGD: ref_sgd, optim.Adam: ref_adam, optim.AdamW: ref_adam, optim.Adagrad: ref_adagrad,
       optim.RMSprop: ref_rmsprop, optim.Adadelta: ref_adadelta, optim.Adamax: ref_adamax,
       optim.NAdam: ref_nadam, optim.RAdam: ref_radam, optim.ASGD: ref_asgd, optim.Rprop: ref_rprop}

# (optimizer, options of group 0, options overriding group 1)
CASES = [
    (optim.SGD, dict(lr=0.05), dict(lr=0.1)),
    (optim.SGD, dict(lr=0.05, momentum=0.9), dict(momentum=0.5, dampening=0.3, weight_decay=0.1)),
    (optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
     dict(maximize=True, nesterov=False, dampening=0.1)),
    (optim.Adam, dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.99))),
    (optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True), dict(maximize=True, betas=(0.6, 0.9))),
    (optim.Adam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
     dict(amsgrad=True, eps=1e-3)),
    (optim.AdamW, dict(lr=0.01), dict(weight_decay=0.5, amsgrad=True, maximize=True)),
    (optim.Adagrad, dict(lr=0.1), dict(lr_decay=0.01, weight_decay=0.1)),
    (optim.Adagrad, dict(lr=0.1, initial_accumulator_value=0.5, maximize=True), dict(eps=1e-3)),
    (optim.RMSprop, dict(lr=0.01), dict(alpha=0.9, weight_decay=0.1)),
    (optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.9), dict(alpha=0.3, maximize=True)),
    (optim.RMSprop, dict(lr=0.01, momentum=0.5, weight_decay=0.05), dict(centered=True, momentum=0)),
    (optim.Adadelta, dict(lr=1.0), dict(rho=0.5, weight_decay=0.1, maximize=True)),
    (optim.Adamax, dict(lr=0.01), dict(betas=(0.3, 0.9), weight_decay=0.1, maximize=True)),
    (optim.NAdam, dict(lr=0.01), dict(momentum_decay=0.01, weight_decay=0.1)),
    (optim.NAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
     dict(betas=(0.3, 0.9), maximize=True)),
    (optim.RAdam, dict(lr=0.01), dict(weight_decay=0.1, betas=(0.3, 0.99))),
    (optim.RAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), dict(maximize=True)),
    (optim.ASGD, dict(lr=0.01, t0=20), dict(lambd=0.01, alpha=0.5, weight_decay=0.1, maximize=True)),
    (optim.Rprop, dict(lr=0.01), dict(etas=(0.3, 1.5), step_sizes=(1e-4, 0.05), maximize=True)),
]
IDS = [f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)]
# Every case in float32; float64 for the first five optimizers' cases and for the first case of
# each later one (every kernel variant is a cold compile in CI).
_FIRST = {c[0]: i for i, c in reversed(list(enumerate(CASES)))}
GRID = [pytest.param(c, dt, id=f"{name}-{dt.__name__}") for c, name in zip(CASES, IDS)
        for dt in (np.float32, np.float64)
        if dt is np.float32 or c[0] in REF_FIRST_FIVE or _FIRST[c[0]] == CASES.index(c)]


def _grads(seed: int, dtype) -> list[list[np.ndarray | None]]:
    """Gradients for every step; some None (param 1 every third step, param 3 for the first 10)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(STEPS):
        row = []
        for i, s in enumerate(SHAPES):
            none = (i == 1 and t % 3 == 0) or (i == 3 and t < 10)
            row.append(None if none else rng.standard_normal(s).astype(dtype))
        out.append(row)
    return out


def _make(cls, o0, o1, dtype, seed=0):
    rng = np.random.default_rng(seed + 1)
    params = [Parameter(rng.standard_normal(s).astype(dtype)) for s in SHAPES]
    groups = [{"params": [p for p, g in zip(params, GROUP_OF) if g == k]} for k in (0, 1)]
    groups[1].update(o1)
    return params, cls(groups, **o0)


def _run(opt, params, grads, steps):
    for row in steps:
        for p, g in zip(params, grads[row]):
            p.grad = g
        if row == 50:
            opt.param_groups[0]["lr"] *= 0.5
        opt.step()


@pytest.mark.parametrize("case,dtype", GRID)
def test_matches_numpy_reference(case, dtype):
    cls, o0, o1 = case
    params, opt = _make(cls, o0, o1, dtype)
    grads = _grads(7, dtype)
    # reference
    ref_p = [p.data.numpy().copy() for p in params]
    hyper = [dict(opt.param_groups[GROUP_OF[i]]) for i in range(len(SHAPES))]
    ref_state = [{} for _ in SHAPES]
    if cls is optim.Adagrad:
        for i, p in enumerate(ref_p):
            ref_state[i] = {"step": 0.0, "sum": np.full_like(p, hyper[i]["initial_accumulator_value"])}
    for t in range(STEPS):
        if t == 50:
            for h, i in zip(hyper, range(len(SHAPES))):
                if GROUP_OF[i] == 0:
                    h["lr"] *= 0.5
        for i in range(len(SHAPES)):
            if grads[t][i] is not None:
                ref_p[i] = REF[cls](ref_p[i], grads[t][i], ref_state[i], hyper[i])
    _run(opt, params, grads, range(STEPS))
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for i, (p, r) in enumerate(zip(params, ref_p)):
        assert p.data.dtype == dtype
        np.testing.assert_allclose(p.data, r, **tol, err_msg=f"param {i}")
        st = opt.state.get(p)
        if not ref_state[i] or (cls is optim.SGD and "momentum_buffer" not in ref_state[i]):
            assert not st, f"param {i} has state {st} but was never stepped"
            continue
        assert set(st) == set(ref_state[i]), (set(st), set(ref_state[i]))
        for k, v in ref_state[i].items():
            if k == "step":
                assert st[k].dtype == np.float32 and st[k].shape == () and float(st[k]) == v
            else:
                np.testing.assert_allclose(st[k], v, **tol, err_msg=f"param {i} state {k}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_state_dict_halfway_continues_identically(case):
    cls, o0, o1 = case
    grads = _grads(3, np.float32)
    params, opt = _make(cls, o0, o1, np.float32)
    _run(opt, params, grads, range(40))
    sd = opt.state_dict()
    saved = [p.data.numpy().copy() for p in params]
    _run(opt, params, grads, range(40, STEPS))
    params2, opt2 = _make(cls, o0, o1, np.float32, seed=99)
    for p, s in zip(params2, saved):
        p.data = s
    opt2.load_state_dict(copy.deepcopy(sd))
    _run(opt2, params2, grads, range(40, STEPS))
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.data, q.data)
    sd1, sd2 = opt.state_dict(), opt2.state_dict()
    assert sd1["param_groups"] == sd2["param_groups"]
    assert sd1["state"].keys() == sd2["state"].keys()
    for k in sd1["state"]:
        for name, v in sd1["state"][k].items():
            np.testing.assert_array_equal(v, sd2["state"][k][name])


def test_nan_and_inf_gradients_propagate_like_pytorch():
    torch = pytest.importorskip("torch")
    g = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0], np.float32)
    for cls, kw in [(optim.Adam, dict(amsgrad=True)), (optim.SGD, dict(momentum=0.9)),
                    (optim.Adagrad, {}), (optim.RMSprop, dict(centered=True, momentum=0.5)),
                    (optim.AdamW, {}), (optim.Adadelta, {}), (optim.Adamax, {}), (optim.NAdam, {}),
                    (optim.RAdam, {}), (optim.ASGD, {}), (optim.Rprop, {})]:
        p = Parameter(np.ones(5, np.float32))
        tp = torch.nn.Parameter(torch.ones(5))
        o, to_ = cls([p], lr=0.1, **kw), getattr(torch.optim, cls.__name__)([tp], lr=0.1, **kw)
        for _ in range(2):
            p.grad = g
            tp.grad = torch.from_numpy(g.copy())
            o.step()
            to_.step()
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-6, equal_nan=True,
                                   err_msg=cls.__name__)


@pytest.mark.parametrize("case,dtype", GRID)
def test_matches_pytorch(case, dtype):
    torch = pytest.importorskip("torch")
    cls, o0, o1 = case
    params, opt = _make(cls, o0, o1, dtype)
    tparams = [torch.nn.Parameter(torch.from_numpy(p.data.numpy().copy())) for p in params]
    tgroups = [{"params": [p for p, g in zip(tparams, GROUP_OF) if g == k]} for k in (0, 1)]
    tgroups[1].update(o1)
    topt = getattr(torch.optim, cls.__name__)(tgroups, **o0)
    grads = _grads(11, dtype)
    for t in range(STEPS):
        for p, tp, g in zip(params, tparams, grads[t]):
            p.grad = g
            tp.grad = None if g is None else torch.from_numpy(g.copy())
        if t == 50:
            opt.param_groups[0]["lr"] *= 0.5
            topt.param_groups[0]["lr"] *= 0.5
        opt.step()
        topt.step()
    tol = dict(rtol=5e-5, atol=5e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.data, tp.detach().numpy(), **tol)
    tsd = topt.state_dict()
    sd = opt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for k, st in tsd["state"].items():
        assert set(st) == set(sd["state"][k])
        for name, v in st.items():
            np.testing.assert_allclose(sd["state"][k][name], v.numpy(), **tol)
