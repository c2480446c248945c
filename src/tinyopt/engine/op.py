"""The op table: for each op, how to compute a node (forward) and how to differentiate it (backward).

An op is registered once with :func:`defop`:

- ``forward(node) -> fn(out, *ins)``: called when a plan is compiled; returns a function that writes
  the node's value into the preallocated array ``out`` from the source arrays ``ins``.
- ``view(node) -> fn(*ins) -> ndarray``: instead of ``forward`` for ops whose result is a view of
  their first source (reshape, transpose, slicing...); the planner gives them no buffer of their own.
- ``backward(node, g) -> tuple[Tensor | None, ...]``: the vector-Jacobian product; given the
  gradient ``g`` of the loss with respect to ``node`` (a Tensor), returns graph nodes for the
  gradients with respect to each source (None where a source gets no gradient).  Gradients are
  graphs themselves, as in ggml, so they are planned and cached like the forward pass.
- ``inplace``: the output may reuse the buffer of source 0 when that source is dead afterwards
  (elementwise ops with equal shape and dtype).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tinyopt.engine.grad_mode import is_grad_enabled
from tinyopt.engine.tensor import Tensor


@dataclass(frozen=True, slots=True)
class OpDef:
    name: str
    forward: Callable | None
    backward: Callable | None
    view: Callable | None
    inplace: bool


OPS: dict[str, OpDef] = {}


def defop(name: str, *, forward: Callable | None = None, backward: Callable | None = None,
          view: Callable | None = None, inplace: bool = False) -> OpDef:
    """Register op ``name`` (see the module docstring)."""
    if (forward is None) == (view is None):
        raise ValueError(f"op {name}: give exactly one of forward and view")
    if name in OPS:
        raise ValueError(f"op {name} is already registered")
    op = OpDef(name, forward, backward, view, inplace)
    OPS[name] = op
    return op


def node(op: str, srcs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: np.dtype,
         attrs: tuple = ()) -> Tensor:
    """Record a new graph node; it requires grad when grad mode is on and any source does."""
    rg = False
    if OPS[op].backward is not None and is_grad_enabled():
        for s in srcs:  # a plain loop: graph building runs on every training step
            if s.requires_grad:
                rg = True
                break
    return Tensor(op, srcs, attrs, shape, dtype, rg)
