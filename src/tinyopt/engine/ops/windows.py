"""Window functions for spectral analysis (``torch.hann_window`` and the rest): 1-D tensors of
``window_length`` values, computed in float64 and rounded once to ``dtype``.

With N = window_length + 1 when ``periodic`` (the window then drops its last value, for use
with FFTs) and N = window_length otherwise, for n = 0 .. N - 1:

- hamming: alpha - beta cos(2 pi n / (N - 1)) (alpha = 0.54, beta = 0.46); hann: alpha = beta =
  1/2;
- blackman: 0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1));
- bartlett: 1 - |2 n / (N - 1) - 1|;
- kaiser: I0(beta sqrt(1 - ((n - m) / m)^2)) / I0(beta), m = (N - 1) / 2 (I0: the modified
  Bessel function of order 0).

A window of length 1 is [1]; of length 0, empty.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tinyopt.engine.dtypes import FLOATS, as_dtype, float32
from tinyopt.engine.ops.creation import new_leaf

__all__ = ["bartlett_window", "blackman_window", "hamming_window", "hann_window",
           "kaiser_window"]


def _window(name: str, window_length: int, periodic: bool, dtype, device, requires_grad: bool,
            formula: Callable[[np.ndarray, int], np.ndarray]) -> object:
    d = as_dtype(dtype or float32)
    if d not in FLOATS:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {d}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={window_length}")
    if window_length <= 1:
        return new_leaf(np.ones(window_length, d), device, requires_grad)
    n_points = window_length + 1 if periodic else window_length
    values = formula(np.arange(n_points, dtype=np.float64), n_points)[:window_length]
    return new_leaf(values.astype(d), device, requires_grad)


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54,
                   beta: float = 0.46, *, dtype=None, layout=None, device=None,
                   requires_grad: bool = False):
    """The Hamming window (see the module docstring)."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, N: alpha - beta * np.cos(2 * np.pi * n / (N - 1)))


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None,
                device=None, requires_grad: bool = False):
    """The Hann window: 1/2 - 1/2 cos(2 pi n / (N - 1))."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, N: 0.5 - 0.5 * np.cos(2 * np.pi * n / (N - 1)))


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None,
                    device=None, requires_grad: bool = False):
    """The Blackman window (see the module docstring)."""
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, N: 0.42 - 0.5 * np.cos(2 * np.pi * n / (N - 1))
                   + 0.08 * np.cos(4 * np.pi * n / (N - 1)))


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None,
                    device=None, requires_grad: bool = False):
    """The Bartlett (triangular) window: 1 - |2 n / (N - 1) - 1|."""
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, N: 1 - np.abs(2 * n / (N - 1) - 1))


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None,
                  layout=None, device=None, requires_grad: bool = False):
    """The Kaiser window (see the module docstring)."""
    def formula(n: np.ndarray, N: int) -> np.ndarray:
        m = (N - 1) / 2
        return np.i0(beta * np.sqrt(np.maximum(1 - ((n - m) / m) ** 2, 0.0))) / np.i0(beta)
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   formula)
