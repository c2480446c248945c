"""The backward pass of an eager run, computed straight into arrays: no backward graph is built.

A plan compiles autodiff's backward graph (``graph.backward_graph``: each op's rule builds
Tensor nodes through the public builders).  An eager run used to build that graph too, then sort
and run it, to use it once: about a quarter of a changing structure's time.  Here the tape is
the sorted forward graph and its values; walking it in reverse, each op's *array rule* computes
its sources' gradient contributions from the arrays, calling the kernels the nodes of its graph
rule would run, with the same operands in the same order, and contributions are summed in the
order ``backward_graph`` sums them (``prev + g``, the ``add`` kernel; a one-row linear layer's
weight and bias contributions are added into their sum by one kernel of the same rounding,
``kernels/grad_sum.py``).  So the bits are those of the planned gradient
(``tests/test_eager_grad.py`` compares them op by op, and ``tests/test_eager.py`` the whole
table).

Array rules exist for the ops of small, changing models: elementwise arithmetic and functions,
sums, views, ``cat``, softmax, logsumexp, the smooth L1 and Huber losses, ``linear``.  An op
without one (the LSTM's, embeddings, pow, casts, ...), or a rule that declines (another dtype to promote, an
attribute it does not handle), has its graph rule build its nodes over ``g`` as a concrete
tensor, and they run at once: the same nodes as in the backward graph, so the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import attrgetter

import numpy as np

from tinyopt.engine import autocast
from tinyopt.engine.dtypes import FLOATS
from tinyopt.engine.grad_mode import no_fold, no_grad
from tinyopt.engine.op import OPS
from tinyopt.engine.ops.reduce import dim_runs
from tinyopt.engine.tensor import LEAF_OPS, Tensor, leaf
from tinyopt.kernels import elementwise as K
from tinyopt.kernels.grad_sum import add_outer, add_row_sum
from tinyopt.kernels.linalg import outer
from tinyopt.kernels.reduce import sum_kernel

Rule = Callable[[Tensor, np.ndarray, dict], "tuple[np.ndarray | None, ...] | None"]
RULES: dict[str, Rule] = {}
"""op name -> ``rule(node, g, vals)``: the gradient contributions of the node's sources (None
for a source that needs none), from the node's gradient ``g`` and ``vals`` (``id(node) ->
array`` of the forward's nodes), or None when the rule does not apply (see the docstring)."""


def gradients(loss: Tensor, nodes: list[Tensor], vals: dict[int, np.ndarray],
              run: Callable[[list[Tensor]], None]) -> dict[int, np.ndarray] | None:
    """``{id(t): gradient of loss}`` for the nodes of the sorted graph ``nodes`` that require
    grad and that ``loss`` depends on, from the forward values ``vals``.  A node whose op has
    no array rule, or whose rule declines, gets its graph rule's nodes, run at once by
    ``run(sorted nodes)`` into ``vals`` (see :func:`_by_graph`).  None when the caller must
    build the whole backward graph instead (it raises what autodiff raises)."""
    seed = np.empty(loss.shape, loss.dtype)
    seed.fill(1.0)  # (the ``full`` node autodiff seeds with)
    grads: dict[int, np.ndarray] = {id(loss): seed}
    made: list[Tensor] = []  # the nodes graph rules made: alive while ``vals`` has their ids
    # the nodes whose gradient is a sum made below, an array no one else holds until the node's
    # rule hands it on: later contributions are added into it (a parameter read on every step
    # of an episode, as torch's autograd sums into its buffer), the same ``add`` on the same
    # values, one array fewer each
    summed: set[int] = set()
    for t in reversed(nodes):
        g = grads.get(id(t))
        if g is None or not t.requires_grad:
            continue
        op = t.op
        if op in LEAF_OPS:
            if op == "freed":  # (a second backward: the backward graph raises torch's error)
                return None
            continue
        rule = RULES.get(op)
        found = rule(t, g, vals) if rule is not None else None
        if found is None:
            found = _by_graph(t, g, vals, run, made)
        for s, gs in zip(t.srcs, found):
            if gs is None or not s.requires_grad:
                continue
            if gs.shape != s.shape:  # (as autodiff checks)
                raise AssertionError(f"backward of {op} gave a gradient of shape {gs.shape} for "
                                     f"a source of shape {s.shape}")
            k = id(s)
            prev = grads.get(k)
            if type(gs) is not np.ndarray:  # a one-row linear layer's, not computed yet
                if k in summed and gs.dtype == prev.dtype:
                    gs.add_into(prev)  # (one kernel call: the bits of the two below)
                    continue
                gs = gs.array()
            if prev is None:
                grads[k] = gs
            elif k in summed and gs.dtype == prev.dtype:
                call(K.add, prev, prev, gs)
            else:  # ``prev + gs``: the node ``accumulate`` builds for these contributions
                total = _binary(K.add, prev, gs)
                if total is None:
                    return None
                grads[k] = total
                summed.add(k)
    return grads


