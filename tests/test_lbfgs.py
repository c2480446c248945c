"""LBFGS against a numpy reference of PyTorch's equations and against torch.optim.LBFGS."""

from __future__ import annotations

import numpy as np
import pytest

from tinyopt import Parameter, optim

SHAPES = [(3, 4), (5,), (), (0,), (2, 3)]


def _objective(x: np.ndarray) -> tuple[float, np.ndarray]:
    """A Rosenbrock chain plus a quartic: curved valleys that make the line search work."""
    f = np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + 0.01 * np.sum(x ** 4)
    g = 0.04 * x ** 3
    g[:-1] += -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return float(f), g


def _start(dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.asarray(rng.standard_normal(s) * 0.5, dtype=dtype) for s in SHAPES]


def _closure_for(params, get, set_grad, counter, objective=_objective):
    def closure():
        counter[0] += 1
        x = np.concatenate([np.asarray(get(p), dtype=np.float64).ravel() for p in params])
        f, g = objective(x)
        at = 0
        for p in params:
            n = int(np.prod(np.shape(get(p)), dtype=np.int64))
            set_grad(p, g[at:at + n].reshape(np.shape(get(p))))
            at += n
        return f
    return closure


def _tinyopt(dtype, steps, **kw):
    params = [Parameter(a.copy()) for a in _start(dtype)]
    opt = optim.LBFGS(params, **kw)
    calls = [0]

    def set_grad(p, g):
        p.grad = g.astype(dtype)
    closure = _closure_for(params, lambda p: p.data.numpy(), set_grad, calls)
    losses = [opt.step(closure) for _ in range(steps)]
    return params, opt, losses, calls[0]


def ref_dot(x: np.ndarray, y: np.ndarray):
    """``x . y`` in the summation order ``tinyopt.kernels.lbfgs`` documents, in numpy: float64
    products; per chunk of 2**16 elements 32 lanes, each adding ``(r0 + r1) + (r2 + r3)`` for
    every four rows of 32, then the remaining rows, then the partial row into the first lanes;
    the lanes halved pairwise; the chunks' sums added in order; rounded to the dtype."""
    lanes, chunk = 32, 1 << 16
    p = x.astype(np.float64) * y.astype(np.float64)
    total = 0.0
    for c in range(0, len(p), chunk):
        pc, acc = p[c:c + chunk], np.zeros(lanes)
        rows = len(pc) // lanes
        grid = pc[:rows * lanes].reshape(rows, lanes)
        for r in range(0, rows - rows % 4, 4):
            acc += (grid[r] + grid[r + 1]) + (grid[r + 2] + grid[r + 3])
        for r in range(rows - rows % 4, rows):
            acc += grid[r]
        tail = pc[rows * lanes:]
        acc[:len(tail)] += tail
        h = lanes // 2
        while h:
            acc[:h] += acc[h:2 * h]
            h //= 2
        total += acc[0]
    return x.dtype.type(total)


