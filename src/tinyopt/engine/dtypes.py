"""The dtypes tinyopt tensors may have, their torch names, and torch's type promotion.

A dtype is a numpy dtype (``to.float32 == np.dtype("float32")``), so arrays and tensors compare
dtypes directly.  Floats default to float32, integers to int64, as in PyTorch.

uint16, uint32 and uint64 are torch 2.13's "shell" dtypes: tensors of them can be made, cast,
viewed, indexed, compared for equality, multiplied and summed, and every other op raises torch's
NotImplementedError (``engine/op.py``); they promote with floats only (with another integer or
bool dtype torch raises, and so does ``promote``).

Promotion (``result_type``) follows torch, not numpy: operands are ranked by *category* (bool <
integer < floating) and by *kind of operand* (a tensor with dimensions > a 0-d tensor > a Python
number).  The result takes the highest category present; within it, the dtype of the highest kind
of operand of that category (``float32 tensor + float64 0-d tensor`` is float32, ``int32 tensor +
1.5`` is float32, ``int32 tensor + int64 0-d tensor`` is int32).  Python floats are float32 (the
default dtype) when they decide the category, Python ints int64.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
int32 = np.dtype(np.int32)
int16 = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)

float16 = np.dtype(np.float16)

SHELL = (uint16, uint32, uint64)
"""torch 2.13's unsigned dtypes with few ops (see the module docstring)."""
SUPPORTED = (float32, float64, int64, int32, int16, int8, uint8, bool_) + SHELL
FLOATS = (float32, float64)
INTEGERS = (int64, int32, int16, int8, uint8) + SHELL
LOW = [float16]
"""The 16-bit float storage types (``docs/low_precision.md``); bfloat16, the dtype of the optional
ml_dtypes package, joins on first use, so ``import tinyopt`` does not import ml_dtypes."""

# the torch names of each dtype (``torch.float``, ``torch.long``...)
ALIASES = {"float32": float32, "float": float32, "float64": float64, "double": float64,
           "int64": int64, "long": int64, "int32": int32, "int": int32, "int16": int16,
           "short": int16, "int8": int8, "uint8": uint8, "bool": bool_, "uint16": uint16,
           "uint32": uint32, "uint64": uint64}
_TORCH_NAME = {float32: "float32", float64: "float64", int64: "int64", int32: "int32",
               int16: "int16", int8: "int8", uint8: "uint8", bool_: "bool", float16: "float16",
               uint16: "uint16", uint32: "uint32", uint64: "uint64"}
_TENSOR_TYPE = {float32: "FloatTensor", float64: "DoubleTensor", int64: "LongTensor",
                int32: "IntTensor", int16: "ShortTensor", int8: "CharTensor",
                uint8: "ByteTensor", bool_: "BoolTensor", float16: "HalfTensor",
                uint16: "UInt16Tensor", uint32: "UInt32Tensor", uint64: "UInt64Tensor"}
_SCALAR_TYPE = {float32: "Float", float64: "Double", int64: "Long", int32: "Int", int16: "Short",
                int8: "Char", uint8: "Byte", bool_: "Bool", float16: "Half", uint16: "UInt16",
                uint32: "UInt32", uint64: "UInt64"}
_LOW_PRECISION = {"float16": float16, "half": float16}


def scalar_type_name(dtype: np.dtype) -> str:
    """``"UInt32"``: the name torch's C++ errors give ``dtype``."""
    return _SCALAR_TYPE.get(dtype, "BFloat16")


_NEEDS_ML_DTYPES = ("bfloat16 needs the ml_dtypes package: pip install ml_dtypes (or "
                    "tinyopt[lowp], the lowp extra)")


