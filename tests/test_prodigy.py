"""Prodigy against a numpy reference of the published update and against ``prodigyopt``, on a
noisy quadratic (so that d, the estimated distance, grows)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optim_runs import assert_close, group_of, groups, initial

from tinyopt import Parameter, optim

STEPS = 40


class RefProdigy:
    """Prodigy (Mishchenko & Defazio 2023, Algorithm 3 with prodigyopt's options) in numpy:
    d, k and the betas from group 0, the sums over every parameter."""

    def __init__(self, params, hyper):  # hyper: the two groups' dicts
        self.p, self.hyper = params, hyper
        self.st: list[dict] = [{} for _ in params]

    def step(self, gs):
        g0 = self.hyper[0]
        lr = max(h["lr"] for h in self.hyper)
        b1, b2 = g0["betas"]
        b3 = g0["beta3"] if g0["beta3"] is not None else math.sqrt(b2)
        k, d = g0["k"], g0["d"]
        bias = (math.sqrt(1 - b2 ** (k + 1)) / (1 - b1 ** (k + 1))
                if g0["use_bias_correction"] else 1)
        dlr = d * lr * bias
        num, den = g0["d_numerator"] * b3, 0.0
        decouple = g0["decouple"]
        for i, g in enumerate(gs):
            if g is None:
                continue
            h, st, p = self.hyper[group_of(i)], self.st[i], self.p[i]
            if h["weight_decay"] != 0 and not decouple:
                g = g + h["weight_decay"] * p
            if not st:
                st.update(step=0.0, s=np.zeros_like(p), p0=p.copy(), exp_avg_sq=np.zeros_like(p))
                if b1 > 0:
                    st["exp_avg"] = np.zeros_like(p)
            if h["lr"] == 0:  # (that group's moments stay)
                continue
            num += (d / h["d0"]) * dlr * float(np.dot(g.ravel().astype(np.float64),
                                                      (st["p0"] - p).ravel()))
            if b1 > 0:
                st["exp_avg"] = st["exp_avg"] * b1 + g * (d * (1 - b1))
            st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (d * d * (1 - b2)) * g * g
            alpha = (d / h["d0"]) * (d if h["safeguard_warmup"] else dlr)
            st["s"] = st["s"] * b3 + g * alpha
            den += float(np.abs(st["s"]).astype(np.float64).sum())
        if den == 0:
            return
        d_hat = g0["d_coef"] * num / den
        if d == self.hyper[-1]["d0"]:
            d = max(d, d_hat)
        d_max = max(g0["d_max"], d_hat)
        d = min(d_max, d * g0["growth_rate"])
        for h in self.hyper:
            h.update(d_numerator=num, d=d, d_max=d_max)
        for i, g in enumerate(gs):
            if g is None:
                continue
            h, st, p = self.hyper[group_of(i)], self.st[i], self.p[i]
            st["step"] += 1
            wd = h["weight_decay"]
            if wd != 0 and not decouple:
                g = g + wd * p
            denom = np.sqrt(st["exp_avg_sq"]) + d * h["eps"]
            if wd != 0 and decouple:
                p = p + (-wd * dlr) * p
            self.p[i] = (p + (-dlr) * st["exp_avg"] / denom if b1 > 0
                         else p + (-dlr * d) * g / denom)
        for h in self.hyper:
            h["k"] += 1


def _grads(rng, ps, t, dtype):
    """A noisy quadratic's gradient at ``ps``; parameter 1 has none every third step."""
    return [None if i == 1 and t % 3 == 0 else
            np.asarray(p - 0.5 + 0.1 * rng.standard_normal(p.shape), dtype)
            for i, p in enumerate(ps)]


CASES = [(dict(weight_decay=0.1), dict(eps=1e-6)),
         (dict(weight_decay=0.05, decouple=False, d_coef=2.0), dict(eps=1e-6)),
         (dict(betas=(0.0, 0.99), use_bias_correction=True, growth_rate=1.05),
          dict(safeguard_warmup=True, d0=1e-5)),
         (dict(beta3=0.9), dict(lr=0.0))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 0]


def _run_both(o0, o1, dtype, other):
    """tinyopt's Prodigy and ``other(params, hyper)`` (its ``step(gs)``, ``p``) side by side;
    the gradients are taken at tinyopt's parameters and handed to both."""
    x = initial(dtype)
    params = [Parameter(a.copy()) for a in x]
    opt = optim.Prodigy(groups(params, o1), **o0)
    ref = other([a.copy() for a in x], opt)
    rng = np.random.default_rng(5)
    for t in range(STEPS):
        gs = _grads(rng, [p.data.numpy() for p in params], t, dtype)
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()
        ref.step(gs)
    return params, opt, ref


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    params, opt, ref = _run_both(o0, o1, dtype, lambda x, opt: RefProdigy(
        x, [dict(g) for g in opt.param_groups]))
    assert opt.param_groups[0]["d"] > 2e-6  # (d grew from d0)
    assert opt.param_groups[0]["d"] == pytest.approx(ref.hyper[0]["d"], rel=1e-5)
    assert_close([p.data for p in params], ref.p, dtype, rtol=1e-5 if dtype == np.float32 else None)
    for i, p in enumerate(params):
        st = opt.state.get(p, {})
        assert set(st) == set(ref.st[i])
        if st:
            assert float(st["step"]) == ref.st[i]["step"]


class _Package:
    """prodigyopt's Prodigy over torch copies, with the numpy gradients."""

    def __init__(self, x, opt):
        import torch
        from prodigyopt import Prodigy
        self.torch = torch
        self.tp = [torch.nn.Parameter(torch.from_numpy(a)) for a in x]
        o = [dict(g) for g in opt.param_groups]
        gs = groups(self.tp, {})
        for tg, og in zip(gs, o):
            tg.update({k: v for k, v in og.items() if k != "params"})
        self.opt = Prodigy(gs, **{k: v for k, v in o[0].items()
                                  if k in ("lr", "betas", "beta3", "eps", "weight_decay")})

    @property
    def p(self):
        return [t.detach().numpy() for t in self.tp]

    def step(self, gs):
        for t, g in zip(self.tp, gs):
            t.grad = None if g is None else self.torch.from_numpy(g.copy())
        self.opt.step()


def _float64_sums_and_exact_sqrt(torch, monkeypatch) -> None:
    """Make prodigyopt's three inexact float32 operations exact: its two sums for d
    (``torch.dot`` and ``Tensor.sum``: float32 accumulations in BLAS's and ATen's orders) in
    float64, and ``Tensor.sqrt`` (MKL's vsSqrt: within an ulp, not correctly rounded) by numpy."""
    dot, total = torch.dot, torch.Tensor.sum
    monkeypatch.setattr(torch, "dot", lambda a, b: dot(a.double(), b.double()))
    monkeypatch.setattr(torch.Tensor, "sum", lambda t, *a, **k: total(t.double(), *a, **k))
    monkeypatch.setattr(torch.Tensor, "sqrt",
                        lambda t: torch.from_numpy(np.asarray(np.sqrt(t.numpy()))))


PACKAGE_GRID = [g for g in GRID if g.values[2] is np.float32][:3] + [GRID[1]]


@pytest.mark.parametrize("o0,o1,dtype", PACKAGE_GRID)
def test_matches_prodigyopt(o0, o1, dtype):
    """Within 1e-6 (float32; 1e-12 float64).  What differs is prodigyopt's: d's two sums are
    float32 accumulations there (tinyopt's are float64), and PyTorch's sqrt is not correctly
    rounded (see the next test)."""
    pytest.importorskip("torch")
    pytest.importorskip("prodigyopt")
    params, opt, ref = _run_both(o0, o1, dtype, _Package)
    rel = 1e-6 if dtype == np.float32 else 1e-14
    assert opt.param_groups[0]["d"] == pytest.approx(ref.opt.param_groups[0]["d"], rel=rel)
    assert_close([p.data for p in params], ref.p, dtype)


@pytest.mark.parametrize("o0,o1,dtype", PACKAGE_GRID[:3])
def test_matches_prodigyopt_to_the_bit_where_its_float32_rounding_is_exact(o0, o1, dtype,
                                                                          monkeypatch):
    """With prodigyopt's sums taken in float64 and its sqrt correctly rounded, every other
    operation of it rounds as tinyopt's kernels do (fused multiply-adds where PyTorch's CPU
    kernels fuse, d's terms added one parameter at a time): the same bits, d included.  The
    reference against itself: its own float32 sums move d by up to ~5e-7 relative and the
    parameters by up to ~1e-6 (the difference the previous test allows)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("prodigyopt")
    _float64_sums_and_exact_sqrt(torch, monkeypatch)
    params, opt, ref = _run_both(o0, o1, dtype, _Package)
    assert opt.param_groups[0]["d"] == ref.opt.param_groups[0]["d"]
    for p, q in zip(params, ref.p):
        np.testing.assert_array_equal(p.data.numpy(), q)


def test_state_dict_saved_halfway_continues_identically():
    import copy
    x = initial(np.float32)
    runs = []
    for resume in (False, True):
        params = [Parameter(a.copy()) for a in x]
        opt = optim.Prodigy(groups(params, {"weight_decay": 0.1}))
        rng = np.random.default_rng(2)
        for t in range(STEPS):
            if resume and t == STEPS // 2:
                sd = copy.deepcopy(opt.state_dict())
                opt = optim.Prodigy(groups(params, {}), lr=0.5)
                opt.load_state_dict(sd)
            gs = _grads(rng, [p.data.numpy() for p in params], t, np.float32)
            for p, g in zip(params, gs):
                p.grad = g
            opt.step()
        runs.append([p.data.numpy().copy() for p in params])
        assert opt.param_groups[1]["weight_decay"] == 0.1
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_zero_gradients_make_no_progress_and_no_step():
    p = Parameter(np.ones(3, np.float32))
    opt = optim.Prodigy([p])
    p.grad = np.zeros(3, np.float32)
    opt.step()
    np.testing.assert_array_equal(p.data, 1.0)
    assert opt.param_groups[0]["k"] == 0 and float(opt.state[p]["step"]) == 0


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=0.0), "Invalid learning rate: 0.0"),
    (dict(d0=0.0), "Invalid d0 value: 0.0"),
    (dict(eps=0.0), "Invalid epsilon value: 0.0"),
    (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (dict(slice_p=11), "slice_p must be 1"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.Prodigy([Parameter(np.zeros(2, np.float32))], **kw)


def test_different_group_learning_rates_raise_as_the_reference():
    a, b = Parameter(np.ones(2, np.float32)), Parameter(np.ones(2, np.float32))
    opt = optim.Prodigy([{"params": [a]}, {"params": [b], "lr": 0.5}])
    a.grad = b.grad = np.ones(2, np.float32)
    with pytest.raises(RuntimeError, match="different lr values"):
        opt.step()


def test_bfloat16_masters_follow_the_float32_run():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    x = [a.astype(bf16) for a in initial(np.float32)]
    p16 = [Parameter(a) for a in x]
    p32 = [Parameter(a.astype(np.float32)) for a in x]
    o16, o32 = optim.Prodigy(p16, weight_decay=0.1), optim.Prodigy(p32, weight_decay=0.1)
    rng = np.random.default_rng(1)
    for t in range(5):
        gs = _grads(rng, [p.data.numpy() for p in p32], t, np.float32)
        for p, q, g in zip(p16, p32, gs):
            p.grad, q.grad = g, g
        o16.step()
        o32.step()
    for p, q in zip(p16, p32):
        if q in o32.state:
            np.testing.assert_array_equal(o16.state[p]["master_param"].numpy(), q.data.numpy())
        np.testing.assert_array_equal(p.data.numpy(), q.data.numpy().astype(bf16))
