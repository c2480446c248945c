"""Giving the C heap's free pages back to the system after a big eager run.

numpy allocates through C's malloc.  glibc serves an array below its mmap threshold from the
heap, and raises that threshold (up to 32 MiB) each time it unmaps a freed larger array, so the
arrays a big eager run frees as it goes (activations of every size) end up on a heap that keeps
their pages while anything lives above them.  GPT-2 small's eager first step left 0.5 GB there,
under the optimizer's state and then the compiled plan's arena: the process's peak
(``benchmarks/bench_gpt.py``: 3.25 GB, 2.95 GB trimmed; torch: 2.99).  So a big eager run
(``eager.BIG_BYTES``) ends with :func:`trim_heap` (a few ms, once per big run).
"""

from __future__ import annotations

import ctypes

_TRIM: list = []  # [glibc's malloc_trim, or None where the C library has none]


def trim_heap() -> None:
    """``malloc_trim(0)`` where the C library has it (glibc); nothing elsewhere."""
    if not _TRIM:
        _TRIM.append(getattr(ctypes.CDLL(None), "malloc_trim", None))
    if _TRIM[0] is not None:
        _TRIM[0](0)