def bfloat16() -> np.dtype:
    """The bfloat16 dtype (``ml_dtypes.bfloat16``), importing ml_dtypes on first use."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(_NEEDS_ML_DTYPES) from None
    return _register(np.dtype(ml_dtypes.bfloat16))


class UnavailableDtype:
    """``to.bfloat16`` where ml_dtypes is not installed.  The name exists, prints as torch's,
    hashes and compares (unequal to every dtype), so a script that builds a dtype table at
    start-up still runs in float32; *using* it (a tensor, a cast, ``np.dtype``) raises the
    error that says what to install."""

    __slots__ = ()
    is_floating_point = True
    is_signed = True
    itemsize = 2

    def __repr__(self) -> str:
        return "torch.bfloat16"

    @property
    def dtype(self):  # numpy asks this of any object it is to read as a dtype
        raise TypeError(_NEEDS_ML_DTYPES)


def bfloat16_or_name() -> np.dtype | UnavailableDtype:
    """``to.bfloat16``: the dtype, or its name alone where ml_dtypes is missing."""
    try:
        return bfloat16()
    except TypeError:
        return _UNAVAILABLE_BFLOAT16


_UNAVAILABLE_BFLOAT16 = UnavailableDtype()


def _register(d: np.dtype) -> np.dtype:
    if d not in LOW:
        LOW.append(d)
        _TORCH_NAME[d] = "bfloat16"
        _TENSOR_TYPE[d] = "BFloat16Tensor"
    return d


def is_low(d: np.dtype) -> bool:
    """Whether ``d`` is float16 or bfloat16."""
    try:
        return _IS_LOW[d]
    except KeyError:  # (``dtype.name`` is a Python property: a third of an eager ``x[i] += 1``)
        low = _IS_LOW[d] = d in LOW or (d.name == "bfloat16" and _register(d) is d)
        return low


_IS_LOW: dict[np.dtype, bool] = {}


def is_float(d: np.dtype) -> bool:
    """Whether ``d`` is a floating-point dtype: float32, float64, float16 or bfloat16."""
    return d in FLOATS or is_low(d)


def grad_dtype(d: np.dtype) -> np.dtype:
    """The dtype of the gradient of a tensor of dtype ``d``: float32 for float16 and bfloat16
    (their gradients are not rounded; ``docs/low_precision.md``), ``d`` otherwise."""
    return float32 if is_low(d) else d


def as_dtype(dtype) -> np.dtype:
    """Normalise ``dtype`` (numpy dtype or type, a name such as ``"float32"`` or ``"long"``, or a
    Python type ``float``/``int``/``bool``) to one of the supported numpy dtypes."""
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
        if name in ALIASES:
            return ALIASES[name]
        if name in _LOW_PRECISION:
            return _LOW_PRECISION[name]
        if name == "bfloat16":
            return bfloat16()
    elif dtype is float:
        return float64  # as torch: ``dtype=float`` is float64
    elif dtype is int:
        return int64
    elif dtype is bool:
        return bool_
    elif isinstance(dtype, UnavailableDtype):
        return bfloat16()  # (raises: what to install)
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unsupported dtype {dtype!r}") from None
    if d not in SUPPORTED and not is_low(d):
        raise TypeError(f"unsupported dtype {d}; tinyopt tensors are "
                        f"{', '.join(_TORCH_NAME.values())}")
    return d


def torch_name(dtype: np.dtype) -> str:
    """``"torch.float32"``: how PyTorch prints the dtype."""
    return "torch." + _TORCH_NAME.get(dtype, str(dtype))


def tensor_type_name(dtype: np.dtype) -> str:
    """``"torch.FloatTensor"``: what ``Tensor.type()`` returns."""
    return "torch." + _TENSOR_TYPE[dtype]


def tensor_type_dtype(name: str) -> np.dtype | None:
    """The dtype of a legacy type name such as ``"torch.LongTensor"`` (None if it is not one)."""
    short = name.removeprefix("torch.")
    for d, n in _TENSOR_TYPE.items():
        if n == short:
            return d
    return None


def default_dtype_for(arr: np.ndarray) -> np.dtype:
    """The dtype a new tensor made from ``arr`` gets when none is given (PyTorch's rules)."""
    d = arr.dtype
    if d in SUPPORTED or is_low(d):
        return d
    kind = d.kind
    if kind == "f":
        return float64 if d.itemsize > 4 else float32
    if kind in "iu":
        return int64
    raise TypeError(f"cannot make a tensor from an array of dtype {d}")


def category(dtype: np.dtype) -> int:
    """0 for bool, 1 for integers, 2 for floats: the order of torch's type promotion."""
    return 2 if dtype.kind == "f" or is_low(dtype) else 0 if dtype.kind == "b" else 1


def scalar_dtype(value) -> np.dtype:
    """The dtype torch gives a Python number standing alone (``tensor(1.5)`` is float32)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, numbers.Integral):
        return int64
    if isinstance(value, numbers.Real):
        return float32
    raise TypeError(f"unsupported scalar {value!r} of type {type(value).__name__} (complex "
                    f"numbers are not supported)")


def scalar_array(value, dtype: np.dtype) -> np.ndarray:
    """A Python number as a 0-d array of ``dtype``; an int outside an integer dtype's range wraps
    around, as torch's C cast of a scalar does (``uint8 tensor + -1`` adds 255; numpy refuses
    such a value)."""
    if type(value) is int and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            value = (value - info.min) % (1 << info.bits) + info.min
    return np.array(value, dtype=dtype)


def stored_scalar(value, dtype: np.dtype) -> np.ndarray:
    """A Python number stored into a tensor of ``dtype`` (``fill_``, ``full``, ``x[i] = v``,
    ``masked_fill``, ``index_fill``) as a 0-d array, with torch's checked conversion: a value the
    dtype cannot hold raises ("value cannot be converted to type uint8_t without overflow"),
    where arithmetic (``x + 300``) wraps (:func:`scalar_array`).  As torch's ``c10::overflows``:
    an int may wrap into an unsigned dtype by two's complement (uint8 takes -1 as 255, not -256);
    a float must lie within an integer dtype's range (NaN and inf never do); a finite value a
    float dtype cannot hold (beyond its largest finite value) overflows, an infinity or NaN
    does not."""
    if isinstance(value, (bool, np.bool_)) or dtype == bool_:
        return scalar_array(value, dtype)
    ok = True
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if isinstance(value, numbers.Integral):
            v = int(value)
            ok = info.min <= v <= info.max or dtype.kind == "u" and -info.max <= v < 0
        else:
            f = float(value)
            ok = info.min <= f <= info.max  # (False for NaN)
    elif dtype.kind in "fV" and dtype.itemsize < 8 and isinstance(value, numbers.Real):
        f = float(value)
        ok = not math.isfinite(f) or abs(f) <= _FLOAT_MAX.get(dtype, 3.3895313892515355e38)
    if not ok:
        name = _C_TYPE.get(dtype, "c10::BFloat16")
        raise RuntimeError(f"value cannot be converted to type {name} without overflow")
    return scalar_array(value, dtype)


_C_TYPE = {float32: "float", float64: "double", int64: "int64_t", int32: "int", int16: "int16_t",
           int8: "int8_t", uint8: "uint8_t", float16: "c10::Half", uint16: "uint16_t",
           uint32: "uint32_t", uint64: "uint64_t"}
"""The C++ type names torch's overflow errors give."""
_FLOAT_MAX = {float16: 65504.0, float32: float(np.finfo(np.float32).max)}  # (bfloat16: the default)


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch.promote_types for two dtypes of one kind of operand."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if (a in SHELL or b in SHELL) and ca < 2 and cb < 2:
        raise RuntimeError(f"Promotion for uint16, uint32, uint64 types is not supported, "
                           f"attempted to promote {scalar_type_name(a)} and "
                           f"{scalar_type_name(b)}")
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def result_type(*operands) -> np.dtype:
    """The dtype of an op over ``operands`` (tensors, arrays or Python numbers), by torch's rules
    (see the module docstring).  Tensors are anything with ``dtype`` and ``shape``."""
    best: list[np.dtype | None] = [None, None, None]  # per kind: dimensioned, 0-d, number
    for x in operands:
        if isinstance(x, (list, tuple)):  # data for a tensor, as ``tensor(x)`` would make it
            arr = np.asarray(x)
            x = arr.astype(np.float32) if arr.dtype == np.float64 else arr
        if hasattr(x, "dtype") and hasattr(x, "shape"):
            kind, d = (0 if len(x.shape) else 1), default_dtype_for(np.empty(0, x.dtype))
        else:
            kind, d = 2, scalar_dtype(x)
        best[kind] = d if best[kind] is None else promote(best[kind], d)
    top = max(category(d) for d in best if d is not None)
    for d in best:
        if d is not None and category(d) == top:
            return d
    raise AssertionError("unreachable")