def _by_graph(t: Tensor, g: np.ndarray, vals: dict[int, np.ndarray],
              run: Callable[[list[Tensor]], None], made: list[Tensor]
              ) -> tuple[np.ndarray | None, ...]:
    """The gradient contributions of ``t``'s sources by its graph rule: the nodes autodiff
    would build for it, over ``g`` as a concrete tensor and the forward nodes (whose values
    are in ``vals``), run now in creation order and kept in ``made``."""
    with no_grad(), no_fold(), autocast.disabled():  # (as ``graph.backward_graph``)
        found = OPS[t.op].backward(t, leaf(g))
    order = new_nodes([x for x in found if x is not None], vals)
    made += order
    run(order)
    return tuple(None if x is None else vals[id(x)] for x in found)


def new_nodes(roots: list[Tensor], known) -> list[Tensor]:
    """The nodes reaching ``roots`` whose ids are not in ``known``, sorted by creation (which
    puts sources before consumers)."""
    found: dict[int, Tensor] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        k = id(t)
        if k not in known and k not in found:
            found[k] = t
            stack.extend(t.srcs)
    return sorted(found.values(), key=_creation)


_creation = attrgetter("node_id")


def _rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn
    return register


# ---- helpers: the arrays of ``sum_to``, ``g * x`` and the views --------------------------------
def _sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``elementwise.sum_to``: ``g`` summed over the dimensions broadcasting added to ``shape``,
    as its ``sum_run`` nodes compute it (``reduce._sum_forward``), then reshaped."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and g.shape[lead + i] != 1)
    r = g
    for d0, d1 in reversed(dim_runs(dims)):
        kept = r.shape[:d0] + (1,) * (d1 - d0 + 1) + r.shape[d1 + 1:]
        out = np.empty(kept, r.dtype)
        A, R, B = (math.prod(r.shape[:d0]), math.prod(r.shape[d0:d1 + 1]),
                   math.prod(r.shape[d1 + 1:]))
        sum_kernel(B)(np.ascontiguousarray(r).reshape(A, R, B), out.reshape(A, B))
        r = out
    return r.reshape(shape)


