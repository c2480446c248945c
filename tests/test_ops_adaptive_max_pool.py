"""Adaptive max pooling over 1, 2 and 3 spatial dims (``engine/ops/adaptive_max_pool.py``):
values, indices and gradients against torch, batched and unbatched, equal and unequal windows,
ties and NaN; finite differences; torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt.nn import functional as F

from gradcheck import gradcheck

CASES = [  # (function, input shape, output_size): unequal and equal windows, None entries
    ("adaptive_max_pool1d", (2, 3, 7), 3), ("adaptive_max_pool1d", (3, 8), (4,)),
    ("adaptive_max_pool2d", (3, 5, 7), (None, 3)), ("adaptive_max_pool2d", (2, 2, 6, 4), 2),
    ("adaptive_max_pool3d", (2, 3, 5, 4, 7), (2, None, 3)),
    ("adaptive_max_pool3d", (3, 5, 4, 7), 2),
    ("adaptive_max_pool3d", (2, 4, 4, 6), (2, 1, 3)),
]


@pytest.mark.parametrize("name, shape, size", CASES)
def test_adaptive_max_pool_matches_torch(name, shape, size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(shape))
    for x in (rng.standard_normal(shape), np.round(rng.standard_normal(shape))):  # (ties)
        x.reshape(-1)[3] = np.nan
        p, t = to.Parameter(x), torch.tensor(x, requires_grad=True)
        ours, ours_i = getattr(F, name)(p, size, return_indices=True)
        theirs, theirs_i = getattr(torch.nn.functional, name)(t, size, return_indices=True)
        np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
        np.testing.assert_array_equal(ours_i.numpy(), theirs_i.numpy())
        assert ours_i.dtype == np.int64
        g = rng.standard_normal(ours.shape)
        (ours * to.tensor(g)).sum().backward()
        (theirs * torch.tensor(g)).sum().backward()
        # (a tie: its first element; overlapping windows add up in another order)
        np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("name, shape, size", [CASES[0], CASES[4]])
def test_adaptive_max_pool_gradient_matches_finite_differences(name, shape, size):
    x = np.random.default_rng(1).permutation(np.prod(shape)).reshape(shape) / 7.0  # no ties
    gradcheck(lambda t: getattr(F, name)(t, size), x)


def test_adaptive_max_pool_errors_are_torchs():
    with pytest.raises(RuntimeError, match=r"^adaptive_max_pool3d\(\): Expected 4D or 5D tensor, "
                                           r"but got: \[2, 3, 4\]$"):
        F.adaptive_max_pool3d(to.zeros(2, 3, 4), 2)
    with pytest.raises(RuntimeError, match=r"^adaptive_max_pool2d\(\): Expected 3D or 4D"):
        F.adaptive_max_pool2d(to.zeros(3, 4), 2)
    with pytest.raises(RuntimeError, match=r"^Expected 2 to 3 dimensions, but got 4-dimensional "
                       r"tensor for argument #1 'self' \(while checking arguments for "
                       r"adaptive_max_pool1d\)$"):
        F.adaptive_max_pool1d(to.zeros(1, 2, 3, 4), 2)
    with pytest.raises(RuntimeError, match=r"output_size' should contain one int \(got 2\)"):
        F.adaptive_max_pool1d(to.zeros(2, 4), (2, 2))
    with pytest.raises(RuntimeError, match=r"output_size.size\(\) must be 3"):
        F.adaptive_max_pool3d(to.zeros(2, 4, 4, 4), (2, 2))
