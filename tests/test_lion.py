"""Lion against a numpy reference of the published update and against ``lion-pytorch``."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import (assert_close, matches_package, matches_reference,
                       state_dict_halfway)

from tinyopt import Parameter, optim

STEPS = 30


def ref_lion(p, g, st, h):
    """Lion (Chen et al. 2023, Algorithm 2), in lion-pytorch's order of operations."""
    if not st:
        st["exp_avg"] = np.zeros_like(p)
    b1, b2 = h["betas"]
    g = -g if h["maximize"] else g
    p = p * (1 - h["lr"] * h["weight_decay"])
    u = np.sign(st["exp_avg"] * b1 + (1 - b1) * g)
    p = p + (-h["lr"]) * u
    st["exp_avg"] = st["exp_avg"] * b2 + (1 - b2) * g
    return p


# (each case's groups differ in run-time values only: one kernel per case to compile)
CASES = [(dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.9))),
         (dict(lr=0.01, weight_decay=0.5, maximize=True), dict(betas=(0.95, 0.98)))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 0]


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    matches_reference(optim.Lion, ref_lion, o0, o1, dtype, STEPS)


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_lion_pytorch(o0, o1, dtype):
    torch = pytest.importorskip("torch")
    lion_pytorch = pytest.importorskip("lion_pytorch")
    if o0.get("maximize"):  # (lion-pytorch has no maximize)
        pytest.skip("lion-pytorch has no maximize")
    _, opt, _, topt = matches_package(torch, optim.Lion, lion_pytorch.Lion, o0, o1, dtype, STEPS)
    tsd = topt.state_dict()["state"]
    assert opt.state_dict()["state"].keys() == tsd.keys()
    assert_close([opt.state_dict()["state"][k]["exp_avg"] for k in tsd],
                 [v["exp_avg"].numpy() for v in tsd.values()], dtype)


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.Lion, *CASES[1], STEPS)


def test_sign_of_zero_and_nan_is_zero_as_torch_sign():
    p = Parameter(np.ones(4, np.float32))
    opt = optim.Lion([p], lr=0.5, betas=(0.0, 0.5))
    p.grad = np.array([0.0, -0.0, np.nan, -2.0], np.float32)
    opt.step()
    np.testing.assert_array_equal(p.data, [1.0, 1.0, 1.0, 1.5])  # sign(0) = sign(NaN) = 0
    assert np.isnan(opt.state[p]["exp_avg"].numpy()[2])


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(betas=(1.5, 0.9)), "Invalid beta parameter at index 0: 1.5"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.Lion([Parameter(np.zeros(2, np.float32))], **kw)
