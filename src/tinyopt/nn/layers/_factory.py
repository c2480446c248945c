"""The ``device=``/``dtype=`` factory arguments every layer constructor takes, as in PyTorch."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import FLOATS, as_dtype, float32, is_low


def param_dtype(device, dtype) -> np.dtype:
    """The numpy dtype of a new layer's parameters: float32 unless ``dtype`` says otherwise.

    The only device is the CPU; anything else raises a ValueError naming it.
    """
    if device is not None and str(device).split(":")[0] != "cpu":
        raise ValueError(f"tinyopt runs on the CPU only; got device {device!r}")
    if dtype is None:
        return float32
    d = as_dtype(dtype)
    if d not in FLOATS and not is_low(d):  # (float16, bfloat16: docs/low_precision.md)
        raise TypeError(f"layer parameters must be floating point, got dtype {d}")
    return d


def pair(v, name: str) -> tuple[int, int]:
    """An int or a 2-sequence of ints as a 2-tuple (``_pair`` in PyTorch), validated."""
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(t) != 2 or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                              for i in t):
        raise TypeError(f"{name} must be an int or a tuple of 2 ints, got {v!r}")
    return int(t[0]), int(t[1])
