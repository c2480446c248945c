"""Storage: the memory a base tensor and all its views share, as torch has it.

A tensor made by a view op (``x[1:3]``, ``x.view(-1)``, ``x.t()``, ``x.diagonal()``, ``x.unfold``,
``x.as_strided``, ``x.detach()``...) is a window onto its *base* (the tensor that owns the memory;
the base of a view of a view is the first one's base).  The base and its views share one
:class:`Storage`, which holds what torch keeps per storage:

- ``version``: torch's version counter (``t._version``), bumped by every in-place write through
  the base or any view (``detach()`` aliases included; a ``.data`` alias counts its own);
- ``base``: the tensor owning the memory;
- ``views()``: the views still alive (held weakly), each with its :class:`ViewInfo`: how it is
  made from the base (a chain of :class:`ViewStep`, one per view op) and how it was created
  (torch's ``CreationMeta``: in grad mode, under ``no_grad``, by a multi-output function such as
  ``unbind``/``split``, or as a ``detach()``/``.data`` alias that autograd does not see through).

Concrete tensors share the memory itself (numpy views), so a write without autograd is a plain
numpy write into the base's array.  A write *with* autograd is recorded the way torch's
functionalization records it (``engine/inplace.py``): the view's new value is
scattered into the base by a ``view_scatter`` node (torch's ``slice_scatter``/``select_scatter``/
``as_strided_scatter``; its gradient is ``g`` with the view's elements zeroed for the base and the
view of ``g`` for the new value), the base becomes that node, and every live view is regenerated
from the new base by replaying its :class:`ViewStep` chain.  Views of graph nodes are recorded
the same way, so the model holds whether tensors are values or nodes; a training step pays for
it only where it makes or writes views.

Example::

    >>> import tinyopt as to
    >>> x = to.tensor([[1., 2.], [3., 4.]], requires_grad=True)
    >>> y = x * 1.0
    >>> y[0].mul_(10)                  # a write through a view of y...
    tensor([10., 20.], grad_fn=<SliceBackward0>)
    >>> y.sum().backward()             # ...is a write to y, differentiated
    >>> x.grad.tolist(), y._version
    ([[10.0, 10.0], [1.0, 1.0]], 1)
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from tinyopt.engine import grad_mode

if TYPE_CHECKING:
    from tinyopt.engine.tensor import Tensor


class ViewStep(NamedTuple):
    """One view op applied to a parent: what a graph node of that op holds (``op``, ``attrs``,
    ``shape``, ``dtype``) and its extra sources (a slice's run-time starts), so the step can be
    replayed over another parent (``OPS[op].view(step)`` takes it in place of a node)."""
    op: str
    attrs: tuple
    shape: tuple[int, ...]
    dtype: Any
    extras: tuple


DEFAULT, NO_GRAD, MULTI = "default", "no_grad", "multi"
"""How a view was created (torch's ``CreationMeta``): in grad mode; under ``no_grad`` (writing
it in place with grad mode on raises); by a function returning several views (``unbind``,
``split``, ``chunk``: writing it in place with autograd raises)."""

ALIAS, DATA = "detach", "data"
"""The aliases autograd does not see through: ``detach()`` (it shares the memory and the version
counter, and a write into it changes the base's values but not the base's gradient) and
``.data`` (the same, with a version counter of its own, so its writes invalidate nothing:
torch's "unsafe" ``.data``).  For autograd, an alias and its views have the alias as their
base."""


class ViewInfo(NamedTuple):
    """How a view is made from its base: ``steps`` from the base to it; ``creation`` (one of
    :data:`DEFAULT`, :data:`NO_GRAD`, :data:`MULTI`) and for a multi-output view ``name``, the
    output as torch's errors say it (``"Output 0 of Split"``); ``alias`` (:data:`ALIAS` or
    :data:`DATA`, or ``""``) when the chain passes through an alias, and for a ``.data`` alias
    and its views ``counter``, the version counter they share; ``alias_at``, how many of
    ``steps`` lead to the (last) alias: more steps make a view *of* the alias."""
    steps: tuple[ViewStep, ...]
    creation: str = DEFAULT
    name: str = ""
    alias: str = ""
    counter: Storage | None = None
    alias_at: int = 0


class Storage:
    """The storage a base tensor shares with its views (see the module docstring).

    Attributes: ``version`` (int, torch's version counter), ``base`` (the tensor owning the
    memory, or None once it is gone) and :meth:`views` (the live views).
    ``engine.inplace.relocate`` moves the memory."""

    __slots__ = ("_base", "version", "_views", "_stamps", "__weakref__")

    def __init__(self, base: Tensor, version: int = 0) -> None:
        self._base = weakref.ref(base)
        self.version = version
        self._views: list[weakref.ref] = []
        self._stamps: list[int] = []  # the engine's clock at the latest writes (a bounded tail)

    @property
    def base(self) -> Tensor | None:
        return self._base()

    def views(self) -> list[Tensor]:
        """The views of this storage still alive, oldest first."""
        alive = [t for t in (r() for r in self._views)
                 if t is not None and getattr(t, "view_info", None) is not None]
        if len(alive) < len(self._views):
            self._views = [weakref.ref(t) for t in alive]
        return alive

    def add_view(self, view: Tensor) -> None:
        """Record ``view`` as a live view of this storage (held weakly)."""
        self._views.append(weakref.ref(view))
        if len(self._views) > 64 and len(self._views) & (len(self._views) - 1) == 0:
            self.views()  # prune dead views now and then (at 128, 256, ... entries)

    def bump(self, stamp: int) -> int:
        """Count one in-place write made at ``stamp`` (the engine's clock: tensor ids); the new
        version."""
        self.version += 1
        self._stamps.append(stamp)
        if len(self._stamps) > 256:
            del self._stamps[:128]
        return self.version

    def version_at(self, stamp: int) -> int:
        """The version the storage had at ``stamp``: what a node made then saw."""
        return self.version - sum(1 for s in self._stamps if s > stamp)

    def written_since(self, stamp: int) -> bool:
        """Whether an in-place write reached this storage after ``stamp``."""
        return bool(self._stamps) and self._stamps[-1] > stamp

    def __repr__(self) -> str:
        return f"Storage(version={self.version}, views={len(self.views())})"


def storage_of(t: Tensor) -> Storage:
    """The storage ``t`` shares with its base and views (made on first need: a tensor that is
    never viewed nor written in place has none)."""
    s = getattr(t, "shared_storage", None)
    if s is None:
        base = getattr(t, "_base", None)
        root = t if base is None else base
        s = getattr(root, "shared_storage", None)
        if s is None:
            s = root.shared_storage = Storage(root)
        t.shared_storage = s
    return s


def note_view(t: Tensor, parent: Tensor, step: ViewStep | None, alias: str = "") -> None:
    """Record that ``t`` is ``step`` applied to ``parent``, so it shares ``parent``'s storage;
    or, with ``alias`` (:data:`ALIAS`, :data:`DATA`) and no step, that ``t`` aliases all of it.
    Its creation follows torch's rule: a view of a ``no_grad`` or multi-output view is one too;
    else grad mode decides."""
    info = getattr(parent, "view_info", None)
    if info is None and step is not None and not alias:
        # the common case, a view of a tensor that is not one (``x[i]``, ``h.view(1, -1)``: a
        # CRF sentence makes ~200), as below without the inheritance: ~0.55 us against ~0.9
        base = getattr(parent, "_base", None)
        root = t._base = parent if base is None else base
        s = getattr(root, "shared_storage", None)
        if s is None:
            s = storage_of(root)
        t.shared_storage = s
        t.view_info = _tuple_new(ViewInfo, ((step,), DEFAULT if grad_mode.current.enabled
                                            else NO_GRAD, "", "", None, 0))
        s.add_view(t)
        return
    steps = () if info is None else info.steps
    if step is not None:
        steps = steps + (step,)
    creation, name = DEFAULT if grad_mode.current.enabled else NO_GRAD, ""
    inherited, counter = ("", None) if info is None else (info.alias, info.counter)
    alias_at = 0 if info is None else info.alias_at
    if alias:
        creation = DEFAULT  # (an alias is a leaf of its own for autograd)
        alias_at = len(steps)
        if alias == DATA:
            counter = Storage(t)
        inherited = inherited or alias
    elif info is not None and info.creation != DEFAULT:
        creation = info.creation
        if creation == MULTI:  # torch names the last view op: "Output 0 of Select"
            name = f"Output 0 of {_torch_name(step)}"
    base = getattr(parent, "_base", None)
    t._base = parent if base is None else base
    s = storage_of(t._base)
    t.shared_storage = s
    t.view_info = ViewInfo(steps, creation, name, inherited, counter, alias_at)
    s.add_view(t)


_tuple_new = tuple.__new__
"""``_tuple_new(ViewInfo, fields)``: a named tuple made without its ``__new__``'s Python frame
(all fields given, in order)."""


def version_counter(t: Tensor) -> Storage:
    """The storage whose version ``t._version`` shows and its in-place writes bump: its own
    storage's, or a ``.data`` alias's own counter."""
    info = getattr(t, "view_info", None)
    if info is not None and info.counter is not None:
        return info.counter
    return storage_of(t)


def _torch_name(step: ViewStep | None) -> str:
    if step is None:
        return "View"
    if step.op == "slice" and any(e[0] == "i" for e in step.attrs[0]):
        return "Select"
    return _TORCH_NAMES.get(step.op, "View")


_TORCH_NAMES = {"slice": "Slice", "reshape": "View", "permute": "Permute", "expand": "Expand",
                "diagonal": "Diagonal", "unfold": "Unfold", "as_strided": "AsStrided"}
"""The names of torch's view functions, for its errors about views of multi-output views."""
