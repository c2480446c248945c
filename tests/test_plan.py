"""Compiled plans and their cache: runs from several threads at once, the byte bound, logging, and
what a failed run leaves behind."""

import gc
import logging
import threading
import weakref

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.engine import cache_clear, cache_info, set_cache_limit
from tinyopt.engine.plan import NODE_BYTES
from tinyopt.engine.plan_cache import CACHE, DEFAULT_MAX_BYTES, PlanCache


def _lazy(a: np.ndarray) -> to.Tensor:
    """A leaf whose ops build graphs (ops over concrete tensors run at once, with no plan)."""
    return to.Parameter(a, requires_grad=False)


def _model(seed: int):
    to.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 16), nn.ReLU(),
                         nn.Dropout(0.0), nn.Linear(16, 5))


def _train(model, seed: int, steps: int, barrier=None) -> list:
    """Train a model of the one architecture on data of its own; its losses and final weights."""
    opt = to.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 8)
    if barrier is not None:
        barrier.wait()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        losses.append(model(x[:2]).numpy())  # an inference plan too, shared as well
    return losses + [p.data.numpy().copy() for p in model.parameters()]


def test_threads_training_models_of_one_architecture_match_running_alone():
    steps, n = 30, 4
    alone = [_train(_model(seed), seed, steps) for seed in range(n)]
    models = [_model(seed) for seed in range(n)]  # the global generator is not per thread
    results: list = [None] * n
    errors: list = []
    barrier = threading.Barrier(n)

    def work(k):
        try:
            results[k] = _train(models[k], k, steps, barrier)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, alone):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)  # bit-identical


def test_concurrent_runs_get_arenas_of_their_own_and_the_cache_counts_them():
    cache_clear()
    x = _lazy(np.ones((64, 64), np.float32))
    plan = to.engine.get_plan(x.exp() + 1.0)
    assert len(plan._idle) == 1 and cache_info().nbytes == plan.nbytes
    before = plan.nbytes
    held = plan._idle.pop()  # as if another thread were running it
    try:
        np.testing.assert_allclose((x.exp() + 1.0).numpy(), np.e + 1.0, rtol=1e-6)
    finally:
        plan._idle.append(held)
    assert len(plan._idle) == 2 and plan.nbytes == before + plan.run_bytes
    assert cache_info().nbytes == plan.nbytes
    assert plan._idle[0].arena is not plan._idle[1].arena


def test_cache_is_bounded_by_bytes(compile_at_once):
    cache_clear()
    try:
        # three arenas of 4096 float64 and three plans' Python objects (up to 9 nodes each)
        set_cache_limit(max_bytes=3 * (4096 * 8 + 9 * NODE_BYTES) + 2048)
        for n in range(1, 9):  # arenas of about 4096 float64 each (plans of other structures:
            t = _lazy(np.ones(4096))  # plans differing only in sizes would share one arena)
            for _ in range(n):
                t = t.exp()
            t.numpy()
            info = cache_info()
            assert info.nbytes <= info.max_bytes
        assert cache_info().currsize == 3  # the three most recent plans fit
        # a plan bigger than the bound still runs, alone in the cache
        big = _lazy(np.ones(100_000)).exp().numpy()
        assert big.shape == (100_000,) and cache_info().currsize == 1
        assert cache_info().nbytes > cache_info().max_bytes
    finally:
        set_cache_limit(max_bytes=DEFAULT_MAX_BYTES)
        cache_clear()


def test_cache_byte_bound_default_and_setting(monkeypatch):
    assert PlanCache().max_bytes == DEFAULT_MAX_BYTES == 1 << 30
    monkeypatch.setenv("TINYOPT_PLAN_CACHE_BYTES", "12345")
    assert PlanCache().max_bytes == 12345
    with pytest.raises(ValueError, match="max_bytes must be a non-negative int"):
        set_cache_limit(max_bytes=-1)
    assert CACHE.max_bytes == DEFAULT_MAX_BYTES


def test_compiles_and_evictions_are_logged(caplog, compile_at_once):
    cache_clear()
    old = CACHE.maxsize
    try:
        set_cache_limit(maxsize=2)
        with caplog.at_level(logging.INFO, logger="tinyopt"):
            for n in (1, 2, 3, 1, 2, 3):  # a cycle longer than the cache: it thrashes
                _lazy(np.ones(n)).exp().numpy()
        compiled = [r for r in caplog.records if r.getMessage().startswith("compiled a plan")]
        evicted = [r for r in caplog.records if r.getMessage().startswith("evicted a plan")]
        thrash = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(compiled) == 6 and len(evicted) == 4
        assert all(r.name == "tinyopt" for r in compiled + evicted)
        assert len(thrash) == 1 and "thrashing" in thrash[0].getMessage()
    finally:
        CACHE.maxsize = old  # (set_cache_limit(maxsize=None) would leave the bound of 2)
        cache_clear()


