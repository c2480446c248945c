"""Schedule-Free SGD, AdamW and RAdam against a numpy reference of the published update and
against the ``schedulefree`` package (when it and torch are installed)."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import (GROUP_OF, SHAPES, assert_close, grads, make, run,
                        run_torch, state_dict_halfway, torch_twin)

from tinyopt import Parameter, optim

STEPS = 30
SWAP_AT = 12  # eval() then train() before this step


def _lerp(a, b, w):
    w = a.dtype.type(w)
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (a.dtype.type(1) - w)


class RefScheduleFree:
    """Schedule-Free (Defazio et al. 2024) as the ``schedulefree`` package computes it, in numpy:
    group-level ``k``, ``weight_sum``, ``lr_max``; per parameter ``z`` (and ``exp_avg_sq``)."""

    def __init__(self, kind: str, params: list[np.ndarray], hyper: list[dict]):
        self.kind, self.p, self.hyper = kind, params, hyper  # hyper: the group's dict per param
        self.groups = {id(h): h for h in hyper}
        for h in self.groups.values():
            h.update(k=0, weight_sum=0.0, lr_max=-1.0, train_mode=False)
        self.st = [{} for _ in params]

    def beta(self, h):
        return h["momentum"] if self.kind == "SGD" else h["betas"][0]

    def swap(self, train: bool):
        for i, h in enumerate(self.hyper):
            if "z" in self.st[i] and h["train_mode"] != train:
                b = self.beta(h)
                self.p[i] = _lerp(self.p[i], self.st[i]["z"], 1 - b if train else 1 - 1 / b)
        for h in self.groups.values():
            h["train_mode"] = train

    def step(self, gs: list[np.ndarray | None]):
        coef = {}
        for key, h in self.groups.items():
            k, b2 = h["k"], h.get("betas", (0, 0))[1]
            adam = True
            if self.kind == "RAdam":
                t = k + 1
                rho_inf = 2 / (1 - b2) - 1
                rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
                adam = rho_t > 4.0
                rect = (((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2)
                                                               * rho_t)) ** 0.5
                        if adam else float(not h["silent_sgd_phase"]))
                lr = h["lr"] * rect
            else:
                warm = h["warmup_steps"]
                lr = h["lr"] * ((k + 1) / warm if k < warm else 1.0)
            h["lr_max"] = max(lr, h["lr_max"])
            weight = (k + 1) ** h["r"] * h["lr_max"] ** h["weight_lr_power"]
            h["weight_sum"] += weight
            ckp1 = weight / h["weight_sum"] if h["weight_sum"] else 0
            coef[key] = (lr, ckp1, adam, 1 - b2 ** (k + 1))
        for i, g in enumerate(gs):
            if g is None:
                continue
            h, st = self.hyper[i], self.st[i]
            lr, ckp1, adam, bc2 = coef[id(h)]
            y = self.p[i]
            if not st:
                st["z"] = y.copy()
                if self.kind != "SGD":
                    st["exp_avg_sq"] = np.zeros_like(y)
            if self.kind != "SGD":
                b2 = h["betas"][1]
                st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
                if adam:
                    g = g / (np.sqrt(st["exp_avg_sq"] / bc2) + h["eps"])
            if h["weight_decay"] != 0:
                g = g + h["weight_decay"] * y
            y = _lerp(y, st["z"], ckp1)
            self.p[i] = y + (lr * (self.beta(h) * (1 - ckp1) - 1)) * g
            st["z"] = st["z"] + (-lr) * g
        for h in self.groups.values():
            h["k"] += 1


CLASSES = {"SGD": optim.SGDScheduleFree, "AdamW": optim.AdamWScheduleFree,
           "RAdam": optim.RAdamScheduleFree}
# (each case's groups differ in run-time values only: one kernel per case to compile)
CASES = [
    ("SGD", dict(lr=0.5, warmup_steps=4, weight_decay=0.1), dict(momentum=0.8, r=1.0)),
    ("AdamW", dict(lr=0.02, warmup_steps=5, weight_decay=0.05),
     dict(betas=(0.8, 0.99), weight_lr_power=0.0, r=0.5)),
    ("RAdam", dict(lr=0.02, weight_decay=0.1), dict(silent_sgd_phase=False, betas=(0.5, 0.9))),
]
GRID = [pytest.param(c, dt, id=f"{c[0]}-{dt.__name__}") for c in CASES
        for dt in (np.float32, np.float64) if dt is np.float32 or c[0] == "AdamW"]


def _swap(opt, t):
    if t == SWAP_AT:
        opt.eval()
        opt.train()


@pytest.mark.parametrize("case,dtype", GRID)
def test_matches_numpy_reference(case, dtype):
    kind, o0, o1 = case
    params, opt = make(CLASSES[kind], o0, o1, dtype)
    gs = grads(7, dtype, STEPS)
    defaults = dict(opt.defaults)
    both = [dict(defaults), dict(defaults, **o1)]  # the two groups' hyperparameters
    hyper = [both[GROUP_OF[i]] for i in range(len(SHAPES))]
    ref = RefScheduleFree(kind, [p.data.numpy().copy() for p in params], hyper)
    ref.swap(True)
    opt.train()
    for t in range(STEPS):
        if t == STEPS // 2:
            both[0]["lr"] *= 0.5
        if t == SWAP_AT:
            ref.swap(False)
            ref.swap(True)
        ref.step(gs[t])
    run(opt, params, gs, range(STEPS), _swap)
    assert_close([p.data for p in params], ref.p, dtype)
    opt.eval()
    ref.swap(False)
    assert_close([p.data for p in params], ref.p, dtype, what="x of param")
    for i, p in enumerate(params):
        assert set(opt.state.get(p, {})) == set(ref.st[i])
        assert_close([opt.state[p][k] for k in sorted(ref.st[i])],
                     [ref.st[i][k] for k in sorted(ref.st[i])], dtype, what=f"param {i} state")
    for g, h in zip(opt.param_groups, both):
        assert (g["k"], g["train_mode"]) == (h["k"], False) == (STEPS, False)
        assert g["weight_sum"] == pytest.approx(h["weight_sum"], rel=1e-12)
        assert g["lr_max"] == pytest.approx(h["lr_max"], rel=1e-12)


@pytest.mark.parametrize("case,dtype", GRID)
def test_matches_schedulefree_package(case, dtype):
    torch = pytest.importorskip("torch")
    schedulefree = pytest.importorskip("schedulefree")
    kind, o0, o1 = case
    ref_cls = getattr(schedulefree, CLASSES[kind].__name__)
    params, opt = make(CLASSES[kind], o0, o1, dtype)
    tparams, topt = torch_twin(torch, ref_cls, o0, o1, params)
    gs = grads(11, dtype, STEPS)
    opt.train()
    topt.train()
    run(opt, params, gs, range(STEPS), _swap)
    run_torch(torch, topt, tparams, gs, range(STEPS), _swap)
    assert_close([p.data for p in params], [p.detach().numpy() for p in tparams], dtype)
    opt.eval()
    topt.eval()
    assert_close([p.data for p in params], [p.detach().numpy() for p in tparams], dtype)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for k, st in tsd["state"].items():
        assert set(st) == set(sd["state"][k])
        assert_close([sd["state"][k][n] for n in st], [v.numpy() for v in st.values()], dtype)
    for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
        assert set(g) == set(tg)
        for key in ("k", "train_mode", "r", "weight_lr_power", "weight_sum", "lr_max"):
            assert g[key] == pytest.approx(tg[key], rel=1e-12)


@pytest.mark.parametrize("kind", ["SGD", "AdamW"])
def test_state_dict_saved_halfway_continues_identically(kind):
    _, o0, o1 = next(c for c in CASES if c[0] == kind)

    def each(opt, t):
        if t == 0 or t == STEPS // 2 - 3:  # (a fresh optimizer starts in eval mode)
            opt.train()
        _swap(opt, t)
    state_dict_halfway(CLASSES[kind], o0, o1, STEPS, each)


def test_step_needs_train_mode_and_eval_train_move_only_parameters_with_state():
    a, b = Parameter(np.ones(3, np.float32)), Parameter(np.full(2, 5.0, np.float32))
    # (weight_decay: the switches of the SGD case above, so no kernel of its own to compile)
    opt = optim.SGDScheduleFree([a, b], lr=0.1, weight_decay=0.1)
    with pytest.raises(RuntimeError, match="not in train mode"):
        opt.step()
    opt.train()
    a.grad = np.ones(3, np.float32)
    opt.step()
    y, z = a.data.numpy().copy(), opt.state[a]["z"].numpy().copy()
    opt.eval()
    np.testing.assert_allclose(a.data, (y - 0.1 * z) / 0.9, rtol=1e-6)  # x = (y - (1-b) z) / b
    np.testing.assert_array_equal(b.data, 5.0)  # no state: left as it is
    opt.eval()  # already in eval mode: nothing moves
    np.testing.assert_allclose(a.data, (y - 0.1 * z) / 0.9, rtol=1e-6)
    opt.train()
    np.testing.assert_allclose(a.data, y, rtol=1e-6)
    assert b not in opt.state and opt.param_groups[0]["k"] == 1


def test_bfloat16_parameters_swap_with_their_masters():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    p = Parameter(np.linspace(-1, 1, 6).astype(bf16))
    q = Parameter(p.data.numpy().astype(np.float32))
    # (weight_decay: the float32 run takes the AdamW case's kernels)
    opts = [optim.AdamWScheduleFree([x], lr=0.05, weight_decay=0.05) for x in (p, q)]
    for o in opts:
        o.train()
    for t in range(3):
        g = np.linspace(0.5, -0.2, 6).astype(np.float32) * (t + 1)
        p.grad, q.grad = g, g.copy()
        for o in opts:
            o.step()
    for o in opts:
        o.eval()
    np.testing.assert_array_equal(opts[0].state[p]["master_param"].numpy(), q.data.numpy())
    np.testing.assert_array_equal(p.data.numpy(), q.data.numpy().astype(bf16))


@pytest.mark.parametrize("cls,kw,msg", [
    (optim.SGDScheduleFree, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (optim.SGDScheduleFree, dict(momentum=1.0), "Momentum must be between 0 and 1 exclusive"),
    (optim.SGDScheduleFree, dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    (optim.AdamWScheduleFree, dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (optim.AdamWScheduleFree, dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    (optim.AdamWScheduleFree, dict(warmup_steps=-2), "Invalid warmup_steps value: -2"),
    (optim.RAdamScheduleFree, dict(lr=-0.5), "Invalid learning rate: -0.5"),
])
def test_argument_checks(cls, kw, msg):
    with pytest.raises(ValueError, match=msg):
        cls([Parameter(np.zeros(2, np.float32))], **kw)
