"""Adafactor against a numpy reference of PyTorch's equations and against torch.optim.Adafactor."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tinyopt import Parameter, optim

SHAPES = [(6, 4), (5,), (), (2, 3, 4), (1, 7)]
GROUP_OF = [0, 0, 1, 1, 0]
STEPS = 12
CASES = [
    (dict(lr=0.02), dict(lr=0.05)),
    (dict(lr=0.03, weight_decay=0.1, maximize=True, d=2.0),
     dict(beta2_decay=-0.5, eps=(1e-20, 1e-2), weight_decay=0.0)),
]


def _torch_lerp(a, b, w):
    w = a.dtype.type(w)
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def ref_adafactor(p, g, st, h):
    """One step of PyTorch's single-tensor Adafactor on one parameter (numpy)."""
    g = -g if h["maximize"] else g
    eps1, eps2 = h["eps"]
    eps1 = np.finfo(p.dtype).eps if eps1 is None else eps1
    if not st:
        st["step"] = np.float32(0)
        if g.ndim > 1:
            st["row_var"] = np.zeros(g.shape[:-1] + (1,), g.dtype)
            st["col_var"] = np.zeros(g.shape[:-2] + (1,) + g.shape[-1:], g.dtype)
        else:
            st["variance"] = np.zeros_like(g)
    st["step"] = np.float32(st["step"] + 1)
    t = float(st["step"])
    w = t ** h["beta2_decay"]
    rho = min(h["lr"], 1 / t ** 0.5)
    alpha = max(eps2, float(np.sqrt(np.sum(p * p))) / p.size ** 0.5) * rho
    if h["weight_decay"] != 0:
        p = p * p.dtype.type(1 - h["lr"] * h["weight_decay"])
    if g.ndim > 1:
        st["row_var"] = _torch_lerp(st["row_var"], np.sum(g * g, -1, keepdims=True) / g.shape[-1], w)
        st["col_var"] = _torch_lerp(st["col_var"], np.sum(g * g, -2, keepdims=True) / g.shape[-2], w)
        v = st["row_var"] * st["col_var"]
        v = v / np.maximum(st["row_var"].mean(-2, keepdims=True), p.dtype.type(eps1))
    else:
        st["variance"] = _torch_lerp(st["variance"], g * g, w)
        v = st["variance"]
    u = g / np.sqrt(np.maximum(v, p.dtype.type(eps1 * eps1)))
    denom = max(1.0, float(np.sqrt(np.sum(u * u))) / (u.size ** 0.5 * h["d"]))
    return p + p.dtype.type(-alpha / denom) * u


def _setup(dtype):
    rng = np.random.default_rng(4)
    starts = [np.asarray(rng.standard_normal(s), dtype=dtype) for s in SHAPES]
    grads = [[None if (k + i) % 5 == 4 else np.asarray(rng.standard_normal(s), dtype=dtype)
              for i, s in enumerate(SHAPES)] for k in range(STEPS)]
    return starts, grads


def _groups(params, case):
    o0, o1 = case
    return [{"params": [p for p, k in zip(params, GROUP_OF) if k == 0], **o1},
            {"params": [p for p, k in zip(params, GROUP_OF) if k == 1]}], o0


def _run(opt, params, grads, steps, wrap=np.array):
    for k in steps:
        for p, g in zip(params, grads[k]):
            p.grad = None if g is None else wrap(g.copy())
        opt.step()