def test_a_failed_run_keeps_no_batch_or_model_alive(compile_at_once):
    def fail_once():
        p = to.Parameter(np.ones((4, 3), np.float32))
        x = np.ones((4, 3), np.float32)
        idx = _lazy(np.array([0, 9])) + 0  # computed: out of range only when run
        with pytest.raises(IndexError):
            ((p * x)[idx]).sum().backward()
        assert p.grad is None  # a failed backward wrote no gradient
        return weakref.ref(p), weakref.ref(p._data), weakref.ref(x)

    cache_clear()
    refs = fail_once()
    gc.collect()
    assert cache_info().currsize == 1
    assert all(r() is None for r in refs)


# ---- plans over changing sizes: one structure, one arena, the bits of a plan per size ----------

def _sharing(share: bool, work):
    """``work()`` on a fresh cache whose plans of one structure share their runs (``share``) or
    each hold their own, as before plans shared them; under the adaptive threshold, every
    structure compiled at its second sighting, however rarely it recurs
    (``plan_cache.COMPILE_AFTER``)."""
    old, after = CACHE.share_sizes, CACHE.compile_after
    cache_clear()
    CACHE.share_sizes, CACHE.compile_after = share, after or 2
    try:
        return work(), cache_info(), list(CACHE._plans.values())
    finally:
        CACHE.share_sizes, CACHE.compile_after = old, after
        cache_clear()


def _fit(model, batches, loss_fn, extra=None) -> list:
    """Adam over ``batches``; the losses, outputs, final weights and buffers."""
    opt = to.optim.Adam(model.parameters(), lr=1e-2)
    got = []
    for x, y in batches:
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        got += [loss.item(), out.detach().numpy().copy()]
        if extra is not None:
            got.append(extra(model))
    return got + [v.numpy().copy() for v in model.state_dict().values()]


def _assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)  # bit for bit


@pytest.mark.parametrize("case", ["mlp", "cnn"])
def test_changing_batch_sizes_give_the_bits_of_a_plan_per_size(case):
    rng = np.random.default_rng(0)
    sizes = [6, 9, 4, 9, 2, 6, 3]  # the arena grows, shrinks back, grows again; last partial

    def work():
        to.manual_seed(0)
        if case == "mlp":
            model = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))
            data = [(rng.standard_normal((n, 5)).astype(np.float32), rng.integers(0, 3, n))
                    for n in sizes]
        else:  # direct conv kernels, fused conv+ReLU+pool, BatchNorm statistics over the batch
            model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
            data = [(rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, n))
                    for n in sizes]
        ce = nn.functional.cross_entropy

        def evaluate(m):  # an inference plan of another size between steps
            m.eval()
            with to.no_grad():
                v = m(data[1][0][:5]).numpy().copy()
            m.train()
            return v
        return _fit(model, data, lambda out, y: ce(out, y) + 0.5 * ce(out, y, reduction="sum"),
                    evaluate)

    shared, info, plans = _sharing(True, work)
    rng = np.random.default_rng(0)
    alone, info_alone, _ = _sharing(False, work)
    _assert_same(shared, alone)
    assert info.misses == info_alone.misses  # a plan per size still (its shapes and kernels)
    assert info.structures == 2 < info_alone.structures  # ... over one training structure
    assert info.nbytes < info_alone.nbytes


def test_changing_sequence_lengths_give_the_bits_of_a_plan_per_length(compile_at_once):
    rng = np.random.default_rng(1)
    lengths = [7, 3, 11, 3, 5, 11]

    def work():
        to.manual_seed(0)
        lstm, head = nn.LSTM(4, 8, batch_first=True), nn.Linear(8, 3)
        model = nn.Sequential()  # holds both, for _fit's state_dict
        model.lstm, model.head = lstm, head
        model.forward = lambda x: head(lstm(x)[0]).reshape(-1, 3)
        data = [(rng.standard_normal((2, t, 4)).astype(np.float32), rng.integers(0, 3, 2 * t))
                for t in lengths]
        return _fit(model, data, nn.functional.cross_entropy)

    shared, info, _ = _sharing(True, work)
    rng = np.random.default_rng(1)
    alone, info_alone, _ = _sharing(False, work)
    _assert_same(shared, alone)
    assert info.structures == 1 and info_alone.structures == 4  # four lengths


