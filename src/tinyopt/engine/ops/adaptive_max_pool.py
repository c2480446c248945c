"""Adaptive max pooling over 1, 2 or 3 spatial dims: ``F.adaptive_max_pool1d/2d/3d`` (1-d as
2-d over a height of 1, as torch).

Output cell i of a spatial dim of size n pooled to o covers floor(i n / o) .. ceil((i + 1) n / o)
- 1, as torch's kernels.  When o divides n the windows are plain max pooling's (one kernel);
otherwise each window's maximum is taken apart and gathered at its first largest element
(NaN counts as largest), so the gradient goes to that one element, as torch's.

    y, idx = F.adaptive_max_pool3d(x, (2, 3, None), return_indices=True)   # None keeps D, H or W
"""

from __future__ import annotations

import itertools

import numpy as np

from tinyopt.engine.op import own_reshape
from tinyopt.engine.ops.conv import max_pool2d
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.ops.movement import stack
from tinyopt.engine.ops.pool_empty import checked_sizes, empty_pool
from tinyopt.engine.ops.volume import max_pool3d
from tinyopt.engine.tensor import Tensor, as_tensor

__all__ = ["adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"]


def _sizes(op: str, output_size, shape: tuple[int, ...], k: int) -> tuple[int, ...]:
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * k
    if len(sizes) != k:
        raise RuntimeError(f"{op}(): internal error: output_size.size() must be {k}")
    out = tuple(n if s is None else int(s) for s, n in zip(sizes, shape[-k:]))
    checked_sizes(op, out, shape[:-k] + out)
    return out


def _windows(x: Tensor, out: tuple[int, ...], return_indices: bool):
    """Each adaptive window's maximum (and flat index within the spatial volume), stacked."""
    k = len(out)
    spatial = x.shape[-k:]
    bounds = [[((i * n) // o, -((-(i + 1) * n) // o)) for i in range(o)]
              for n, o in zip(spatial, out)]
    values, indices = [], []
    for cell in itertools.product(*bounds):
        win = x[(Ellipsis,) + tuple(slice(a, b) for a, b in cell)].flatten(-k)
        r = win.argmax(-1, keepdim=True)
        values.append(win.gather(-1, r).squeeze(-1))
        if return_indices:
            r, flat, inner, outer = r.squeeze(-1), 0, 1, 1
            for (a, b), n in zip(reversed(cell), reversed(spatial)):
                flat = flat + ((r // inner) % (b - a) + a) * outer
                inner, outer = inner * (b - a), outer * n
            indices.append(flat)
    shape = x.shape[:-k] + out
    y = own_reshape(stack(values, -1), shape)
    return (y, own_reshape(stack(indices, -1), shape)) if return_indices else y


def _adaptive_max(op: str, input, output_size, return_indices: bool, k: int):
    x = as_tensor(input)
    require_float(op, x)
    if x.ndim not in (k + 1, k + 2):
        raise RuntimeError(f"{op}(): Expected {k + 1}D or {k + 2}D tensor, but got: "
                           f"{list(x.shape)}")
    spatial = x.shape[-k:]
    out = _sizes(op, output_size, x.shape, k)
    if 0 in out:  # (an empty result, as torch's: its gradient raises, as torch's)
        y = empty_pool(op, x, x.shape[:-k] + out)
        return (y, as_tensor(np.zeros(y.shape, np.int64))) if return_indices else y
    if all(n % o == 0 for n, o in zip(spatial, out)):  # equal windows: max pooling itself
        pool = max_pool2d if k == 2 else max_pool3d
        window = tuple(n // o for n, o in zip(spatial, out))
        return pool(x, window, return_indices=return_indices)
    return _windows(x, out, return_indices)


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """The maximum of each adaptive window of (N, C, L) or (C, L), as
    ``torch.nn.functional.adaptive_max_pool1d``; with ``return_indices`` also each maximum's
    position along L.  As torch's: the 2-d pooling of x.unsqueeze(-2) to (1, size), squeezed
    (so its results are views, as torch's are)."""
    x = as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {x.ndim}-dimensional tensor for "
                           f"argument #1 'self' (while checking arguments for adaptive_max_pool1d)")
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,)
    if len(sizes) != 1:
        raise RuntimeError(f"adaptive_max_pool1d() argument 'output_size' should contain one int "
                           f"(got {len(sizes)})")
    out = adaptive_max_pool2d(x.unsqueeze(-2), (1, sizes[0]), return_indices)
    return tuple(r.squeeze(-2) for r in out) if return_indices else out.squeeze(-2)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """The maximum of each adaptive window of (N, C, H, W) or (C, H, W), as
    ``torch.nn.functional.adaptive_max_pool2d``; with ``return_indices`` also the flat
    ``h W + w`` index of each maximum within its plane."""
    return _adaptive_max("adaptive_max_pool2d", input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):
    """The maximum of each adaptive window of (N, C, D, H, W) or (C, D, H, W), as
    ``torch.nn.functional.adaptive_max_pool3d``; with ``return_indices`` also the flat
    ``(d H + h) W + w`` index of each maximum within its volume."""
    return _adaptive_max("adaptive_max_pool3d", input, output_size, return_indices, 3)