def _binary(kernel, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``kernel(a, b)`` into a fresh array of the broadcast shape, as the node ``a op b`` runs
    it; None where that node would promote (dtypes differ) or is not a float kernel's."""
    if a.dtype != b.dtype or a.dtype not in FLOATS:
        return None
    out = np.empty(a.shape if a.shape == b.shape else np.broadcast_shapes(a.shape, b.shape),
                   a.dtype)
    call(kernel, out, a, b)
    return out


def call(kernel, out: np.ndarray, *ins) -> None:
    """``kernel(*ins, out=out)`` for an elementwise kernel (``kernels.jit.ufunc``) and a fresh
    ``out``: where every operand is an array laid out as out, the flat loop that call takes
    (``_LazyUfunc.__call__``'s first case: the same loop, so the same bits), without the ~1 us
    of checks the call makes again on every node (most of a 0-d or 1-d node's time)."""
    found = _LOOPS.get(kernel) or flat_loop(kernel)
    if found is not None and out.dtype in found[1]:
        shape, dtype, strides = out.shape, out.dtype, out.strides
        for a in ins:
            if (type(a) is not np.ndarray or a.strides != strides or a.shape != shape
                    or a.dtype != dtype):
                break
        else:
            if len(shape) == 1:
                found[0](*ins, out)
            else:
                found[0](*[a.reshape(-1) for a in ins], out.reshape(-1))
            return
    kernel(*ins, out=out)


def flat_loop(kernel) -> tuple | None:
    """``(loop, dtypes)`` of an elementwise kernel (``_LazyUfunc.flat_loop``) once its own call
    has built the loop; None before, or for another kind of kernel."""
    found = _LOOPS.get(kernel)
    if found is None:
        get = getattr(kernel, "flat_loop", None)
        found = get() if get is not None else None
        if found is None:  # (not built yet: the kernel's own call builds it)
            return None
        _LOOPS[kernel] = found
    return found


_LOOPS: dict = {}
"""kernel -> (its flat loop, the dtypes it takes that loop for), once the kernel built it."""


def _expand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The ``expand`` view (``movement._expand_view``: the same strides), made by the ndarray
    constructor over a contiguous ``x`` (0.4 us; ``as_strided`` takes ~7)."""
    lead = len(shape) - x.ndim
    strides = (0,) * lead + tuple(0 if n == 1 and m != 1 else s for n, m, s in
                                  zip(x.shape, shape[lead:], x.strides))
    if x.flags.c_contiguous and x.size:
        return np.ndarray(shape, x.dtype, x, 0, strides)
    return np.lib.stride_tricks.as_strided(x, shape, strides)


# ---- elementwise -------------------------------------------------------------------------------
@_rule("add")
def _add(t, g, vals):
    a, b = t.srcs
    return (_sum_to(g, a.shape) if a.requires_grad else None,
            _sum_to(g, b.shape) if b.requires_grad else None)


@_rule("sub")
def _sub(t, g, vals):
    a, b = t.srcs
    gb = None
    if b.requires_grad:
        if g.dtype not in FLOATS:
            return None
        neg = np.empty(g.shape, g.dtype)
        call(K.neg, neg, g)
        gb = _sum_to(neg, b.shape)
    return (_sum_to(g, a.shape) if a.requires_grad else None, gb)


@_rule("mul")
def _mul(t, g, vals):
    a, b = t.srcs
    ga = gb = None
    if a.requires_grad:
        if (p := _binary(K.mul, g, vals[id(b)])) is None:
            return None
        ga = _sum_to(p, a.shape)
    if b.requires_grad:
        if (p := _binary(K.mul, g, vals[id(a)])) is None:
            return None
        gb = _sum_to(p, b.shape)
    return ga, gb


@_rule("neg")
def _neg(t, g, vals):
    if g.dtype not in FLOATS:
        return None
    out = np.empty(g.shape, g.dtype)
    call(K.neg, out, g)
    return (out,)


@_rule("exp")
def _exp(t, g, vals):
    return (_binary(K.mul, g, vals[id(t)]),)


@_rule("log")
def _log(t, g, vals):
    return (_binary(K.div, g, vals[id(t.srcs[0])]),)


# f(x) whose graph rule is one ``<op>_grad`` node over (g, x) (or (g, y): those reading y)
_OF_OUTPUT = ("relu", "sigmoid", "tanh", "tan", "expm1", "rsqrt", "reciprocal")
_OF_INPUT = ("abs", "silu", "gelu", "gelu_tanh", "leaky_relu", "softplus", "clamp", "sin", "cos",
             "sinh", "cosh", "asin", "acos", "atan", "log1p", "log2", "log10", "erf")
_GRAD_KERNELS = {name: getattr(K, name + "_grad") for name in _OF_OUTPUT + _OF_INPUT}


@_rule(*_OF_OUTPUT, *_OF_INPUT)
def _unary(t, g, vals):
    if g.dtype != t.dtype or g.dtype not in FLOATS:
        return None
    x = vals[id(t)] if t.op in _OF_OUTPUT else vals[id(t.srcs[0])]
    out = np.empty(g.shape, g.dtype)
    if t.attrs:
        _GRAD_KERNELS[t.op](g, x, *t.attrs, out=out)
    else:
        call(_GRAD_KERNELS[t.op], out, g, x)
    return (out,)


# ---- sums and views ----------------------------------------------------------------------------
@_rule("sum_run")
def _sum_run(t, g, vals):
    src = t.srcs[0]
    d0, d1 = t.attrs
    kept = src.shape[:d0] + (1,) * (d1 - d0 + 1) + src.shape[d1 + 1:]
    return (_expand(g.reshape(kept), src.shape),)


@_rule("reshape")
def _reshape(t, g, vals):
    return (g.reshape(t.srcs[0].shape),)


@_rule("expand")
def _expand_grad(t, g, vals):
    return (_sum_to(g, t.srcs[0].shape),)


@_rule("permute")
def _permute(t, g, vals):
    return (g.transpose(np.argsort(t.attrs[0])),)


@_rule("contiguous")
def _contiguous(t, g, vals):
    return (g,)


@_rule("slice")
def _slice(t, g, vals):
    src, starts = t.srcs
    out = np.empty(src.shape, g.dtype)
    # the ``slice_grad`` node's forward, which reads the slice's attributes alone
    OPS["slice_grad"].forward(t)(out, g, vals[id(starts)])
    return (out, None)


@_rule("cat")
def _cat(t, g, vals):
    dim = t.attrs[0]
    found: list[np.ndarray | None] = []
    start = 0
    for s in t.srcs:  # (``getitem(g, key)``: basic slices, views of g)
        n = s.shape[dim]
        found.append(g[(slice(None),) * dim + (slice(start, start + n),)]
                     if s.requires_grad else None)
        start += n
    return tuple(found)


# ---- softmax, logsumexp, losses, linear ----------------------------------------------------------
def _grad_of_output(grad_op: str) -> Rule:
    """The rule of an op whose graph rule is one ``grad_op`` node over (g, the output) of the
    op's own shape, dtype and attributes: that node's forward, compiled for the op's node."""
    def rule(t, g, vals):
        if g.dtype != t.dtype:
            return None
        out = np.empty(t.shape, t.dtype)
        OPS[grad_op].forward(t)(out, g, vals[id(t)])
        return (out,)
    return rule


RULES["softmax_run"] = _grad_of_output("softmax_grad")
RULES["log_softmax_run"] = _grad_of_output("log_softmax_grad")


@_rule("logsumexp_run")
def _logsumexp_run(t, g, vals):  # g * (x - y).exp()
    x, y = vals[id(t.srcs[0])], vals[id(t)]
    if y.ndim < x.ndim:  # (keepdim=False: the reduced dim back, for broadcasting)
        dim = t.attrs[0]
        y, g = np.expand_dims(y, dim), np.expand_dims(g, dim)
    d = _binary(K.sub, x, y)
    if d is None:
        return None
    e = np.empty(d.shape, d.dtype)
    call(K.exp, e, d)
    return (_binary(K.mul, g, e),)


def _pair_loss(t, g, vals):
    x, y = t.srcs
    if g.dtype != t.dtype or t.dtype not in FLOATS:
        return None
    gx = np.empty(t.shape, t.dtype)
    OPS[t.op + "_grad"].forward(t)(gx, g, vals[id(x)], vals[id(y)])  # (attrs: the op's)
    gy = None
    if y.requires_grad:
        neg = np.empty(gx.shape, gx.dtype)
        call(K.neg, neg, gx)
        gy = _sum_to(neg, y.shape)
    return (_sum_to(gx, x.shape) if x.requires_grad else None, gy)


RULES["smooth_l1"] = RULES["huber"] = _pair_loss


@_rule("linear")
def _linear(t, g, vals):
    """``linear.py``'s rule: ``matmul(g, w)``, then one node for each parameter gradient."""
    x, w = t.srcs[0], t.srcs[1]
    dtype = g.dtype
    if (dtype not in (np.float32, np.float64) or x.dtype != dtype or w.dtype != dtype
            or len(t.srcs) == 3 and t.srcs[2].dtype != dtype):
        return None
    wv = vals[id(w)]
    n_out, n_in = w.shape
    rows = math.prod(g.shape[:-1])
    gx = gw = gb = None
    if x.requires_grad:  # matmul's nodes and kernels (``linalg._matmul_forward``)
        if g.ndim <= 2:
            a = g.reshape(1, -1) if g.ndim == 1 else g
            gx = np.empty((a.shape[0], n_in), dtype)
            if n_out == 1:  # (an outer product)
                outer(a[:, 0], wv[0], gx)
            else:
                np.dot(a, wv, out=gx)
            if g.ndim == 1:
                gx = gx.reshape(n_in)
        else:
            gx = np.empty(x.shape, dtype)
            np.dot(np.ascontiguousarray(g).reshape(rows, n_out), wv,
                   out=gx.reshape(rows, n_in))
    if w.requires_grad:  # ``linear_grad_weight``
        xv = vals[id(x)]
        if rows == 1:  # (one row: g and x are it, as the views of them would be)
            gw = _Outer(g.reshape(n_out), xv.reshape(n_in), w.shape)
        else:
            gw = np.empty(w.shape, dtype)
            np.dot(g.reshape(rows, n_out).T, xv.reshape(rows, n_in), out=gw)
    if len(t.srcs) == 2:
        return gx, gw
    if t.srcs[2].requires_grad:  # ``linear_grad_bias``
        if rows == 1:
            gb = _RowSum(g.reshape(n_out))
        else:
            gb = np.empty((n_out,), dtype)
            sum_kernel(n_out)(np.ascontiguousarray(g).reshape(1, rows, n_out),
                              gb.reshape(1, n_out))
    return gx, gw, gb


class _Outer:
    """A one-row linear layer's weight gradient ``outer(g, x)``, computed where it is used:
    into a fresh array (``array``), or added straight into a parameter's running sum of
    contributions (``add_into``: ``kernels/grad_sum.py``, the same bits as computing it and
    adding it, one kernel call and one array fewer an environment step)."""

    __slots__ = ("g", "x", "shape", "dtype")

    def __init__(self, g: np.ndarray, x: np.ndarray, shape: tuple[int, int]):
        self.g, self.x, self.shape, self.dtype = g, x, shape, g.dtype

    def array(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        outer(self.g, self.x, out)
        return out

    def add_into(self, total: np.ndarray) -> None:
        add_outer(total, self.g, self.x)


class _RowSum:
    """A one-row linear layer's bias gradient ``sum_axis(g)`` over its one row, computed where
    it is used (as :class:`_Outer`)."""

    __slots__ = ("g", "shape", "dtype")

    def __init__(self, g: np.ndarray):
        self.g, self.shape, self.dtype = g, g.shape, g.dtype

    def array(self) -> np.ndarray:
        n = self.shape[0]
        out = np.empty(n, self.dtype)
        sum_kernel(n)(np.ascontiguousarray(self.g).reshape(1, 1, n), out.reshape(1, n))
        return out

    def add_into(self, total: np.ndarray) -> None:
        add_row_sum(total, self.g, self.dtype.type(0))


@_rule("div")
def _div(t, g, vals):  # ``g / b``, and ``-(g / b * y)`` for the divisor
    a, b = t.srcs
    ga = _binary(K.div, g, vals[id(b)])
    if ga is None:
        return None
    gb = None
    if b.requires_grad:
        p = _binary(K.mul, ga, vals[id(t)])
        if p is None:
            return None
        neg = np.empty(p.shape, p.dtype)
        call(K.neg, neg, p)
        gb = _sum_to(neg, b.shape)
    return (_sum_to(ga, a.shape) if a.requires_grad else None, gb)