@pytest.mark.parametrize("case", CASES, ids=["default", "options"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy_reference(case, dtype):
    starts, grads = _setup(dtype)
    params = [Parameter(a.copy()) for a in starts]
    groups, o0 = _groups(params, case)
    opt = optim.Adafactor(groups, **o0)
    _run(opt, params, grads, range(STEPS))
    defaults = optim.Adafactor([Parameter(np.zeros(1))], **o0).defaults
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for i, start in enumerate(starts):
        h = dict(defaults, **case[1]) if GROUP_OF[i] == 0 else defaults
        p, st = start.copy(), {}
        for k in range(STEPS):
            if grads[k][i] is not None:
                p = ref_adafactor(p, grads[k][i], st, h)
        np.testing.assert_allclose(params[i].data.numpy(), p, rtol=tol, atol=tol)
        ours = opt.state[params[i]]
        assert sorted(ours) == sorted(st) and ours["step"] == st["step"]
        for key in st:
            np.testing.assert_allclose(ours[key], st[key], rtol=tol, atol=tol * 1e-3)


@pytest.mark.parametrize("case", CASES, ids=["default", "options"])
def test_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    starts, grads = _setup(np.float32)
    params = [Parameter(a.copy()) for a in starts]
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in starts]
    (groups, o0), (tgroups, _) = _groups(params, case), _groups(tparams, case)
    opt, topt = optim.Adafactor(groups, **o0), torch.optim.Adafactor(tgroups, **o0)
    _run(opt, params, grads, range(STEPS))
    _run(topt, tparams, grads, range(STEPS), wrap=torch.from_numpy)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.data.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["param_groups"] == tsd["param_groups"]
    for i, st in tsd["state"].items():
        assert sorted(sd["state"][i]) == sorted(st)
        for k, v in st.items():
            assert np.shape(sd["state"][i][k]) == tuple(v.shape)
            np.testing.assert_allclose(sd["state"][i][k], v.numpy(), rtol=1e-5, atol=1e-9)


def test_state_dict_halfway_continues_identically_and_loads_into_torch():
    from tinyopt.optim.torch_compat import to_torch
    starts, grads = _setup(np.float32)
    params = [Parameter(a.copy()) for a in starts]
    groups, o0 = _groups(params, CASES[1])
    opt = optim.Adafactor(groups, **o0)
    _run(opt, params, grads, range(5))
    sd = copy.deepcopy(opt.state_dict())
    twins = [Parameter(p.data.numpy().copy()) for p in params]
    groups2, _ = _groups(twins, CASES[1])
    opt2 = optim.Adafactor(groups2)
    opt2.load_state_dict(sd)
    _run(opt, params, grads, range(5, STEPS))
    _run(opt2, twins, grads, range(5, STEPS))
    for a, b in zip(params, twins):
        np.testing.assert_array_equal(a.data.numpy(), b.data.numpy())
    bad = copy.deepcopy(sd)
    bad["state"][0]["row_var"] = np.zeros((4, 1), np.float32)  # a (6, 4) parameter's is (6, 1)
    with pytest.raises(ValueError, match=r"'row_var' of shape \(4, 1\), expected \(6, 1\)"):
        opt2.load_state_dict(bad)
    torch = pytest.importorskip("torch")
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in starts]
    tgroups, _ = _groups(tparams, CASES[1])
    torch.optim.Adafactor(tgroups).load_state_dict(to_torch(sd))


def test_errors_like_pytorch():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    p = Parameter(np.zeros((2, 2), np.float32))
    for kw, msg in [(dict(lr=-1), "Learning rate should be >= 0 but is: -1"),
                    (dict(beta2_decay=0.5), "beta2_decay should be <= 0 but is: 0.5"),
                    (dict(eps=(-1, 1e-3)), "epsilon1 should be >= 0 but is: -1"),
                    (dict(eps=(None, -1)), "epsilon2 should be >= 0 but is: -1"),
                    (dict(d=0.5), "Clipping threshold d should be >= 1 but is: 0.5"),
                    (dict(weight_decay=-1), "weight_decay should be >= 0 but is: -1")]:
        with pytest.raises(ValueError, match=msg):
            optim.Adafactor([p], **kw)
    with pytest.raises(TypeError, match="elementwise"):  # factored moments read whole rows
        ZeroRedundancyOptimizer([p], optimizer_class=optim.Adafactor)


def test_signature_and_defaults_are_pytorchs():
    import inspect
    torch = pytest.importorskip("torch")
    ours = inspect.signature(optim.Adafactor.__init__).parameters.values()
    theirs = inspect.signature(torch.optim.Adafactor.__init__).parameters.values()
    assert [(p.name, p.kind, p.default) for p in ours] == \
        [(p.name, p.kind, p.default) for p in theirs]
    assert list(optim.Adafactor([Parameter(np.zeros(2, np.float32))]).defaults.items()) == \
        list(torch.optim.Adafactor([torch.nn.Parameter(torch.zeros(2))]).defaults.items())


