"""``to.finfo`` and ``to.iinfo``: the numeric limits of a dtype, with PyTorch's attribute names.

    eps = to.finfo(x.dtype).eps          # 1.1920929e-07 for float32
    logits.clamp(min=to.finfo(logits.dtype).min)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyopt.engine.dtypes import FLOATS, INTEGERS, as_dtype, float32


class finfo:
    """Limits of a floating-point dtype (``torch.finfo``); ``finfo()`` is the default dtype's.

    ``bits``, ``eps`` (the gap between 1.0 and the next value), ``max``, ``min`` (the most
    negative finite value), ``tiny``/``smallest_normal`` (the smallest positive normal value),
    ``resolution`` (10 ** -decimal digits) and ``dtype`` (its name, as in torch).
    """

    bits: int
    eps: float
    max: float
    min: float
    tiny: float
    smallest_normal: float
    resolution: float
    dtype: str

    def __init__(self, type: Any = None) -> None:
        d = float32 if type is None else as_dtype(type)
        if d not in FLOATS:
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        info = np.finfo(d)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)  # exact decimal, as torch (not float32)
        self.dtype = d.name

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype (``torch.iinfo``): ``bits``, ``max``, ``min``, ``dtype``."""

    bits: int
    max: int
    min: int
    dtype: str

    def __init__(self, type: Any) -> None:
        d = as_dtype(type)
        if d.kind == "b":
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if d not in INTEGERS:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to "
                            "handle 'torch.iinfo'")
        info = np.iinfo(d)
        self.bits, self.max, self.min, self.dtype = int(info.bits), int(info.max), \
            int(info.min), d.name

    def __repr__(self) -> str:
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"
