"""``F.affine_grid`` and ``F.grid_sample`` (``engine/ops/grid_sample.py``): PyTorch's values and
gradients in every mode, finite differences, and no out-of-bounds access for any grid."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
import tinyopt.nn.functional as F

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5, 6))
GRID = RNG.uniform(-1.3, 1.3, (2, 4, 7, 2))
GRID[0, 0, 0] = [1.0, -1.0]  # corners and the centre exactly
GRID[0, 0, 1] = [0.0, 0.0]
HOSTILE = GRID.copy()
HOSTILE[0, 0, 1] = [np.nan, 0.2]
HOSTILE[1, 1, 1] = [np.inf, -np.inf]
HOSTILE[1, 2, 3] = [-7.0, 40.0]
CASES = list(itertools.product(["bilinear", "nearest"], ["zeros", "border", "reflection"],
                               [False, True]))


@pytest.mark.parametrize("mode, padding, align", CASES)
def test_values_and_gradients_match_torch(mode, padding, align):
    torch = pytest.importorskip("torch")
    tx = torch.tensor(X, requires_grad=True)
    tg = torch.tensor(GRID, requires_grad=True)
    ty = torch.nn.functional.grid_sample(tx, tg, mode, padding, align)
    w = RNG.standard_normal(ty.shape)
    (ty * torch.tensor(w)).sum().backward()
    ox, og = to.tensor(X, requires_grad=True), to.tensor(GRID, requires_grad=True)
    oy = F.grid_sample(ox, og, mode, padding, align)
    (oy * to.tensor(w)).sum().backward()
    np.testing.assert_allclose(oy.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(og.grad.numpy(), tg.grad.numpy(), rtol=1e-10, atol=1e-12)
    # non-finite and far-away grid points: PyTorch's values (its backward crashes on some)
    hy = F.grid_sample(to.tensor(X), to.tensor(HOSTILE), mode, padding, align).numpy()
    np.testing.assert_allclose(hy, torch.nn.functional.grid_sample(
        torch.tensor(X), torch.tensor(HOSTILE), mode, padding, align).numpy(), atol=1e-12)


@pytest.mark.parametrize("padding, align", [("zeros", False), ("border", True),
                                            ("reflection", False)])
def test_bilinear_gradients_match_finite_differences(padding, align):
    grid = RNG.uniform(-0.9, 0.9, (1, 3, 4, 2))
    gradcheck(lambda x, g: F.grid_sample(x, g, "bilinear", padding, align), X[:1, :2], grid,
              max_elems=24)


def test_no_grid_reads_outside_the_input():
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    huge = np.array([1e300, -1e300, 1e30, 2.0**62, -(2.0**63), 3.5, np.nan, np.inf, -np.inf])
    grid = np.stack(np.meshgrid(huge, huge), -1).reshape(1, 9, 9, 2)
    for mode, padding, align in CASES:
        gx = to.tensor(x, requires_grad=True)
        gg = to.tensor(grid, requires_grad=True)
        y = F.grid_sample(gx, gg, mode, padding, align)
        y.sum().backward()
        v = y.numpy()
        finite = v[np.isfinite(v)]
        assert ((finite >= 0) & (finite <= 11)).all(), (mode, padding)
        assert padding != "zeros" or mode != "bilinear" or np.isnan(v).any()


@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_matches_torch_and_trains_a_spatial_transformer(align):
    torch = pytest.importorskip("torch")
    theta = RNG.standard_normal((2, 2, 3))
    tt = torch.tensor(theta, requires_grad=True)
    tgrid = torch.nn.functional.affine_grid(tt, (2, 3, 5, 6), align_corners=align)
    ty = torch.nn.functional.grid_sample(torch.tensor(X), tgrid, align_corners=align)
    ty.pow(2).sum().backward()
    ot = to.tensor(theta, requires_grad=True)
    ogrid = F.affine_grid(ot, (2, 3, 5, 6), align_corners=align)
    oy = F.grid_sample(to.tensor(X), ogrid, align_corners=align)
    oy.pow(2).sum().backward()
    np.testing.assert_allclose(ogrid.numpy(), tgrid.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(oy.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ot.grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-12)
    gradcheck(lambda th: F.affine_grid(th, (1, 1, 3, 4), align_corners=align),
              theta[:1])


def test_errors_and_the_default_warning():
    x, g = to.zeros(1, 1, 3, 3), to.zeros(1, 2, 2, 2)
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(x, g)
    with pytest.raises(ValueError, match="expected mode to be 'bilinear', 'nearest' or 'bicubic'"):
        F.grid_sample(x, g, mode="bad", align_corners=False)
    with pytest.raises(ValueError, match="expected padding_mode to be 'zeros', 'border', or"):
        F.grid_sample(x, g, padding_mode="bad", align_corners=False)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.grid_sample(x, g, mode="bicubic", align_corners=False)
    with pytest.raises(RuntimeError, match="same batch size"):
        F.grid_sample(x, to.zeros(2, 2, 2, 2), align_corners=False)
    with pytest.raises(RuntimeError, match="size 2 in last dimension"):
        F.grid_sample(x, to.zeros(1, 2, 2, 3), align_corners=False)
    with pytest.raises(ValueError, match="Nx2x3"):
        F.affine_grid(to.zeros(2, 3, 3), (2, 1, 4, 4), align_corners=False)
