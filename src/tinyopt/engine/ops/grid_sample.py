"""Spatial transformers: ``affine_grid`` (sampling grids from affine matrices, from differentiable
ops) and ``grid_sample`` (one op: bilinear or nearest reads at grid points, with the gradient
with respect to both the input and the grid; ``kernels/grid_sample.py``).

    grid = F.affine_grid(theta, x.size(), align_corners=False)     # theta (N, 2, 3)
    y = F.grid_sample(x, grid, align_corners=False)                # the spatial transformer
"""

from __future__ import annotations

import warnings

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import c_contiguous, require_float

from tinyopt.engine.ops.workspace import region
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels import grid_sample as K

_MODES = {"bilinear": 0, "nearest": 1}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False "
                  "since 1.3.0. Please specify align_corners=True if the old behavior is desired. "
                  "See the documentation of grid_sample for details.")


def _forward(t):
    mode, padding, align = t.attrs
    return lambda out, x, grid: K.grid_sample(c_contiguous(x), c_contiguous(grid), mode, padding,
                                              align, out)


def _grad_forward(t):
    mode, padding, align = t.attrs
    x_shape, grid_shape = t.srcs[1].shape, t.srcs[2].shape
    n = int(np.prod(x_shape))

    def fwd(out, g, x, grid):
        K.grid_sample_grad(c_contiguous(g), c_contiguous(x), c_contiguous(grid), mode, padding,
                           align,
                           out[:n].reshape(x_shape), out[n:].reshape(grid_shape))
    return fwd


def _backward(t, g):
    x, grid = t.srcs
    n = x.numel()
    both = node("grid_sample_grad", (g, x, grid), (n + grid.numel(),), g.dtype, t.attrs)
    return (region(both, 0, x.shape) if x.requires_grad else None,
            region(both, n, grid.shape) if grid.requires_grad else None)


defop("grid_sample", forward=_forward, backward=_backward)
defop("grid_sample_grad", forward=_grad_forward)


def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """out[n, c, i, j] = input[n, c] read at grid[n, i, j] = (x, y) in [-1, 1] (-1: left/top),
    as ``torch.nn.functional.grid_sample`` for 4-D input: ``mode`` 'bilinear' or 'nearest',
    ``padding_mode`` 'zeros', 'border' or 'reflection' (see ``kernels/grid_sample.py`` for the
    coordinate map).  Differentiable with respect to ``input`` and (bilinear) ``grid``."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in _PADDINGS:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    x, g = as_tensor(input), as_tensor(grid)
    require_float("grid_sample", x, g)
    if x.ndim == 5:
        raise NotImplementedError("grid_sample: 5-D (volumetric) input is not supported by "
                                  "tinyopt; only 4-D (N, C, H, W)")
    if mode == "bicubic":
        raise NotImplementedError("grid_sample: mode='bicubic' is not supported by tinyopt; use "
                                  "'bilinear' or 'nearest'")
    if x.ndim != 4 or g.ndim != 4:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number "
                           f"of dimensions, but got input with sizes {list(x.shape)} and grid "
                           f"with sizes {list(g.shape)}")
    if x.shape[0] != g.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got input with sizes {list(x.shape)} and grid with sizes "
                           f"{list(g.shape)}")
    if g.shape[-1] != 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size 2 in last dimension, "
                           f"but got grid with sizes {list(g.shape)}")
    if g.dtype != x.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same dtype, but "
                           f"input has {x.dtype} and grid has {g.dtype}")
    shape = (x.shape[0], x.shape[1], g.shape[1], g.shape[2])
    return node("grid_sample", (x, g), shape, x.dtype,
                (_MODES[mode], _PADDINGS[padding_mode], bool(align_corners)))


def _base(n: int, align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """The n normalized pixel positions along an axis (centres: edges at +-1 unless aligned)."""
    if n <= 1:
        return np.zeros(max(n, 0), dtype)
    b = np.linspace(-1.0, 1.0, n)
    return (b if align_corners else b * (n - 1) / n).astype(dtype)


def affine_grid(theta, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, H, W, 2) of the affine maps ``theta`` (N, 2, 3) for an output of
    ``size`` (N, C, H, W): grid[n, i, j] = theta[n] @ (x_j, y_i, 1), as
    ``torch.nn.functional.affine_grid``; differentiable with respect to ``theta``."""
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    th = as_tensor(theta)
    require_float("affine_grid", th)
    size = tuple(int(s) for s in size)
    if len(size) == 5:
        raise NotImplementedError("affine_grid: 3-D (5-D size) grids are not supported by "
                                  "tinyopt; only 4-D sizes (N, C, H, W)")
    if len(size) != 4:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    if th.ndim != 3 or th.shape[1:] != (2, 3):
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                         f"{size}. Got {th.shape}.")
    N, _, H, W = size
    if th.shape[0] != N:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{N}, 3] but got: [{th.shape[0]}, 3].")
    if min(size[2:]) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    xs, ys = _base(W, align_corners, th.dtype), _base(H, align_corners, th.dtype)
    base = np.empty((H, W, 3), th.dtype)
    base[..., 0], base[..., 1], base[..., 2] = xs[None, :], ys[:, None], 1
    grid = leaf(base.reshape(1, H * W, 3)) @ th.transpose(1, 2)   # (N, H*W, 2)
    return grid.reshape(N, H, W, 2)
