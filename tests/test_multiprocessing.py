"""tinyopt.multiprocessing: torch.multiprocessing's names; hogwild training of a shared model."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import tinyopt as to
import tinyopt.multiprocessing as mp
from tinyopt import nn, optim
from tinyopt.data import fashion_mnist
from tinyopt.nn import functional as F

WORKERS, SAMPLES, BATCH, EPOCHS = 4, 2000, 32, 1


def _data():
    ds = fashion_mnist()
    x = ds.x_train[:SAMPLES].reshape(-1, 784).astype(np.float32) / 255
    xt = ds.x_test.reshape(-1, 784).astype(np.float32) / 255
    return x, ds.y_train[:SAMPLES], xt, ds.y_test


def _model():
    to.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def _train(rank: int, model, x, y) -> None:
    """pytorch/examples mnist_hogwild's ``train``: an optimizer of its own over the shared
    model, its own shuffling of the whole training set."""
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    rng = np.random.default_rng(1 + rank)
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for i in range(0, len(x) - BATCH + 1, BATCH):
            idx = order[i:i + BATCH]
            opt.zero_grad()
            F.cross_entropy(model(to.from_numpy(x[idx])), to.from_numpy(y[idx])).backward()
            opt.step()


def _accuracy(model, x, y) -> float:
    with to.no_grad():
        return float((model(to.from_numpy(x)).argmax(1).numpy() == y).mean())


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork start method")
def test_mnist_hogwild_pattern_trains_the_shared_model():
    x, y, xt, yt = _data()
    model = _model()
    serial = _model()  # the same start, the same workers run one after another in this process
    for rank in range(WORKERS):  # (also compiles the kernels the forked workers inherit)
        _train(rank, serial, x, y)
    reference = _accuracy(serial, xt, yt)
    untrained = _accuracy(model, xt, yt)
    model.share_memory()
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_train, args=(rank, model, x, y)) for rank in range(WORKERS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0] * WORKERS
    acc = _accuracy(model, xt, yt)
    # before share_memory_ was real the parent tested its untrained model (12% on MNIST)
    assert untrained < 0.3 and reference > 0.7
    assert acc >= reference - 0.03, (acc, reference)
    print(f"hogwild {acc:.3f}, the workers in turn {reference:.3f}, untrained {untrained:.3f}")


def _add_rank(rank: int, p) -> None:
    opt = optim.SGD([p], lr=1.0)
    p.grad = np.full(p.shape, -(rank + 1.0), np.float32)
    opt.step()


def _fail(rank: int) -> None:
    raise ValueError(f"worker {rank} failed")


def test_spawned_workers_get_shared_parameters_by_handle():
    p = nn.Parameter(to.zeros(3)).share_memory_()
    mp.spawn(_add_rank, args=(p,), nprocs=2)  # each steps the parent's storage in place
    np.testing.assert_array_equal(p.detach().numpy(), 3.0)
    with pytest.raises(mp.ProcessRaisedException, match="worker 0 failed"):
        mp.spawn(_fail, nprocs=1)


def test_torch_names():
    for name in ("Process", "Queue", "SimpleQueue", "Pool", "get_context", "set_start_method",
                 "get_start_method", "spawn", "start_processes", "ProcessContext",
                 "get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy"):
        assert hasattr(mp, name) and name in mp.__all__
    assert mp.get_sharing_strategy() in mp.get_all_sharing_strategies()
    with pytest.raises(AssertionError):
        mp.set_sharing_strategy("file_system")
    assert to.multiprocessing is mp
