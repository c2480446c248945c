"""The dtypes tinyopt tensors may have: float32 (the default for floats), float64 and int64, and
the 16-bit storage floats float16 and bfloat16.

float16 and bfloat16 are storage types (see ``docs/low_precision.md``): kernels widen them
exactly to float32 to compute.  bfloat16 is the numpy dtype of the optional ``ml_dtypes``
package (``pip install tinyopt[lowp]``), imported on first use so ``import tinyopt`` stays fast.
"""

from __future__ import annotations

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
float16 = np.dtype(np.float16)

SUPPORTED = [float32, float64, int64, float16]
FLOATS = (float32, float64)
LOW = [float16]
"""The 16-bit float storage dtypes; bfloat16 joins (and SUPPORTED) once it is first used."""


def bfloat16() -> np.dtype:
    """The bfloat16 numpy dtype (``ml_dtypes.bfloat16``), importing ml_dtypes on first use."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 needs the ml_dtypes package: pip install ml_dtypes (or "
                        "tinyopt[lowp])") from None
    return _register(np.dtype(ml_dtypes.bfloat16))


def _register(d: np.dtype) -> np.dtype:
    if d not in LOW:
        LOW.append(d)
        SUPPORTED.append(d)
    return d


def is_low(d: np.dtype) -> bool:
    """Whether ``d`` is float16 or bfloat16."""
    return d in LOW or (d.name == "bfloat16" and _register(d) is d)


def grad_dtype(d: np.dtype) -> np.dtype:
    """The dtype of a gradient of a tensor of dtype ``d``: float32 for the 16-bit floats (their
    gradients are not rounded: see ``docs/low_precision.md``), ``d`` otherwise."""
    return float32 if is_low(d) else d


def as_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (numpy dtype, type or name) to one of the supported numpy dtypes."""
    if isinstance(dtype, str) and dtype.removeprefix("torch.") == "bfloat16":
        return bfloat16()
    if isinstance(dtype, str) and dtype.removeprefix("torch.") == "half":
        return float16
    d = np.dtype(dtype)
    if d not in SUPPORTED and not is_low(d):
        raise TypeError(f"unsupported dtype {d}; tinyopt tensors are float32, float64, int64, "
                        f"float16 or bfloat16")
    return d


def default_dtype_for(arr: np.ndarray) -> np.dtype:
    """The dtype a new tensor made from ``arr`` gets when none is given (PyTorch's rules)."""
    d = arr.dtype
    if d == float64 or d == float32 or is_low(d):
        return d
    kind = d.kind
    if kind == "f":
        return float32
    if kind in "iub":
        return int64
    raise TypeError(f"cannot make a tensor from an array of dtype {arr.dtype}")
