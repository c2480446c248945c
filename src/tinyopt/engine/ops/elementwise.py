"""Elementwise ops (numpy broadcasting), each with its forward kernel and its backward rule."""

from __future__ import annotations

import numbers

import numpy as np

from tinyopt.engine.dtypes import FLOATS, float32
from tinyopt.engine.op import defop, node
from tinyopt.engine.tensor import Tensor, as_tensor
from tinyopt.kernels import elementwise as K


def constant(value, dtype) -> Tensor:
    """A 0-d input leaf: how Python numbers enter a graph (its value is bound at run time)."""
    return Tensor("input", (), (), (), dtype, value=np.array(value, dtype=dtype))


def _operands(op: str, a, b) -> tuple[Tensor, Tensor]:
    """Both operands as tensors of one dtype (Python numbers take the tensor's dtype)."""
    if not isinstance(a, Tensor) and isinstance(a, numbers.Number) and isinstance(b, Tensor):
        a = constant(a, _scalar_dtype(a, b.dtype))
    elif not isinstance(b, Tensor) and isinstance(b, numbers.Number) and isinstance(a, Tensor):
        b = constant(b, _scalar_dtype(b, a.dtype))
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype != b.dtype:
        if a.dtype in FLOATS and b.dtype in FLOATS:
            wide = np.promote_types(a.dtype, b.dtype)
        else:
            wide = a.dtype if a.dtype in FLOATS else b.dtype
        a, b = a.to(wide), b.to(wide)
    return a, b


def _scalar_dtype(v, tensor_dtype):
    if tensor_dtype in FLOATS or isinstance(v, (bool, numbers.Integral)):
        return tensor_dtype
    return float32


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    if len(shapes) == 2:  # the common cases without numpy's general (and slower) routine
        a, b = shapes
        if a == b or not b:
            return a
        if not a:
            return b
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{op}: shapes {' and '.join(map(str, shapes))} cannot be broadcast "
                         f"together") from None


def _require_float(op: str, *ts: Tensor) -> None:
    for t in ts:
        if t.dtype not in FLOATS:
            raise TypeError(f"{op}: expected a floating point tensor, got {t.dtype} "
                            f"(shape {t.shape}); convert with .float()")


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``g`` over the dimensions that broadcasting expanded, giving ``shape``."""
    if g.shape == shape:
        return g
    from tinyopt.engine.ops.reduce import sum as _sum
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and g.shape[lead + i] != 1)
    r = _sum(g, dims, keepdim=True) if dims else g
    return r.reshape(shape)


def _ufunc_forward(kernel):
    """A forward compiler for a ufunc kernel of the node's sources."""
    return lambda t: (lambda out, *ins: kernel(*ins, out=out))


def _binary_op(name, kernel, backward, *, float_only=False):
    defop(name, forward=_ufunc_forward(kernel), backward=backward, inplace=True)

    def build(a, b) -> Tensor:
        a, b = _operands(name, a, b)
        if float_only:
            _require_float(name, a, b)
        return node(name, (a, b), broadcast_shape(name, a.shape, b.shape), a.dtype)
    build.__name__ = name
    return build


add = _binary_op("add", K.add, lambda t, g: (sum_to(g, t.srcs[0].shape),
                                            sum_to(g, t.srcs[1].shape)))
sub = _binary_op("sub", K.sub, lambda t, g: (sum_to(g, t.srcs[0].shape),
                                            sum_to(-g, t.srcs[1].shape)))
mul = _binary_op("mul", K.mul, lambda t, g: (sum_to(g * t.srcs[1], t.srcs[0].shape),
                                            sum_to(g * t.srcs[0], t.srcs[1].shape)))


def _div_backward(t, g):
    a, b = t.srcs
    ga = g / b
    return sum_to(ga, a.shape), sum_to(-(ga * t), b.shape) if b.requires_grad else None


def _div_build(a, b):
    a, b = _operands("div", a, b)
    if a.dtype not in FLOATS:  # true division of integers gives floats, as in PyTorch
        a, b = a.to(float32), b.to(float32)
    return node("div", (a, b), broadcast_shape("div", a.shape, b.shape), a.dtype)


defop("div", forward=_ufunc_forward(K.div), backward=_div_backward, inplace=True)
div = _div_build


def _pow_backward(t, g):
    a, b = t.srcs
    ga = sum_to(node("pow_grad_base", (g, a, b), t.shape, t.dtype), a.shape) \
        if a.requires_grad else None
    gb = sum_to(node("pow_grad_exp", (g, a, t), t.shape, t.dtype), b.shape) \
        if b.requires_grad else None
    return ga, gb


pow = _binary_op("pow", K.pow, _pow_backward, float_only=True)
defop("pow_grad_base", forward=_ufunc_forward(K.pow_grad_base))
defop("pow_grad_exp", forward=_ufunc_forward(K.pow_grad_exp))


def _minmax_backward(grad_op):
    def rule(t, g):
        a, b = t.srcs
        ga = node(grad_op, (g, a, b), t.shape, t.dtype)
        gb = node(grad_op, (g, b, a), t.shape, t.dtype)
        return sum_to(ga, a.shape), sum_to(gb, b.shape)
    return rule


maximum = _binary_op("maximum", K.maximum, _minmax_backward("max_grad"))
minimum = _binary_op("minimum", K.minimum, _minmax_backward("min_grad"))
defop("max_grad", forward=_ufunc_forward(K.max_grad))
defop("min_grad", forward=_ufunc_forward(K.min_grad))


