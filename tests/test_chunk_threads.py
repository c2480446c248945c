"""kernels/chunk_threads.py: chunks run once each, on several threads, errors reach the caller, results
do not depend on the number of threads, and a forked child gets workers of its own."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pytest

import tinyopt as to
from tinyopt.kernels import chunk_threads
from tinyopt.engine.ops.conv import conv2d


@pytest.fixture
def pool(monkeypatch):
    """Swap in a pool of ``n`` threads (the caller included)."""
    def make(n):
        monkeypatch.setattr(chunk_threads, "_pool", chunk_threads._Pool(n - 1))
        return chunk_threads._pool
    return make


def test_every_chunk_runs_once_and_the_workers_take_part(pool):
    pool(3)
    seen = []

    def chunk(k):
        time.sleep(0.005)   # long enough that every thread gets chunks
        seen.append((k, threading.get_ident()))
    chunk_threads.run_chunks(chunk, 12)
    assert sorted(k for k, _ in seen) == list(range(12))
    assert len({ident for _, ident in seen}) > 1


def test_an_error_in_a_chunk_reaches_the_caller_and_the_pool_keeps_working(pool):
    pool(2)

    def chunk(k):
        if k == 3:
            raise ValueError("chunk 3")
    with pytest.raises(ValueError, match="chunk 3"):
        chunk_threads.run_chunks(chunk, 6)
    done = []
    chunk_threads.run_chunks(done.append, 4)
    assert sorted(done) == [0, 1, 2, 3]


def test_callers_on_two_threads_at_once_both_finish(pool):
    pool(2)
    results = {}

    def caller(name):
        out = []
        for _ in range(20):
            got = []
            chunk_threads.run_chunks(got.append, 5)
            out.append(sorted(got))
        results[name] = out
    threads = [threading.Thread(target=caller, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {n: [[0, 1, 2, 3, 4]] * 20 for n in "ab"}


def _conv_step():
    rng = np.random.default_rng(0)
    x = to.Parameter(rng.standard_normal((64, 3, 12, 12)).astype(np.float32))
    w = to.Parameter(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    b = to.Parameter(rng.standard_normal(8).astype(np.float32))
    g = rng.standard_normal((64, 8, 12, 12)).astype(np.float32)
    y = conv2d(x, w, b, padding=1)
    (y * g).sum().backward()
    return y.numpy(), x.grad, w.grad, b.grad


def test_direct_conv_gives_the_same_bits_on_one_thread_and_on_three(pool):
    pool(1)
    one = _conv_step()
    to.engine.cache_clear()  # the chunk counts are fixed when a plan is compiled
    pool(3)
    three = _conv_step()
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)


def _child(q):
    q.put(float(np.abs(_conv_step()[2]).sum()))


def test_a_forked_child_runs_chunks_on_workers_of_its_own(pool):
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork on this platform")
    pool(2)
    want = float(np.abs(_conv_step()[2]).sum())   # the parent's workers have started
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(timeout=60)
    assert p.exitcode == 0 and got == want


def _cnn(seed):
    from tinyopt import nn
    to.manual_seed(seed)   # the global generator is one per process: models are built up front
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(16 * 14 * 14, 10))


def _cnn_losses(model, seed, steps, barrier=None):
    from tinyopt import nn
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    opt = to.optim.Adam(model.parameters(), lr=1e-3)
    out = []
    if barrier is not None:
        barrier.wait()
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out + [np.array(p._data) for p in model.parameters()]


def test_cnns_trained_on_two_threads_at_once_match_training_alone(pool):
    """Two callers share the worker pool (one runs its chunks itself) and the direct conv plans:
    the bits do not depend on that."""
    pool(2)
    alone = [_cnn_losses(_cnn(seed), seed, 4) for seed in range(2)]
    models = [_cnn(seed) for seed in range(2)]
    results: list = [None, None]
    barrier = threading.Barrier(2)

    def work(k):
        results[k] = _cnn_losses(models[k], k, 4, barrier)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, alone):
        assert got is not None and len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
