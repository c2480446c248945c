"""AdEMAMix against a numpy reference of the published update and against pytorch-optimizer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optim_runs import matches_package, matches_reference, state_dict_halfway

from tinyopt import Parameter, optim

STEPS = 30


def _lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - a.dtype.type(w))


def ref_ademamix(p, g, st, h):
    """AdEMAMix (Pagliardini et al. 2024, Algorithm 1 and its schedulers), per-parameter step."""
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p),
                  exp_avg_slow=np.zeros_like(p))
    st["step"] = t = float(np.float32(st["step"] + 1))
    b1, b2, b3 = h["betas"]
    alpha, T = h["alpha"], h["t_alpha_beta3"]
    if T is not None:
        alpha = min(t * alpha / T, alpha)
        lb1, lb3 = math.log(b1), math.log(b3)
        b3 = min(math.exp(lb1 * lb3 / ((1 - t / T) * lb3 + (t / T) * lb1)), b3)
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        if h["weight_decouple"]:
            p = p * (1 - h["weight_decay"] * (1 if h["fixed_decay"] else h["lr"]))
        else:
            g = g + h["weight_decay"] * p
    st["exp_avg"] = _lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    st["exp_avg_slow"] = _lerp(st["exp_avg_slow"], g, 1 - b3)
    denom = np.sqrt(st["exp_avg_sq"]) / math.sqrt(1 - b2 ** t) + h["eps"]
    u = st["exp_avg"] / (1 - b1 ** t) + alpha * st["exp_avg_slow"]
    return p + (-h["lr"]) * u / denom


# (each case's groups differ in run-time values only: one kernel per case to compile; maximize
# in the first group's options: pytorch-optimizer takes it for all groups)
CASES = [(dict(lr=0.01, weight_decay=0.1), dict(lr=0.02, betas=(0.8, 0.99, 0.999), alpha=3.0)),
         (dict(lr=0.01, t_alpha_beta3=20, weight_decay=0.1, weight_decouple=True, maximize=True),
          dict(alpha=2.0, betas=(0.3, 0.9, 0.99), fixed_decay=True, t_alpha_beta3=10))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 1]


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    matches_reference(optim.AdEMAMix, ref_ademamix, o0, o1, dtype, STEPS)


@pytest.mark.parametrize("o0,o1,dtype", GRID)
@pytest.mark.parametrize("exact_sqrt", [False, True], ids=["", "exact-sqrt"])
def test_matches_pytorch_optimizer(o0, o1, dtype, exact_sqrt, monkeypatch):
    """pytorch-optimizer counts steps per group: compared where every parameter has a gradient
    at every step (then the counts agree).  Within 1e-6 (float32; 1e-12 float64); with the
    reference's sqrt correctly rounded, to the bit: PyTorch's CPU sqrt is MKL's vsSqrt, within
    an ulp but not correctly rounded (0.7% of float32 results an ulp low), and each of the
    reference's other operations rounds as tinyopt's kernel does (its lerp, add(alpha=) and
    addcmul are fused multiply-adds in PyTorch's CPU kernels, and in tinyopt's)."""
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    if exact_sqrt:
        monkeypatch.setattr(torch, "_foreach_sqrt", lambda ts: [
            torch.from_numpy(np.asarray(np.sqrt(t.numpy()))) for t in ts])
    params, _, tparams, _ = matches_package(torch, optim.AdEMAMix, pytorch_optimizer.AdEMAMix,
                                            o0, o1, dtype, STEPS, none=False)
    if exact_sqrt:
        for p, q in zip(params, tparams):
            np.testing.assert_array_equal(p.data.numpy(), q.detach().numpy())


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.AdEMAMix, *CASES[1], STEPS)


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(betas=(0.9, 0.999)), "betas must be a triple"),
    (dict(betas=(0.9, 0.999, 1.0)), "Invalid beta parameter at index 2: 1.0"),
    (dict(alpha=-1.0), "Invalid alpha value: -1.0"),
    (dict(t_alpha_beta3=0), "Invalid t_alpha_beta3 value: 0"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.AdEMAMix([Parameter(np.zeros(2, np.float32))], **kw)
