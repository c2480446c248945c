"""Gather and scatter along the middle axis of ``(A, R, B)`` views, with every index checked.

``idx`` holds int64 positions along R.  A position outside [0, R) is never read or written:
the kernel stops and sets ``bad[0]`` to the offending position's flat number (-1 when all are
valid), so the caller raises PyTorch's error.

- ``gather_axis(x, idx, out, bad)``: out[a, k, b] = x[a, idx[a, k, b], b].
- ``scatter_add_axis(src, idx, out, bad)``: out[a, idx[a, k, b], b] += src[a, k, b].
- ``scatter_axis(src, idx, out, bad)``: out[a, idx[a, k, b], b] = src[a, k, b] (the last write
  wins on repeated positions).
- ``index_add_axis(src, idx, out, bad)``: out[a, idx[k], b] += src[a, k, b] (one index per slice,
  as ``index_add`` and the gradient of ``index_select``/``x[idx]``).

Any dtype numba handles; C-contiguous or strided views.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel


@kernel
def gather_axis(x, idx, out, bad):
    A, R, B = x.shape
    K = idx.shape[1]
    bad[0] = -1
    for a in range(A):
        for k in range(K):
            for b in range(B):
                i = idx[a, k, b]
                if i < 0 or i >= R:
                    bad[0] = (a * K + k) * B + b
                    return
                out[a, k, b] = x[a, i, b]


@kernel
def scatter_add_axis(src, idx, out, bad):
    A, R, B = out.shape
    K = idx.shape[1]
    bad[0] = -1
    for a in range(A):
        for k in range(K):
            for b in range(B):
                i = idx[a, k, b]
                if i < 0 or i >= R:
                    bad[0] = (a * K + k) * B + b
                    return
                out[a, i, b] += src[a, k, b]


@kernel
def scatter_axis(src, idx, out, bad):
    A, R, B = out.shape
    K = idx.shape[1]
    bad[0] = -1
    for a in range(A):
        for k in range(K):
            for b in range(B):
                i = idx[a, k, b]
                if i < 0 or i >= R:
                    bad[0] = (a * K + k) * B + b
                    return
                out[a, i, b] = src[a, k, b]


@kernel
def index_add_axis(src, idx, out, bad):
    A, R, B = out.shape
    K = idx.shape[0]
    bad[0] = -1
    for k in range(K):
        i = idx[k]
        if i < -R or i >= R:
            bad[0] = k
            return
    for a in range(A):
        for k in range(K):
            i = idx[k]
            if i < 0:
                i += R
            for b in range(B):
                out[a, i, b] += src[a, k, b]
