"""Node: the engine's graph-node protocol, the fields every engine module reads on a tensor.

:class:`~tinyopt.engine.tensor.Tensor` inherits it (``class Tensor(Node, TensorMethods)``); the
torch-facing fields (``shape``, ``dtype``, ``requires_grad``, ``name``, ``grad``, ``_base``...)
stay on Tensor, under torch's names.  These fields are what ggml's ``ggml_tensor`` makes public
(``op``, ``src``, ``data``, ``view_src``/``view_offs``) and tinygrad's ``Tensor.uop``: the graph
as the engine builds, plans and replays it.  They are not torch API: read them (to inspect a
graph, or in an engine extension); assigning them is the engine's job (``engine/op.py`` makes
nodes, ``engine/inplace.py`` rewrites them on in-place writes, ``engine/realize.py`` fills
``value``).

Example::

    >>> import tinyopt as to
    >>> w = to.nn.Parameter(to.ones(2))
    >>> y = w * 3.0
    >>> y.op, [s.op for s in y.srcs], y.srcs[0] is w, y.value is None   # a graph node
    ('mul', ['param', 'input'], True, True)
    >>> y.tolist(), y.value                       # realized when read: the value is kept
    ([3.0, 3.0], array([3., 3.], dtype=float32))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinyopt.engine.storage import Storage, ViewInfo
    from tinyopt.engine.tensor import Tensor


class Node:
    """A node of the engine's graph, the base of every Tensor: the engine's node protocol.

    These fields are not torch API (``torch.Tensor`` has none of these names): read them to
    inspect a graph; only the engine assigns them.

    Always set (``engine/tensor.py``'s ``make_node``):

    - ``op``: the op that makes this node (``engine/op.py``'s table), or a leaf's kind:
      ``"input"`` (a concrete value), ``"param"`` (a Parameter), ``"freed"`` (a value whose graph
      ``backward()`` freed).
    - ``srcs``: the nodes this one is computed from, in the op's order.
    - ``attrs``: the op's non-tensor arguments (axes, scalars, flags), hashable.
    - ``value``: the realized numpy array (a concrete tensor's array, a Parameter's storage);
      None for a graph node not computed yet.
    - ``node_id``: the creation stamp (a global counter): orders nodes, and is renewed when an
      in-place autograd write makes this tensor a new node.

    Set only where they apply (``make_node`` sets ``view_info`` and ``shared_storage`` to None on
    the nodes it makes; other tensors may leave any of these unset: read them with
    ``getattr(t, name, None)``):

    - ``view_info``: for a view, its :class:`~tinyopt.engine.storage.ViewInfo` (how it is made
      from its base, how it was created).
    - ``shared_storage``: the :class:`~tinyopt.engine.storage.Storage` shared with the base and
      its views (made on first need).
    - ``prev_version``: the node this tensor was before its latest in-place autograd write
      (graph nodes built before the write keep reading it).
    - ``write_stamp``: the ``node_id``-clock stamp of the latest in-place write into this
      tensor's memory (``graph.check_versions``).
    - ``superseded_at``: on a version saved by an in-place write, the stamp of that write.
    """

    __slots__ = ("op", "srcs", "attrs", "value", "node_id", "view_info", "shared_storage",
                 "prev_version", "write_stamp", "superseded_at")

    op: str
    srcs: tuple[Tensor, ...]
    attrs: tuple
    value: Any
    node_id: int
    view_info: ViewInfo | None
    shared_storage: Storage | None
    prev_version: Tensor | None
    write_stamp: int
    superseded_at: int