def _policy(hidden=32):
    to.manual_seed(0)
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def _episodes(lengths, policy=None):
    """A policy-gradient loop (REINFORCE): an episode of each length, the log-probabilities of the
    actions taken weighted by the returns."""
    rng = np.random.default_rng(2)
    policy = policy or _policy()
    opt = to.optim.Adam(policy.parameters(), lr=1e-2)
    losses = []
    for t in lengths:
        obs = rng.standard_normal((t, 4)).astype(np.float32)
        act = rng.integers(0, 2, t)
        ret = to.tensor(rng.standard_normal(t).astype(np.float32))
        logp = nn.functional.log_softmax(policy(obs), 1)
        loss = -(logp[np.arange(t), act] * ret).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses + [p.data.numpy().copy() for p in policy.parameters()]


def test_episodes_of_changing_lengths_share_one_structure_and_one_arena():
    lengths = [int(t) for t in np.random.default_rng(3).integers(2, 60, 30)]
    lengths += lengths[::-1]  # sizes come back after the runs' tables of them were dropped
    shared, info, plans = _sharing(True, lambda: _episodes(lengths))
    alone, info_alone, plans_alone = _sharing(False, lambda: _episodes(lengths))
    _assert_same(shared, alone)
    distinct = len(set(lengths))
    assert info.misses == info_alone.misses == distinct > 20
    assert info.structures == 1 and info_alone.structures == distinct
    fam = plans[0].family
    assert all(p.family is fam for p in plans) and len(fam._idle) == 1  # one thread: one run
    run = fam._idle[0]
    assert run.arena.nbytes == max(p.peak_bytes for p in plans)
    assert len(run.tables) <= run.TABLES
    # memory: one arena and one gradient scratch, not one per length
    assert info.nbytes == fam.nbytes + sum(p.own_bytes for p in plans)
    assert info.nbytes <= max(p.nbytes for p in plans_alone) + sum(p.own_bytes for p in plans) \
        + sum(e[3] for e in run.tables.values())  # the largest plan alone, and the constants
    own, own_alone = (sum(p.own_bytes for p in ps) for ps in (plans, plans_alone))
    assert (info.nbytes - own) * 5 < info_alone.nbytes - own_alone  # (arenas and scratch)


def test_threads_running_one_structure_at_different_sizes_match_running_alone():
    sizes = [[5, 9, 5, 3, 9], [9, 5, 3, 9, 5]]  # different sizes of one structure at once
    alone = [_episodes(s) for s in sizes]
    results: list = [None, None]
    barrier = threading.Barrier(2)
    policies = [_policy(), _policy()]  # the global generator is not per thread

    def work(k):
        barrier.wait()
        results[k] = _episodes(sizes[k], policies[k])
    cache_clear()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, alone):
        _assert_same(got, want)


