"""amp.GradScaler against torch.amp.GradScaler: same gradients, same scales, same skipped steps."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import Parameter, amp, optim

SHAPES = [(4, 3), (5,), (2, 2), (40000,)]
BAD = {3: "inf", 4: "nan", 5: "inf", 11: "-inf", 12: "nan"}  # steps whose gradients overflow


def _grads(steps, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        row = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        if t in BAD:
            row[(0, 3, 2)[t % 3]].flat[3] = float(BAD[t])
        if t % 4 == 1:
            row[1] = None
        out.append(row)
    return out


def _run_tinyopt(grads, **kw):
    rng = np.random.default_rng(1)
    params = [Parameter(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]
    opt = optim.SGD([{"params": params[:2]}, {"params": params[2:], "lr": 0.05}], lr=0.1,
                    momentum=0.9)
    scaler = amp.GradScaler("cpu", **kw)
    trace = []
    for row in grads:
        scaler.scale(to.tensor(1.0))  # (the first call makes the scale)
        scale = np.float32(scaler.get_scale())
        for p, g in zip(params, row):
            with np.errstate(over="ignore"):  # what backward of the scaled loss gives
                p.grad = None if g is None else g * scale
        out = scaler.step(opt)
        unscaled = [None if p.grad is None else p.grad.numpy().copy() for p in params]
        scaler.update()
        trace.append((scaler.get_scale(), out, unscaled, [p.data.numpy().copy() for p in params]))
    return trace, scaler


def _run_torch(grads, **kw):
    import torch

    rng = np.random.default_rng(1)
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(s).astype(np.float32)))
              for s in SHAPES]
    opt = torch.optim.SGD([{"params": params[:2]}, {"params": params[2:], "lr": 0.05}], lr=0.1,
                          momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **kw)
    trace = []
    for row in grads:
        scaler.scale(torch.tensor(1.0))
        scale = np.float32(scaler.get_scale())
        for p, g in zip(params, row):
            with np.errstate(over="ignore"):
                p.grad = None if g is None else torch.from_numpy(g * scale)
        scaler.step(opt)
        unscaled = [None if p.grad is None else p.grad.numpy().copy() for p in params]
        scaler.update()
        trace.append((scaler.get_scale(), unscaled, [p.detach().numpy().copy() for p in params]))
    return trace, scaler


@pytest.mark.parametrize("kw", [dict(growth_interval=3), dict(init_scale=2.0**126,
                                                               growth_interval=2),
                                dict(init_scale=3.0, growth_factor=1.5, backoff_factor=0.25,
                                     growth_interval=1)],
                         ids=["grows", "stops-below-inf", "odd-factors"])
def test_scale_trajectory_skips_and_unscaled_gradients_match_torch(kw):
    pytest.importorskip("torch")
    grads = _grads(16)
    ours, scaler = _run_tinyopt(grads, **kw)
    theirs, tscaler = _run_torch(grads, **kw)
    for t, ((s, _, g, p), (ts, tg, tp)) in enumerate(zip(ours, theirs)):
        assert s == ts, f"step {t}: scale {s} != torch's {ts}"
        for a, b in zip(g, tg):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a, b, err_msg=f"step {t}")  # unscaled bit for bit
        for a, b in zip(p, tp):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
    assert scaler.state_dict() == tscaler.state_dict()


def test_skipped_steps_leave_parameters_and_state_untouched():
    grads = _grads(8)
    trace, _ = _run_tinyopt(grads, growth_interval=100)
    for t in BAD:
        if t < len(trace):
            for a, b in zip(trace[t][3], trace[t - 1][3]):
                np.testing.assert_array_equal(a, b, err_msg=f"step {t} was not skipped")
    for t in (1, 2, 6, 7):
        assert any(not np.array_equal(a, b) for a, b in zip(trace[t][3], trace[t - 1][3]))


def test_scale_backward_unscale_clip_step_on_a_graph():
    w = Parameter(np.array([1.0, -2.0, 3.0], np.float32))
    opt = optim.SGD([w], lr=0.5)
    scaler = amp.GradScaler("cpu", init_scale=1024.0)
    x = to.tensor(np.array([0.5, 0.25, 2.0], np.float32))
    loss = (w * x).sum()
    scaled = scaler.scale(loss)
    assert scaled.item() == pytest.approx(1024.0 * loss.item())
    scaled.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.array([512.0, 256.0, 2048.0], np.float32))
    scaler.unscale_(opt)
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy())
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)  # uses the unscaled gradients, does not unscale again
    np.testing.assert_allclose(w.data.numpy(), np.array([0.75, -2.125, 2.0], np.float32))
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) is being called after step"):
        scaler.unscale_(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0
    both = scaler.scale([loss, (loss,)])
    assert isinstance(both, list) and isinstance(both[1], tuple)
    assert both[1][0].item() == 1024.0 * loss.item() == 6144.0


def test_gradients_of_bfloat16_parameters_unscale_in_float32():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = Parameter(np.ones(5, ml_dtypes.bfloat16))
    opt = optim.Adam([p], lr=0.1)
    scaler = amp.GradScaler("cpu", init_scale=2.0**20)
    scaler.scale(to.tensor(1.0))
    g = np.array([3e-7, 1e-8, -2e-6, 0.0, 1.0], np.float32)
    p.grad = g * np.float32(2.0**20)
    scaler.unscale_(opt)
    assert p.grad.numpy().dtype == np.float32
    np.testing.assert_array_equal(p.grad.numpy(), g * np.float32(2.0**20) * np.float32(2.0**-20))


def test_disabled_and_cuda_scalers_pass_through():
    w = Parameter(np.ones(2, np.float32))
    opt = optim.SGD([w], lr=1.0)
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
        cuda = amp.GradScaler()
    off = amp.GradScaler("cpu", enabled=False)
    for s in (cuda, off):
        loss = to.tensor(2.0)
        assert s.scale(loss) is loss and s.get_scale() == 1.0 and not s.is_enabled()
        w.grad = np.ones(2, np.float32)
        s.step(opt)
        s.update()
        assert s.state_dict() == {}
    np.testing.assert_array_equal(w.data.numpy(), [-1.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        amp.GradScaler("cuda", enabled=False)
    with pytest.raises(AssertionError, match="growth factor must be > 1.0"):
        amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(AssertionError, match="backoff factor must be < 1.0"):
        amp.GradScaler("cpu", backoff_factor=1.0)


def test_state_dict_round_trips_and_loads_into_torch():
    grads = _grads(7)
    _, scaler = _run_tinyopt(grads, growth_interval=2)
    sd = scaler.state_dict()
    fresh = amp.GradScaler("cpu")
    fresh.load_state_dict(sd)
    assert fresh.state_dict() == sd
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        fresh.load_state_dict({})
    torch = pytest.importorskip("torch")
    ts = torch.amp.GradScaler("cpu")
    ts.load_state_dict(sd)
    assert ts.state_dict() == sd
    back = amp.GradScaler("cpu")
    back.load_state_dict(ts.state_dict())
    assert back.state_dict() == sd
