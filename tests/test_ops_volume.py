"""The 3-d family (``engine/ops/volume.py``, ``nn/layers/volume.py``): Conv3d, ConvTranspose3d,
MaxPool3d, AvgPool3d, AdaptiveAvgPool3d against PyTorch (values and every gradient) and finite
differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F
from tinyopt import nn

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 4, 5, 6))

LAYERS = [
    ("Conv3d", (4, 6, 3), dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(1, 1, 2),
                               groups=2)),
    ("Conv3d", (4, 3, (2, 3, 2)), dict(padding="same", bias=False)),
    ("ConvTranspose3d", (4, 6, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    ("ConvTranspose3d", (4, 3, (2, 3, 2)), dict(stride=(1, 2, 3), dilation=(2, 1, 1))),
    ("MaxPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True)),
    ("MaxPool3d", ((2, 2, 3),), dict(stride=1, dilation=(1, 2, 1))),
    ("AvgPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("AvgPool3d", (2,), dict(padding=1, divisor_override=3)),
    ("AdaptiveAvgPool3d", ((3, None, 4),), {}),
]


@pytest.mark.parametrize("name, args, kw", LAYERS, ids=[f"{n}{i}" for i, (n, *_) in
                                                       enumerate(LAYERS)])
def test_layers_match_torch(name, args, kw):
    torch = pytest.importorskip("torch")
    tm = getattr(torch.nn, name)(*args, **kw).double()
    om = getattr(nn, name)(*args, **kw)
    om.to(np.float64)
    om.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    tx, ox = torch.tensor(X, requires_grad=True), to.tensor(X, requires_grad=True)
    ty, oy = tm(tx), om(ox)
    w = RNG.standard_normal(tuple(ty.shape))
    (ty * torch.tensor(w)).sum().backward()
    (oy * to.tensor(w)).sum().backward()
    np.testing.assert_allclose(oy.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    for (_, p), (_, q) in zip(sorted(om.named_parameters()), sorted(tm.named_parameters())):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-11)
    assert repr(om) == repr(tm)


def test_gradients_match_finite_differences():
    x = RNG.standard_normal((1, 2, 3, 4, 3))
    w = RNG.standard_normal((2, 2, 2, 2, 2))
    b = RNG.standard_normal(2)
    gradcheck(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1), x, w, b)
    gradcheck(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=(0, 1, 0)), x, w)
    gradcheck(lambda x: F.avg_pool3d(x, 2, 1, 1, count_include_pad=False), x)
    gradcheck(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), x)
    gradcheck(lambda x: F.max_pool3d(x, 2, 1), x)


def test_max_pool_indices_nan_and_unbatched():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 4, 4))
    x[0, 1, 1, 2] = np.nan
    ty, ti = torch.nn.functional.max_pool3d(torch.tensor(x), 2, return_indices=True)
    oy, oi = F.max_pool3d(to.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(oy.numpy(), ty.numpy())
    np.testing.assert_array_equal(oi.numpy(), ti.numpy())
    with pytest.raises(RuntimeError, match="Expected 4D \\(unbatched\\) or 5D \\(batched\\)"):
        F.max_pool3d(to.ones(2, 3, 4), 2)
    with pytest.raises(RuntimeError, match="expected input\\[2, 3, 4, 4, 4\\] to have 4 "
                                           "channels"):
        F.conv3d(to.ones(2, 3, 4, 4, 4), to.ones(2, 4, 1, 1, 1))
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool3d(to.ones(1, 1, 1, 1, 1), 2)