def _compare(name, kernel):
    defop(name, forward=_ufunc_forward(kernel))

    def build(a, b) -> Tensor:
        a, b = _operands(name, a, b)
        return node(name, (a, b), broadcast_shape(name, a.shape, b.shape), np.dtype(np.int64))
    build.__name__ = name
    return build


eq, ne, lt, le, gt, ge = (_compare(n, getattr(K, n)) for n in ("eq", "ne", "lt", "le", "gt", "ge"))


# ---- where -------------------------------------------------------------------------------------
def _where_backward(t, g):
    c, a, b = t.srcs
    zero = constant(0, g.dtype)
    return (None, sum_to(where(c, g, zero), a.shape) if a.requires_grad else None,
            sum_to(where(c, zero, g), b.shape) if b.requires_grad else None)


defop("where", forward=_ufunc_forward(K.where), backward=_where_backward)


def where(condition, input, other) -> Tensor:
    """``input`` where ``condition`` is nonzero, else ``other`` (broadcast together)."""
    a, b = _operands("where", input, other)
    c = as_tensor(condition)
    if c.dtype != np.int64:  # nonzero is true (a cast would truncate 0.5 to false)
        c = ne(c, 0)
    shape = broadcast_shape("where", c.shape, a.shape, b.shape)
    return node("where", (c, a, b), shape, a.dtype)


# ---- casts -------------------------------------------------------------------------------------
def _cast_backward(t, g):
    src = t.srcs[0]
    return (g.to(src.dtype) if src.dtype in FLOATS else None,)


defop("cast", forward=lambda t: (lambda out, x: np.copyto(out, x, casting="unsafe")),
      backward=_cast_backward)


def to(x: Tensor, dtype) -> Tensor:
    """``x`` converted to ``dtype`` (float to int truncates toward zero, as in PyTorch)."""
    x = as_tensor(x)
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    out = node("cast", (x,), x.shape, dtype, (dtype.char,))
    if dtype not in FLOATS:  # integer tensors never require grad (gradients stop here)
        out.requires_grad = False
    return out


# ---- unary -------------------------------------------------------------------------------------
def _unary(name, kernel, backward, *, float_only=True, int_ok=False):
    defop(name, forward=lambda t: (lambda out, x: kernel(x, *t.attrs, out=out)),
          backward=backward, inplace=True)

    def build(x, *attrs) -> Tensor:
        x = as_tensor(x)
        if float_only and not (int_ok and x.dtype == np.int64):
            _require_float(name, x)
        return node(name, (x,), x.shape, x.dtype, tuple(float(a) for a in attrs))
    build.__name__ = name
    return build


def _grad_node(op, *srcs, attrs=()):
    return node(op, srcs, srcs[0].shape, srcs[0].dtype, attrs)


neg = _unary("neg", K.neg, lambda t, g: (-g,), int_ok=True)
abs = _unary("abs", K.abs, lambda t, g: (_grad_node("abs_grad", g, t.srcs[0]),), int_ok=True)
exp = _unary("exp", K.exp, lambda t, g: (g * t,))
log = _unary("log", K.log, lambda t, g: (g / t.srcs[0],))
sqrt = _unary("sqrt", K.sqrt, lambda t, g: (g / (t * 2.0),))
square = _unary("square", K.square, lambda t, g: (g * t.srcs[0] * 2.0,))
relu = _unary("relu", K.relu, lambda t, g: (_grad_node("relu_grad", g, t),))
sigmoid = _unary("sigmoid", K.sigmoid, lambda t, g: (_grad_node("sigmoid_grad", g, t),))
tanh = _unary("tanh", K.tanh, lambda t, g: (_grad_node("tanh_grad", g, t),))
silu = _unary("silu", K.silu, lambda t, g: (_grad_node("silu_grad", g, t.srcs[0]),))
_gelu = _unary("gelu", K.gelu, lambda t, g: (_grad_node("gelu_grad", g, t.srcs[0]),))
_gelu_tanh = _unary("gelu_tanh", K.gelu_tanh,
                    lambda t, g: (_grad_node("gelu_tanh_grad", g, t.srcs[0]),))
_leaky_relu = _unary("leaky_relu", K.leaky_relu,
                     lambda t, g: (_grad_node("leaky_relu_grad", g, t.srcs[0], attrs=t.attrs),))
_softplus = _unary("softplus", K.softplus,
                   lambda t, g: (_grad_node("softplus_grad", g, t.srcs[0], attrs=t.attrs),))
_clamp = _unary("clamp", K.clamp,
                lambda t, g: (_grad_node("clamp_grad", g, t.srcs[0], attrs=t.attrs),),
                int_ok=False)

for _name in ("abs_grad", "relu_grad", "sigmoid_grad", "tanh_grad", "silu_grad", "gelu_grad",
              "gelu_tanh_grad", "leaky_relu_grad", "softplus_grad", "clamp_grad"):
    defop(_name, forward=(lambda k: lambda t: (lambda out, g, x: k(g, x, *t.attrs, out=out)))(
        getattr(K, _name)), inplace=True)


def gelu(x, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: x * Phi(x), or its tanh approximation."""
    if approximate == "none":
        return _gelu(x)
    if approximate == "tanh":
        return _gelu_tanh(x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def leaky_relu(x, negative_slope: float = 0.01) -> Tensor:
    return _leaky_relu(x, negative_slope)


def softplus(x, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return _softplus(x, beta, threshold)


def clamp(x, min: float | None = None, max: float | None = None) -> Tensor:
    """Limit ``x`` to ``[min, max]`` (either bound may be None, not both)."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    x = as_tensor(x)
    _require_float("clamp", x)
    lo = -np.inf if min is None else float(min)
    hi = np.inf if max is None else float(max)
    return _clamp(x, lo, hi)
