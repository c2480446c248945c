from __future__ import annotations

import json
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt
from tinyopt.data import DataLoader, Dataset, Subset, TensorDataset, default_collate, random_split
from tinyopt.data.dataset import TensorDataset as _TD
from tinyopt.engine.random import Generator


def make(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


class Squares(Dataset):
    """A plain map-style data set (no fast path): sample i is (i*i as float64, i)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.array([i * i], dtype=np.float64), i


def labels(loader):
    return [b[1].tolist() for b in loader]


def test_sequential_batches_and_len():
    loader = DataLoader(make(10), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    assert isinstance(batches[0], list) and len(batches[0]) == 2  # like PyTorch: a list
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 3) and batches[0][0].dtype == np.float32
    dl = DataLoader(make(10), batch_size=4, drop_last=True)
    assert len(dl) == 2 and labels(dl) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(DataLoader(make(8), batch_size=4, drop_last=True)) == 2
    assert list(DataLoader(make(0), batch_size=4)) == []


def test_batches_do_not_alias_the_dataset():
    ds = make(6)
    for shuffle in (False, True):
        xb, _ = next(iter(DataLoader(ds, batch_size=3, shuffle=shuffle)))
        xb[...] = -1
        assert (ds.tensors[0] >= 0).all()


def test_fast_path_matches_default_collate(monkeypatch):
    ds = make(23)
    sub = random_split(ds, [0.6, 0.4], generator=Generator(1))[0]
    for data in (ds, sub, Subset(sub, list(range(len(sub)))[::-1])):
        for shuffle in (False, True):
            fast = list(DataLoader(data, batch_size=5, shuffle=shuffle, generator=Generator(3)))
            slow = list(DataLoader(data, batch_size=5, shuffle=shuffle, generator=Generator(3),
                                   collate_fn=default_collate))
            assert len(fast) == len(slow)
            for f, s in zip(fast, slow):
                assert type(f) is type(s)
                for a, b in zip(f, s):
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)

    def no_per_sample_calls(self, i):
        raise AssertionError("the fast path must not index samples one by one")

    monkeypatch.setattr(_TD, "__getitem__", no_per_sample_calls)
    assert len(list(DataLoader(sub, batch_size=4, shuffle=True))) == 4


def test_numpy_array_as_dataset():
    arr = np.arange(12.0).reshape(6, 2)
    batches = list(DataLoader(arr, batch_size=4))
    np.testing.assert_array_equal(batches[0], arr[:4])
    assert batches[1].shape == (2, 2)


def test_generic_dataset_and_getitems():
    batches = list(DataLoader(Squares(5), batch_size=2))
    np.testing.assert_array_equal(batches[0][0], [[0.0], [1.0]])
    assert batches[0][1].dtype == np.int64 and batches[2][1].tolist() == [4]

    class Batched(Squares):
        calls = 0

        def __getitems__(self, indices):
            Batched.calls += 1
            return [self[i] for i in indices]

    list(DataLoader(Batched(5), batch_size=2))
    assert Batched.calls == 3


def test_default_collate():
    Point = namedtuple("Point", "x y")
    out = default_collate([{"a": 1.0, "b": (1, "s")}, {"a": 2.0, "b": (2, "t")}])
    assert out["a"].dtype == np.float64 and out["a"].tolist() == [1.0, 2.0]
    assert out["b"][0].dtype == np.int64 and out["b"][1] == ["s", "t"]
    assert default_collate([True, False]).dtype == np.bool_
    p = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(p, Point) and p.x.tolist() == [1, 3]
    s = default_collate([np.float32(1), np.float32(2)])
    assert s.dtype == np.float32 and s.shape == (2,)
    t = default_collate([tinyopt.Parameter(np.ones(2, np.float32))] * 3)
    assert t.shape == (3, 2)
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError, match="found object"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="dtype object"):
        default_collate([np.array([None]), np.array([None])])


def test_constructor_errors():
    ds = make(4)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got "
                                         "batch_size=0"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="drop_last should be a boolean value"):
        DataLoader(ds, drop_last=1)
    with pytest.raises(TypeError, match="generator must be a tinyopt Generator or a numpy"):
        DataLoader(ds, generator=3)
    with pytest.raises(TypeError, match="map-style"):
        DataLoader(5)
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        DataLoader(ds, collate_fn=3)


def test_shuffle_each_epoch_is_a_new_permutation_and_seeded():
    ds = make(20)
    tinyopt.manual_seed(7)
    loader = DataLoader(ds, batch_size=6, shuffle=True)
    epochs = [sum(labels(loader), []) for _ in range(3)]
    for e in epochs:
        assert sorted(e) == list(range(20))
    assert epochs[0] != epochs[1]
    tinyopt.manual_seed(7)
    again = DataLoader(ds, batch_size=6, shuffle=True)
    assert [sum(labels(again), []) for _ in range(3)] == epochs
    # an explicit generator makes the order independent of the global generator
    g_orders = []
    for seed in (1, 2):
        tinyopt.manual_seed(seed)
        g_orders.append(labels(DataLoader(ds, batch_size=6, shuffle=True, generator=Generator(0))))
    assert g_orders[0] == g_orders[1]


def test_break_then_iterate_starts_a_new_epoch():
    loader = DataLoader(make(10), batch_size=3)
    it = iter(loader)
    next(it)
    assert labels(loader)[0] == [0, 1, 2]
    assert loader.state_dict()["epoch"] == 2


def _json_able(state):
    json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in state.items()})


def _run_epochs(loader, epochs):
    return [[b[1].tolist() for b in loader] for _ in range(epochs)]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 23), batch_size=st.integers(1, 7), shuffle=st.booleans(),
       drop_last=st.booleans(), own_gen=st.booleans(), fast=st.booleans(),
       stop=st.integers(0, 200), seed=st.integers(0, 1000))
def test_resume_yields_exactly_the_remaining_batches(n, batch_size, shuffle, drop_last, own_gen,
                                                     fast, stop, seed):
    if drop_last and n < batch_size:
        n = batch_size
    epochs = 3
    ds = make(n) if fast else Squares(n)

    def loader():
        return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                          generator=Generator(seed) if own_gen else None)

    tinyopt.manual_seed(seed)
    reference = [x for e in _run_epochs(loader(), epochs) for x in e]
    stop = stop % (len(reference) + 1)

    tinyopt.manual_seed(seed)
    first = loader()
    seen = []
    state = None
    for _ in range(epochs):
        for b in first:
            seen.append(b[1].tolist())
            if len(seen) == stop:
                state = first.state_dict()
                break
        if state is not None:
            break
    if state is None:  # stop == 0: saved before the first batch
        state = loader().state_dict()
    _json_able(state)

    tinyopt.manual_seed(seed + 12345)  # a fresh process: the global generator differs
    second = loader()
    second.load_state_dict(state)
    while len(seen) < len(reference):
        batches = [b[1].tolist() for b in second]
        assert batches, "an epoch yielded nothing"
        seen.extend(batches)
    assert seen == reference


def test_state_dict_while_iterating_does_not_disturb_the_run():
    tinyopt.manual_seed(3)
    ref = _run_epochs(DataLoader(make(10), batch_size=3, shuffle=True), 2)
    tinyopt.manual_seed(3)
    loader = DataLoader(make(10), batch_size=3, shuffle=True)
    got = []
    for _ in range(2):
        epoch = []
        for b in loader:
            epoch.append(b[1].tolist())
            st_ = loader.state_dict()
            assert st_["index"] == min(3 * len(epoch), 10)
        got.append(epoch)
    assert got == ref


def test_mid_epoch_state_contents():
    tinyopt.manual_seed(0)
    loader = DataLoader(make(10), batch_size=4, shuffle=True)
    it = iter(loader)
    first = next(it)[1]
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["index"] == 4 and state["length"] == 10
    assert state["order"].dtype == np.int64
    np.testing.assert_array_equal(state["order"][:4], first)
    assert isinstance(state["generator"], dict)


def test_load_state_dict_rejects_bad_state_and_changes_nothing():
    tinyopt.manual_seed(0)
    loader = DataLoader(make(10), batch_size=4, shuffle=True)
    next(iter(loader))
    good = loader.state_dict()
    bad_states = [
        ({**good, "order": np.arange(9)}, ValueError, "permutation"),
        ({**good, "order": np.zeros(10, dtype=np.int64)}, ValueError, "permutation"),
        ({**good, "index": 11}, ValueError, "past the end"),
        ({**good, "epoch": -1}, ValueError, "non-negative integer"),
        ({**good, "length": 9, "order": np.arange(9)}, ValueError, "data set of 9 samples"),
        ({**good, "generator": {"bit_generator": "nope"}}, ValueError, "generator state"),
        ({**good, "order": None}, ValueError, "no shuffled order"),
        ({k: v for k, v in good.items() if k != "index"}, KeyError, "missing keys"),
        ([1, 2], TypeError, "expected a dict"),
    ]
    for state, error, message in bad_states:
        with pytest.raises(error, match=message):
            loader.load_state_dict(state)
        after = loader.state_dict()
        np.testing.assert_array_equal(after["order"], good["order"])
        assert {k: v for k, v in after.items() if k != "order"} == \
            {k: v for k, v in good.items() if k != "order"}
    with pytest.raises(ValueError, match="shuffle=False"):
        DataLoader(make(10), batch_size=4).load_state_dict(good)


# ---- samplers, batch samplers, unbatched and iterable data sets -----------------------------------
try:
    import torch
    import torch.utils.data as tud
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def test_default_samplers_are_exposed_as_in_torch():
    from tinyopt.data import BatchSampler, RandomSampler, SequentialSampler
    seq = DataLoader(make(10), batch_size=4)
    assert isinstance(seq.sampler, SequentialSampler)
    assert isinstance(seq.batch_sampler, BatchSampler) and seq.batch_sampler.batch_size == 4
    shuf = DataLoader(make(10), batch_size=4, shuffle=True)
    assert isinstance(shuf.sampler, RandomSampler)
    tinyopt.manual_seed(4)
    order = sum(labels(shuf), [])
    # the sampler the loader exposes draws from the loader's generator: its next epoch is the
    # loader's next epoch
    following = list(shuf.sampler)
    tinyopt.manual_seed(4)
    again = DataLoader(make(10), batch_size=4, shuffle=True)
    assert sum(labels(again), []) == order and sum(labels(again), []) == following
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        seq.batch_size = 3


def test_sampler_argument():
    from tinyopt.data import SubsetRandomSampler, WeightedRandomSampler
    ds = make(10)
    loader = DataLoader(ds, batch_size=3, sampler=[9, 1, 4, 4, 0])
    assert labels(loader) == [[9, 1, 4], [4, 0]] and len(loader) == 2
    sub = DataLoader(ds, batch_size=2, sampler=SubsetRandomSampler([2, 3, 5], generator=Generator(0)))
    got = sum(labels(sub), [])
    assert sorted(got) == [2, 3, 5]
    w = DataLoader(ds, batch_size=5, sampler=WeightedRandomSampler([0] * 9 + [1], 10))
    assert sum(labels(w), []) == [9] * 10
    generic = DataLoader(Squares(6), batch_size=2, sampler=[5, 0])
    assert [b[1].tolist() for b in generic] == [[5, 0]]
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0], shuffle=True)


def test_batch_sampler_argument():
    ds = make(10)
    loader = DataLoader(ds, batch_sampler=[[0, 1, 2], [7], [3, 3]])
    assert labels(loader) == [[0, 1, 2], [7], [3, 3]] and len(loader) == 3
    assert loader.batch_size is None
    for kwargs in ({"batch_size": 2}, {"shuffle": True}, {"sampler": [0]}, {"drop_last": True}):
        with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
            DataLoader(ds, batch_sampler=[[0]], **kwargs)


def test_batch_sampler_position_resumes():
    ds = make(10)
    batches = [[4, 5], [0], [9, 8, 7], [1, 2]]
    loader = DataLoader(ds, batch_sampler=batches)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["index"] == 3 and state["sizes"].tolist() == [2, 1, 3, 2]
    other = DataLoader(ds, batch_sampler=batches)
    other.load_state_dict(state)
    assert labels(other) == [[9, 8, 7], [1, 2]]
    with pytest.raises(ValueError, match="batch boundary"):
        other.load_state_dict({**state, "index": 4})


def test_sampler_position_resumes_mid_epoch():
    from tinyopt.data import RandomSampler
    ds = make(12)
    loader = DataLoader(ds, batch_size=5, sampler=RandomSampler(ds, generator=Generator(1)))
    it = iter(loader)
    first = next(it)[1].tolist()
    state = loader.state_dict()
    rest = [b[1].tolist() for b in it]
    other = DataLoader(ds, batch_size=5, sampler=RandomSampler(ds, generator=Generator(99)))
    other.load_state_dict(state)
    assert labels(other) == rest
    assert sorted(first + sum(rest, [])) == list(range(12))


def test_unbatched_loading():
    loader = DataLoader(make(3), batch_size=None)
    samples = list(loader)
    assert len(samples) == 3 and len(loader) == 3
    x, y = samples[1]
    assert x.shape == (3,) and int(y) == 1
    with pytest.raises(ValueError, match="batch_size=None option disables auto-batching"):
        DataLoader(make(3), batch_size=None, drop_last=True)


class Stream(tinyopt.data.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = tinyopt.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield np.array([i], dtype=np.float32), i

    def __len__(self):
        return self.n


def test_iterable_dataset():
    loader = DataLoader(Stream(7), batch_size=3)
    assert [b[1].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(loader) == 3
    dropped = DataLoader(Stream(7), batch_size=3, drop_last=True)
    assert [b[1].tolist() for b in dropped] == [[0, 1, 2], [3, 4, 5]] and len(dropped) == 2
    single = list(DataLoader(Stream(2), batch_size=None))
    assert [int(s[1]) for s in single] == [0, 1]
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Stream(3), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler option"):
        DataLoader(Stream(3), sampler=[0])
    with pytest.raises(TypeError, match="no resumable position"):
        DataLoader(Stream(3)).state_dict()
    chained = DataLoader(Stream(2) + Stream(3), batch_size=10)
    assert [b[1].tolist() for b in chained] == [[0, 1, 0, 1, 2]]


def test_sampler_without_len_is_iterated_lazily():
    def forever():
        i = 0
        while True:
            yield i % 10
            i += 1

    class Endless:
        def __iter__(self):
            return forever()

    loader = DataLoader(make(10), batch_size=4, sampler=Endless())
    it = iter(loader)
    assert [next(it)[1].tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    with pytest.raises(TypeError, match="no saveable position"):
        loader.state_dict()


def test_numpy_generator_for_shuffling_and_its_state():
    rng = np.random.default_rng(11)
    loader = DataLoader(make(9), batch_size=4, shuffle=True, generator=rng)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [b[1].tolist() for b in it]
    follow = labels(loader)
    other = DataLoader(make(9), batch_size=4, shuffle=True, generator=np.random.default_rng(0))
    other.load_state_dict(state)
    assert labels(other) == rest and labels(other) == follow


def test_torch_path_alias():
    import tinyopt.utils.data as tud_alias
    from tinyopt.utils.data import DataLoader as DL
    from tinyopt.utils.data.dataloader import DataLoader as DL2
    from tinyopt.utils.data.sampler import RandomSampler as RS
    assert tud_alias is tinyopt.data and DL is DataLoader and DL2 is DataLoader
    assert RS is tinyopt.data.RandomSampler
    assert tinyopt.utils.data.TensorDataset is TensorDataset


@needs_torch
@pytest.mark.parametrize("kwargs", [dict(batch_size=4), dict(batch_size=4, drop_last=True),
                                    dict(batch_size=3, sampler=[5, 1, 1, 0, 7]),
                                    dict(batch_sampler=[[1, 2], [0], [9, 8, 7]]),
                                    dict(batch_size=None)])
def test_batches_match_torch(kwargs):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10, dtype=np.int64)
    ours = list(DataLoader(TensorDataset(x, y), **kwargs))
    theirs = list(tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                 **kwargs))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(np.asarray(u), v.numpy())
            assert np.asarray(u).dtype == v.numpy().dtype
    assert len(DataLoader(TensorDataset(x, y), **kwargs)) == len(
        tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), **kwargs))


@needs_torch
def test_constructor_errors_match_torch():
    ds = make(4)
    tds = tud.TensorDataset(torch.zeros(4))
    for kwargs in (dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2),
                   dict(persistent_workers=True), dict(multiprocessing_context="fork"),
                   dict(num_workers=1, multiprocessing_context="nope")):
        with pytest.raises(ValueError) as theirs:
            tud.DataLoader(tds, **kwargs)
        with pytest.raises(ValueError) as ours:
            DataLoader(ds, **kwargs)
        assert str(ours.value) == str(theirs.value)


def test_batches_are_tensors_sharing_the_collated_arrays():
    loader = DataLoader(make(6), batch_size=4)
    xb, yb = next(iter(loader))
    assert isinstance(xb, tinyopt.Tensor) and isinstance(yb, tinyopt.Tensor)
    assert xb.dtype == np.float32 and yb.dtype == np.int64
    arr = xb.numpy()
    assert np.shares_memory(arr, np.asarray(xb))  # no copy between the batch and its array
    assert xb.view(4, 3, 1).shape == (4, 3, 1) and yb.size(0) == 4
    generic = next(iter(DataLoader(Squares(3), batch_size=3)))
    assert all(isinstance(t, tinyopt.Tensor) for t in generic)
    single = next(iter(DataLoader(make(2), batch_size=None)))
    assert all(isinstance(t, tinyopt.Tensor) for t in single)
    custom = next(iter(DataLoader(make(4), batch_size=2, collate_fn=lambda b: b)))
    assert isinstance(custom, list) and isinstance(custom[0][0], np.ndarray)  # left as it is