# ---- the reference: torch's LBFGS without a line search, in plain numpy ---------------------------
def ref_lbfgs(xs: list[np.ndarray], steps: int, lr=1.0, max_iter=20, tolerance_grad=1e-7,
              tolerance_change=1e-9, history_size=100, objective=_objective):
    x = np.concatenate([a.ravel() for a in xs])
    dtype = x.dtype.type

    def grad(x):
        f, g = objective(x.astype(np.float64))
        return f, g.astype(x.dtype)

    st: dict = {"func_evals": 0, "n_iter": 0}
    losses = []
    for _ in range(steps):
        loss, g = grad(x)
        losses.append(loss)
        st["func_evals"] += 1
        if np.abs(g).max() <= tolerance_grad:
            continue
        evals, n = 1, 0
        while n < max_iter:
            n += 1
            st["n_iter"] += 1
            if st["n_iter"] == 1:
                d, dirs, stps, ro, H = -g, [], [], [], 1
            else:
                y, s = g - st["g_prev"], d * dtype(t)
                ys = ref_dot(y, s)
                if ys > 1e-10:
                    if len(dirs) == history_size:
                        dirs.pop(0), stps.pop(0), ro.pop(0)
                    dirs.append(y), stps.append(s), ro.append(1.0 / ys)
                    H = ys / ref_dot(y, y)
                q, al = -g, [None] * len(dirs)
                for i in reversed(range(len(dirs))):
                    al[i] = ref_dot(stps[i], q) * ro[i]
                    q = q + (-al[i]) * dirs[i]
                d = q * H
                for i in range(len(dirs)):
                    d = d + (al[i] - ref_dot(dirs[i], d) * ro[i]) * stps[i]
            st["g_prev"], prev_loss = g.copy(), loss
            t = min(1.0, 1.0 / np.abs(g).sum()) * lr if st["n_iter"] == 1 else lr
            if ref_dot(g, d) > -tolerance_change:
                break
            x = x + dtype(t) * d
            done = False
            if n != max_iter:
                loss, g = grad(x)
                evals += 1
                st["func_evals"] += 1
                done = np.abs(g).max() <= tolerance_grad
            if n == max_iter or evals >= max_iter * 5 // 4 or done:
                break
            if np.abs(d * dtype(t)).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
        st.update(d=d, t=t, dirs=dirs, stps=stps, ro=ro, H=H, prev_loss=prev_loss)
    return x, st, losses


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_numpy_reference(dtype):
    params, opt, losses, _ = _tinyopt(dtype, 3, lr=0.05, history_size=4)
    x, st, ref_losses = ref_lbfgs(_start(dtype), 3, lr=0.05, history_size=4)
    got = np.concatenate([p.data.numpy().ravel() for p in params])
    np.testing.assert_array_equal(got, x)  # the same operations in the same order: bit for bit
    assert losses == ref_losses
    state = opt.state[params[0]]
    assert (state["func_evals"], state["n_iter"]) == (st["func_evals"], st["n_iter"])
    assert len(state["old_dirs"]) == len(st["dirs"]) == 4
    np.testing.assert_array_equal(state["d"], st["d"])
    np.testing.assert_array_equal(np.asarray(state["H_diag"]), st["H"])
    assert state["d"].dtype == dtype and state["prev_loss"] == st["prev_loss"]


def test_rejected_pairs_match_numpy_reference(monkeypatch):
    """Near the minimum of a float32 quadratic the curvature pairs are rejected (y's <= 1e-10)
    step after step, and the recursion starts from the last kept pair: bit for bit as the
    reference."""
    from tinyopt.kernels import lbfgs as vec
    scale = np.linspace(1.0, 2.0, 3000)

    def objective(x):
        return float(0.5 * np.sum(scale * x * x)), scale * x
    start = [np.ones(3000, np.float32)]
    curvatures = []
    real = vec.curvature_pair

    def spy(*a):
        out = real(*a)
        curvatures.append(np.float32(out[0]))
        return out
    monkeypatch.setattr(vec, "curvature_pair", spy)
    params = [Parameter(start[0].copy())]
    opt = optim.LBFGS(params, max_iter=5, history_size=3)

    def set_grad(p, g):
        p.grad = g.astype(np.float32)
    closure = _closure_for(params, lambda p: p.data.numpy(), set_grad, [0], objective)
    losses = [opt.step(closure) for _ in range(12)]
    x, st, ref_losses = ref_lbfgs(start, 12, max_iter=5, history_size=3, objective=objective)
    assert sum(ys <= 1e-10 for ys in curvatures) >= 2 and opt.state[params[0]]["old_dirs"]
    np.testing.assert_array_equal(params[0].data.numpy(), x)
    assert losses == ref_losses
    np.testing.assert_array_equal(opt.state[params[0]]["d"], st["d"])


def _torch_run(dtype, steps, **kw):
    torch = pytest.importorskip("torch")
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in _start(dtype)]
    topt = torch.optim.LBFGS(tparams, **kw)
    calls = [0]

    def set_grad(p, g):
        p.grad = torch.from_numpy(np.array(g, dtype=dtype))
    closure = _closure_for(tparams, lambda p: p.detach().numpy(), set_grad, calls)
    losses = [topt.step(closure) for _ in range(steps)]
    return tparams, topt, losses, calls[0]


