"""Kernels run with numpy's floating-point warnings off, as PyTorch computes NaN and inf silently.

numpy checks the CPU's floating-point flags after every ufunc loop, numba-compiled kernels too,
and prints ``RuntimeWarning: invalid value encountered in relu`` when a NaN passed through an
ordered comparison (or ``divide by zero`` for log1p(-1)).  The values are right; the warnings are
noise a PyTorch user never sees.  So a plan run and an eagerly computed op set numpy's error state
to "ignore" around their kernels (a context variable: per thread, the caller's state restored)::

    token = fpstate.quiet()
    try:
        run_the_kernels()
    finally:
        fpstate.restore(token)

``np.errstate(all="ignore")`` does the same, at ~10-40x the cost of a small kernel call (it builds
the error-state object on every entry; measured 12-37 us vs 0.5 us on the shared 2-core
machine), which every eager op would pay; here the object is built once per caller state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # numpy >= 2: the error state is a context variable holding an "extobj"
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
except ImportError:  # pragma: no cover - another numpy layout: the public, slower way
    _extobj_contextvar = None

_QUIET: dict[Any, Any] = {}  # the caller's extobj -> the same with every error ignored


def quiet() -> Any:
    """Turn numpy's floating-point warnings off in this context; returns the token to restore."""
    if _extobj_contextvar is None:  # pragma: no cover
        state = np.errstate(all="ignore")
        state.__enter__()
        return state
    current = _extobj_contextvar.get()
    q = _QUIET.get(current)
    if q is None:
        if len(_QUIET) > 64:  # callers changing their error state in a loop: stay bounded
            _QUIET.clear()
        q = _QUIET[current] = _make_extobj(all="ignore")
    return _extobj_contextvar.set(q)


def restore(token: Any) -> None:
    """Put back the error state ``quiet()`` replaced."""
    if _extobj_contextvar is None:  # pragma: no cover
        token.__exit__(None, None, None)
        return
    _extobj_contextvar.reset(token)
