"""ADOPT against a numpy reference of the published update and against pytorch-optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import (assert_close, grads, make, matches_package,
                       matches_reference, run, run_reference, state_dict_halfway)

from tinyopt import Parameter, optim

STEPS = 30


def _lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - a.dtype.type(w))


def ref_adopt(p, g, st, h, clip=lambda t: t ** 0.25):
    """ADOPT (Taniguchi et al. 2024, Algorithm 2), per-parameter step."""
    if not st:
        st.update(step=0.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    st["step"] = t = float(np.float32(st["step"] + 1))
    b1, b2 = h["betas"]
    g = -g if h["maximize"] else g
    if h["weight_decay"] != 0:
        if h["weight_decouple"]:
            p = p * (1 - h["weight_decay"] * (1 if h["fixed_decay"] else h["lr"]))
        else:
            g = g + h["weight_decay"] * p
    if t == 1:
        st["exp_avg_sq"] = st["exp_avg_sq"] + g * g
        return p
    n = g / np.maximum(np.sqrt(st["exp_avg_sq"]), h["eps"])
    if clip is not None:
        n = np.clip(n, -clip(t), clip(t))
    st["exp_avg"] = _lerp(st["exp_avg"], n, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    return p + (-h["lr"]) * st["exp_avg"]


# (each case's groups differ in run-time values only: one kernel per case to compile; maximize
# in the first group's options: pytorch-optimizer takes it for all groups)
CASES = [(dict(lr=0.01, weight_decay=0.1), dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3)),
         (dict(lr=0.01, weight_decay=0.1, weight_decouple=True, maximize=True),
          dict(eps=1e-3, fixed_decay=True, betas=(0.3, 0.9)))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 0]


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    matches_reference(optim.ADOPT, ref_adopt, o0, o1, dtype, STEPS)


def test_a_custom_clip_and_none():
    clip = lambda t: 0.5 + 0.1 * t  # noqa: E731
    for fn in (clip, None):
        params, opt = make(optim.ADOPT, dict(lr=0.05, clip_lambda=fn), {}, np.float32)
        gs = grads(5, np.float32, 12)
        ref, states = run_reference(lambda p, g, st, h: ref_adopt(p, g, st, h, fn), opt, params,
                                    gs)
        run(opt, params, gs, range(12))
        assert_close([p.data for p in params], ref, np.float32)


@pytest.mark.parametrize("o0,o1,dtype", GRID)
@pytest.mark.parametrize("exact_sqrt", [False, True], ids=["", "exact-sqrt"])
def test_matches_pytorch_optimizer(o0, o1, dtype, exact_sqrt, monkeypatch):
    """pytorch-optimizer counts steps per group: compared where every parameter has a gradient
    at every step (then the counts agree).  Within 1e-6 (float32; 1e-12 float64); to the bit
    with the reference's sqrt correctly rounded (PyTorch's CPU sqrt is MKL's, within an ulp:
    see tests/test_ademamix.py)."""
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    if exact_sqrt:
        monkeypatch.setattr(torch, "_foreach_sqrt", lambda ts: [
            torch.from_numpy(np.asarray(np.sqrt(t.numpy()))) for t in ts])
    params, _, tparams, _ = matches_package(torch, optim.ADOPT, pytorch_optimizer.ADOPT, o0, o1,
                                            dtype, STEPS, none=False)
    if exact_sqrt:
        for p, q in zip(params, tparams):
            np.testing.assert_array_equal(p.data.numpy(), q.detach().numpy())


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.ADOPT, *CASES[1], STEPS)


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (dict(eps=-1e-3), "Invalid epsilon value: -0.001"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.ADOPT([Parameter(np.zeros(2, np.float32))], **kw)


def test_copies_and_pickles_keep_the_clip_function():
    import copy
    import pickle
    clip = lambda t: 0.5 + 0.1 * t  # noqa: E731
    opt = optim.ADOPT([Parameter(np.zeros(2, np.float32))], clip_lambda=clip)
    assert copy.deepcopy(opt).clip_lambda is clip
    default = optim.ADOPT([Parameter(np.zeros(2, np.float32))])
    assert pickle.loads(pickle.dumps(default)).clip_lambda is optim.adopt.adopt_clip