@pytest.mark.parametrize("dtype,kw", [
    (np.float64, dict(line_search_fn="strong_wolfe")),
    (np.float64, dict(lr=0.05, history_size=3, max_iter=7)),
    (np.float32, dict(line_search_fn="strong_wolfe", history_size=5, max_iter=6)),
], ids=["wolfe64", "fixed64", "wolfe32"])
def test_matches_pytorch(dtype, kw):
    """float64 over 4 steps (80 iterations, to convergence); float32 over one step (numpy's and
    torch's BLAS sum dot products in different orders: near convergence, where float32 rounding
    decides the line search, the two runs would part)."""
    steps = 4 if dtype == np.float64 else 1
    tparams, topt, tlosses, tcalls = _torch_run(dtype, steps, **kw)
    params, opt, losses, calls = _tinyopt(dtype, steps, **kw)
    tol = 1e-6 if dtype == np.float64 else 1e-4
    assert calls == tcalls  # the same evaluations: the same decisions in the line search
    np.testing.assert_allclose(losses, tlosses, rtol=tol)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.data.numpy(), tp.detach().numpy(), rtol=tol, atol=tol)
    st, tst = opt.state[params[0]], topt.state[tparams[0]]
    assert set(st) == set(tst)
    assert (st["func_evals"], st["n_iter"]) == (tst["func_evals"], tst["n_iter"])
    assert len(st["old_dirs"]) == len(tst["old_dirs"])
    np.testing.assert_allclose(st["d"], tst["d"].numpy(), rtol=tol * 10, atol=tol)


def test_state_dict_round_trip_continues_identically_and_exchanges_with_torch():
    from tinyopt.optim.torch_compat import from_torch, to_torch
    kw = dict(line_search_fn="strong_wolfe", history_size=3)
    params, opt, _, _ = _tinyopt(np.float64, 2, **kw)
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == sorted(["func_evals", "n_iter", "d", "t", "old_dirs",
                                             "old_stps", "ro", "H_diag", "prev_flat_grad",
                                             "prev_loss", "al"])
    twin = [Parameter(p.data.numpy().copy()) for p in params]
    opt2 = optim.LBFGS(twin, **kw)
    opt2.load_state_dict(sd)
    counter = [0]

    def set_grad(p, g):
        p.grad = g
    for ps, o in ((params, opt), (twin, opt2)):
        o.step(_closure_for(ps, lambda p: p.data.numpy(), set_grad, counter))
    for a, b in zip(params, twin):
        np.testing.assert_array_equal(a.data.numpy(), b.data.numpy())
    torch = pytest.importorskip("torch")
    tparams = [torch.nn.Parameter(torch.from_numpy(p.data.numpy().copy())) for p in params]
    topt = torch.optim.LBFGS(tparams, **kw)
    topt.load_state_dict(to_torch(opt.state_dict()))  # tinyopt -> torch -> tinyopt
    back = optim.LBFGS([Parameter(p.data.numpy().copy()) for p in params], **kw)
    back.load_state_dict(from_torch(topt.state_dict()))
    np.testing.assert_array_equal(back.state_dict()["state"][0]["d"], opt.state_dict()["state"][0]["d"])


def test_errors_like_pytorch():
    p = Parameter(np.zeros(3))
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.LBFGS([p], lr=-1)
    with pytest.raises(ValueError, match="doesn't support per-parameter options"):
        optim.LBFGS([{"params": [p]}, {"params": [Parameter(np.zeros(2))]}])
    opt = optim.LBFGS([p])
    with pytest.raises(TypeError):
        opt.step()  # the closure is required
    p.grad = np.ones(3)
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        optim.LBFGS([p], line_search_fn="armijo").step(lambda: 1.0)
    with pytest.raises(TypeError, match="floating point"):
        optim.LBFGS([p, Parameter(np.zeros(2, np.int64), requires_grad=False)])
    assert optim.LBFGS([p], max_iter=8).defaults["max_eval"] == 10
    bad = opt.state_dict()
    bad["state"] = {0: {"func_evals": 1, "n_iter": 1, "d": np.zeros(4)}}
    with pytest.raises(ValueError, match="expected a flat vector of 3 numbers"):
        opt.load_state_dict(bad)
    assert not opt.state[p]  # a rejected load changes nothing


def test_signature_and_defaults_are_pytorchs():
    import inspect
    torch = pytest.importorskip("torch")
    ours, theirs = inspect.signature(optim.LBFGS.__init__), inspect.signature(torch.optim.LBFGS.__init__)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
    p = Parameter(np.zeros(2, np.float32))
    assert list(optim.LBFGS([p]).defaults.items()) == \
        list(torch.optim.LBFGS([torch.nn.Parameter(torch.zeros(2))]).defaults.items())