GRID_SHAPES = [(3, 5), (2, 2, 3), (4, 1), (1, 1), (7,), (), (0,), (0, 3), (3, 37), (2, 2, 40)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("maximize,weight_decay", [(False, 0.1), (True, 0.0)])
def test_fused_kernel_matches_reference_over_a_grid(dtype, maximize, weight_decay):
    """The one kernel call per group and dtype against the per-parameter reference: factored
    (2-d, 3-d, a column, 1x1, rows wider than the kernel's 16 lanes), 1-d, 0-d and empty
    parameters (never given a gradient), None grads on some steps, maximize, weight decay."""
    rng = np.random.default_rng(7)
    starts = [np.asarray(rng.standard_normal(s), dtype) for s in GRID_SHAPES]
    params = [Parameter(a.copy()) for a in starts]
    h = dict(lr=0.05, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=weight_decay,
             maximize=maximize)
    opt = optim.Adafactor(params, **{k: v for k, v in h.items()})
    refs, states = [a.copy() for a in starts], [{} for _ in starts]
    for k in range(6):
        for i, p in enumerate(params):
            g = None if p.numel() == 0 or (i + k) % 4 == 3 else \
                np.asarray(rng.standard_normal(p.shape), dtype)
            p.grad = g
            if g is not None:
                refs[i] = ref_adafactor(refs[i], g, states[i], h)
        opt.step()
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for p, ref, st in zip(params, refs, states):
        np.testing.assert_allclose(p.data.numpy(), ref, rtol=tol, atol=tol)
        assert sorted(opt.state[p]) == sorted(st)
        for key in st:
            np.testing.assert_allclose(opt.state[p][key], st[key], rtol=tol, atol=tol * 1e-3)


def test_an_empty_parameter_with_a_gradient_raises_like_pytorch_and_changes_nothing():
    a, e = Parameter(np.ones((2, 3), np.float32)), Parameter(np.zeros((0, 3), np.float32))
    opt = optim.Adafactor([a, e])
    a.grad, e.grad = np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32)
    with pytest.raises(ZeroDivisionError, match="float division by zero"):
        opt.step()
    assert np.array_equal(a.data.numpy(), np.ones((2, 3))) and not opt.state[a]


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_16_bit_parameters_have_float32_masters_following_the_float32_run(low):
    """As every fused optimizer: float32 masters and state, the 16-bit parameter their rounding;
    eps1 None is the 16-bit dtype's machine epsilon, as torch's."""
    import tinyopt as to
    dt = to.bfloat16 if low == "bfloat16" else np.float16
    eps1 = 2.0 ** -7 if low == "bfloat16" else float(np.finfo(np.float16).eps)
    starts, grads = _setup(np.float32)
    starts = [a.astype(dt).astype(np.float32) for a in starts]  # exactly 16-bit values
    lows = [Parameter(a.astype(dt)) for a in starts]
    fulls = [Parameter(a.copy()) for a in starts]
    opt = optim.Adafactor(lows, lr=0.05, weight_decay=0.1)
    ref = optim.Adafactor(fulls, lr=0.05, weight_decay=0.1, eps=(eps1, 1e-3))
    _run(opt, lows, grads, range(6))
    _run(ref, fulls, grads, range(6))
    for p, f in zip(lows, fulls):
        st = opt.state[p]
        assert p.dtype == dt and st["master_param"].dtype == np.float32
        np.testing.assert_array_equal(st["master_param"].numpy(), f.data.numpy())
        np.testing.assert_array_equal(p.data.numpy(), f.data.numpy().astype(dt))
        for key in ref.state[f]:
            np.testing.assert_array_equal(st[key].numpy(), ref.state[f][key].numpy())
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, low)
    tps = [torch.nn.Parameter(torch.from_numpy(a.copy()).to(tdt)) for a in starts]
    topt = torch.optim.Adafactor(tps, lr=0.05, weight_decay=0.1)
    for k in range(6):
        for tp, g in zip(tps, grads[k]):
            tp.grad = None if g is None else torch.from_numpy(g.copy()).to(tdt)
        topt.step()
    for p, tp in zip(lows, tps):  # torch computes in 16 bits: a few of their ulps apart
        ulp = 2.0 ** -7 if low == "bfloat16" else 2.0 ** -10
        np.testing.assert_allclose(p.data.numpy().astype(np.float32),
                                   tp.detach().float().numpy(), rtol=4 * ulp, atol=4 * ulp)
    topt.load_state_dict(__import__("tinyopt.optim.torch_compat", fromlist=["x"]).to_torch(
        opt.state_dict()))


