"""What each op saves for its backward pass, as torch's ``derivatives.yaml`` says, so that
backpropagating through a node whose saved value was written in place since raises torch's
error (``graph.check_saved``) exactly where torch does.

tinyopt's graphs are values: a node built before an in-place write keeps reading the version it
was built from (``engine/inplace.py``), so it could still compute the right gradient.  torch
cannot, and raises "one of the variables needed for gradient computation has been modified by
an inplace operation"; a program that runs under tinyopt must run under torch, so tinyopt raises
too, for the values torch saves:

- ops that save their *output* (``exp``, ``tanh``, ``sigmoid``, ``sqrt``, ``relu``, softmax...):
  a write into the output's memory after the op invalidates it;
- ops that save nothing (sums, views, copies, ``add``/``sub``, indexing): nothing does;
- ``mul``, ``div`` and the matrix products save an operand only when another needs a gradient;
- ``logsumexp``, ``prod``, the vector norms, ``amax``/``amin`` and ``median`` save their source
  and their output;
- every other op saves its floating-point sources (torch's usual formulas need them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinyopt.engine.tensor import Tensor

OUTPUT = frozenset("exp expm1 tanh sigmoid sqrt rsqrt relu reciprocal softmax_run "
                   "log_softmax_run".split())
"""Ops whose backward reads their output."""

NOTHING = frozenset("""add sub neg sum_run cast clone contiguous cat reshape permute expand slice
    diagonal unfold as_strided alias rebased_multi_view view_scatter setitem index gather
    gather_rows embedding flip roll tril triu sign floor ceil round trunc floor_divide cumsum
    where region rnn_out attention_out attention_weights conv2d_pool_values""".split())
"""Ops whose backward reads no floating-point value (shapes and integer indices only)."""

_SOURCE_AND_OUTPUT = frozenset(("logsumexp_run", "prod_run", "vector_norm", "shared_value"))

_PRODUCTS = frozenset(("mul", "matmul", "linear", "einsum"))


def saved(t: Tensor) -> list[Tensor]:
    """The tensors node ``t`` saves for its backward pass (``t`` itself for its output)."""
    op = t.op
    if op in NOTHING:
        return []
    if op in OUTPUT:
        return [t]
    srcs = t.srcs
    if op in _SOURCE_AND_OUTPUT:  # (torch's formula reads both)
        return [srcs[0], t]
    if op in _PRODUCTS and len(srcs) >= 2:  # each of the first two when the other needs a grad
        a, b = srcs[0], srcs[1]
        return [s for s, other in ((a, b), (b, a)) if other.requires_grad]
    if op == "div" and len(srcs) == 2:  # d/da = g / b; d/db = -g a / b^2
        a, b = srcs
        return ([b] if a.requires_grad or b.requires_grad else []) + ([a] if b.requires_grad
                                                                      else [])
    return [s for s in srcs if s.dtype.kind == "f" or s.dtype.itemsize == 2]
