"""The cautious option (Liang et al. 2024) of Lion, Adam/AdamW and SGD: a numpy reference of
the masked update, pytorch-optimizer's cautious Lion, 16-bit masters, and where it may not go."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import (SHAPES, assert_close, assert_state_close, grads, make, run, run_reference,
                        run_torch, state_dict_halfway, torch_twin)

from tinyopt import Parameter, optim

STEPS = 30
# a parameter over several of the two-pass kernel's chunks, between small ones
BIG = SHAPES[:3] + [(40000,)] + SHAPES[3:]


def _lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - a.dtype.type(w))


def _cautious(u, g):
    """u where it agrees in sign with g, times numel / (count + 1); 0 elsewhere."""
    mask = u * g > 0
    return u * (mask * u.dtype.type(u.size / (np.count_nonzero(mask) + 1)))


def ref_lion(p, g, st, h):
    if not st:
        st["exp_avg"] = np.zeros_like(p)
    b1, b2 = h["betas"]
    g = -g if h["maximize"] else g
    p = p * (1 - h["lr"] * h["weight_decay"])
    u = _cautious(np.sign(st["exp_avg"] * b1 + (1 - b1) * g), g)
    st["exp_avg"] = st["exp_avg"] * b2 + (1 - b2) * g
    return p + (-h["lr"]) * u


def ref_adam(p, g, st, h):
    """torch's Adam/AdamW with m replaced by its cautious mask in the update."""
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        if h["amsgrad"]:
            st["max_exp_avg_sq"] = np.zeros_like(p)
    b1, b2 = h["betas"]
    lr, wd = h["lr"], h["weight_decay"]
    g = -g if h["maximize"] else g
    st["step"] = t = float(np.float32(st["step"] + 1))
    if wd != 0:
        if h["decoupled_weight_decay"]:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    v = st["exp_avg_sq"]
    if h["amsgrad"]:
        st["max_exp_avg_sq"] = v = np.maximum(st["max_exp_avg_sq"], v)
    denom = np.sqrt(v) / ((1 - b2 ** t) ** 0.5) + h["eps"]
    return p + (-(lr / (1 - b1 ** t))) * _cautious(st["exp_avg"], g) / denom


def ref_sgd(p, g, st, h):
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        g = g + h["weight_decay"] * p
    u = g
    if h["momentum"] != 0:
        b = g.copy() if "momentum_buffer" not in st else \
            st["momentum_buffer"] * h["momentum"] + (1 - h["dampening"]) * g
        st["momentum_buffer"] = b
        u = g + h["momentum"] * b if h["nesterov"] else b
    return p + (-h["lr"]) * _cautious(u, g)


# (each case's groups differ in run-time values only: one kernel per case to compile)
CASES = [
    (optim.Lion, ref_lion, dict(lr=0.01, weight_decay=0.1, maximize=True), dict(betas=(0.5, 0.9))),
    (optim.AdamW, ref_adam, dict(lr=0.01, amsgrad=True), dict(weight_decay=0.3, eps=1e-3)),
    (optim.Adam, ref_adam, dict(lr=0.01, weight_decay=0.1, maximize=True), dict(betas=(0.3, 0.9))),
    (optim.SGD, ref_sgd, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
     dict(momentum=0.5, weight_decay=0.1)),
]
GRID = [pytest.param(c, dt, id=f"{c[0].__name__}{k}-{dt.__name__}") for k, c in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 1]


@pytest.mark.parametrize("case,dtype", GRID)
def test_matches_numpy_reference(case, dtype):
    cls, ref_fn, o0, o1 = case
    params, opt = make(cls, dict(o0, cautious=True), o1, dtype, shapes=BIG)
    gs = grads(7, dtype, STEPS, BIG)
    ref, states = run_reference(ref_fn, opt, params, gs)
    run(opt, params, gs, range(STEPS))
    assert_close([p.data for p in params], ref, dtype)
    assert_state_close(opt, params, states, dtype)
    assert opt.param_groups[0]["cautious"] is True


def test_lion_matches_pytorch_optimizer():
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    o0, o1 = dict(lr=0.01, weight_decay=0.1, cautious=True, maximize=True), dict(betas=(0.5, 0.9))
    params, opt = make(optim.Lion, o0, o1, np.float32, shapes=BIG)
    tparams, topt = torch_twin(torch, pytorch_optimizer.Lion, o0, o1, params)
    gs = grads(11, np.float32, STEPS, BIG)
    run(opt, params, gs, range(STEPS))
    run_torch(torch, topt, tparams, gs, range(STEPS))
    # (pytorch-optimizer's Lion lerps m: the same values to an ulp, the same signs)
    assert_close([p.data for p in params], [p.detach().numpy() for p in tparams], np.float32)


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.AdamW, dict(CASES[1][2], cautious=True), CASES[1][3], STEPS)


def test_the_option_is_in_the_defaults_only_when_on():
    assert "cautious" not in optim.AdamW([Parameter(np.zeros(2))]).defaults
    assert "cautious" not in optim.SGD([Parameter(np.zeros(2))]).defaults
    assert optim.SGD([Parameter(np.zeros(2))], cautious=True).defaults["cautious"] is True


def test_a_cautious_group_steps_outside_the_backward_plan():
    from tinyopt.optim.in_plan import fusable
    opt = optim.AdamW([Parameter(np.zeros(2, np.float32))], cautious=True)
    assert "cautious" in fusable(opt)
    assert fusable(optim.AdamW([Parameter(np.zeros(2, np.float32))])) is None


def test_bfloat16_masters_follow_the_float32_run():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(0)
    x = [rng.standard_normal(s).astype(np.float32).astype(bf16) for s in ((3, 4), (40000,))]
    p16 = [Parameter(a) for a in x]
    p32 = [Parameter(a.astype(np.float32)) for a in x]
    # (amsgrad: the float32 run takes the AdamW case's kernel)
    o16, o32 = (optim.AdamW(ps, lr=0.01, amsgrad=True, cautious=True) for ps in (p16, p32))
    for _ in range(3):
        for p, q in zip(p16, p32):
            p.grad = rng.standard_normal(p.shape).astype(np.float32)
            q.grad = p.grad.numpy().copy()
        o16.step()
        o32.step()
    for p, q in zip(p16, p32):
        np.testing.assert_array_equal(o16.state[p]["master_param"].numpy(), q.data.numpy())
        np.testing.assert_array_equal(p.data.numpy(), q.data.numpy().astype(bf16))
