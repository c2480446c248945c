"""group_norm and instance_norm (``engine/ops/group_norm.py``): values, gradients and running
statistics against PyTorch 2.13 and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt.nn.functional as F
from gradcheck import gradcheck
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(4)
X = rng.normal(loc=1.0, scale=2.0, size=(3, 6, 4, 5))


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm_against_torch(groups, affine):
    torch = torch_or_skip()
    w, b = rng.normal(size=6), rng.normal(size=6)
    if affine:
        against_torch(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-3),
                      lambda x, w, b: torch.nn.functional.group_norm(x, groups, w, b, eps=1e-3),
                      X, w, b)
    else:
        against_torch(lambda x: F.group_norm(x, groups),
                      lambda x: torch.nn.functional.group_norm(x, groups), X)
    against_torch(lambda x: F.group_norm(x, groups),
                  lambda x: torch.nn.functional.group_norm(x, groups),
                  X.astype(np.float32), rtol=2e-5, atol=2e-5)
    against_torch(lambda x: F.group_norm(x, groups),
                  lambda x: torch.nn.functional.group_norm(x, groups), X[:, :, 0])


def test_group_norm_gradcheck():
    gradcheck(lambda x, w, b: F.group_norm(x, 2, w, b), X[:2, :, :2, :3], rng.normal(size=6),
              rng.normal(size=6))


def test_group_norm_errors():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(X, 4)
    with pytest.raises(RuntimeError, match="expected weight to be a vector of size"):
        F.group_norm(X, 2, np.ones(3))


@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_against_torch(affine):
    torch = torch_or_skip()
    w, b = rng.normal(size=6), rng.normal(size=6)
    if affine:
        against_torch(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      lambda x, w, b: torch.nn.functional.instance_norm(x, weight=w, bias=b),
                      X, w, b)
    else:
        against_torch(F.instance_norm, torch.nn.functional.instance_norm, X)
    gradcheck(lambda x: F.instance_norm(x), X[:2, :2, :2])


def test_instance_norm_running_statistics_against_torch():
    torch = torch_or_skip()
    rm, rv = np.zeros(6), np.ones(6)
    trm, trv = torch.zeros(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    for step in range(3):
        x = X + step
        y = F.instance_norm(x, rm, rv, momentum=0.2)
        ty = torch.nn.functional.instance_norm(torch.from_numpy(x), trm, trv, momentum=0.2)
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(rm, trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, trv.numpy(), rtol=1e-12)
    evald = F.instance_norm(X, rm, rv, use_input_stats=False)
    tevald = torch.nn.functional.instance_norm(torch.from_numpy(X), trm, trv,
                                               use_input_stats=False)
    np.testing.assert_allclose(evald.numpy(), tevald.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="Expected more than 1 spatial element"):
        F.instance_norm(X[:, :, :1, :1])
