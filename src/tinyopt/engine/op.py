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
- ``aliases``: a view op that is a torch view (``reshape``, ``permute``, ``expand``, ``slice``,
  ``diagonal``, ``unfold``, ``as_strided``, ``alias``): its result shares its source's storage
  (``engine/storage.py``), so writes through it reach the source.  Other view ops (the parts of a
  multi-output node) are plumbing, not torch views.

:func:`node` records a node, or, when every source is concrete and no gradient is needed, runs
the op at once with the same forward (or view) function and returns a concrete tensor: eager
PyTorch semantics for values, the compiled plan for graphs over Parameters.

float16 and bfloat16 are storage types (``docs/low_precision.md``): an op over them (other than
a cast, a copy or a view) is recorded over its 16-bit sources widened to float32, computes in
float32, and its result is rounded to the 16-bit dtype, so forward kernels only ever see float32
(as torch's CPU kernels compute 16-bit ops).  Gradients of 16-bit tensors are float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tinyopt.engine import fpstate, grad_mode
from tinyopt.engine.dtypes import SHELL, float32, is_low, scalar_type_name, uint32, uint64
from tinyopt.engine.ops import load_all
from tinyopt.engine.storage import ViewStep, note_view
from tinyopt.engine.tensor import CONCRETE, Tensor, make_node, _root


@dataclass(frozen=True, slots=True)
class OpDef:
    name: str
    forward: Callable | None
    backward: Callable | None
    view: Callable | None
    inplace: bool
    aliases: bool
    # the elementwise kernel (``kernels.jit.ufunc``) its forward calls as ``kernel(*srcs,
    # out=out)`` for float operands and no attrs, so a plan can bind the call once
    # (``kernel.bound``); None for other ops
    elementwise: Callable | None = None


class _OpTable(dict):
    """``OPS[name]``; an op whose family is not imported yet (the families load on first use,
    ``tinyopt.engine.ops``) imports them all: a backward rule may record a node of another
    family's op by name."""

    def __missing__(self, name: str) -> OpDef:
        load_all()
        return dict.__getitem__(self, name)


OPS: dict[str, OpDef] = _OpTable()

_tuple_new = tuple.__new__  # (``_tuple_new(ViewStep, fields)``: without its __new__'s frame)


def defop(name: str, *, forward: Callable | None = None, backward: Callable | None = None,
          view: Callable | None = None, inplace: bool = False, aliases: bool = False,
          elementwise: Callable | None = None) -> OpDef:
    """Register op ``name`` (see the module docstring)."""
    if (forward is None) == (view is None):
        raise ValueError(f"op {name}: give exactly one of forward and view")
    if aliases and view is None:
        raise ValueError(f"op {name}: only a view op can alias its source")
    if name in OPS:
        raise ValueError(f"op {name} is already registered")
    op = OpDef(name, forward, backward, view, inplace, aliases, elementwise)
    OPS[name] = op
    return op


# op -> a rule giving ``prev + g`` as one node when ``g``, a fresh gradient contribution of that
# op, can be added into ``prev`` as it is computed (None: the plain sum); see ``accumulate``
ACCUMULATE: dict[str, Callable[[Tensor, Tensor], "Tensor | None"]] = {}


def accumulate_rule(op: str):
    """Register an accumulate rule for gradient contributions of ``op`` (see ``accumulate``)."""
    def register(rule):
        ACCUMULATE[op] = rule
        return rule
    return register


def accumulate(prev: Tensor, g: Tensor) -> Tensor:
    """The sum of two gradient contributions to one tensor: ``prev + g``, or one node of the
    contribution's op that adds into ``prev`` where a rule gives the same bits with one buffer
    fewer (``embedding_grad``: a tied embedding).  IEEE addition is commutative, so ``g + prev``
    is the same value: either side may be the one accumulated into."""
    for a, b in ((prev, g), (g, prev)):
        rule = ACCUMULATE.get(b.op)
        if rule is not None:
            t = rule(a, b)
            if t is not None:
                return t
    return prev + g


def node(op: str, srcs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: np.dtype,
         attrs: tuple = ()) -> Tensor:
    """Record a new graph node; it requires grad when grad mode is on and any source does.  Over
    concrete sources, with no gradient to record, the op runs now (see the module docstring)."""
    state = grad_mode.current
    opdef = OPS[op]
    rg = False
    concrete = state.fold
    # cheap first tests (numpy's dtypes are singletons): a 16-bit float, or uint16/32/64
    half = dtype.itemsize == 2
    unsigned = dtype is uint32 or dtype is uint64
    for s in srcs:  # a plain loop: graph building runs on every training step
        if s.requires_grad:
            rg = True
        if s.op not in CONCRETE:
            concrete = False
        if s.dtype.itemsize == 2:
            half = True
        elif s.dtype is uint32 or s.dtype is uint64:
            unsigned = True
    if (half or unsigned) and opdef.view is None and op not in _SHELL_OPS and (
            dtype in SHELL or any(s.dtype in SHELL for s in srcs)):
        _refuse_shell(op, dtype, srcs)
    if half and opdef.view is None and op not in _STORES and (
            is_low(dtype) or any(is_low(s.dtype) for s in srcs)):
        return _in_float32(op, srcs, shape, dtype, attrs)
    rg = rg and state.enabled and opdef.backward is not None
    t = make_node(op, srcs, attrs, shape, dtype, rg)
    if opdef.aliases:
        if rg and srcs[0].op == "rebased_multi_view":  # (torch: its grad_fn cannot be made)
            raise RuntimeError(srcs[0].attrs[0])
        step = _tuple_new(ViewStep, (op, attrs, t.shape, dtype, srcs[1:]))  # (ViewStep(...))
        if concrete and not rg:
            _run_now(t, opdef)
            if getattr(t, "_base", None) is None:  # numpy had to copy: not a view
                return t
        note_view(t, srcs[0], step)
    elif concrete and not rg:
        _run_now(t, opdef)
    return t


def _views(value: np.ndarray, src: np.ndarray) -> bool:
    """Whether numpy made ``value`` a view of ``src`` (not a copy); an empty one has no memory
    to compare, so its chain of bases decides."""
    if np.may_share_memory(value, src):
        return True
    if value.size:
        return False
    b = value.base
    while b is not None:
        if b is src or b is src.base:
            return True
        b = b.base
    return False


def view_node(step: ViewStep, parent: Tensor, own: bool = False) -> Tensor:
    """``step`` replayed over ``parent`` (a node, or a concrete view when ``parent`` is concrete
    and no gradient is recorded), not recorded as a view: regenerating a view from a new base
    (``engine/inplace.py``) gives the view itself the result's place.  With ``own`` the result
    is a tensor of its own even when computed now (a reduction's result: torch's has no
    ``_base``), not one sharing ``parent``'s memory."""
    opdef = OPS[step.op]
    srcs = (parent,) + step.extras
    rg = parent.requires_grad and grad_mode.current.enabled and opdef.backward is not None
    t = make_node(step.op, srcs, step.attrs, step.shape, step.dtype, rg)
    if not rg and parent.op in CONCRETE and grad_mode.current.fold:
        _run_now(t, opdef, own)
    return t


def own_reshape(r: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``r``, a node an op made for itself or a view of one (never a user's tensor nor a view of
    one), reshaped to ``shape`` as the op's result: a tensor of its own, not a view of ``r``
    (torch's result has no ``_base``, and a view would cost a view record per call); ``r``
    itself when it is of that shape and not a view."""
    if r.shape == shape and _root(r) is r:
        return r
    return view_node(ViewStep("reshape", (shape,), shape, r.dtype, ()), r, own=True)


def view_array(steps: tuple[ViewStep, ...], arr: np.ndarray) -> np.ndarray:
    """The numpy view of ``arr`` that ``steps`` make (the extras are concrete)."""
    for step in steps:
        view = OPS[step.op].view
        assert view is not None, step.op
        arr = view(step)(arr, *[e.value for e in step.extras])
    return arr


_STORES = frozenset(("cast", "clone", "contiguous", "view_scatter"))
"""Ops that store 16-bit values as they are (the views do too)."""

_SHELL_OPS = _STORES | frozenset((
    "mul", "eq", "ne", "bitwise_and", "bitwise_or", "bitwise_xor", "where", "cat", "stack",
    "index", "setitem", "repeat", "roll", "tile", "floor", "ceil", "round", "trunc", "full",
    "any", "all", "gather", "argsort"))
"""What torch 2.13 computes on uint16/32/64 tensors on the CPU, besides views and casts (its
other kernels are not built for them: ``dtypes.SHELL``)."""

_SHELL_KERNEL = {"add": "add_stub", "sub": "add_stub", "neg": "neg_cpu", "abs": "abs_cpu",
                 "pow": "pow", "square": "pow", "floor_divide": "div_floor_cpu",
                 "div_trunc": "div_trunc_cpu", "relu": "clamp_min_scalar_cpu",
                 "clamp": "clamp_scalar_cpu", "max_vals": "max_cpu", "max_idx": "argmax_cpu",
                 "min_vals": "min_cpu", "min_idx": "argmin_cpu", "max_all": "max_all",
                 "min_all": "min_all", "masked_fill": "masked_fill", "gather": "take_cpu"}


def refuse_unsigned(kernel: str, *tensors) -> None:
    """torch's NotImplementedError naming ``kernel`` if any of ``tensors`` is uint16/32/64: for
    the functions whose nodes are ones torch allows (``gather`` for ``topk``, ``where`` for
    ``masked_fill``...) or that compute at once."""
    for t in tensors:
        if getattr(t, "dtype", None) in SHELL:
            raise NotImplementedError(f'"{kernel}" not implemented for '
                                      f"'{scalar_type_name(t.dtype)}'")


def _refuse_shell(op: str, dtype: np.dtype, srcs: tuple[Tensor, ...]) -> None:
    """torch's NotImplementedError for an op its CPU kernels do not build for uint16/32/64."""
    d = next((s.dtype for s in srcs if s.dtype in SHELL), dtype)
    kernel = _SHELL_KERNEL.get(op, op.removesuffix("_run") + "_cpu")
    raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(d)}\'')


def _in_float32(op: str, srcs: tuple[Tensor, ...], shape: tuple[int, ...], dtype: np.dtype,
                attrs: tuple) -> Tensor:
    """Op ``op`` over 16-bit sources: computed in float32, its result rounded to ``dtype``."""
    wide = tuple(node("cast", (s,), s.shape, float32, (float32.char,)) if is_low(s.dtype) else s
                 for s in srcs)
    if not is_low(dtype):
        return node(op, wide, shape, dtype, attrs)
    return node("cast", (node(op, wide, shape, float32, attrs),), shape, dtype, (dtype.char,))


def _run_now(t: Tensor, opdef: OpDef, own: bool = False) -> None:
    """Compute ``t`` from its concrete sources and make it concrete (a view shares its source's
    storage, unless ``own``: see ``view_node``)."""
    arrays = [s.value for s in t.srcs]
    if opdef.view is not None:
        value = opdef.view(t)(*arrays)
        base = (_root(t.srcs[0]) if t.srcs and not own and _views(value, arrays[0])
                else None)
    else:
        value = np.empty(t.shape, t.dtype)
        token = fpstate.quiet()  # NaN/inf compute silently, as in PyTorch
        try:
            opdef.forward(t)(value, *arrays)
        finally:
            fpstate.restore(token)
        base = None
    t.op = "input"
    t.srcs = ()
    t.attrs = ()
    t.value = value
    if base is not None:
        t._base = base
