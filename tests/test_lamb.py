"""LAMB against a numpy reference of the published update and against pytorch-optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import SHAPES, assert_close, matches_package, matches_reference, state_dict_halfway

from tinyopt import Parameter, optim

STEPS = 30
BIG = SHAPES[:3] + [(40000,)] + SHAPES[3:]  # a parameter over several chunks of the kernel


def ref_lamb(p, g, st, h):
    """LAMB (You et al. 2019, Algorithm 2, v3 without bias correction)."""
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    st["step"] = t = float(np.float32(st["step"] + 1))
    b1, b2 = h["betas"]
    lr, wd, eps = h["lr"], h["weight_decay"], h["eps"]
    g = -g if h["maximize"] else g
    st["exp_avg"] = st["exp_avg"] * b1 + (1 - b1 if h["grad_averaging"] else 1.0) * g
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    if wd != 0 and h["weight_decouple"]:
        p = p * (1 - wd * (1 if h["fixed_decay"] else lr))
    u = st["exp_avg"] / (np.sqrt(st["exp_avg_sq"]) + eps)
    if wd != 0 and not h["weight_decouple"]:
        u = u + wd * p
    wn = min(float(np.linalg.norm(p.astype(np.float64))), h["clamp"])
    un = float(np.linalg.norm(u.astype(np.float64)))
    trust = 1.0 if wn == 0 or un == 0 else wn / (un + eps)
    # (kept as float32 scalar state, as every fused optimizer's scalars)
    st.update(weight_norm=float(np.float32(wn)), adam_norm=float(np.float32(un)),
              trust_ratio=float(np.float32(trust)))
    step_size = p.dtype.type(-lr / (1 - b1 ** t))
    return p + p.dtype.type(step_size * (1.0 if h["adam"] else trust)) * u


# (each case's groups differ in run-time values only: one kernel per case to compile; maximize
# in the first group's options: pytorch-optimizer takes it for all groups)
CASES = [(dict(lr=0.01, weight_decay=0.1, maximize=True),
          dict(lr=0.02, betas=(0.8, 0.99), fixed_decay=True)),
         (dict(lr=0.01, weight_decay=0.1, weight_decouple=False, clamp=1.0),
          dict(grad_averaging=False, eps=1e-3)),
         (dict(lr=0.05, weight_decay=0.1, adam=True), dict(lr=0.01))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 0]


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    matches_reference(optim.Lamb, ref_lamb, o0, o1, dtype, STEPS, BIG)


@pytest.mark.parametrize("o0,o1,dtype", GRID[:3])
def test_matches_pytorch_optimizer(o0, o1, dtype):
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    def setup(topt):  # (clamp: a class attribute there, one for all groups)
        topt.clamp = o0.get("clamp", 10.0)
    # (its step is the group's: every parameter has a gradient at every step)
    params, opt, tparams, topt = matches_package(torch, optim.Lamb, pytorch_optimizer.Lamb, o0, o1,
                                                 dtype, STEPS, BIG, none=False, setup=setup)
    for p, tp in zip(params, tparams):
        if p in opt.state:
            tst = topt.state[tp]
            assert_close([opt.state[p][k] for k in ("weight_norm", "adam_norm", "trust_ratio")],
                         [float(tst[k]) for k in ("weight_norm", "adam_norm", "trust_ratio")],
                         dtype, rtol=1e-6)  # (float32 scalar state)


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.Lamb, *CASES[0], STEPS)


def test_the_trust_ratio_is_per_parameter_not_per_piece():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    with pytest.raises(TypeError, match="elementwise"):
        ZeroRedundancyOptimizer([Parameter(np.zeros(2, np.float32))], optimizer_class=optim.Lamb)


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    (dict(clamp=0.0), "Invalid clamp value: 0.0"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.Lamb([Parameter(np.zeros(2, np.float32))], **kw)
