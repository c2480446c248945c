"""conv_transpose2d (``engine/ops/conv_transpose.py``): values and gradients against PyTorch 2.13
and finite differences over strides, padding, output padding, dilation and groups."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt.nn.functional as F
from gradcheck import gradcheck
from torch_parity import against_torch, torch_or_skip

rng = np.random.default_rng(5)


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2), dict(stride=2, padding=1,
                                                                  output_padding=1),
                                    dict(dilation=2, padding=2), dict(stride=(2, 1), padding=(0, 1)),
                                    dict(stride=3, output_padding=2, dilation=1),
                                    dict(groups=2, stride=2), dict(groups=4)])
@pytest.mark.parametrize("batch", [1, 3])
def test_against_torch(kwargs, batch):
    torch = torch_or_skip()
    G = kwargs.get("groups", 1)
    x = rng.normal(size=(batch, 4, 5, 6))
    w = rng.normal(size=(4, 6 // G if G != 4 else 2, 3, 2))
    b = rng.normal(size=(w.shape[1] * G,))
    against_torch(lambda x, w, b: F.conv_transpose2d(x, w, b, **kwargs),
                  lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kwargs),
                  x, w, b)
    against_torch(lambda x, w: F.conv_transpose2d(x, w, **kwargs),
                  lambda x, w: torch.nn.functional.conv_transpose2d(x, w, **kwargs),
                  x.astype(np.float32), w.astype(np.float32), rtol=2e-5, atol=2e-5)


def test_unbatched_and_gradcheck():
    torch = torch_or_skip()
    x, w = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 2, 2))
    against_torch(lambda x, w: F.conv_transpose2d(x, w, stride=2),
                  lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2), x, w)
    gradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
              x[None], w, rng.normal(size=3))


@pytest.mark.parametrize("call, message", [
    (lambda: F.conv_transpose2d(np.zeros((1, 3, 4, 4)), np.zeros((2, 2, 3, 3))),
     "expected input\\[1, 3, 4, 4\\] to have 2 channels"),
    (lambda: F.conv_transpose2d(np.zeros((1, 2, 4, 4)), np.zeros((2, 2, 3, 3)), stride=2,
                                output_padding=2), "output padding must be smaller"),
    (lambda: F.conv_transpose2d(np.zeros((2, 4)), np.zeros((2, 2, 3, 3))),
     "Expected 3D \\(unbatched\\) or 4D \\(batched\\) input"),
])
def test_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
