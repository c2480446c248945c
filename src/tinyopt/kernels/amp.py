"""Gradient unscaling for mixed precision (``tinyopt.amp.GradScaler``), one call per flat buffer.

``unscale(g, seg, chunk_seg, chunk, flags, inv_scale) -> int``: over a flat gradient buffer laid
out as ``kernels/optim.py`` describes (``g`` float32 or float64, 1-d, C-contiguous; parameter
``j`` at ``[seg[j], seg[j+1])``, skipped where ``flags[j] == 0``, i.e. its grad is None)::

    found <- found or any(g_i is inf or NaN)
    g_i   <- g_i * inv_scale          (not written at all when inv_scale == 1)

in the buffer's dtype (``inv_scale`` already rounded to float32 by the caller, as
``torch._amp_foreach_non_finite_check_and_unscale_`` takes it), returning the number of
non-finite elements: detection and unscaling are one pass over the gradients.
"""

from __future__ import annotations

from tinyopt.kernels.jit import parallel_kernel, prange


@parallel_kernel(sized_by=0)
def unscale(g, seg, chunk_seg, chunk, flags, inv_scale):
    n = g.shape[0]
    scale = inv_scale != 1.0
    found = 0
    for ci in prange(chunk_seg.shape[0]):
        start = ci * chunk
        end = min(start + chunk, n)
        j = chunk_seg[ci]
        i0 = start
        bad = 0
        while i0 < end:
            e = min(seg[j + 1], end)
            if flags[j] != 0:
                gs = g[i0:e]
                for i in range(e - i0):
                    v = gs[i]
                    bad += (v - v) != 0  # inf - inf and NaN - NaN are NaN
                if scale:
                    for i in range(e - i0):
                        gs[i] = gs[i] * inv_scale
            i0 = e
            j += 1
        found += bad
    return found
