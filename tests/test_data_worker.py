"""``DataLoader(num_workers=N)``: real worker processes (``tinyopt.data.worker``): the batch order of
``num_workers=0``, errors re-raised in the parent, clean shutdown, timeouts, persistent workers."""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest

import tinyopt
from tinyopt.data import (BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler,
                          TensorDataset, get_worker_info)
from tinyopt.engine.random import Generator


def make(n=20):
    return TensorDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n))


class Squares(Dataset):
    """A generic map-style data set; records which process made each sample."""

    def __init__(self, n, fail_at=None, exit_at=None, sleep=0.0):
        self.n, self.fail_at, self.exit_at, self.sleep = n, fail_at, exit_at, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if i == self.exit_at:
            os._exit(3)
        if self.sleep:
            time.sleep(self.sleep)
        return np.array([i * i], dtype=np.float64), i, os.getpid()


def flat(batches, k=1):
    return [np.asarray(b[k]).tolist() for b in batches]


def alive(pool):
    return [w.is_alive() for w in pool.workers]


@pytest.mark.parametrize("kwargs", [
    lambda: dict(batch_size=3), lambda: dict(batch_size=4, shuffle=True),
    lambda: dict(batch_size=4, drop_last=True),
    lambda: dict(batch_size=2, sampler=RandomSampler(range(20), generator=Generator(2))),
    lambda: dict(batch_sampler=BatchSampler(RandomSampler(range(20)), 6, False)),
    lambda: dict(batch_size=None)])
def test_same_batches_as_in_process(kwargs):
    for ds in (make(20), Squares(20)):
        runs = []
        for workers in (0, 2):
            tinyopt.manual_seed(0)
            loader = DataLoader(ds, num_workers=workers, **kwargs())
            epochs = [flat(loader) for _ in range(2)]
            # the main process's random stream is not touched by starting workers
            runs.append((epochs, tinyopt.rand(3).tolist()))
        assert runs[0] == runs[1]


def test_batches_are_made_in_the_workers():
    pids = {int(p) for b in DataLoader(Squares(12), batch_size=2, num_workers=2) for p in b[2]}
    assert os.getpid() not in pids and len(pids) == 2


def test_worker_error_is_reraised_with_its_traceback():
    loader = DataLoader(Squares(10, fail_at=5), batch_size=2, num_workers=2)
    it = iter(loader)
    assert flat([next(it), next(it)]) == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker process 0") as e:
        next(it)
    assert "bad sample 5" in str(e.value) and "__getitem__" in str(e.value)
    assert not any(alive(it._pool))  # shut down at once


def test_key_error_message_stays_readable():
    class Missing(Squares):
        def __getitem__(self, i):
            return {}["k"]

    with pytest.raises(KeyError) as e:
        list(DataLoader(Missing(4), num_workers=1))
    assert "Caught KeyError in DataLoader worker process 0" in str(e.value)
    assert "\\n" not in str(e.value)


def test_clean_shutdown_after_an_epoch_and_after_break():
    loader = DataLoader(make(10), batch_size=2, num_workers=2)
    it = iter(loader)
    list(it)
    assert not any(alive(it._pool))
    it = iter(loader)
    next(it)
    pool = it._pool
    assert all(alive(pool))
    del it
    gc.collect()
    assert not any(alive(pool))


def test_persistent_workers_live_across_epochs_and_die_with_the_loader():
    loader = DataLoader(Squares(8), batch_size=2, num_workers=2, persistent_workers=True)
    first = {int(p) for b in loader for p in b[2]}
    it = iter(loader)
    next(it)  # an abandoned epoch: its prefetched results must not leak into the next one
    second = [b for b in loader]
    assert {int(p) for b in second for p in b[2]} == first
    assert flat(second) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    pool = loader._pool
    del loader, it, second
    gc.collect()
    assert not any(alive(pool))


def test_a_dying_worker_raises():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) .*\) exited unexpectedly"):
        list(DataLoader(Squares(6, exit_at=3), batch_size=1, num_workers=2))


def test_timeout():
    loader = DataLoader(Squares(4, sleep=1.0), batch_size=1, num_workers=1, timeout=0.2)
    it = iter(loader)
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.2 seconds"):
        next(it)
    it._pool.shutdown()


def test_worker_info_seed_and_init_fn():
    class Info(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            info = get_worker_info()
            return info.id, info.num_workers, info.seed, float(np.random.rand()), \
                float(tinyopt.rand(1).numpy()[0]), os.environ.get("TINYOPT_TEST_WORKER", "")

    def init(worker_id):
        os.environ["TINYOPT_TEST_WORKER"] = f"w{worker_id}"

    assert get_worker_info() is None
    rows = [tuple(np.asarray(c).tolist() for c in b) for b in
            DataLoader(Info(), batch_size=1, num_workers=2, worker_init_fn=init)]
    ids = [r[0][0] for r in rows]
    assert ids == [0, 1, 0, 1] and all(r[1][0] == 2 for r in rows)
    seeds = {r[0][0]: r[2][0] for r in rows}
    assert seeds[1] == seeds[0] + 1
    assert rows[0][3] != rows[1][3] and rows[0][4] != rows[1][4]  # workers draw differently
    assert [r[5][0] for r in rows] == ["w0", "w1", "w0", "w1"]


def test_init_fn_error_is_reported():
    def init(worker_id):
        raise OSError("no disk")

    with pytest.raises(OSError, match="no disk"):
        list(DataLoader(make(4), num_workers=1, worker_init_fn=init))


def test_unpicklable_batch_is_an_error_not_a_hang():
    with pytest.raises(Exception, match="while sending a batch"):
        list(DataLoader(make(4), batch_size=2, num_workers=1, collate_fn=lambda b: (lambda: b)))


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


def test_iterable_dataset_with_workers():
    got = [b.tolist() for b in DataLoader(Stream(11), batch_size=2, num_workers=2)]
    # worker 0 streams 0, 2, 4, ...; worker 1 streams 1, 3, ...; batches alternate between them
    assert got == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9]]
    loader = DataLoader(Stream(11), batch_size=2, num_workers=2, persistent_workers=True)
    assert [b.tolist() for b in loader] == got and [b.tolist() for b in loader] == got
    assert [b.tolist() for b in DataLoader(Stream(11), batch_size=2, num_workers=2,
                                           drop_last=True)] == got[:-1]


def test_resume_with_workers():
    ds = make(15)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, generator=Generator(5))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = flat(it)
    other = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, generator=Generator(0))
    other.load_state_dict(state)
    assert flat(other) == rest


def test_spawn_context():
    ds = make(6)
    got = flat(DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="spawn"))
    assert got == [[0, 1, 2, 3], [4, 5]]


def test_pin_memory_is_accepted_with_torchs_warning():
    with pytest.warns(UserWarning, match="no accelerator is found"):
        assert flat(DataLoader(make(4), batch_size=2, pin_memory=True)) == [[0, 1], [2, 3]]
