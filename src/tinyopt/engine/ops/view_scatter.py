"""Writes through views as graph ops: ``view_scatter`` and ``alias`` (``engine/inplace.py``).

``view_scatter(base, src, *extras)`` is ``base`` with the elements that a chain of view ops
selects replaced by ``src`` (torch's ``slice_scatter``, ``select_scatter``, ``diagonal_scatter``
and ``as_strided_scatter`` in one op): attrs ``(steps, through, overlap)``, where ``steps`` are
the view ops ``(op, attrs, shape, dtype, n_extras)`` from the base to the view, ``extras`` their
extra sources (a slice's run-time starts), ``overlap`` whether the view's elements share memory
(torch writes one value into an expanded view, but cannot differentiate that write).  With ``V``
the view and ``through``:

    out = base;  V(out) = src
    d/dbase = g with V(g) = 0        d/dsrc = V(g)

Without ``through`` (a write autograd does not see: ``no_grad``, ``detach()``, ``.data``) the
gradient passes to ``base`` whole and ``src`` gets none.

``alias(x)`` is ``x`` itself, a view with no gradient: a ``detach()`` alias regenerated over a new
base.  ``rebased_multi_view(x)`` is ``x`` too, but backpropagating through it raises torch's
error: it is a multi-output view (``unbind``, ``split``) regenerated after a write to its base.
"""

from __future__ import annotations

import numpy as np

from tinyopt.engine.inplace import OVERLAP
from tinyopt.engine.op import OPS, defop, node, view_node
from tinyopt.engine.ops.creation import constant_node
from tinyopt.engine.storage import ViewStep


def _steps(t) -> list[tuple[ViewStep, int]]:
    metas = t.attrs[0]
    return [(ViewStep(op, attrs, shape, dtype, ()), n) for op, attrs, shape, dtype, n in metas]


def _view_scatter_forward(t):
    chain = [(OPS[step.op].view(step), n) for step, n in _steps(t)]

    def fwd(out, base, src, *extras):
        if not (out.ctypes.data == base.ctypes.data and out.strides == base.strides):
            np.copyto(out, base)  # (the planner may give ``out`` base's dead buffer)
        region, k = out, 0
        for view, n in chain:
            region = view(region, *extras[k:k + n])
            k += n
        region[...] = src
    return fwd


def _view_scatter_backward(t, g):
    base, src, *extras = t.srcs
    through = t.attrs[1]
    if t.attrs[2] and through and base.requires_grad:
        raise RuntimeError(OVERLAP)
    gb = gs = None
    if base.requires_grad:
        gb = g
        if through:
            zero = constant_node(src.shape, 0, g.dtype)
            gb = node("view_scatter", (g, zero, *extras), g.shape, g.dtype, t.attrs)
    if through and src.requires_grad:
        gs, k = g, 0
        for step, n in _steps(t):
            gs = view_node(step._replace(dtype=g.dtype, extras=tuple(extras[k:k + n])), gs)
            k += n
    return (gb, gs) + (None,) * len(extras)


defop("view_scatter", forward=_view_scatter_forward, backward=_view_scatter_backward,
      inplace=True)
defop("alias", view=lambda t: (lambda x: x), aliases=True)


def _rebased_backward(t, g):
    raise RuntimeError(t.attrs[0])


defop("rebased_multi_view", view=lambda t: (lambda x: x), backward=_rebased_backward)