def test_elementwise_steps_over_the_arena_are_bound_once_and_give_the_general_paths_bits(compile_at_once):
    """A plan binds an elementwise kernel over its arena's arrays once (the flat loop, no
    per-call checks); where an operand is a leaf (bound per run) or strided it keeps the
    general call.  Both give the bits of the kernel called as a ufunc."""
    import functools

    from tinyopt.engine.plan import _Run
    from tinyopt.kernels import elementwise as K

    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    a[0, :3] = [np.nan, -0.0, np.inf]
    w = to.nn.Parameter(rng.standard_normal((5, 7)).astype(np.float32))
    x = to.tensor(a)
    h = to.relu(x * w)              # relu over an arena array: bound
    s = to.sigmoid(x.t())           # over a view of a leaf: the general call
    loss = (to.tanh(h) * s.t()).sum()
    loss.backward()
    built = []
    orig = _Run._build
    _Run._build = lambda self, plan: built.append(orig(self, plan)) or built[-1]
    try:
        to.engine.cache_clear()
        w.grad = None
        h = to.relu(x * w)
        s = to.sigmoid(x.t())
        loss = (to.tanh(h) * s.t()).sum()
        loss.backward()
    finally:
        _Run._build = orig
    plan, A, _, _, steps = built[-1]  # (every step: the fixed views' too)
    ops = [t.op for i, t in enumerate(plan.nodes) if plan._kind[i] in ("compute", "into_grad", "view")]
    bound = {op for op, st in zip(ops, steps) if isinstance(st, functools.partial)}
    assert {"relu", "tanh", "relu_grad", "tanh_grad"} <= bound and "sigmoid" not in bound
    xw = a * w.numpy()
    hr = K.relu(xw, out=np.empty_like(xw))
    th = K.tanh(hr, out=np.empty_like(hr))
    sg = K.sigmoid(a.T, out=np.empty_like(a.T)).T
    gh = K.tanh_grad(sg, th, out=np.empty_like(th))
    gxw = K.relu_grad(gh, hr, out=np.empty_like(gh))
    assert np.array_equal(h.numpy(), hr, equal_nan=True)
    with np.errstate(invalid="ignore"):
        want = gxw * a
    assert np.asarray(w.grad).view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_views_of_computed_nodes_are_made_once_per_table_and_bind_the_kernels_reading_them(compile_at_once):
    """A view whose array is the same in every run (a reshape of a computed node, a slice of one
    with constant starts) is made when a run's table is built, not by every run, and an
    elementwise kernel reading it is bound once as one over the arena is; a view of a leaf
    (bound per run) stays a step.  The values are the bits of the eager run."""
    import functools

    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 6)).astype(np.float32)
    a[0, :2] = [-0.0, np.inf]

    def build(w, x):
        h = (x * w).reshape(3, 4)             # a view of a computed node: fixed
        r = x.reshape(3, 4)                   # a view of a leaf: a step of every run
        return (to.tanh(h) * to.exp(r)).sum()

    def grads():
        w = to.nn.Parameter(to.tensor(a[1]))
        x = _lazy(a)
        got = []
        for _ in range(3):
            w.grad = None
            loss = build(w, x)
            loss.backward()
            got += [loss.item(), w.grad.numpy().copy()]
        return got

    CACHE.compile_after = 10 ** 6
    try:
        want = grads()  # eager runs
    finally:
        CACHE.compile_after = 1  # (compile_at_once's)
    _assert_same(grads(), want)  # a plan's runs: the same bits
    plan = next(iter(CACHE._plans.values()))
    run = plan._idle[0]
    _, A, steps, _, every = run.tables[id(plan)]
    fixed = [i for i in plan._fixed_views if A[i] is not None]
    h = next(i for i in fixed if plan.nodes[plan._srcs[i][0]].op == "mul")  # (x * w).reshape
    assert len(steps) == len(every) - len(fixed)
    assert np.may_share_memory(A[h], run.arena)
    leaf_views = [i for i, t in enumerate(plan.nodes)
                  if plan._kind[i] == "view" and plan._kind[plan._srcs[i][0]] == "leaf"]
    assert leaf_views and not set(leaf_views) & set(plan._fixed_views)
    kept = {i: A[i] for i in fixed}
    grads()  # more runs of the table: the fixed views stay, the others are unbound after
    assert all(A[i] is v for i, v in kept.items())
    assert all(A[i] is None for i in leaf_views)
    pos = {i: n for n, i in enumerate(i for i, k in enumerate(plan._kind)
                                      if k in ("compute", "into_grad", "view"))}
    tanh = next(i for i, t in enumerate(plan.nodes) if t.op == "tanh")
    assert isinstance(every[pos[tanh]], functools.partial)  # bound over the fixed view


def test_small_elementwise_steps_copy_broadcast_and_per_run_operands_and_bind_the_loop(compile_at_once):
    """An elementwise kernel writing a small arena array, whose operands are broadcast (a
    computed (3, 1) against (3, 4)) or bound per run (a leaf), copies those operands into
    arrays laid out as its output on each run and calls its flat loop bound once, not the
    kernel's general call: the bits of the eager run, which makes that call (NaN, inf and -0.0
    included, the gradients' broadcast sums too)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    a[0, :3] = [np.nan, -0.0, np.inf]
    b = rng.standard_normal((1, 4)).astype(np.float32)
    b[0, 1] = -0.0

    def grads():
        w = to.nn.Parameter(to.tensor(a))
        got = []
        for k in range(3):
            x = _lazy(b + k)  # a new leaf each run, bound per run
            h = w * 2.0
            y = (h - h.sum(1, keepdim=True)) * x
            y.sum().backward()
            got += [y.detach().numpy().copy(), w.grad.numpy().copy()]
        return got

    CACHE.compile_after = 10 ** 6
    try:
        want = grads()  # eager runs: the kernels' general calls
    finally:
        CACHE.compile_after = 1  # (compile_at_once's)
    got = grads()
    for u, v in zip(got, want):
        assert u.tobytes() == v.tobytes()  # bit for bit, NaN included
    plan = next(iter(CACHE._plans.values()))
    _, _, _, _, every = plan._idle[0].tables[id(plan)]
    pos = [i for i, k in enumerate(plan._kind) if k in ("compute", "into_grad", "view")]
    names: dict[str, set] = {}
    for i, st in zip(pos, every):
        names.setdefault(plan.nodes[i].op, set()).add(getattr(st, "__name__", ""))
    assert names["sub"] == {"run_copied"} and "run_copied_bound" in names["mul"]
