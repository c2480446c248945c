"""The parameter arena: layers allocate their parameters end to end, from their creation.

An optimizer (or DDP, ZeRO, an averaged model) works on a group of parameters as one flat index
space.  Their storage is never moved there (``engine/slot.py``), but when the parameters of a
group already lie end to end in one array, that array *is* the group's flat parameter buffer:
algorithms that treat the group as one vector (LBFGS, Adafactor's kernel, ZeRO's allgather,
``AveragedModel``'s single averaging call) then read and write it in place instead of through a
copy, and the optimizer's flat buffers keep one distance (mod 4 KiB) to the parameters, which
``optim/flat.py`` staggers against 4K aliasing (SGD with momentum over 200 separately allocated
tensors of 50k elements, all 16 bytes past a page: 34 ms a step against 28 ms from here, on the
loaded 2-core VM).  So a Parameter made from an array (``Parameter(np.empty(shape))``, as every
layer of ``tinyopt.nn`` makes its own) copies it into storage from here (:func:`empty`):
consecutive parameters of one dtype are consecutive in memory, and ``model.parameters()`` of a
model built layer by layer is usually one run.

A chunk is a plain numpy array; each parameter's storage is a view of it, so a chunk is freed
when its last parameter is.  A parameter that does not fit the current chunk starts a new one
(of ``CHUNK_BYTES``, or twice its size when larger), which breaks the run: nothing depends on a
run, it only saves copies.
"""

from __future__ import annotations

import numpy as np

CHUNK_BYTES = 1 << 22
"""Bytes of the first chunk of a dtype; each next one is twice the previous (up to
``MAX_GROWN``), or twice the parameter that did not fit, so a big model takes a few runs."""

MAX_GROWN = 1 << 28

_ALIGN = 64  # a chunk's start (a cache line); parameters inside follow each other unpadded

_current: dict[np.dtype, list] = {}  # dtype -> [chunk (uint8), bytes used]


def empty(shape: tuple[int, ...] | int, dtype: np.dtype | type | str) -> np.ndarray:
    """An uninitialized C-contiguous array for a parameter's storage, placed right after the
    previous one of the same dtype when it fits."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = n * dtype.itemsize
    entry = _current.get(dtype)
    if entry is None or entry[1] + nbytes > entry[0].size:
        grown = 0 if entry is None else min(2 * entry[0].size, MAX_GROWN)
        size = max(CHUNK_BYTES, 2 * nbytes, grown)
        raw = np.empty(size + _ALIGN, dtype=np.uint8)
        start = -raw.ctypes.data % _ALIGN
        entry = _current[dtype] = [raw[start:start + size], 0]
    chunk, used = entry
    entry[1] = used + nbytes
    return chunk[used:used + nbytes].view(dtype).reshape(shape)
