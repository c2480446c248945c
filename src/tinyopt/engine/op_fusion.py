"""Fusion: a plan compiles a rewritten copy of the forward graph in which a chain of ops that one
kernel can do is one node (a convolution and the ReLU after it, say).  An optimization only: the
fused node computes the same values in the same order of operations as the chain, and its backward
rule the same gradients.

The rewrite happens once, when a plan is compiled (a cached plan is reused without it), on a copy:
the user's graph is never changed, and the leaves stay the same objects, so the plan binds them as
usual.  A rule may swallow a node only when nothing else reads that node's value -- no other
consumer in the graph and not a requested output -- so every value someone asked for is still
computed.

A rule is registered per op, beside the op (``engine/ops/conv.py`` registers ReLU-after-conv2d):
``rule(t, uses) -> Tensor | None`` gets the copy of a node whose sources are already rewritten and
``uses(s)``, the number of nodes that read source ``s`` in the forward graph (a large number when
``s`` is a requested output, or not a node of this graph); it returns the node to use instead of
``t``, or None to keep ``t``.
"""

from __future__ import annotations

from collections.abc import Callable

from tinyopt.engine.tensor import LEAF_OPS, Tensor, make_node

Rule = Callable[[Tensor, Callable[[Tensor], bool]], "Tensor | None"]
RULES: dict[str, list[Rule]] = {}


def fusion_rule(op: str):
    """Register ``rule`` (see the module docstring) for nodes of ``op``."""
    def register(rule: Rule) -> Rule:
        RULES.setdefault(op, []).append(rule)
        return rule
    return register


def fuse(fwd: list[Tensor], outputs: list[Tensor], loss: Tensor | None
         ) -> tuple[list[Tensor], list[Tensor], Tensor | None]:
    """The forward graph ``fwd`` (topologically sorted) with the registered rules applied: its new
    node list (sorted; the same leaves), and the nodes that now stand for ``outputs`` and
    ``loss``.  Without a rule that applies, the graph itself."""
    if not any(t.op in RULES for t in fwd):
        return fwd, outputs, loss
    uses: dict[int, int] = {}
    for t in fwd:
        for s in t.srcs:
            uses[id(s)] = uses.get(id(s), 0) + 1
    wanted = {id(t) for t in outputs} | ({id(loss)} if loss is not None else set())
    new: dict[int, Tensor] = {}     # id(original) -> its copy
    original: dict[int, Tensor] = {}  # id(copy) -> the original

    def readers(s: Tensor) -> int:
        t = original.get(id(s))
        if t is None or id(t) in wanted:
            return 1 << 30
        return uses.get(id(t), 0)

    changed = False
    for t in fwd:
        if t.op in LEAF_OPS:
            new[id(t)] = t
            continue
        c = make_node(t.op, tuple(new[id(s)] for s in t.srcs), t.attrs, t.shape, t.dtype,
                  t.requires_grad)
        original[id(c)] = t
        for rule in RULES.get(t.op, ()):
            f = rule(c, readers)
            if f is not None:
                c, changed = f, True
                original[id(c)] = t
                break
        new[id(t)] = c
    if not changed:
        return fwd, outputs, loss
    from tinyopt.engine.graph import toposort
    outs = [new[id(t)] for t in outputs]
    lo = new[id(loss)] if loss is not None else None
    return toposort(outs + ([lo] if lo is not None else [])), outs, lo
