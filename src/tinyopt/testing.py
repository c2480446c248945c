"""``torch.testing.assert_close``: tensors (or numbers, arrays, and containers of them) equal up
to PyTorch's default tolerances for their dtype, with its error messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["assert_allclose", "assert_close"]

# rtol, atol by dtype name: PyTorch's defaults (integers and bools: exact)
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5),
               "complex128": (1e-7, 1e-7)}


def _array(x: Any) -> tuple[np.ndarray, str, str]:
    """(values, dtype name, kind: "tensor" / "array" / "number")."""
    if hasattr(x, "numpy") and hasattr(x, "dtype") and type(x).__module__.startswith("tinyopt"):
        arr = np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy())
        return arr, arr.dtype.name, "tensor"
    if isinstance(x, np.ndarray):
        return x, x.dtype.name, "array"
    arr = np.asarray(x)
    name = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}.get(
        type(x), arr.dtype.name)
    return arr, name, "number"


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True,
                 rtol: float | None = None, atol: float | None = None, equal_nan: bool = False,
                 check_device: bool = True, check_dtype: bool = True, check_layout: bool = True,
                 check_stride: bool = False, msg: str | Callable[[str], str] | None = None
                 ) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` match: same shape (and dtype,
    with ``check_dtype``), and |actual - expected| <= atol + rtol |expected| elementwise."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if set(actual) != set(expected):
            _fail(f"The keys of the mappings do not match: {sorted(map(str, actual))} != "
                  f"{sorted(map(str, expected))}.", msg)
        for k in expected:
            assert_close(actual[k], expected[k], rtol=rtol, atol=atol, equal_nan=equal_nan,
                         check_dtype=check_dtype, msg=msg)
        return
    if isinstance(expected, Sequence) and not isinstance(expected, str) and \
            isinstance(actual, Sequence) and not isinstance(actual, str):
        if len(actual) != len(expected):
            _fail(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", msg)
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan,
                         check_dtype=check_dtype, msg=msg)
        return
    a, adt, _ = _array(actual)
    e, edt, _ = _array(expected)
    if a.shape != e.shape:
        _fail(f"The values for attribute 'shape' do not match: torch.Size({list(a.shape)}) != "
              f"torch.Size({list(e.shape)}).", msg)
    if check_dtype and adt != edt:
        _fail(f"The values for attribute 'dtype' do not match: torch.{adt} != torch.{edt}.", msg)
    if rtol is None:
        rtol, atol = max(_TOLERANCES.get(adt, (0.0, 0.0)), _TOLERANCES.get(edt, (0.0, 0.0)))
    af, ef = a.astype(np.float64) if a.dtype.kind != "c" else a, \
        e.astype(np.float64) if e.dtype.kind != "c" else e
    with np.errstate(invalid="ignore"):
        close = np.isclose(af, ef, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.all():
        return
    bad = int((~close).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(af - ef)
        rel = diff / np.abs(ef)
    diff = np.where(np.isnan(diff), -np.inf, diff)
    rel = np.where(np.isnan(rel), -np.inf, rel)
    ia = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
    ir = np.unravel_index(int(np.argmax(rel)), rel.shape) if rel.ndim else ()
    kind = "Tensor-likes" if a.ndim or e.ndim else "Scalars"
    lines = [f"{kind} are not close!", "",
             f"Mismatched elements: {bad} / {close.size} ({100.0 * bad / close.size:.1f}%)",
             f"Greatest absolute difference: {float(diff[ia]) if diff.ndim else float(diff)} at "
             f"index {tuple(int(i) for i in ia)} (up to {atol} allowed)",
             f"Greatest relative difference: {float(rel[ir]) if rel.ndim else float(rel)} at "
             f"index {tuple(int(i) for i in ir)} (up to {rtol} allowed)"]
    _fail("\n".join(lines), msg)


def assert_allclose(actual: Any, expected: Any, rtol: float | None = None,
                    atol: float | None = None, equal_nan: bool = True,
                    msg: str = "") -> None:
    """The deprecated ``torch.testing.assert_allclose``: ``assert_close`` without the dtype
    check (``expected`` may be a number or a list), with PyTorch's FutureWarning."""
    import warnings
    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be removed "
                  "in a future release. Please use `torch.testing.assert_close()` instead. You "
                  "can find detailed upgrade instructions in "
                  "https://github.com/pytorch/pytorch/issues/61844.", FutureWarning, stacklevel=2)
    a = np.asarray(actual.numpy() if hasattr(actual, "numpy") else actual)
    e = np.broadcast_to(np.asarray(expected.numpy() if hasattr(expected, "numpy") else expected,
                                   dtype=a.dtype if a.dtype.kind in "fc" else None), a.shape)
    if rtol is None and atol is None:
        rtol, atol = _TOLERANCES.get(a.dtype.name, (0.0, 0.0))
    assert_close(a, np.array(e), rtol=rtol or 0.0, atol=atol or 0.0, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)


def _fail(text: str, msg: str | Callable[[str], str] | None) -> None:
    if msg is None:
        raise AssertionError(text)
    raise AssertionError(msg(text) if callable(msg) else msg)