def test_rows_cut_into_items_match_the_reference_and_the_threads_do_not_change_a_bit(
        monkeypatch):
    """A factored parameter's rows are cut into items (the unit of parallel work and of the
    summation order; small items here): matrices cut into row ranges, several whole matrices
    per item, 1-d and 0-d parameters, None grads; against the reference, and the parallel
    build gives the serial build's bits."""
    from tinyopt.kernels import adafactor as kernels
    from tinyopt.kernels import jit
    monkeypatch.setattr(kernels, "ROWS_ELEMENTS", 16)
    monkeypatch.setattr(kernels, "MIN_ROWS", 2)
    shapes = [(40, 7), (5, 13, 4), (6, 2, 3), (3, 2, 5), (9,), ()]
    rng = np.random.default_rng(11)
    starts = [rng.standard_normal(s) for s in shapes]
    grads = [[None if (i + k) % 4 == 3 else rng.standard_normal(s) for i, s in enumerate(shapes)]
             for k in range(5)]
    h = dict(lr=0.05, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.1,
             maximize=False)
    runs = []
    for parallel_from in (jit.PARALLEL_MIN_ELEMENTS, 0):
        monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", parallel_from)
        params = [Parameter(a.copy()) for a in starts]
        opt = optim.Adafactor(params, **h)
        _run(opt, params, grads, range(5))
        runs.append((params, opt))
    fb = runs[0][1]._flat[0][0]
    assert len(fb.scratch["items"]) == 20 + 5 * 4 + 3 + 3 + 2
    for i, start in enumerate(starts):
        p, st = start.copy(), {}
        for k in range(5):
            if grads[k][i] is not None:
                p = ref_adafactor(p, grads[k][i], st, h)
        np.testing.assert_allclose(runs[0][0][i].data.numpy(), p, rtol=1e-14, atol=1e-14)
        for key in st:
            np.testing.assert_allclose(runs[0][1].state[runs[0][0][i]][key], st[key],
                                       rtol=1e-14, atol=1e-17)
        serial, parallel = runs[0][0][i], runs[1][0][i]
        np.testing.assert_array_equal(serial.data.numpy(), parallel.data.numpy())
        for key in st:
            np.testing.assert_array_equal(runs[0][1].state[serial][key],
                                          runs[1][1].state[parallel][key])


def test_the_row_mean_reciprocal_rounds_as_the_division():
    """float32 ``x / mean`` is ``x * (1 / mean)`` in float64, rounded to float32, bit for bit
    (the kernels' ``recip`` switch): 2e6 random pairs over the whole exponent range, ``mean``
    from 2^-63 (``eps1^2`` normal) up; results below 2^-126 may differ, and the kernel clamps
    them to ``eps1^2 >= 2^-126`` anyway."""
    rng = np.random.default_rng(5)
    for lo, hi in ((0, 0x7F800000), (0x3F000000, 0x40800000)):  # all floats; mantissas near 1
        x = rng.integers(lo, hi, 1_000_000, dtype=np.uint32).view(np.float32)
        mean = rng.integers(max(lo, 0x20000000), hi, 1_000_000, dtype=np.uint32).view(np.float32)
        with np.errstate(over="ignore"):
            q = x / mean
            r = (x.astype(np.float64) * (1.0 / mean.astype(np.float64))).astype(np.float32)
        tiny = np.float32(2.0 ** -126)
        np.testing.assert_array_equal(np.maximum(q, tiny).view(np.uint32),
                                      np.maximum(r, tiny).view(np.uint32))


