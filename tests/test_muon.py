"""Muon against a numpy reference of PyTorch's equations (bfloat16 Newton–Schulz) and against
torch.optim.Muon."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tinyopt import Parameter, optim
from tinyopt.kernels.native import gemm_bf16
from tinyopt.optim import muon

SHAPES = [(6, 4), (3, 8), (5, 5), (0, 3)]
STEPS = 6


def bf16(x) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even) -> float32, by integer arithmetic."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), r).reshape(x.shape)


def ref_newton_schulz(g, coefficients, steps, eps):
    a, b, c = (np.float32(v) for v in coefficients)
    x = bf16(g.astype(np.float32))
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    norm = bf16(np.float32(math.sqrt(float(np.sum(x * x, dtype=np.float32)))))
    x = bf16(x / max(norm, bf16(np.float32(eps))))
    for _ in range(steps):
        gram = bf16(x @ x.T)
        x = bf16(bf16(c * (gram @ gram) + b * gram) @ x + a * x)
    return x.T if tall else x


def _lerp(a, b, w):
    w = a.dtype.type(w)
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def ref_muon(p, g, st, h):
    buf = st["momentum_buffer"] = _lerp(st.get("momentum_buffer", np.zeros_like(p)), g,
                                        1 - h["momentum"])
    update = _lerp(g, buf, h["momentum"]) if h["nesterov"] else buf
    ortho = ref_newton_schulz(update, h["ns_coefficients"], h["ns_steps"], h["eps"])
    rows, cols = p.shape
    ratio = (math.sqrt(max(1, rows / cols)) if h["adjust_lr_fn"] in (None, "original")
             else 0.2 * math.sqrt(max(rows, cols)))
    p = p * p.dtype.type(1 - h["lr"] * h["weight_decay"])
    return p + p.dtype.type(-h["lr"] * ratio) * ortho.astype(p.dtype)


CASES = [
    (dict(lr=0.02), dict(lr=0.05, weight_decay=0.0)),
    (dict(lr=0.01, momentum=0.6, nesterov=False, adjust_lr_fn="match_rms_adamw"),
     dict(lr=0.03, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), momentum=0.3)),
]


PATHS = ["float32", pytest.param("bf16", marks=pytest.mark.skipif(
    not gemm_bf16.available(), reason="the CPU has no AVX512-BF16"))]


@pytest.fixture(params=PATHS)
def ns_path(request, monkeypatch):
    """Each Newton–Schulz path in turn, forced (``muon.NS_PATH``)."""
    monkeypatch.setattr(muon, "NS_PATH", request.param)
    return request.param


def _setup(case, dtype):
    rng = np.random.default_rng(1)
    starts = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[None if (k + i) % 4 == 3 else rng.standard_normal(s).astype(dtype)
              for i, s in enumerate(SHAPES)] for k in range(STEPS)]
    return starts, grads


def _groups(params, case):
    o0, o1 = case
    return [{"params": params[:2], **o1}, {"params": params[2:]}], o0


def _run(opt, params, grads, steps):
    for k in steps:
        for p, g in zip(params, grads[k]):
            p.grad = None if g is None else g.copy()
        opt.step()


@pytest.mark.parametrize("case,dtype", [(CASES[0], np.float32), (CASES[1], np.float32),
                                        (CASES[0], np.float64)], ids=["default", "options", "f64"])
def test_matches_numpy_reference(case, dtype, ns_path):
    starts, grads = _setup(case, dtype)
    params = [Parameter(a.copy()) for a in starts]
    groups, o0 = _groups(params, case)
    opt = optim.Muon(groups, **o0)
    _run(opt, params, grads, range(STEPS))
    defaults = optim.Muon([Parameter(np.zeros((2, 2)))], **o0).defaults
    hyper = [dict(defaults, **case[1]), defaults]
    for i, start in enumerate(starts):
        p, st, h = start.copy(), {}, hyper[0 if i < 2 else 1]
        for k in range(STEPS):
            if grads[k][i] is not None:
                p = ref_muon(p, grads[k][i], st, h)
        np.testing.assert_allclose(params[i].data.numpy(), p, rtol=1e-6, atol=1e-7)
        assert params[i].data.numpy().dtype == dtype
        np.testing.assert_array_equal(opt.state[params[i]]["momentum_buffer"].numpy(),
                                      st["momentum_buffer"])


@pytest.mark.parametrize("case", CASES, ids=["default", "options"])
def test_matches_pytorch(case, ns_path):
    torch = pytest.importorskip("torch")
    starts, grads = _setup(case, np.float32)
    params = [Parameter(a.copy()) for a in starts]
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in starts]
    groups, o0 = _groups(params, case)
    tgroups, _ = _groups(tparams, case)
    opt, topt = optim.Muon(groups, **o0), torch.optim.Muon(tgroups, **o0)
    for k in range(STEPS):
        for p, tp, g in zip(params, tparams, grads[k]):
            p.grad = None if g is None else g.copy()
            tp.grad = None if g is None else torch.from_numpy(g.copy())
        opt.step()
        topt.step()
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.data.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["param_groups"] == [{k: v for k, v in g.items()} for g in tsd["param_groups"]]
    assert {k: sorted(v) for k, v in sd["state"].items()} == \
        {k: sorted(v) for k, v in tsd["state"].items()}


def test_state_dict_halfway_continues_identically():
    starts, grads = _setup(CASES[0], np.float32)
    params = [Parameter(a.copy()) for a in starts]
    groups, o0 = _groups(params, CASES[0])
    opt = optim.Muon(groups, **o0)
    _run(opt, params, grads, range(3))
    sd = copy.deepcopy(opt.state_dict())
    twins = [Parameter(p.data.numpy().copy()) for p in params]
    tgroups, _ = _groups(twins, CASES[0])
    opt2 = optim.Muon(tgroups, lr=1.0)
    opt2.load_state_dict(sd)
    _run(opt, params, grads, range(3, STEPS))
    _run(opt2, twins, grads, range(3, STEPS))
    for a, b in zip(params, twins):
        np.testing.assert_array_equal(a.data.numpy(), b.data.numpy())


def test_errors_like_pytorch_and_zero_rejects_it():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    w = Parameter(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"Muon only supports 2D parameters whereas we found a "
                                         r"parameter with size: \(3,\)"):
        optim.Muon([w, Parameter(np.zeros(3, np.float32))])
    for kw, msg in [(dict(lr=-1), "Learning rate should be >= 0 but is: -1"),
                    (dict(momentum=-0.5), "momentum should be >= 0 but is: -0.5"),
                    (dict(weight_decay=-1), "weight decay should be >= 0 but is: -1"),
                    (dict(adjust_lr_fn="x"), "Adjust learning rate function x is not supported"),
                    (dict(ns_steps=100), "Number of steps must be less than 100"),
                    (dict(ns_coefficients=(1, 2)), "exactly 3 values")]:
        with pytest.raises(ValueError, match=msg):
            optim.Muon([w], **kw)
    with pytest.raises(TypeError, match="elementwise"):  # Newton-Schulz reads whole matrices
        ZeroRedundancyOptimizer([w], optimizer_class=optim.Muon)


def test_signature_and_defaults_are_pytorchs():
    import inspect
    torch = pytest.importorskip("torch")
    ours = list(inspect.signature(optim.Muon.__init__).parameters.values())
    theirs = list(inspect.signature(torch.optim.Muon.__init__).parameters.values())
    assert ours[-1].name == "stochastic_rounding"  # tinyopt's own, keyword-only
    assert [(p.name, p.kind, p.default) for p in ours[:-1]] == \
        [(p.name, p.kind, p.default) for p in theirs]
    assert list(optim.Muon([Parameter(np.zeros((2, 2), np.float32))]).defaults.items()) == \
        list(torch.optim.Muon([torch.nn.Parameter(torch.zeros(2, 2))]).defaults.items())


def test_bfloat16_parameters_keep_float32_masters_that_follow_the_float32_run():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16_dtype = np.dtype(ml_dtypes.bfloat16)
    starts, grads = _setup(CASES[0], np.float32)
    low = [Parameter(a.astype(bf16_dtype)) for a in starts]
    wide = [Parameter(p.data.numpy().astype(np.float32)) for p in low]
    opts = [optim.Muon(ps, lr=0.02) for ps in (low, wide)]
    for k in range(STEPS):
        for ps, opt in zip((low, wide), opts):
            for p, g in zip(ps, grads[k]):
                p.grad = None if g is None else g.copy()
            opt.step()
    for p, q in zip(low, wide):
        st = opts[0].state[p]
        np.testing.assert_array_equal(st["master_param"].numpy(), q.data.numpy())
        np.testing.assert_array_equal(st["momentum_buffer"].numpy(),
                                      opts[1].state[q]["momentum_buffer"].numpy())
        assert p.data.numpy().dtype == bf16_dtype
        np.testing.assert_array_equal(p.data.numpy(), q.data.numpy().astype(bf16_dtype))


NS_SHAPES = [(64, 129), (130, 64), (300, 257)]

_TORCH_NS = """
import sys
import numpy as np
import torch
from torch.optim._muon import _zeropower_via_newtonschulz as ns
m, n = int(sys.argv[1]), int(sys.argv[2])
g = np.random.default_rng(7).standard_normal((m, n)).astype(np.float32)
co = tuple(float(c) for c in sys.argv[3:6])
sys.stdout.buffer.write(ns(torch.from_numpy(g), co, 5, 1e-7).float().numpy().tobytes())
"""


def _torch_newton_schulz_on_vdpbf16ps(shape, co) -> np.ndarray:
    """PyTorch's Newton-Schulz with oneDNN held to AVX512-BF16 (``vdpbf16ps``, the instruction
    the bf16 path uses).  On a CPU with AMX, oneDNN otherwise multiplies on AMX tiles, which sum
    in an order of their own: measured on a Xeon with AMX-BF16 at 300 x 257, PyTorch's result
    then differs from both of tinyopt's paths in ~68% of the elements (by at most 3e-3), and
    from the bf16 path in 6.5% with oneDNN held to AVX512-BF16.  ``ONEDNN_MAX_CPU_ISA`` is read
    once per process, hence the child process."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")
    out = subprocess.run([sys.executable, "-c", _TORCH_NS, *map(str, shape), *map(str, co)],
                         env=env, capture_output=True, check=True, timeout=300).stdout
    return np.frombuffer(out, dtype=np.float32).reshape(shape)


