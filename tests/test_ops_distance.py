"""vector_norm, normalize, cosine_similarity, pairwise_distance (``engine/ops/distance.py``):
values and gradients against PyTorch 2.13 and finite differences, including zero vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyopt as to
import tinyopt.nn.functional as F
from gradcheck import gradcheck
from tinyopt.engine.ops.distance import vector_norm
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(2)
A = rng.normal(size=(5, 7))
B = rng.normal(size=(5, 7))


@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, 1.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), (1, 2)])
def test_vector_norm_against_torch(ord, dim):
    torch = torch_or_skip()
    x = rng.normal(size=(3, 4, 5))
    x[0, 0, 0] = 0.0
    against_torch(lambda a: vector_norm(a, ord, dim), lambda a: torch.linalg.vector_norm(a, ord, dim),
                  x, grad=ord not in (0.5,))
    against_torch(lambda a: vector_norm(a, ord, dim, keepdim=True),
                  lambda a: torch.linalg.vector_norm(a, ord, dim, keepdim=True), x,
                  grad=ord not in (0.5,))


def test_vector_norm_gradient_at_zero_is_zero():
    for ord in (2, 1.5, 3):
        z = to.Parameter(np.zeros((2, 3)))
        vector_norm(z, ord, 1).sum().backward()
        np.testing.assert_array_equal(z.grad, 0.0)


@pytest.mark.parametrize("ord", [2, 1, 3, math.inf])
def test_vector_norm_gradcheck(ord):
    gradcheck(lambda a: vector_norm(a, ord, 1), A)


def test_normalize_against_torch():
    torch = torch_or_skip()
    x = A.copy()
    x[2] = 0.0  # a zero row: clamped to eps, gradient as PyTorch's
    for p, dim in ((2, 1), (1, 0), (3, -1)):
        against_torch(lambda a: F.normalize(a, p, dim),
                      lambda a: torch.nn.functional.normalize(a, p, dim), x)
    gradcheck(lambda a: F.normalize(a, dim=1), A)


def test_cosine_similarity_against_torch():
    torch = torch_or_skip()
    against_torch(F.cosine_similarity, torch.nn.functional.cosine_similarity, A, B)
    against_torch(lambda a, b: F.cosine_similarity(a[:, None], b[None], dim=-1),
                  lambda a, b: torch.nn.functional.cosine_similarity(a[:, None], b[None], dim=-1),
                  A, B)
    tiny = A.copy()
    tiny[1] = 1e-10  # below eps: the clamp keeps the norm's gradient, as PyTorch's does
    against_torch(F.cosine_similarity, torch.nn.functional.cosine_similarity, tiny, B)
    gradcheck(F.cosine_similarity, A, B)


@pytest.mark.parametrize("p", [2, 1, 3, math.inf])
def test_pairwise_distance_against_torch(p):
    torch = torch_or_skip()
    against_torch(lambda a, b: F.pairwise_distance(a, b, p),
                  lambda a, b: torch.nn.functional.pairwise_distance(a, b, p), A, B)
    against_torch(lambda a, b: F.pairwise_distance(a, b, p, keepdim=True),
                  lambda a, b: torch.nn.functional.pairwise_distance(a, b, p, keepdim=True),
                  A, B[0])
    gradcheck(lambda a, b: F.pairwise_distance(a, b, p), A, B)


def test_errors():
    with pytest.raises(RuntimeError, match="Expected a floating point"):
        vector_norm(np.arange(3))
    with pytest.raises(IndexError, match="Dimension out of range"):
        vector_norm(A, 2, 2)
