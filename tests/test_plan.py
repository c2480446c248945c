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
from tinyopt.engine.plan import CACHE, DEFAULT_MAX_BYTES, PlanCache


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


def test_cache_is_bounded_by_bytes():
    cache_clear()
    try:
        set_cache_limit(max_bytes=3 * 4096 * 8 + 2048)
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


def test_compiles_and_evictions_are_logged(caplog):
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
        set_cache_limit(maxsize=old)
        cache_clear()


def test_a_failed_run_keeps_no_batch_or_model_alive():
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
