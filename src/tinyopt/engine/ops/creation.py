"""Tensors made from nothing: constants filled inside a plan, and eager factory functions."""

from __future__ import annotations

import numpy as np

from tinyopt.engine.dtypes import as_dtype, float32
from tinyopt.engine.op import defop, node
from tinyopt.engine.random import Generator, default_generator
from tinyopt.engine.tensor import Tensor, tensor

defop("full", forward=lambda t: (lambda out: out.fill(t.attrs[0])))


def full(shape, fill_value: float, dtype=float32) -> Tensor:
    """A graph node filled with ``fill_value`` when the plan runs (no input to bind)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return node("full", (), shape, as_dtype(dtype), (float(fill_value),))


def _shape(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(int(s) for s in size)


def zeros(*size, dtype=None) -> Tensor:
    return tensor(np.zeros(_shape(size), dtype=as_dtype(dtype or float32)))


def ones(*size, dtype=None) -> Tensor:
    return tensor(np.ones(_shape(size), dtype=as_dtype(dtype or float32)))


def arange(start, end=None, step=1, *, dtype=None) -> Tensor:
    if end is None:
        start, end = 0, start
    arr = np.arange(start, end, step)
    return tensor(arr, dtype=dtype)


def randn(*size, dtype=None, generator: Generator | None = None) -> Tensor:
    """Standard normal samples from the tinyopt generator (seeded by ``manual_seed``)."""
    rng = (generator or default_generator).numpy
    return tensor(rng.standard_normal(_shape(size)), dtype=dtype or float32)


def rand(*size, dtype=None, generator: Generator | None = None) -> Tensor:
    """Uniform samples on [0, 1) from the tinyopt generator."""
    rng = (generator or default_generator).numpy
    return tensor(rng.random(_shape(size)), dtype=dtype or float32)
