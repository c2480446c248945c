"""Ops with several results, on a graph whose nodes have one output each.

A fused op (a recurrent layer, attention) computes several arrays at once and keeps more for its
backward pass.  Its node writes them all into one flat *workspace*; a :class:`Layout` names the
parts (offsets into the flat buffer), and :func:`region` views pick the results out.  The gradient
of a region is one pass (zeros around the block), and a backward rule attached to a view of the
part a user can see gets a gradient only as large as that part::

    L = Layout([("out", (N, E)), ("probs", (N, S))])
    ws = node("my_op", srcs, (L.size,), dtype)         # the kernel writes every part
    y = region(ws, L.offset("out"), L.shape("out"))
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import Tensor


class Layout:
    """Named parts of a flat buffer, in order: ``offset(name)``, ``shape(name)``, ``size``."""

    def __init__(self, parts: list[tuple[str, tuple[int, ...]]]):
        self._parts: dict[str, tuple[int, tuple[int, ...]]] = {}
        off = 0
        for name, shape in parts:
            self._parts[name] = (off, tuple(shape))
            off += math.prod(shape)
        self.size = off

    def __contains__(self, name: str) -> bool:
        return name in self._parts

    def offset(self, name: str) -> int:
        return self._parts[name][0]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._parts[name][1]

    def views(self, arr: np.ndarray) -> dict[str, np.ndarray]:
        """Each part of the flat array ``arr`` as an array of its shape (views, no copies)."""
        flat = arr.reshape(-1)
        return {name: flat[off:off + math.prod(shape)].reshape(shape)
                for name, (off, shape) in self._parts.items()}

    def region(self, x: Tensor, name: str) -> Tensor:
        """Part ``name`` of the flat tensor ``x`` (see :func:`region`)."""
        return region(x, self.offset(name), self.shape(name))


def _region_view(t):
    off, n = t.attrs[0], math.prod(t.shape)
    return lambda x: x.reshape(-1)[off:off + n].reshape(t.shape)


def _region_grad_forward(t):
    off, n = t.attrs[0], math.prod(t.srcs[0].shape)

    def fwd(out, g):
        flat = out.reshape(-1)
        flat[:off] = 0
        flat[off:off + n] = g.reshape(-1)
        flat[off + n:] = 0
    return fwd


defop("region", view=_region_view, backward=lambda t, g: (
    node("region_grad", (g,), t.srcs[0].shape, g.dtype, t.attrs),))
defop("region_grad", forward=_region_grad_forward)


def region(x: Tensor, off: int, shape: tuple[int, ...]) -> Tensor:
    """The contiguous block of the (contiguous) tensor ``x`` starting at flat element ``off``,
    as a view of ``shape``."""
    if off < 0 or off + math.prod(shape) > x.numel():
        raise ValueError(f"region: [{off}, {off + math.prod(shape)}) is outside a tensor of "
                         f"{x.numel()} elements")
    return node("region", (x,), tuple(shape), x.dtype, (int(off),))
