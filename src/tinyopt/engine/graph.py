"""Graphs: topological order, structural signatures and reverse-mode autodiff.

``toposort`` is ``ggml_build_forward_expand``: every node after its sources, each node once (in
creation order, so the same code builds the same order on every step).  The signature of a graph
captures everything a compiled plan depends on (ops, attributes, shapes, dtypes, wiring, which
leaves are parameters and which are inputs) and nothing it does not (the values of the leaves), so
a new batch of the same shape finds the same plan.
"""

from __future__ import annotations

from operator import attrgetter

from tinyopt.engine.grad_mode import no_grad
from tinyopt.engine.op import OPS
from tinyopt.engine.tensor import Tensor


def toposort(roots: list[Tensor]) -> list[Tensor]:
    """All nodes reaching ``roots``, sources before consumers: by creation order, which every
    source precedes its consumers in."""
    return toposort_signed(roots)[0]


def signature(nodes: list[Tensor]) -> tuple:
    """The structural key of a topologically sorted graph (see the module docstring)."""
    index = {id(t): i for i, t in enumerate(nodes)}
    return tuple((t.op, t.attrs, t.shape, t.dtype.char, t.requires_grad,
                  tuple(index[id(s)] for s in t.srcs)) for t in nodes)


def toposort_signed(roots: list[Tensor]) -> tuple[list[Tensor], dict[int, int], tuple]:
    """``toposort(roots)``, each node's position in it (keyed by ``id``) and its ``signature``:
    realizing a graph needs all three on every training step."""
    seen: dict[int, Tensor] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        if id(t) not in seen:
            seen[id(t)] = t
            stack.extend(t.srcs)
    order = sorted(seen.values(), key=_creation)
    index = {id(t): i for i, t in enumerate(order)}
    sig = tuple([(t.op, t.attrs, t.shape, t.dtype.char, t.requires_grad,
                  tuple([index[id(s)] for s in t.srcs])) for t in order])
    return order, index, sig


_creation = attrgetter("_id")


def use_counts(nodes: list[Tensor]) -> dict[int, int]:
    """How many times each node is used as a source (ggml's ``n_children``), keyed by ``id``."""
    counts = {id(t): 0 for t in nodes}
    for t in nodes:
        for s in t.srcs:
            counts[id(s)] += 1
    return counts


def backward_graph(loss: Tensor, nodes: list[Tensor], wrt: list[Tensor],
                   seed: Tensor | None = None) -> dict[int, Tensor]:
    """Build the gradient graph of ``loss`` with respect to each tensor in ``wrt``.

    ``nodes`` is the topological order of the graph reaching ``loss``.  Walks it in reverse, as
    micrograd does, calling each op's backward rule; the rules emit ordinary graph nodes, reusing
    the forward nodes they need.  Returns ``{id(t): grad}`` for the ``wrt`` tensors that ``loss``
    depends on.
    """
    from tinyopt.engine.ops.creation import full

    with no_grad():
        grads: dict[int, Tensor] = {id(loss): seed if seed is not None else
                                    full(loss.shape, 1.0, loss.dtype)}
        for t in reversed(nodes):
            g = grads.get(id(t))
            if g is None or t.is_leaf or not t.requires_grad:
                continue
            rule = OPS[t.op].backward
            src_grads = rule(t, g)
            for s, gs in zip(t.srcs, src_grads):
                if gs is None or not s.requires_grad:
                    continue
                if gs.shape != s.shape:
                    raise AssertionError(f"backward of {t.op} gave a gradient of shape {gs.shape} "
                                         f"for a source of shape {s.shape}")
                prev = grads.get(id(s))
                grads[id(s)] = gs if prev is None else prev + gs
    return {id(t): grads[id(t)] for t in wrt if id(t) in grads}