@pytest.mark.skipif(not gemm_bf16.available(), reason="the CPU has no AVX512-BF16")
@pytest.mark.parametrize("shape", NS_SHAPES, ids=str)
def test_newton_schulz_bf16_path_against_float32_path_and_pytorch(shape, monkeypatch):
    """The two paths round the same float32 sums, summed in other orders, to bfloat16: they
    differ by a bfloat16 ulp here and there (|x| < 0.5 here: 2^-9 .. 2^-8), as the float32
    path and PyTorch do; the bf16 path, on the same instruction as oneDNN, is the closer
    (oneDNN held to that instruction where the CPU also has AMX: see the helper above)."""
    g = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    co = (muon.DEFAULT_A, muon.DEFAULT_B, muon.DEFAULT_C)
    results = {}
    for path in ("float32", "bf16"):
        monkeypatch.setattr(muon, "NS_PATH", path)
        results[path] = muon._zeropower_via_newtonschulz(g, co, 5, 1e-7, {})
        assert results[path].shape == shape and results[path].dtype == np.float32
    np.testing.assert_allclose(results["bf16"], results["float32"], rtol=0, atol=4e-3)
    monkeypatch.setattr(muon, "NS_PATH", "auto")  # bf16 from m^2 n = 2^21 multiply-adds
    np.testing.assert_array_equal(muon._zeropower_via_newtonschulz(g, co, 5, 1e-7),
                                  results["bf16" if min(shape) >= 200 else "float32"])
    pytest.importorskip("torch")
    pytest.importorskip("torch.optim._muon")
    t = _torch_newton_schulz_on_vdpbf16ps(shape, co)
    np.testing.assert_allclose(results["bf16"], t, rtol=0, atol=4e-3)
    assert np.mean(results["bf16"] != t) <= np.mean(results["float32"] != t)


