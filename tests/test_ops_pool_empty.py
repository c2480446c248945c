"""Adaptive poolings to an output size with a 0 in it (``engine/ops/pool_empty.py``): torch's
empty result, and torch's errors from its backward and for negative sizes."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt.nn import functional as F

BACKWARD = ("_backward(): Expected grad_output to have non-zero size for non-batch dimensions, "
            "but grad_output has sizes {} with dimension {} being empty")

# (function, input shape, output size, result shape, the op torch's backward error names, the
# gradient's sizes it lists, the empty dimension): what torch 2.13 gives
EMPTY = [
    ("adaptive_avg_pool1d", (2, 3, 5), 0, (2, 3, 0), "adaptive_avg_pool2d", [2, 3, 1, 0], 3),
    ("adaptive_avg_pool1d", (3, 5), 0, (3, 0), "adaptive_avg_pool2d", [3, 1, 0], 2),
    ("adaptive_avg_pool2d", (3, 5, 6), (0, 0), (3, 0, 0), "adaptive_avg_pool2d", [3, 0, 0], 1),
    ("adaptive_avg_pool3d", (3, 4, 5, 6), (0, 1, 2), (3, 0, 1, 2), "adaptive_avg_pool3d",
     [3, 0, 1, 2], 1),
    ("adaptive_max_pool1d", (3, 5), 0, (3, 0), "adaptive_max_pool2d", [3, 1, 0], 2),
    ("adaptive_max_pool2d", (2, 3, 5, 6), (None, 0), (2, 3, 5, 0), "adaptive_max_pool2d",
     [2, 3, 5, 0], 3),
    ("adaptive_max_pool3d", (2, 3, 4, 5, 6), (1, 2, 0), (2, 3, 1, 2, 0), "adaptive_max_pool3d",
     [2, 3, 1, 2, 0], 4),
]


@pytest.mark.parametrize("name, shape, size, out, op, sizes, dim", EMPTY)
def test_an_output_size_of_0_gives_torchs_empty_result_and_its_backward_error(
        name, shape, size, out, op, sizes, dim):
    x = to.tensor(np.ones(shape, np.float32), requires_grad=True)
    y = getattr(F, name)(x, size)
    assert y.shape == out and y.numpy().shape == out
    if "max" in name:
        values, indices = getattr(F, name)(x, size, return_indices=True)
        assert values.shape == indices.shape == out and indices.dtype == to.int64
    with to.no_grad():
        assert getattr(F, name)(x, size).shape == out
    with pytest.raises(RuntimeError) as e:
        (y.sum() + x.sum()).backward()
    assert str(e.value) == op + BACKWARD.format(sizes, dim)
    assert x.grad is None


@pytest.mark.parametrize("name, shape, size, message", [
    ("adaptive_avg_pool1d", (3, 5), -1, "adaptive_avg_pool2d: elements of output_size must be "
     "greater than or equal to 0 but received {1, -1}"),
    ("adaptive_avg_pool2d", (2, 3, 5, 6), (-1, 2), "adaptive_avg_pool2d: elements of output_size "
     "must be greater than or equal to 0 but received {-1, 2}"),
    ("adaptive_avg_pool3d", (2, 3, 4, 5, 6), (-1, 2, 2), "adaptive_avg_pool3d: elements of "
     "output_size must be greater than or equal to 0 but received {-1, 2,2}"),
    ("adaptive_max_pool1d", (3, 5), -1, "Trying to create tensor with negative dimension -1: "
     "[3, 1, -1]"),
    ("adaptive_max_pool3d", (2, 3, 4, 5, 6), (1, -2, 2), "Trying to create tensor with negative "
     "dimension -2: [2, 3, 1, -2, 2]"),
])
def test_a_negative_output_size_raises_torchs_error(name, shape, size, message):
    with pytest.raises(RuntimeError) as e:
        getattr(F, name)(to.ones(*shape), size)
    assert str(e.value) == message