@pytest.mark.parametrize("kw", [dict(line_search_fn="strong_wolfe"), dict(lr=0.05, max_iter=7)],
                         ids=["wolfe", "fixed"])
def test_mixed_dtypes_promote_as_pytorch(kw):
    """float32 and float64 parameters in one group: torch's vectors are float64 (torch.cat
    promotes), in the parameters' order; each parameter keeps its dtype."""
    torch = pytest.importorskip("torch")
    dtypes = [np.float32, np.float64, np.float32, np.float64, np.float32]
    starts = [a.astype(dt) for a, dt in zip(_start(np.float64), dtypes)]
    params = [Parameter(a.copy()) for a in starts]
    tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in starts]
    runs = []
    for ps, get, wrap, make in (
            (params, lambda p: p.data.numpy(), np.array, optim.LBFGS),
            (tparams, lambda p: p.detach().numpy(), torch.from_numpy, torch.optim.LBFGS)):
        opt = make(ps, **kw)
        calls = [0]

        def set_grad(p, g, get=get, wrap=wrap):
            p.grad = wrap(np.array(g, dtype=get(p).dtype))
        closure = _closure_for(ps, get, set_grad, calls)
        runs.append(([opt.step(closure) for _ in range(3)], calls[0], opt))
    (losses, calls, opt), (tlosses, tcalls, topt) = runs
    assert calls == tcalls
    np.testing.assert_allclose(losses, tlosses, rtol=1e-5)
    for p, tp in zip(params, tparams):
        assert p.data.numpy().dtype == tp.detach().numpy().dtype
        np.testing.assert_allclose(p.data.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    d, td = opt.state[params[0]]["d"], topt.state[tparams[0]]["d"].numpy()
    assert d.dtype == td.dtype == np.float64
    np.testing.assert_allclose(d, td, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_16_bit_parameters_have_float32_masters(low):
    """As every tinyopt optimizer: float32 masters take the steps, the 16-bit parameters the
    closure reads are their roundings.  So the run is bit for bit a float32 run whose closure
    evaluates at the rounded point; and it converges where torch's 16-bit run does."""
    import tinyopt as to
    dt = to.bfloat16 if low == "bfloat16" else np.float16
    starts = [a.astype(dt) for a in _start(np.float32)]
    lows = [Parameter(a.copy()) for a in starts]
    fulls = [Parameter(a.astype(np.float32)) for a in starts]
    kw = dict(line_search_fn="strong_wolfe", max_iter=10)
    results = []
    for ps, get in ((lows, lambda p: p.data.numpy().astype(np.float32)),
                    (fulls, lambda p: p.data.numpy().astype(dt).astype(np.float32))):
        opt = optim.LBFGS(ps, **kw)

        def set_grad(p, g):
            p.grad = g.astype(np.float32)
        closure = _closure_for(ps, get, set_grad, [0])
        results.append([opt.step(closure) for _ in range(2)])
    assert results[0] == results[1]
    for p, f in zip(lows, fulls):
        assert p.dtype == dt
        np.testing.assert_array_equal(p.data.numpy(), f.data.numpy().astype(dt))
    torch = pytest.importorskip("torch")
    target = [np.full(s, 0.75, np.float32) for s in SHAPES]
    ends = []
    for make, ps, get, wrap in (
            (optim.LBFGS, [Parameter(a.copy()) for a in starts],
             lambda p: p.data.numpy().astype(np.float32), lambda g, p: np.asarray(g)),
            (torch.optim.LBFGS, [torch.nn.Parameter(torch.from_numpy(a.astype(np.float32))
                                                    .to(getattr(torch, low))) for a in starts],
             lambda p: p.detach().float().numpy(),
             lambda g, p: torch.from_numpy(np.asarray(g)).to(p.dtype))):
        opt = make(ps, **kw)

        def closure(ps=ps, get=get, wrap=wrap):  # a convex quadratic: both runs converge
            f = 0.0
            for p, t in zip(ps, target):
                r = get(p) - t
                f += float(np.sum(r * r))
                p.grad = wrap(2 * r, p)
            return f
        for _ in range(3):
            opt.step(closure)
        ends.append([get(p) for p in ps])
    ulp = 2.0 ** -7 if low == "bfloat16" else 2.0 ** -10
    for a, b in zip(*ends):
        np.testing.assert_allclose(a, b, atol=2 * ulp)


# ---- the vector kernels (tinyopt.kernels.lbfgs) against numpy --------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_kernels_equal_numpy_bit_for_bit_in_the_documented_order(dtype, monkeypatch):
    """Each fused kernel = numpy's separate steps (``y += a * x``: two roundings) followed by
    ``ref_dot``; sizes around the lane, group, block and chunk boundaries; the same bits with the
    chunks run on one thread or in parallel."""
    from tinyopt.kernels import lbfgs as vec
    one = np.dtype(dtype).type
    rng = np.random.default_rng(1)
    for n in (0, 1, 31, 33, 129, 2048 + 95, (1 << 16) + 130, 5 * (1 << 16) + 7):
        x, z, g, gp, d = (rng.standard_normal(n).astype(dtype) for _ in range(5))
        y0 = rng.standard_normal(n).astype(dtype)
        a = one(-0.37)
        runs = []
        for parallel_from in (1 << 30, 1):
            monkeypatch.setattr(vec, "PARALLEL_CHUNKS", parallel_from)
            got, y = {}, y0.copy()
            got["dot"] = vec.dot(x, z)
            vec.axpy(y, a, x)
            got["axpy"] = y.copy()
            got["axpy_dot"] = vec.axpy_dot(y, a, z, x), y.copy()
            got["scale_dot"] = vec.scale_dot(y, a, z), y.copy()
            q = np.empty_like(g)
            got["negate_dot"] = vec.negate_dot(g, q, z), q
            yy, ss, prev = np.empty_like(g), np.empty_like(g), gp.copy()
            got["pair"] = vec.curvature_pair(g, prev, d, a, yy, ss), yy, ss, prev
            runs.append(got)
        ref = y0.copy()
        ref += a * x
        np.testing.assert_array_equal(runs[0]["axpy"], ref)
        assert one(runs[0]["dot"]) == ref_dot(x, z)
        ref += a * z
        np.testing.assert_array_equal(runs[0]["axpy_dot"][1], ref)
        assert one(runs[0]["axpy_dot"][0]) == ref_dot(x, ref)
        ref = ref * a
        np.testing.assert_array_equal(runs[0]["scale_dot"][1], ref)
        assert one(runs[0]["scale_dot"][0]) == ref_dot(z, ref)
        np.testing.assert_array_equal(runs[0]["negate_dot"][1], -g)
        assert one(runs[0]["negate_dot"][0]) == ref_dot(z, -g)
        (ys, yy), y_, s_, prev = runs[0]["pair"]
        np.testing.assert_array_equal(y_, g - gp)
        np.testing.assert_array_equal(s_, d * a)
        np.testing.assert_array_equal(prev, g)
        assert (one(ys), one(yy)) == (ref_dot(g - gp, d * a), ref_dot(g - gp, g - gp))
        def flat(v):
            return [w for u in v for w in flat(u)] if isinstance(v, tuple) else [np.asarray(v)]
        for key in runs[0]:  # one thread or in parallel: the same bits
            for u, v in zip(flat(runs[0][key]), flat(runs[1][key]), strict=True):
                np.testing.assert_array_equal(u, v)


def test_abs_max_is_numpys_with_nan_inf_and_empty(monkeypatch):
    """Serial and with the chunks in parallel (a NaN or inf in any chunk)."""
    from tinyopt.kernels import lbfgs as vec
    rng = np.random.default_rng(2)
    for parallel_from in (1 << 30, 1):
        monkeypatch.setattr(vec, "PARALLEL_CHUNKS", parallel_from)
        for dtype in (np.float32, np.float64):
            for n in (0, 1, 40, 1000, 2 * (1 << 16) + 3):
                x = rng.standard_normal(n).astype(dtype)
                assert vec.abs_max(x) == np.abs(x).max(initial=0)
                for at in {0, n // 2, n - 1} if n else ():
                    for bad in (np.inf, -np.inf, np.nan, -np.nan):
                        y = x.copy()
                        y[at] = bad
                        want = np.abs(y).max(initial=0)
                        got = vec.abs_max(y)
                        assert (got == want) or (np.isnan(got) and np.isnan(want))
                        assert got.dtype == dtype
            assert vec.abs_max(np.array([-0.0, -0.0], dtype)) == 0


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_16_bit_masters_are_saved_so_a_resumed_run_continues_bit_for_bit(low):
    """The float32 masters are ``state[p]["master_param"]``: a run resumed from a state dict
    (or a deepcopy) mid-way ends with the masters and 16-bit values of the uninterrupted run."""
    import copy

    import tinyopt as to
    dt = to.bfloat16 if low == "bfloat16" else np.float16
    starts = [a.astype(dt) for a in _start(np.float32)]
    kw = dict(line_search_fn="strong_wolfe", max_iter=4)

    def run(params, opt, steps):
        def set_grad(p, g):
            p.grad = g.astype(np.float32)
        closure = _closure_for(params, lambda p: p.data.numpy().astype(np.float32), set_grad, [0])
        for _ in range(steps):
            opt.step(closure)

    whole = [Parameter(a.copy()) for a in starts]
    whole_opt = optim.LBFGS(whole, **kw)
    run(whole, whole_opt, 4)

    first = [Parameter(a.copy()) for a in starts]
    opt = optim.LBFGS(first, **kw)
    run(first, opt, 2)
    sd = opt.state_dict()
    saved = {i: st["master_param"] for i, st in sd["state"].items()}
    assert set(saved) == set(range(len(first)))  # every 16-bit parameter
    assert any((m != p.data.numpy().astype(np.float32)).any()  # the masters carry more bits
               for m, p in zip(saved.values(), (first[i] for i in saved)))
    forked = copy.deepcopy((first, opt))
    resumed = [Parameter(p.data.numpy().copy()) for p in first]
    again = optim.LBFGS(resumed, **kw)
    again.load_state_dict(sd)
    for ps, o in ((resumed, again), forked):
        run(ps, o, 2)
        for p, w in zip(ps, whole):
            np.testing.assert_array_equal(p.data.numpy().view(np.uint16), w.data.numpy().view(np.uint16))
        for p, w in zip(ps, whole):
            np.testing.assert_array_equal(o.state[p]["master_param"],
                                          whole_opt.state[w]["master_param"])


def _after_a_raising_closure(lib, line_search_fn, fail_at: int, first: bool):
    """Steps of L-BFGS whose closure raises at its ``fail_at``-th call of the ``first`` step or
    of the second; then two more steps: the parameters, or the error they raised."""
    if lib is None:
        w = Parameter(np.array([1.5, -2.0, 0.5], np.float32))
        opt = optim.LBFGS([w], line_search_fn=line_search_fn, max_iter=4)
    else:
        w = lib.nn.Parameter(lib.tensor([1.5, -2.0, 0.5]))
        opt = lib.optim.LBFGS([w], line_search_fn=line_search_fn, max_iter=4)
    calls = [0, first]  # calls in the armed step, armed

    def closure():
        opt.zero_grad()
        loss = ((w - 1.0) ** 4).sum() + (w * w).sum()
        loss.backward()
        if calls[1]:
            calls[0] += 1
            if calls[0] == fail_at:
                raise ValueError("the closure failed")
        return loss
    if not first:
        opt.step(closure)
    calls[1] = True
    with pytest.raises(ValueError, match="the closure failed"):
        opt.step(closure)
    calls[1] = False
    try:
        opt.step(closure)
        opt.step(closure)
    except TypeError as e:
        return str(e)
    return np.array(w.tolist())


def test_a_step_after_a_first_step_whose_closure_raised_fails_as_torchs():
    """Issue 25.14: it died in a numba TypingError; torch's fails in a TypeError (its iteration
    count moved on, its previous gradient was never stored)."""
    assert _after_a_raising_closure(None, None, 2, True) == (
        "sub(): argument 'other' (position 1) must be Tensor, not NoneType")


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("fail_at, first", [(1, True), (2, True), (2, False), (3, False)])
def test_steps_after_a_closure_raised_are_torchs(line_search_fn, fail_at, first):
    """What a step that raised left behind (the iteration count, the previous gradient and the
    history lists move as the step goes, the rest at its end) is torch's, so the next steps are
    torch's: the same parameters, or the same TypeError."""
    torch = pytest.importorskip("torch")
    got = _after_a_raising_closure(None, line_search_fn, fail_at, first)
    want = _after_a_raising_closure(torch, line_search_fn, fail_at, first)
    if isinstance(want, str):
        assert got == want
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4)
