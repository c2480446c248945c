"""The dtypes tinyopt tensors may have: float32 (the default for floats), float64 and int64."""

from __future__ import annotations

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)

SUPPORTED = (float32, float64, int64)
FLOATS = (float32, float64)


def as_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (numpy dtype, type or name) to one of the supported numpy dtypes."""
    d = np.dtype(dtype)
    if d not in SUPPORTED:
        raise TypeError(f"unsupported dtype {d}; tinyopt tensors are float32, float64 or int64")
    return d


def default_dtype_for(arr: np.ndarray) -> np.dtype:
    """The dtype a new tensor made from ``arr`` gets when none is given (PyTorch's rules)."""
    kind = arr.dtype.kind
    if kind == "f":
        return float64 if arr.dtype == np.float64 else float32
    if kind in "iub":
        return int64
    raise TypeError(f"cannot make a tensor from an array of dtype {arr.dtype}")
