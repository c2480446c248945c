"""Samplers: PyTorch's classes, arguments, lengths, errors and orders (``tinyopt.data.sampler``)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt
from tinyopt.data import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                          SubsetRandomSampler, WeightedRandomSampler)
from tinyopt.engine.random import Generator

try:
    import torch
    import torch.utils.data as tud
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def test_sequential_sampler():
    s = SequentialSampler(range(5))
    assert list(s) == [0, 1, 2, 3, 4] and len(s) == 5
    assert list(s) == list(s)


def test_random_sampler_is_a_permutation_each_epoch_and_seeded():
    data = range(30)
    tinyopt.manual_seed(0)
    s = RandomSampler(data)
    a, b = list(s), list(s)
    assert sorted(a) == list(range(30)) and sorted(b) == list(range(30)) and a != b
    tinyopt.manual_seed(0)
    assert list(RandomSampler(data)) == a  # each iter seeds from the global generator
    g1, g2 = Generator(5), Generator(5)
    assert list(RandomSampler(data, generator=g1)) == list(RandomSampler(data, generator=g2))
    assert len(RandomSampler(data)) == 30


def test_random_sampler_num_samples_and_replacement():
    tinyopt.manual_seed(1)
    long = list(RandomSampler(range(4), num_samples=10))
    assert len(long) == 10
    # without replacement, chained permutations: each block of 4 holds every index once
    assert sorted(long[:4]) == sorted(long[4:8]) == [0, 1, 2, 3]
    short = list(RandomSampler(range(10), num_samples=3))
    assert len(set(short)) == 3
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=300))
    assert len(drawn) == 300 and set(drawn) == {0, 1, 2}


def test_numpy_generator_is_accepted_and_advanced():
    rng = np.random.default_rng(7)
    s = RandomSampler(range(10), generator=rng)
    first = list(s)
    assert list(RandomSampler(range(10), generator=np.random.default_rng(7))) == first
    assert list(s) != first  # the user's generator moved on
    sub = SubsetRandomSampler([10, 20, 30], generator=np.random.default_rng(0))
    assert sorted(sub) == [10, 20, 30]


def test_subset_random_sampler():
    tinyopt.manual_seed(2)
    s = SubsetRandomSampler([5, 7, 9, 11])
    got = list(s)
    assert sorted(got) == [5, 7, 9, 11] and len(s) == 4
    assert s._indices().dtype == np.int64


def test_weighted_random_sampler_follows_the_weights():
    w = [0.1, 0.0, 0.3, 0.6]
    s = WeightedRandomSampler(w, num_samples=20000, generator=Generator(3))
    counts = np.bincount(list(s), minlength=4) / 20000
    np.testing.assert_allclose(counts, w, atol=0.015)
    assert len(s) == 20000
    no_rep = list(WeightedRandomSampler([1, 2, 3, 4], 4, replacement=False, generator=Generator(0)))
    assert sorted(no_rep) == [0, 1, 2, 3]


@pytest.mark.parametrize("make, error, message", [
    (lambda: RandomSampler(range(3), replacement=1), TypeError, "replacement should be a boolean"),
    (lambda: RandomSampler(range(3), num_samples=0), ValueError, "num_samples should be a positive"),
    (lambda: RandomSampler([]), ValueError, "num_samples=0"),
    (lambda: WeightedRandomSampler([1.0], 0), ValueError, "num_samples should be a positive"),
    (lambda: WeightedRandomSampler([1.0], True), ValueError, "num_samples should be a positive"),
    (lambda: WeightedRandomSampler([1.0], 1, replacement=1), ValueError, "replacement should be"),
    (lambda: WeightedRandomSampler([[1.0]], 1), ValueError, "weights should be a 1d sequence"),
    (lambda: WeightedRandomSampler([1.0, -1.0], 1), RuntimeError, "invalid multinomial"),
    (lambda: WeightedRandomSampler([0.0, 0.0], 1), RuntimeError, "sum of probabilities <= 0"),
    (lambda: WeightedRandomSampler([1.0, 1.0], 3, replacement=False), RuntimeError,
     "cannot sample n_sample > prob_dist.size"),
    (lambda: WeightedRandomSampler([1.0, 0.0], 2, replacement=False), RuntimeError,
     "not enough non-negative category"),
    (lambda: BatchSampler(range(3), 0, False), ValueError, "batch_size should be a positive"),
    (lambda: BatchSampler(range(3), 2, 1), ValueError, "drop_last should be a boolean value"),
    (lambda: RandomSampler(range(3), generator=3), TypeError, "tinyopt Generator or a numpy"),
])
def test_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


@needs_torch
@pytest.mark.parametrize("n, bs, drop", [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False),
                                         (2, 5, True)])
def test_batch_sampler_matches_torch(n, bs, drop):
    ours = BatchSampler(SequentialSampler(range(n)), bs, drop)
    theirs = tud.BatchSampler(tud.SequentialSampler(range(n)), bs, drop)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
    assert list(BatchSampler(range(n), bs, drop)) == list(tud.BatchSampler(range(n), bs, drop))


@needs_torch
def test_lengths_and_error_messages_match_torch():
    for ours, theirs in [(RandomSampler(range(7), num_samples=12),
                          tud.RandomSampler(range(7), num_samples=12)),
                         (SubsetRandomSampler([1, 2]), tud.SubsetRandomSampler([1, 2])),
                         (WeightedRandomSampler([1, 2], 5), tud.WeightedRandomSampler([1, 2], 5))]:
        assert len(ours) == len(theirs) and len(list(ours)) == len(list(theirs))
    for make in (lambda m: m.RandomSampler(range(3), num_samples=-1),
                 lambda m: m.WeightedRandomSampler([[1.0, 2.0]], 1),
                 lambda m: m.BatchSampler(range(3), 2, "x")):
        with pytest.raises(Exception) as theirs:
            make(tud)
        with pytest.raises(type(theirs.value), match=str(theirs.value).replace("(", r"\(")
                           .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
            make(tinyopt.data)


def test_custom_sampler_subclass():
    class Evens(Sampler[int]):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))

        def __len__(self):
            return (self.n + 1) // 2

    assert list(BatchSampler(Evens(7), 2, False)) == [[0, 2], [4, 6]]
    with pytest.raises(NotImplementedError):
        iter(Sampler())


def test_samplers_draw_lazily_and_iterating_equals_the_epoch_array():
    import itertools
    import tracemalloc
    from tinyopt.data import DataLoader, TensorDataset
    huge = int(1e10)
    tracemalloc.start()
    for s in (RandomSampler(range(20), replacement=True, num_samples=huge),
              WeightedRandomSampler(np.ones(20), num_samples=huge)):
        first = list(itertools.islice(iter(s), 100))
        assert len(first) == 100 and all(0 <= i < 20 for i in first) and len(s) == huge
    ds = TensorDataset(np.arange(20, dtype=np.float32))
    loader = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, True, huge))
    (xb,) = next(iter(loader))
    assert xb.shape == (4,)
    assert tracemalloc.get_traced_memory()[1] < 64 * 2**20  # (74.5 GiB when drawn whole)
    tracemalloc.stop()
    # chunked draws are the same numbers as one draw of the epoch (orders seeded today stay)
    for make in (lambda k: RandomSampler(range(7), True, k), lambda k: RandomSampler(range(7),
                 False, k), lambda k: WeightedRandomSampler(np.arange(1.0, 8.0), k)):
        for k in (3, 7, 20, 70_000):
            tinyopt.manual_seed(5)
            lazy = list(make(k))
            tinyopt.manual_seed(5)
            whole = make(k)._indices().tolist()
            assert lazy == whole and len(lazy) == k
