"""Graphviz export of a graph (``ggml_graph_dump_dot``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tinyopt.engine.graph import backward_graph, toposort
from tinyopt.engine.tensor import LEAF_OPS, Parameter, Tensor


def _parameter_names(names: Any) -> dict[int, str]:
    """{id(parameter): name} from a module (anything with ``named_parameters()``) or a mapping."""
    if names is None:
        return {}
    if callable(getattr(names, "named_parameters", None)):
        items = names.named_parameters(remove_duplicate=False)
    elif isinstance(names, Mapping):
        items = names.items()
    else:
        raise TypeError(f"to_dot: names must be a Module or a mapping of names to tensors, got "
                        f"{type(names).__name__}")
    out: dict[int, str] = {}
    for name, p in items:
        out.setdefault(id(p), name)  # a shared parameter keeps its first name
    return out


def to_dot(tensor: Tensor, path: str | os.PathLike | None = None, *,
           backward: bool | None = None, names: Any = None) -> str:
    """DOT text of the graph reaching ``tensor``; written to ``path`` when given.

    Nodes are labelled with op, shape, dtype and name; parameters are green boxes labelled by their
    names in ``names`` (a Module, e.g. the model: ``1.weight``, or a mapping of names to
    parameters; else the tensor's own ``name``), inputs grey boxes, the output is bold.  With
    ``backward`` (default: when ``tensor`` is a scalar that requires grad) the gradient graph is
    drawn too, its nodes in red, with dashed edges into each parameter's gradient.
    """
    named = _parameter_names(names)
    fwd = toposort([tensor])
    if backward is None:
        backward = tensor.requires_grad and tensor.numel() == 1
    roots = [tensor]
    grads: dict[int, Tensor] = {}
    if backward:
        params = [t for t in fwd if isinstance(t, Parameter) and t.requires_grad]
        grads = backward_graph(tensor, fwd, params)
        roots += list(grads.values())
    nodes = toposort(roots)
    fwd_ids = {id(t) for t in fwd}
    index = {id(t): i for i, t in enumerate(nodes)}
    lines = ["digraph G {", "  newrank = true;", "  rankdir = TB;"]
    for i, t in enumerate(nodes):
        label = f"{t.op}\\n{list(t.shape)} {t.dtype}"
        name = named.get(id(t)) or t.name
        if name:
            label = f"{name}\\n" + label
        if isinstance(t, Parameter):
            style = 'shape=box, style=filled, fillcolor="#c8f0c8"'
        elif t.op in LEAF_OPS:
            style = 'shape=box, style=filled, fillcolor="#e0e0e0"'
        elif id(t) in fwd_ids:
            style = "shape=ellipse"
        else:
            style = 'shape=ellipse, color="#d04040"'
        if t is tensor:
            style += ", penwidth=2"
        lines.append(f'  n{i} [label="{label}", {style}];')
    for i, t in enumerate(nodes):
        for s in t.srcs:
            lines.append(f"  n{index[id(s)]} -> n{i};")
    for t in fwd:
        g = grads.get(id(t))
        if g is not None:
            lines.append(f'  n{index[id(g)]} -> n{index[id(t)]} [style=dashed, label="grad"];')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text
