"""The engine pauses Python's cyclic garbage collector while it runs a cold structure or
compiles a plan (engine/gc_pause.py), and leaves the program's collector as it found it."""

import gc

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import cache_clear
from tinyopt.engine.gc_pause import paused


def _chain_loss(w: to.Tensor, n: int) -> to.Tensor:
    h = w
    for k in range(n):
        h = h * 1.001 if k % 2 else h + 0.5
    return h.sum()


@pytest.fixture
def collections():
    """Young collections counted while the test runs."""
    seen = []

    def count(phase, info):
        if phase == "start":
            seen.append(info["generation"])
    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def test_no_collection_during_an_eager_backward(collections):
    # autodiff of a 1500-op chain makes thousands of nodes: without the pause the collector
    # would run every 700 allocations (and promote the live tape towards a full collection)
    cache_clear()
    w = to.nn.Parameter(to.tensor(np.ones(4, np.float32)))
    loss = _chain_loss(w, 1500)
    assert gc.isenabled()
    collections.clear()
    loss.backward()
    assert len(collections) <= 1  # (one may start as the pause ends)
    assert gc.isenabled()
    assert to.engine.cache_info().eager >= 1
    assert w.grad is not None


def test_compile_leaves_the_collector_on():
    cache_clear()
    w = to.nn.Parameter(to.tensor(np.ones(4, np.float32)))
    for _ in range(3):  # eager, then compiled, then replayed
        _chain_loss(w, 20).backward()
        assert gc.isenabled()
    assert to.engine.cache_info().misses >= 1


def test_a_collector_the_program_turned_off_stays_off():
    w = to.nn.Parameter(to.tensor(np.ones(4, np.float32)))
    gc.disable()
    try:
        for _ in range(3):
            _chain_loss(w, 30).backward()
            assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_resumes_after_an_error():
    @paused
    def fails():
        assert not gc.isenabled()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fails()
    assert gc.isenabled()
