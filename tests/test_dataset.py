from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt
from tinyopt.data import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from tinyopt.engine.random import Generator


def make(n=10):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int64)
    return x, y


def test_tensor_dataset_samples_are_rows():
    x, y = make()
    ds = TensorDataset(x, y)
    assert len(ds) == 10
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi, x[3])
    assert yi == 3 and yi.dtype == np.int64
    assert ds.tensors[0] is x  # not copied
    np.testing.assert_array_equal(ds[-1][0], x[-1])


def test_tensor_dataset_accepts_tensors():
    p = tinyopt.Parameter(np.ones((4, 3), dtype=np.float32))
    ds = TensorDataset(p, np.arange(4))
    np.testing.assert_array_equal(ds[2][0], np.ones(3, dtype=np.float32))
    lazy = tinyopt.tensor(np.ones((4, 3), dtype=np.float32)) * 2  # realized once, here
    np.testing.assert_array_equal(TensorDataset(lazy)[0][0], np.full(3, 2.0, dtype=np.float32))


def test_tensor_dataset_errors():
    x, y = make()
    with pytest.raises(ValueError, match=r"Size mismatch between tensors.*\(10, 2\), \(9,\)"):
        TensorDataset(x, y[:9])
    with pytest.raises(ValueError, match="at least one array"):
        TensorDataset()
    with pytest.raises(ValueError, match="argument 1 is 0-dimensional"):
        TensorDataset(x, np.array(1.0))
    with pytest.raises(TypeError, match="argument 0 must be a numpy array.*list"):
        TensorDataset([1, 2, 3])


def test_base_dataset_requires_subclass_methods():
    with pytest.raises(NotImplementedError):
        Dataset()[0]
    with pytest.raises(NotImplementedError):
        len(Dataset())


def test_subset_and_nested_subset():
    ds = TensorDataset(*make())
    sub = Subset(ds, [7, 2, 5])
    assert len(sub) == 3
    assert sub[0][1] == 7 and sub[-1][1] == 5
    inner = Subset(sub, [2, 0])
    assert [int(inner[i][1]) for i in range(2)] == [5, 7]
    assert [s[1] for s in sub.__getitems__([1, 2])] == [2, 5]


def test_concat_dataset_and_add():
    a = TensorDataset(*make(3))
    b = TensorDataset(*make(4))
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 7
    assert [int(c[i][1]) for i in range(7)] == [0, 1, 2, 0, 1, 2, 3]
    assert int(c[-1][1]) == 3
    with pytest.raises(IndexError):
        c[7]
    with pytest.raises(ValueError, match="empty"):
        ConcatDataset([])


def test_random_split_is_a_reproducible_partition():
    ds = TensorDataset(*make(10))
    tinyopt.manual_seed(0)
    a, b = random_split(ds, [7, 3])
    tinyopt.manual_seed(0)
    a2, b2 = random_split(ds, [7, 3])
    assert a.indices == a2.indices and b.indices == b2.indices
    assert sorted(a.indices + b.indices) == list(range(10))
    assert a.dataset is ds and len(a) == 7 and len(b) == 3
    g1, g2 = Generator(5), Generator(5)
    assert random_split(ds, [5, 5], generator=g1)[0].indices == \
        random_split(ds, [5, 5], generator=g2)[0].indices


@pytest.mark.parametrize("n, fracs, sizes", [
    (10, [0.3, 0.3, 0.4], [3, 3, 4]),
    (11, [0.5, 0.5], [6, 5]),
    (7, [0.25, 0.25, 0.5], [2, 2, 3]),
    (5, [0.2, 0.2, 0.6], [1, 1, 3]),
])
def test_random_split_fractions(n, fracs, sizes):
    parts = random_split(TensorDataset(*make(n)), fracs)
    assert [len(p) for p in parts] == sizes


def test_random_split_fraction_lengths_match_torch():
    torch = pytest.importorskip("torch")
    for n, fracs in [(10, [0.3, 0.3, 0.4]), (11, [0.5, 0.5]), (13, [0.1, 0.2, 0.7]), (3, [0.5, 0.5])]:
        ours = [len(p) for p in random_split(TensorDataset(*make(n)), fracs)]
        theirs = [len(p) for p in torch.utils.data.random_split(range(n), fracs)]
        assert ours == theirs


def test_random_split_errors():
    ds = TensorDataset(*make(10))
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length"):
        random_split(ds, [3, 3])
    with pytest.raises(ValueError, match="non-negative integers"):
        random_split(ds, [11, -1])
    with pytest.raises(TypeError, match="Generator"):
        random_split(ds, [5, 5], generator=0)
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        random_split(TensorDataset(*make(2)), [1.0, 0.0])


@pytest.mark.filterwarnings("ignore:Length of split")  # sizes like [1, 0] read as fractions
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.integers(0, 2**32))
def test_random_split_property(sizes, seed):
    ds = TensorDataset(*make(sum(sizes)))
    parts = random_split(ds, sizes, generator=Generator(seed))
    assert [len(p) for p in parts] == sizes
    assert sorted(i for p in parts for i in p.indices) == list(range(sum(sizes)))