def test_ns_path_bf16_refused_without_the_instruction(monkeypatch):
    monkeypatch.setattr(muon, "NS_PATH", "bf16")
    monkeypatch.setattr(gemm_bf16, "_AVAILABLE", [False])
    with pytest.raises(RuntimeError, match="AVX512-BF16"):
        muon._zeropower_via_newtonschulz(np.ones((70, 70), np.float32), (3.4, -4.7, 2.0), 5,
                                         1e-7)
    g = np.random.default_rng(0).standard_normal((130, 140)).astype(np.float32)
    monkeypatch.setattr(muon, "NS_PATH", "float32")
    x = muon._zeropower_via_newtonschulz(g, (3.4, -4.7, 2.0), 2, 1e-7)
    monkeypatch.setattr(muon, "NS_PATH", "auto")  # auto falls back to float32
    np.testing.assert_array_equal(muon._zeropower_via_newtonschulz(g, (3.4, -4.7, 2.0), 2, 1e-7),
                                  x)


@pytest.mark.skipif(not gemm_bf16.available(), reason="the CPU has no AVX512-BF16")
def test_bf16_buffers_shared_by_matrices_of_several_shapes(monkeypatch):
    monkeypatch.setattr(muon, "NS_PATH", "bf16")
    rng = np.random.default_rng(3)
    gs = [rng.standard_normal(s).astype(np.float32) for s in [(300, 257), (33, 64), (70, 70)]]
    co = (muon.DEFAULT_A, muon.DEFAULT_B, muon.DEFAULT_C)
    fresh = [muon._zeropower_via_newtonschulz(g, co, 3, 1e-7, {}) for g in gs]
    work: dict = {}
    for g, want in zip(gs + gs, fresh + fresh):
        np.testing.assert_array_equal(muon._zeropower_via_newtonschulz(g, co, 3, 1e-7, work),
                                      want)


def test_a_nan_eps_makes_the_update_nan_as_in_torch():
    """Issue 25.11: ``Muon(eps=nan)`` ignored the NaN (Python's ``max`` drops it; torch's
    ``clamp_min`` keeps it)."""
    w = Parameter(np.ones((3, 3), np.float32))
    opt = optim.Muon([w], eps=float("nan"))
    w.grad = Parameter(np.ones((3, 3), np.float32)).detach()
    opt.step()
    assert np.isnan(w.detach().numpy()).all()
