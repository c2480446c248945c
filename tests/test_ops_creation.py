"""Factories (``engine/ops/creation.py``): PyTorch's signatures, shapes, dtypes and keywords,
random values from the tinyopt generator, random fills in place."""

import numpy as np
import pytest

import tinyopt as to

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@needs_torch
def test_factories_match_torch_shapes_dtypes_and_values():
    x = np.arange(6.0).reshape(2, 3)
    cases = [lambda L: L.zeros(2, 3), lambda L: L.zeros((2, 3), dtype=L.int64),
             lambda L: L.ones([4]), lambda L: L.empty(2, 2).shape, lambda L: L.full((2,), 7),
             lambda L: L.full((2, 2), 1.5), lambda L: L.full((1,), True),
             lambda L: L.zeros_like(L.tensor(x)), lambda L: L.ones_like(L.tensor(x), dtype=L.int32),
             lambda L: L.full_like(L.tensor(x), 3), lambda L: L.empty_like(L.tensor(x)).shape,
             lambda L: L.eye(3), lambda L: L.eye(2, 4, dtype=L.float64),
             lambda L: L.linspace(0, 1, 5), lambda L: L.linspace(-2, 2, steps=4),
             lambda L: L.logspace(0, 2, 3), lambda L: L.arange(5), lambda L: L.arange(1, 10, 3),
             lambda L: L.arange(0.0, 1.0, 0.1), lambda L: L.arange(3, dtype=L.float64),
             lambda L: L.arange(10, 0, -3), lambda L: L.tensor([[1, 2], [3, 4]]).tril(),
             lambda L: L.tensor(2.5), lambda L: L.tensor([True]), lambda L: L.tensor([]),
             lambda L: L.tensor([1, 2], dtype=L.float32), lambda L: L.as_tensor([1.0, 2.0]),
             lambda L: L.from_numpy(np.array([1, 2], np.int32))]
    for fn in cases:
        ours, theirs = fn(to), fn(torch)
        if isinstance(theirs, torch.Size):
            assert tuple(ours) == tuple(theirs)
            continue
        assert ours.shape == tuple(theirs.shape), fn
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), fn
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_random_factories_are_seeded_and_take_keywords():
    to.manual_seed(0)
    a = [to.rand(3, 2), to.randn(4), to.randint(0, 10, (5,)), to.randperm(6),
         to.randint(5, (2, 2)), to.normal(0.0, 2.0, (3,)), to.rand_like(to.ones(2)),
         to.randn_like(to.ones(2, dtype=to.float64)), to.randint_like(to.ones(3), 4)]
    to.manual_seed(0)
    b = [to.rand(3, 2), to.randn(4), to.randint(0, 10, (5,)), to.randperm(6),
         to.randint(5, (2, 2)), to.normal(0.0, 2.0, (3,)), to.rand_like(to.ones(2)),
         to.randn_like(to.ones(2, dtype=to.float64)), to.randint_like(to.ones(3), 4)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert a[2].dtype == to.int64 and a[3].dtype == to.int64 and sorted(a[3].tolist()) == list(range(6))
    assert a[7].dtype == to.float64 and ((a[0] >= 0) & (a[0] < 1)).all()
    g = to.Generator().manual_seed(3)
    np.testing.assert_array_equal(to.randn(3, generator=g).numpy(),
                                  to.randn(3, generator=to.Generator().manual_seed(3)).numpy())
    x = to.randn(3, requires_grad=True, dtype=to.float64)
    assert x.requires_grad and x.dtype == to.float64 and x.is_leaf
    with pytest.raises(RuntimeError, match="CPU only"):
        to.randn(2, device="cuda")
    with pytest.raises(RuntimeError, match="negative dimension"):
        to.zeros(-1)


def test_random_fills_in_place_and_sampling():
    to.manual_seed(1)
    w = to.empty(1000)
    assert w.uniform_(-2, 2) is w and (w.abs() <= 2).all() and abs(w.mean().item()) < 0.2
    w.normal_(3.0, 0.5)
    assert abs(w.mean().item() - 3.0) < 0.1 and abs(w.std().item() - 0.5) < 0.1
    w.bernoulli_(0.25)
    assert set(np.unique(w.numpy())) <= {0.0, 1.0} and abs(w.mean().item() - 0.25) < 0.06
    p = to.nn.Parameter(to.zeros(50))
    with to.no_grad():
        p.normal_(0, 0.02)
    assert p.std().item() > 0
    idx = to.multinomial(to.tensor([0.0, 1.0, 3.0]), 500, replacement=True)
    counts = np.bincount(idx.numpy(), minlength=3)
    assert counts[0] == 0 and 0.6 < counts[2] / 500 < 0.9
    assert sorted(to.multinomial(to.ones(4), 4).tolist()) == [0, 1, 2, 3]
    b = to.bernoulli(to.full((200,), 0.5))
    assert b.dtype == to.float32 and 0.3 < b.mean().item() < 0.7