@pytest.mark.parametrize("maximize,weight_decay", [(False, 0.1), (True, 0.0)])
def test_the_reciprocal_path_gives_the_division_paths_bits(monkeypatch, maximize, weight_decay):
    """float32 groups whose ``eps1^2`` is normal take the kernel's ``recip`` path (``V_hat``'s
    division by the row mean as a float64 product); with it switched off the same steps give
    the same bits: matrices whole and cut into items, gradients over many magnitudes, one
    parameter's with NaN and inf, rows of lanes with and without a tail."""
    from tinyopt.kernels import adafactor as kernels
    from tinyopt.optim import adafactor as module
    monkeypatch.setattr(kernels, "ROWS_ELEMENTS", 64)
    monkeypatch.setattr(kernels, "MIN_ROWS", 2)
    shapes = [(40, 37), (3, 5, 16), (7, 300), (9,)]
    rng = np.random.default_rng(12)
    starts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = []
    for k in range(6):
        gs = []
        for i, s in enumerate(shapes):
            g = rng.standard_normal(s) * 10.0 ** rng.uniform(-30, 15, s)
            if k == 4 and i == 1:  # (its values are NaN from here on; the others go on)
                g.reshape(-1)[::97] = np.inf
                g.reshape(-1)[5::89] = np.nan
            gs.append(g.astype(np.float32))
        grads.append(gs)
    runs = []
    for tiny in (module._F32_TINY, np.inf):
        monkeypatch.setattr(module, "_F32_TINY", tiny)
        params = [Parameter(a.copy()) for a in starts]
        opt = optim.Adafactor(params, lr=0.05, weight_decay=weight_decay, maximize=maximize)
        for k in range(6):
            for p, g in zip(params, grads[k]):
                p.grad = g.copy()
            with np.errstate(all="ignore"):
                opt.step()
            runs.append([p.data.numpy().copy() for p in params]
                        + [np.asarray(v).copy() for p in params for v in opt.state[p].values()])
    made = {key[3] for key in kernels.adafactor.made if key[:2] == (maximize, weight_decay != 0)}
    assert made == {True, False}
    half = len(runs) // 2
    for a, b in zip(runs[:half], runs[half:]):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.atleast_1d(x).view(np.uint8),
                                          np.atleast_1d(y).view(np.uint8))


@pytest.mark.parametrize("maximize,weight_decay", [(False, 0.1), (True, 0.0)])
def test_kept_updates_give_the_recomputed_bits_serial_and_parallel(monkeypatch, maximize,
                                                                    weight_decay):
    """A factored parameter of one item keeps its ``U`` from the norm pass for the update; with
    nothing kept (``KEPT_ELEMENTS = 0``) the same steps give the same bits, in the serial build
    and, for one of the two flag combinations, in the parallel build (the costliest compile of
    the suite's Adafactor tests, ~10 s cold; the flags reach only the subroutines, which its
    parallel loops call as the serial build's loops do)."""
    from tinyopt.kernels import adafactor as kernels
    from tinyopt.kernels import jit
    shapes = [(50, 37), (3, 4, 16), (2, 700), (300, 300), (9,)]  # (300, 300): 2 items
    rng = np.random.default_rng(13)
    starts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[(rng.standard_normal(s) * 10.0 ** rng.uniform(-8, 3, s)).astype(np.float32)
              for s in shapes] for _ in range(4)]
    runs = []
    for parallel_from in (jit.PARALLEL_MIN_ELEMENTS, 0)[:1 if maximize else 2]:
        monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", parallel_from)
        for kept in (1 << 17, 0):
            monkeypatch.setattr(kernels, "KEPT_ELEMENTS", kept)
            params = [Parameter(a.copy()) for a in starts]
            opt = optim.Adafactor(params, lr=0.05, weight_decay=weight_decay, maximize=maximize)
            _run(opt, params, grads, range(4))
            runs.append([p.data.numpy().copy() for p in params] + [
                np.atleast_1d(np.asarray(v)).copy() for p in params for v in opt.state[p].values()])
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
