"""LARS against a numpy reference of the published update and against pytorch-optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from optim_runs import SHAPES, matches_package, matches_reference, state_dict_halfway

from tinyopt import Parameter, optim

STEPS = 30
BIG = SHAPES[:3] + [(200, 200)] + SHAPES[3:]  # a matrix over several chunks of the kernel


def ref_lars(p, g, st, h):
    """LARS (You et al. 2017, Algorithm 1), weights (2-d and up) only; SGD for the others."""
    g = -g if h["maximize"] else g
    wd = h["weight_decay"]
    if p.ndim > 1:
        pn = float(np.linalg.norm(p.astype(np.float64)))
        d = float(np.linalg.norm(g.astype(np.float64))) + wd * pn
        trust = h["trust_coefficient"] * pn / d if pn > 0 and d > 0 else 1.0
        g = (g + wd * p) * p.dtype.type(trust)
    if h["momentum"] > 0:
        b = st.get("momentum_buffer", np.zeros_like(p))
        st["momentum_buffer"] = b = b * h["momentum"] + (1 - h["dampening"]) * g
        g = g + h["momentum"] * b if h["nesterov"] else b
    return p + (-h["lr"]) * g


# (maximize in the first group's options: pytorch-optimizer takes it for all groups)
CASES = [(dict(lr=0.1, weight_decay=0.01, maximize=True),
          dict(lr=0.2, momentum=0.5, dampening=0.2, trust_coefficient=0.1)),
         (dict(lr=0.1, nesterov=True, trust_coefficient=0.02), dict(momentum=0.0))]
GRID = [pytest.param(o0, o1, dt, id=f"{k}-{dt.__name__}") for k, (o0, o1) in enumerate(CASES)
        for dt in (np.float32, np.float64) if dt is np.float32 or k == 0]


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_numpy_reference(o0, o1, dtype):
    matches_reference(optim.LARS, ref_lars, o0, o1, dtype, STEPS, shapes=BIG)


@pytest.mark.parametrize("o0,o1,dtype", GRID)
def test_matches_pytorch_optimizer(o0, o1, dtype):
    torch = pytest.importorskip("torch")
    pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
    matches_package(torch, optim.LARS, pytorch_optimizer.LARS, o0, o1, dtype, STEPS, shapes=BIG)


def test_state_dict_saved_halfway_continues_identically():
    state_dict_halfway(optim.LARS, *CASES[0], STEPS)


@pytest.mark.parametrize("kw,msg", [
    (dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (dict(momentum=1.5), "Invalid momentum value: 1.5"),
    (dict(trust_coefficient=-1.0), "Invalid trust_coefficient value: -1.0"),
])
def test_argument_checks(kw, msg):
    with pytest.raises(ValueError, match=msg):
        optim.LARS([Parameter(np.zeros(2, np.float32))], **kw)
