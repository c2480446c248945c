"""FlatBuffer: one group's parameters, gradients and every piece of optimizer state in flat buffers."""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt import Parameter, optim
from tinyopt.optim.flat import FlatBuffer

SHAPES = [(0,), (3, 4), (5,), (0,), (), (7, 2)]


def _params(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(dtype)) for s in SHAPES]


def _grads(params, seed):
    rng = np.random.default_rng(seed)
    for p in params:
        p.grad = rng.standard_normal(p.shape).astype(p.dtype)


def test_every_piece_of_state_is_a_view_into_the_buffer():
    ps = _params()
    opt = optim.Adam(ps, lr=0.01)
    _grads(ps, 1)
    opt.step()
    (fb,) = opt._flat[0]
    for j, p in enumerate(ps):
        assert fb.param_view(j) is p._data  # the storage stays the parameter's own
        assert np.shares_memory(p._grad, fb.grad) or p.numel() == 0
        st = opt.state[p]
        for name in fb.vectors:
            assert np.shares_memory(st[name], fb.vectors[name]) or p.numel() == 0
        for k, name in enumerate(fb.scalar_names):
            if name in opt.scalar_state:
                assert st[name].shape == () and st[name].dtype == np.float32
                st[name][...] = 42  # writing the view writes the buffer
                assert fb.scalars[j, k] == 42


def test_host_record_names_and_overflow():
    fb = FlatBuffer([Parameter(np.zeros(2, np.float32))], np.float32)
    rec = fb.host(dict(lr=1e-3, eps=1e-8, w=np.float32(0.1)), wide=("lr",))
    assert rec.dtype.names == ("lr", "eps", "w")
    assert rec.dtype["lr"] == np.float64 and rec.dtype["eps"] == np.float32
    assert rec[0]["lr"] == 1e-3 and rec[0]["eps"] == np.float32(1e-8)
    fb.host(dict(lr=1e300, eps=float("inf"), w=float("nan")), wide=("lr",))  # inf/NaN stay
    with pytest.raises(RuntimeError, match="cannot be converted to type float without overflow"):
        fb.host(dict(lr=1e-3, eps=1e39, w=0.1), wide=("lr",))
    assert fb.round(0.1) == np.float32(0.1)
    with pytest.raises(RuntimeError, match="without overflow"):
        fb.round(-3.5e38)
