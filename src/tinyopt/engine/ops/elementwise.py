"""Elementwise ops (numpy broadcasting), each with its forward kernel and its backward rule.

Operands are promoted by PyTorch's rules (``dtypes.result_type``: ``int tensor * 0.5`` is
float32, a float64 0-d tensor does not widen a float32 tensor).  Comparisons and logical ops give
bool tensors.  Float functions (``exp``, ``sin``, ``sqrt``...) of integer or bool tensors compute
in float32, as in PyTorch.  Float kernels are numba ufuncs (``kernels/elementwise.py``); integer
and bool ones, and functions numpy computes as well (``sin``, ``floor``...), are numpy's.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from tinyopt.engine.dtypes import (FLOATS, bool_, float32, grad_dtype, int64, is_float, is_low,
                                   result_type, scalar_array, scalar_type_name, stored_scalar)
from tinyopt.engine.op import defop, node
from tinyopt.engine.ops.family import require_float
from tinyopt.engine.tensor import Tensor, as_tensor, leaf
from tinyopt.kernels import elementwise as K


def constant(value, dtype) -> Tensor:
    """A 0-d concrete tensor: how Python numbers enter a graph (its value is bound at run time)."""
    return leaf(scalar_array(value, np.dtype(dtype)))


def _cast(x, dtype) -> Tensor:
    if isinstance(x, Tensor):
        return x if x.dtype == dtype else to(x, dtype)
    if isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray):
        return constant(x, dtype)
    t = as_tensor(x)
    return t if t.dtype == dtype else to(t, dtype)


def promoted_operands(op: str, a, b) -> tuple[Tensor, Tensor]:
    """Both operands as tensors of their common dtype (``dtypes.result_type``)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype == b.dtype:  # the common case
        return a, b
    if isinstance(a, Tensor) and isinstance(b, float) and a.dtype in FLOATS:
        return a, constant(b, a.dtype)
    if isinstance(b, Tensor) and isinstance(a, float) and b.dtype in FLOATS:
        return constant(a, b.dtype), b
    dtype = result_type(a, b)
    return _cast(a, dtype), _cast(b, dtype)


def _float(x) -> Tensor:
    """``x`` as a float tensor (integer and bool tensors compute in float32, as in PyTorch)."""
    x = as_tensor(x)
    return x if x.dtype in FLOATS or is_low(x.dtype) else to(x, float32)


def in_float32(fn):
    """Compute the composite ``fn`` over 16-bit operands in float32 and round its result once,
    as torch's fused CPU kernels do (``addcmul``, ``mean``, ``logaddexp``...): rounding every
    intermediate to 16 bits would differ from torch in the last bits.  Operands whose common
    dtype is not 16-bit pass through unchanged."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, Tensor)]
        if not any(is_low(t.dtype) for t in tensors) or kwargs.get("dtype") is not None:
            return fn(*args, **kwargs)
        low = result_type(*(a for a in args if isinstance(a, (Tensor, float))))
        if not is_low(low):
            return fn(*args, **kwargs)
        wide = [to(a, float32) if isinstance(a, Tensor) and is_low(a.dtype) else a for a in args]
        r = fn(*wide, **kwargs)
        return tuple(to(x, low) for x in r) if isinstance(r, tuple) else to(r, low)
    return run


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
        a, b = shapes[0], shapes[1]
        for k in range(1, max(len(a), len(b)) + 1):
            x, y = (a[-k] if k <= len(a) else 1), (b[-k] if k <= len(b) else 1)
            if x != y and x != 1 and y != 1:
                detail = (f"the size of tensor a ({x}) must match the size of tensor b ({y}) at "
                          f"non-singleton dimension {max(len(a), len(b)) - k}")
                break
        else:
            detail = "the shapes cannot be broadcast together"
        raise RuntimeError(f"{op}: {detail} (shapes {', '.join(map(str, shapes))})") from None


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


def _ufunc_forward(kernel, numpy_ufunc=None):
    """A forward compiler calling ``kernel`` (a numba ufunc of float loops) on float nodes and
    ``numpy_ufunc`` on the others."""
    if numpy_ufunc is None:
        return lambda t: (lambda out, *ins: kernel(*ins, out=out))

    def compile(t):
        k = kernel if t.srcs and t.srcs[0].dtype in FLOATS else numpy_ufunc
        return lambda out, *ins: k(*ins, out=out)
    return compile


def _binary_op(name, kernel, backward, *, numpy_ufunc=None, bools: bool = True, forward=None):
    defop(name, forward=forward or _ufunc_forward(kernel, numpy_ufunc), backward=backward,
          inplace=True,
          elementwise=kernel if forward is None and hasattr(kernel, "bound") else None)

    def build(input, other) -> Tensor:
        a, b = promoted_operands(name, input, other)
        if not bools and a.dtype == bool_:
            raise RuntimeError(_BOOL_ERRORS.get(name, f"{name}: bool tensors are not supported"))
        return node(name, (a, b), broadcast_shape(name, a.shape, b.shape), a.dtype)
    build.__name__ = build.__qualname__ = name  # (the docs site finds it by this name)
    return build


_BOOL_ERRORS = {
    "sub": "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` "
           "or `logical_xor()` operator instead.",
    "neg": "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
           "to invert a mask, use the `~` or `logical_not()` operator instead.",
}

_add = _binary_op("add", K.add, lambda t, g: (sum_to(g, t.srcs[0].shape),
                                             sum_to(g, t.srcs[1].shape)), numpy_ufunc=np.add)
_sub = _binary_op("sub", K.sub, lambda t, g: (sum_to(g, t.srcs[0].shape),
                                             sum_to(-g, t.srcs[1].shape)),
                  numpy_ufunc=np.subtract, bools=False)
mul = _binary_op("mul", K.mul, lambda t, g: (sum_to(g * t.srcs[1], t.srcs[0].shape),
                                            sum_to(g * t.srcs[0], t.srcs[1].shape)),
                 numpy_ufunc=np.multiply)


def add(input, other, *, alpha=1) -> Tensor:
    """input + alpha * other."""
    return _add(input, other if alpha == 1 else mul(other, alpha))


def sub(input, other, *, alpha=1) -> Tensor:
    """input - alpha * other."""
    return _sub(input, other if alpha == 1 else mul(other, alpha))


def _div_backward(t, g):
    a, b = t.srcs
    ga = g / b
    return sum_to(ga, a.shape), sum_to(-(ga * t), b.shape) if b.requires_grad else None


def div(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """input / other: true division (integers give float32), or rounded ``"trunc"``/``"floor"``
    (integers stay integers)."""
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        a, b = promoted_operands("div", input, other)
        if is_float(a.dtype):
            return trunc(_true_div(a, b))
        return node("div_trunc", (a, b), broadcast_shape("div", a.shape, b.shape), a.dtype)
    if rounding_mode is not None:
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                         f"found '{rounding_mode}'")
    return _true_div(input, other)


def _true_div(a, b) -> Tensor:
    a, b = promoted_operands("div", a, b)
    if not is_float(a.dtype):  # true division of integers gives floats, as in PyTorch
        a, b = to(a, float32), to(b, float32)
    return node("div", (a, b), broadcast_shape("div", a.shape, b.shape), a.dtype)


def _integer_divisor_checked(ufunc):
    """A forward compiler calling ``ufunc(a, b, out=out)``; over integers it first raises torch's
    error for a zero divisor (numpy would give 0 with a warning)."""
    def compile(t):
        if is_float(t.dtype):
            return lambda out, a, b: ufunc(a, b, out=out)

        def fwd(out, a, b):
            if not np.all(b):
                raise RuntimeError("ZeroDivisionError")
            ufunc(a, b, out=out)
        return fwd
    return compile


def _trunc_divide(a, b, out):
    """Integer division rounded toward zero, exact for every int64 (no detour through floats)."""
    np.floor_divide(a, b, out=out)
    out += (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))


defop("div", forward=_ufunc_forward(K.div), backward=_div_backward, inplace=True)
defop("div_trunc", forward=_integer_divisor_checked(_trunc_divide))


def _no_derivative(name):
    def rule(t, g):
        raise RuntimeError(f"derivative for aten::{name} is not implemented")
    return rule


def floor_divide(input, other) -> Tensor:
    """input // other, rounded toward minus infinity (Python's and PyTorch's ``//``)."""
    a, b = promoted_operands("floor_divide", input, other)
    return node("floor_divide", (a, b), broadcast_shape("floor_divide", a.shape, b.shape),
                a.dtype)


defop("floor_divide", forward=_integer_divisor_checked(np.floor_divide),
      backward=_no_derivative("floor_divide"))


def _mod_backward(rounding):
    def rule(t, g):
        a, b = t.srcs
        gb = None
        if b.requires_grad:
            gb = sum_to(-g * rounding(div(a, b)), b.shape)
        return sum_to(g, a.shape), gb
    return rule


remainder = _binary_op("remainder", np.remainder, _mod_backward(lambda q: floor(q)),
                       bools=False, forward=_integer_divisor_checked(np.remainder))
remainder.__doc__ = "input mod other with the sign of other (Python's ``%``)."
fmod = _binary_op("fmod", np.fmod, _mod_backward(lambda q: trunc(q)), bools=False,
                  forward=_integer_divisor_checked(np.fmod))
fmod.__doc__ = "input mod other with the sign of input (C's fmod)."


def _pow_backward(t, g):
    a, b = t.srcs
    ga = sum_to(node("pow_grad_base", (g, a, b), t.shape, t.dtype), a.shape) \
        if a.requires_grad else None
    gb = sum_to(node("pow_grad_exp", (g, a, t), t.shape, t.dtype), b.shape) \
        if b.requires_grad else None
    return ga, gb


defop("pow", forward=_ufunc_forward(K.pow, np.power), backward=_pow_backward, inplace=True)
defop("pow_grad_base", forward=_ufunc_forward(K.pow_grad_base))
defop("pow_grad_exp", forward=_ufunc_forward(K.pow_grad_exp))


def pow(input, exponent) -> Tensor:
    """input ** exponent (tensors or numbers for either)."""
    if isinstance(exponent, numbers.Integral) and exponent < 0 and isinstance(input, Tensor) \
            and not is_float(input.dtype):  # (before the exponent is cast to the input's dtype)
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    a, b = promoted_operands("pow", input, exponent)
    if a.dtype == bool_:
        a, b = to(a, np.int64), to(b, np.int64)
    if not is_float(a.dtype) and isinstance(b, Tensor) and b.op == "input" \
            and b.value is not None and (b.value < 0).any():
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return node("pow", (a, b), broadcast_shape("pow", a.shape, b.shape), a.dtype)


def _minmax_backward(grad_op):
    def rule(t, g):
        a, b = t.srcs
        ga = node(grad_op, (g, a, b), t.shape, t.dtype)
        gb = node(grad_op, (g, b, a), t.shape, t.dtype)
        return sum_to(ga, a.shape), sum_to(gb, b.shape)
    return rule


maximum = _binary_op("maximum", K.maximum, _minmax_backward("max_grad"),
                     numpy_ufunc=np.maximum)
minimum = _binary_op("minimum", K.minimum, _minmax_backward("min_grad"),
                     numpy_ufunc=np.minimum)
defop("max_grad", forward=_ufunc_forward(K.max_grad))
defop("min_grad", forward=_ufunc_forward(K.min_grad))


# ---- comparisons and logic: bool results --------------------------------------------------------
def _bool_result(name, ufunc, *, as_bool: bool = False):
    defop(name, forward=lambda t: (lambda out, *ins: ufunc(*ins, out=out)))

    def build(input, other) -> Tensor:
        if as_bool:
            a, b = _cast(input, bool_), _cast(other, bool_)
        else:
            a, b = promoted_operands(name, input, other)
        return node(name, (a, b), broadcast_shape(name, a.shape, b.shape), bool_)
    build.__name__ = build.__qualname__ = name  # (the docs site finds it by this name)
    return build


eq = _bool_result("eq", np.equal)
ne = _bool_result("ne", np.not_equal)
lt = _bool_result("lt", np.less)
le = _bool_result("le", np.less_equal)
gt = _bool_result("gt", np.greater)
ge = _bool_result("ge", np.greater_equal)
logical_and = _bool_result("logical_and", np.logical_and, as_bool=True)
logical_or = _bool_result("logical_or", np.logical_or, as_bool=True)
logical_xor = _bool_result("logical_xor", np.logical_xor, as_bool=True)
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def logical_not(input) -> Tensor:
    """``not input``, elementwise (bool result; nonzero counts as True)."""
    x = _cast(input, bool_) if not isinstance(input, Tensor) else input
    return node("logical_not", (x,), x.shape, bool_)


defop("logical_not", forward=lambda t: (lambda out, x: np.logical_not(x, out=out)))


def _bitwise(name, ufunc):
    defop(name, forward=lambda t: (lambda out, *ins: ufunc(*ins, out=out)))

    def build(input, other) -> Tensor:
        a, b = promoted_operands(name, input, other)
        if a.dtype in FLOATS:
            raise TypeError(f"{name}: \"{name}_cpu\" not implemented for 'Float' (bitwise ops "
                            f"need integer or bool tensors)")
        return node(name, (a, b), broadcast_shape(name, a.shape, b.shape), a.dtype)
    build.__name__ = build.__qualname__ = name  # (the docs site finds it by this name)
    return build


bitwise_and = _bitwise("bitwise_and", np.bitwise_and)
bitwise_or = _bitwise("bitwise_or", np.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor)


def bitwise_not(input) -> Tensor:
    """``~input``: logical not of a bool tensor, bitwise not of an integer one."""
    x = as_tensor(input)
    if x.dtype in FLOATS:
        raise TypeError("bitwise_not: ~ needs an integer or bool tensor, got a float tensor")
    return node("bitwise_not", (x,), x.shape, x.dtype)


defop("bitwise_not", forward=lambda t: (lambda out, x: np.invert(x, out=out)))


def _flag(name, ufunc, doc):
    defop(name, forward=lambda t: (lambda out, x: ufunc(x, out=out)))

    def build(input) -> Tensor:
        x = as_tensor(input)
        if not is_float(x.dtype):  # integers are always finite, never NaN (16-bit floats not)
            return node("full", (), x.shape, bool_, (name == "isfinite",))
        return node(name, (x,), x.shape, bool_)
    build.__name__ = build.__qualname__ = name  # (the docs site finds it by this name)
    build.__doc__ = doc
    return build


isnan = _flag("isnan", np.isnan, "Whether each element is NaN.")
isinf = _flag("isinf", np.isinf, "Whether each element is +inf or -inf.")
isfinite = _flag("isfinite", np.isfinite, "Whether each element is neither inf nor NaN.")
isposinf = _flag("isposinf", np.isposinf, "Whether each element is +inf.")
isneginf = _flag("isneginf", np.isneginf, "Whether each element is -inf.")


# ---- where -------------------------------------------------------------------------------------
def _where_backward(t, g):
    c, a, b = t.srcs
    zero = constant(0, g.dtype)
    return (None, sum_to(where(c, g, zero), a.shape) if a.requires_grad else None,
            sum_to(where(c, zero, g), b.shape) if b.requires_grad else None)


def _where_forward(t):
    if t.dtype in (np.float32, np.float64, np.int64, bool_):
        return lambda out, c, a, b: K.where(c, a, b, out=out)

    def fwd(out, c, a, b):
        np.copyto(out, b)
        np.copyto(out, a, where=c)
    return fwd


defop("where", forward=_where_forward, backward=_where_backward)


def where(condition, input=None, other=None) -> Tensor:
    """``input`` where ``condition`` (a bool tensor) is true, else ``other`` (tensors or numbers,
    broadcast together).  With only ``condition``: ``nonzero(condition, as_tuple=True)``."""
    if input is None and other is None:
        from tinyopt.engine.ops.selection import nonzero
        return nonzero(condition, as_tuple=True)
    c = as_tensor(condition)
    if c.dtype != bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {c.dtype}")
    a, b = promoted_operands("where", input, other)
    shape = broadcast_shape("where", c.shape, a.shape, b.shape)
    return node("where", (c, a, b), shape, a.dtype)


# ---- casts -------------------------------------------------------------------------------------
def _cast_backward(t, g):
    src = t.srcs[0]  # (the gradient of a 16-bit tensor is float32: ``engine/op.py``)
    return (g.to(grad_dtype(src.dtype)) if src.dtype in FLOATS or is_low(src.dtype) else None,)


def _cast_forward(t):
    if not is_low(t.dtype):
        return lambda out, x: np.copyto(out, x, casting="unsafe")

    def fwd(out, x):  # rounding to 16 bits overflows to inf as torch does, without a warning
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(out, x, casting="unsafe")
    return fwd


defop("cast", forward=_cast_forward, backward=_cast_backward)


def to(x: Tensor, dtype) -> Tensor:
    """``x`` converted to ``dtype`` (float to int truncates toward zero, as in PyTorch)."""
    x = as_tensor(x)
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    out = node("cast", (x,), x.shape, dtype, (dtype.char,))
    if dtype not in FLOATS and not is_low(dtype):  # integer tensors never require grad
        out.requires_grad = False
    return out


defop("clone", forward=lambda t: (lambda out, x: np.copyto(out, x)),
      backward=lambda t, g: (g,))


def clone(input) -> Tensor:
    """A copy of ``x`` in storage of its own; gradients flow back to ``x``."""
    input = as_tensor(input)
    return node("clone", (input,), input.shape, input.dtype)


# ---- unary -------------------------------------------------------------------------------------
_NOT_BUILT = {  # op: (torch's CPU kernel, the dtype kinds it is not built for: i, u, b(ool))
    "gelu": ("GeluKernelImpl", "iub"), "gelu_tanh": ("GeluKernelImpl", "iub"),
    "silu": ("silu_cpu", "iub"), "leaky_relu": ("leaky_relu_cpu", "iub"),
    "softplus": ("softplus_cpu", "iub"), "logaddexp": ("logaddexp_cpu", "iub"),
    "logaddexp2": ("logaddexp2_cpu", "iub"), "hypot": ("hypot_cpu", "iub"),
    "abs": ("abs_cpu", "b"), "floor": ("floor_vml_cpu", "b"), "ceil": ("ceil_vml_cpu", "b"),
    "trunc": ("trunc_vml_cpu", "b"), "round": ("round_vml_cpu", "b")}


def refuse_for_dtype(op: str, dtype: np.dtype) -> None:
    """torch's error for an op over integers or bools that torch does not compute (where
    tinyopt would have computed in float32 and returned what torch refuses)."""
    if op == "relu" and dtype == bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    kernel, kinds = _NOT_BUILT.get(op, ("", ""))
    if dtype.kind in kinds:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


def _unary(name, kernel, backward, *, float_only=True, int_ok=False, numpy_ufunc=None,
           with_attrs=False):
    """An elementwise function op, ``f(input)`` (``with_attrs``: ``f(input, *numbers)``, the
    numbers the kernel takes after x, for the functions that wrap it).  ``float_only``: integer
    and bool inputs compute in float32 (``exp``); ``int_ok``: integer inputs keep their dtype
    (``abs``, ``neg``)."""
    defop(name, forward=lambda t: (
        lambda out, x: (kernel if x.dtype in FLOATS or numpy_ufunc is None else numpy_ufunc)(
            x, *t.attrs, out=out)), backward=backward, inplace=True,
          elementwise=kernel if hasattr(kernel, "bound") else None)

    def operand(input) -> Tensor:
        x = as_tensor(input)
        if not is_float(x.dtype):
            refuse_for_dtype(name, x.dtype)
        if x.dtype not in FLOATS and not is_low(x.dtype) and not (int_ok and x.dtype != bool_):
            if float_only:
                x = to(x, float32)
        return x

    if with_attrs:
        def build(input, *attrs) -> Tensor:
            x = operand(input)
            return node(name, (x,), x.shape, x.dtype, tuple([float(a) for a in attrs]))
    else:
        def build(input) -> Tensor:  # (a public function: torch's signature, nothing more)
            x = operand(input)
            return node(name, (x,), x.shape, x.dtype, ())
    build.__name__ = build.__qualname__ = name  # (the docs site finds it by this name)
    return build


def _grad_node(op, *srcs, attrs=()):
    return node(op, srcs, srcs[0].shape, srcs[0].dtype, attrs)


def _neg(input) -> Tensor:
    """``-input``, elementwise (``negative`` is the same; a bool tensor raises, as in
    PyTorch)."""
    x = as_tensor(input)
    if x.dtype == bool_:
        raise RuntimeError(_BOOL_ERRORS["neg"])
    return _neg_op(x)


_neg_op = _unary("neg", K.neg, lambda t, g: (-g,), int_ok=True, numpy_ufunc=np.negative)
neg = _neg
abs = _unary("abs", K.abs, lambda t, g: (_grad_node("abs_grad", g, t.srcs[0]),), int_ok=True,
             numpy_ufunc=np.abs)
exp = _unary("exp", K.exp, lambda t, g: (g * t,))
log = _unary("log", K.log, lambda t, g: (g / t.srcs[0],))
sqrt = _unary("sqrt", K.sqrt, lambda t, g: (g / (t * 2.0),))
_square = _unary("square", K.square, lambda t, g: (g * t.srcs[0] * 2.0,), int_ok=True,
                numpy_ufunc=np.square)
relu = _unary("relu", K.relu, lambda t, g: (_grad_node("relu_grad", g, t),), int_ok=True,
              numpy_ufunc=lambda x, out: np.maximum(x, 0, out=out))
sigmoid = _unary("sigmoid", K.sigmoid, lambda t, g: (_grad_node("sigmoid_grad", g, t),))
tanh = _unary("tanh", K.tanh, lambda t, g: (_grad_node("tanh_grad", g, t),))
silu = _unary("silu", K.silu, lambda t, g: (_grad_node("silu_grad", g, t.srcs[0]),))
_gelu = _unary("gelu", K.gelu, lambda t, g: (_grad_node("gelu_grad", g, t.srcs[0]),))
_gelu_tanh = _unary("gelu_tanh", K.gelu_tanh,
                    lambda t, g: (_grad_node("gelu_tanh_grad", g, t.srcs[0]),))
_leaky_relu = _unary("leaky_relu", K.leaky_relu,
                     lambda t, g: (_grad_node("leaky_relu_grad", g, t.srcs[0], attrs=t.attrs),),
                     with_attrs=True)
_softplus = _unary("softplus", K.softplus,
                   lambda t, g: (_grad_node("softplus_grad", g, t.srcs[0], attrs=t.attrs),),
                   with_attrs=True)
_clamp = _unary("clamp", K.clamp,
                lambda t, g: (_grad_node("clamp_grad", g, t.srcs[0], attrs=t.attrs),),
                int_ok=True, numpy_ufunc=lambda x, lo, hi, out: np.clip(x, lo, hi, out=out,
                                                                        casting="unsafe"),
                with_attrs=True)

# functions of x whose gradient is g * f'(x) (or of the output y), one fused kernel each way
sin = _unary("sin", np.sin, lambda t, g: (_grad_node("sin_grad", g, t.srcs[0]),))
cos = _unary("cos", np.cos, lambda t, g: (_grad_node("cos_grad", g, t.srcs[0]),))
tan = _unary("tan", np.tan, lambda t, g: (_grad_node("tan_grad", g, t),))
sinh = _unary("sinh", np.sinh, lambda t, g: (_grad_node("sinh_grad", g, t.srcs[0]),))
cosh = _unary("cosh", np.cosh, lambda t, g: (_grad_node("cosh_grad", g, t.srcs[0]),))
asin = _unary("asin", np.arcsin, lambda t, g: (_grad_node("asin_grad", g, t.srcs[0]),))
acos = _unary("acos", np.arccos, lambda t, g: (_grad_node("acos_grad", g, t.srcs[0]),))
atan = _unary("atan", np.arctan, lambda t, g: (_grad_node("atan_grad", g, t.srcs[0]),))
log1p = _unary("log1p", np.log1p, lambda t, g: (_grad_node("log1p_grad", g, t.srcs[0]),))
expm1 = _unary("expm1", np.expm1, lambda t, g: (_grad_node("expm1_grad", g, t),))
log2 = _unary("log2", np.log2, lambda t, g: (_grad_node("log2_grad", g, t.srcs[0]),))
log10 = _unary("log10", np.log10, lambda t, g: (_grad_node("log10_grad", g, t.srcs[0]),))
erf = _unary("erf", K.erf, lambda t, g: (_grad_node("erf_grad", g, t.srcs[0]),))
rsqrt = _unary("rsqrt", K.rsqrt, lambda t, g: (_grad_node("rsqrt_grad", g, t),))
reciprocal = _unary("reciprocal", np.reciprocal,
                    lambda t, g: (_grad_node("reciprocal_grad", g, t),))
arcsin, arccos, arctan = asin, acos, atan


def _zero_grad(t, g):
    """Piecewise-constant functions: the gradient is zero almost everywhere (PyTorch)."""
    return (node("full", (), g.shape, g.dtype, (0.0,)),)


_sign = _unary("sign", K.sign, _zero_grad, int_ok=True, numpy_ufunc=np.sign)


def sign(input) -> Tensor:
    """1, -1 or 0 (0 for NaN); a bool tensor's sign is itself, as torch's."""
    x = as_tensor(input)
    return clone(x) if x.dtype == bool_ else _sign(x)


def square(input) -> Tensor:
    """input * input; a bool tensor squares as int64, as torch's ``pow(input, 2)`` does."""
    x = as_tensor(input)
    return _square(to(x, int64) if x.dtype == bool_ else x)
floor = _unary("floor", np.floor, _zero_grad, int_ok=True,
               numpy_ufunc=lambda x, out: np.copyto(out, x))
ceil = _unary("ceil", np.ceil, _zero_grad, int_ok=True,
              numpy_ufunc=lambda x, out: np.copyto(out, x))
trunc = _unary("trunc", np.trunc, _zero_grad, int_ok=True,
               numpy_ufunc=lambda x, out: np.copyto(out, x))
_round = _unary("round", np.round, _zero_grad, int_ok=True,
                numpy_ufunc=lambda x, out: np.copyto(out, x))
fix = trunc

for _name in ("abs_grad", "relu_grad", "sigmoid_grad", "tanh_grad", "silu_grad", "gelu_grad",
              "gelu_tanh_grad", "leaky_relu_grad", "softplus_grad", "clamp_grad", "sin_grad",
              "cos_grad", "tan_grad", "sinh_grad", "cosh_grad", "asin_grad", "acos_grad",
              "atan_grad", "log1p_grad", "expm1_grad", "log2_grad", "log10_grad", "erf_grad",
              "rsqrt_grad", "reciprocal_grad", "finite_grad"):
    defop(_name, forward=(lambda k: lambda t: (lambda out, g, x: k(g, x, *t.attrs, out=out)))(
        getattr(K, _name)), inplace=True,
          elementwise=getattr(K, _name) if hasattr(getattr(K, _name), "bound") else None)


def round(input, *, decimals: int = 0) -> Tensor:
    """Round half to even (``torch.round``), to ``decimals`` decimal places."""
    if decimals == 0:
        return _round(input)
    input = _float(input)
    scale = 10.0 ** decimals
    return _round(input * scale) / scale


def frac(input) -> Tensor:
    """The fractional part x - trunc(x), with x's sign (gradient 1)."""
    x = as_tensor(input)
    if not is_float(x.dtype):
        raise NotImplementedError(f'"frac_cpu" not implemented for '
                                  f"'{scalar_type_name(x.dtype)}'")
    return x - trunc(x)


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


def clamp(input, min=None, max=None) -> Tensor:
    """Limit ``x`` to ``[min, max]`` (numbers or tensors; either bound may be None, not both)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    input = as_tensor(input)
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        r = input
        if min is not None:
            lo = _cast(min, result_type(input, min))
            r = where(logical_or(lt(r, lo), isnan(lo)), lo, r)  # (a NaN bound gives NaN)
        if max is not None:
            hi = _cast(max, result_type(r, max))
            r = where(logical_or(gt(r, hi), isnan(hi)), hi, r)
        return r
    if not is_float(input.dtype):
        if isinstance(min, float) or isinstance(max, float):
            input = to(input, float32)
        elif input.dtype == bool_:
            input = to(input, np.int64)
    # torch converts the bounds to input's dtype, checked: a uint8 input takes -1 as 255, 300
    # raises
    bounds = [None if v is None else stored_scalar(v, input.dtype) for v in (min, max)]
    if not is_float(input.dtype):
        min, max = bounds
    lo = -np.inf if min is None else float(min)
    hi = np.inf if max is None else float(max)
    return _clamp(input, lo, hi)


clip = clamp


def clamp_min(input, min) -> Tensor:
    """``max(x, min)``, elementwise (``clamp(x, min=min)``)."""
    return clamp(input, min=min)


def clamp_max(input, max) -> Tensor:
    """``min(x, max)``, elementwise (``clamp(x, max=max)``)."""
    return clamp(input, max=max)


def nan_to_num(input, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """NaN -> ``nan``, +inf -> ``posinf`` (default: the dtype's largest finite value), -inf ->
    ``neginf`` (default: the smallest); the gradient is zero at the replaced elements."""
    input = as_tensor(input)
    if input.dtype not in FLOATS:
        return input
    info = np.finfo(input.dtype)
    attrs = (float(nan), float(info.max if posinf is None else posinf),
             float(info.min if neginf is None else neginf))
    return node("nan_to_num", (input,), input.shape, input.dtype, attrs)


defop("nan_to_num", forward=lambda t: (lambda out, x: np.copyto(out, np.nan_to_num(
    x, nan=t.attrs[0], posinf=t.attrs[1], neginf=t.attrs[2]))),
    backward=lambda t, g: (_grad_node("finite_grad", g, t.srcs[0]),))


def _lerp_backward(t, g):
    a, b, w = t.srcs
    ga = sum_to(g * (1.0 - w), a.shape) if a.requires_grad else None
    gb = sum_to(g * w, b.shape) if b.requires_grad else None
    gw = sum_to(g * (b - a), w.shape) if w.requires_grad else None
    return ga, gb, gw


defop("lerp", forward=_ufunc_forward(K.lerp), backward=_lerp_backward)


def lerp(input, end, weight) -> Tensor:
    """input + weight * (end - input) (``weight`` a number or a tensor)."""
    a, b = promoted_operands("lerp", input, end)
    require_float("lerp", a)
    w = _cast(weight, float32 if is_low(a.dtype) and not isinstance(weight, Tensor) else a.dtype)
    return node("lerp", (a, b, w), broadcast_shape("lerp", a.shape, b.shape, w.shape), a.dtype)


@in_float32
def addcmul(input, tensor1, tensor2, *, value=1) -> Tensor:
    """input + value * tensor1 * tensor2."""
    return add(input, mul(tensor1, tensor2), alpha=value)


@in_float32
def addcdiv(input, tensor1, tensor2, *, value=1) -> Tensor:
    """input + value * tensor1 / tensor2."""
    return add(input, div(tensor1, tensor2), alpha=value)


def xlogy(input, other) -> Tensor:
    """input * log(other), 0 where input == 0 (NaN where other is NaN, whatever input is)."""
    a, b = promoted_operands("xlogy", input, other)
    a, b = _float(a), _float(b)
    return where(logical_and(eq(a, 0), logical_not(isnan(b))), constant(0.0, a.dtype),
                 a * log(b))


@in_float32
def logaddexp(input, other) -> Tensor:
    """log(e^a + e^b), computed without overflow: max(a, b) + log1p(e^-|a - b|)."""
    a, b = promoted_operands("logaddexp", input, other)
    refuse_for_dtype("logaddexp", a.dtype)
    same_inf = logical_and(isinf(a), eq(a, b))  # inf - inf is NaN; the result is that inf
    return where(same_inf, a, maximum(a, b) + log1p(exp(-abs(a - b))))


@in_float32
def logaddexp2(input, other) -> Tensor:
    """log2(2^a + 2^b), computed without overflow: max(a, b) + log1p(2^-|a - b|) / ln 2."""
    a, b = promoted_operands("logaddexp2", input, other)
    refuse_for_dtype("logaddexp2", a.dtype)
    same_inf = logical_and(isinf(a), eq(a, b))
    return where(same_inf, a,
                 maximum(a, b) + log1p(pow(2.0, -abs(a - b))) * (1.0 / np.log(2.0)))


@in_float32
def hypot(input, other) -> Tensor:
    """``sqrt(a^2 + b^2)``, elementwise."""
    a, b = promoted_operands("hypot", input, other)
    refuse_for_dtype("hypot", a.dtype)
    return sqrt(square(a) + square(b))


def _atan2_backward(t, g):
    a, b = t.srcs
    r2 = square(a) + square(b)
    recip = where(eq(r2, 0.0), 0.0, reciprocal(r2))  # 0 where r^2 is 0 (or underflows), as torch
    return (sum_to(g * b * recip, a.shape) if a.requires_grad else None,
            sum_to(g * neg(a) * recip, b.shape) if b.requires_grad else None)


defop("atan2", forward=lambda t: (lambda out, a, b: np.arctan2(a, b, out=out)),
      backward=_atan2_backward, inplace=True)


@in_float32
def atan2(input, other) -> Tensor:
    """The angle of the point (``other``, ``input``) in radians, in [-pi, pi]: arctan(input /
    other) moved to the quadrant of both signs (C's ``atan2``, signed zeros and infinities
    included).  Integer and bool operands compute in float32.  Gradients: ``other / r^2`` in
    ``input`` and ``-input / r^2`` in ``other``, r^2 = input^2 + other^2."""
    a, b = promoted_operands("atan2", input, other)
    if not is_float(a.dtype):
        a, b = to(a, float32), to(b, float32)
    return node("atan2", (a, b), broadcast_shape("atan2", a.shape, b.shape), a.dtype)


def arctan2(input, other) -> Tensor:
    """``atan2(input, other)`` (NumPy's name)."""
    return atan2(input, other)


def positive(input) -> Tensor:
    """``input`` itself (``+input``)."""
    return as_tensor(input)


def negative(input) -> Tensor:
    """``-input``, elementwise (``neg``)."""
    return neg(input)


def true_divide(input, other) -> Tensor:
    """``input / other``, true division (``div``)."""
    return div(input, other)


def multiply(input, other) -> Tensor:
    """``input * other``, elementwise with broadcasting (``mul``)."""
    return mul(input, other)


def subtract(input, other, *, alpha=1) -> Tensor:
    """``input - alpha * other``, elementwise with broadcasting (``sub``)."""
    return sub(input, other, alpha=alpha)


def divide(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """``input / other`` (``div``): true division, or with ``rounding_mode``
    ``"trunc"``/``"floor"`` rounded toward zero/down."""
    return div(input, other, rounding_mode=rounding_mode)


# ---- whole-tensor comparisons (computed now, Python results) ------------------------------------
def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """|input - other| <= atol + rtol * |other|, elementwise (bool)."""
    a, b = promoted_operands("isclose", input, other)
    close = le(abs(a - b), atol + rtol * abs(b)) if a.dtype in FLOATS else eq(a, b)
    close = logical_or(close, eq(a, b))  # equal infinities
    if equal_nan and a.dtype in FLOATS:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element satisfies ``|input - other| <= atol + rtol * |other|`` (NaNs equal
    only with ``equal_nan``); computed now, a Python bool."""
    return bool(isclose(input, other, rtol, atol, equal_nan).numpy().all())


def equal(input, other) -> bool:
    """True when both have the same shape and the same values (``torch.equal``)."""
    a, b = as_tensor(input), as_tensor(other)
    return a.shape == b.shape and bool(np.array_equal(a.numpy(), b.numpy()))


# ---- the docstrings of the functions the factories above make: the math, elementwise ------------
for _fn, _doc in {
    mul: "``a * b``, elementwise with broadcasting (``multiply`` is the same).",
    maximum: "The larger of ``a`` and ``b``, elementwise; NaN if either is NaN.",
    minimum: "The smaller of ``a`` and ``b``, elementwise; NaN if either is NaN.",
    eq: "``a == b``, elementwise (bool result).",
    ne: "``a != b``, elementwise (bool result; ``not_equal`` is the same).",
    lt: "``a < b``, elementwise (bool result; ``less`` is the same).",
    le: "``a <= b``, elementwise (bool result; ``less_equal`` is the same).",
    gt: "``a > b``, elementwise (bool result; ``greater`` is the same).",
    ge: "``a >= b``, elementwise (bool result; ``greater_equal`` is the same).",
    logical_and: "``a and b``, elementwise (bool result; nonzero counts as True).",
    logical_or: "``a or b``, elementwise (bool result; nonzero counts as True).",
    logical_xor: "``a xor b``, elementwise (bool result; nonzero counts as True).",
    bitwise_and: "``a & b``, elementwise: logical for bool tensors, bitwise for integer ones.",
    bitwise_or: "``a | b``, elementwise: logical for bool tensors, bitwise for integer ones.",
    bitwise_xor: "``a ^ b``, elementwise: logical for bool tensors, bitwise for integer ones.",
    abs: "``|x|``, elementwise (integer tensors keep their dtype).",
    exp: "``e^x``, elementwise.",
    log: "The natural logarithm ``ln x``, elementwise (NaN below 0, -inf at 0).",
    sqrt: "``sqrt(x)``, elementwise (NaN below 0).",
    square: "``x^2``, elementwise (integer tensors keep their dtype).",
    relu: "``max(x, 0)``, elementwise.",
    sigmoid: "``1 / (1 + e^-x)``, elementwise.",
    tanh: "The hyperbolic tangent ``(e^x - e^-x) / (e^x + e^-x)``, elementwise.",
    sin: "``sin x`` (x in radians), elementwise.",
    cos: "``cos x`` (x in radians), elementwise.",
    tan: "``tan x`` (x in radians), elementwise.",
    sinh: "``sinh x = (e^x - e^-x) / 2``, elementwise.",
    cosh: "``cosh x = (e^x + e^-x) / 2``, elementwise.",
    asin: "``arcsin x`` in [-pi/2, pi/2], elementwise (NaN outside [-1, 1]; ``arcsin`` is the "
          "same).",
    acos: "``arccos x`` in [0, pi], elementwise (NaN outside [-1, 1]; ``arccos`` is the same).",
    atan: "``arctan x`` in (-pi/2, pi/2), elementwise (``arctan`` is the same).",
    log1p: "``ln(1 + x)``, elementwise, accurate for small ``x``.",
    expm1: "``e^x - 1``, elementwise, accurate for small ``x``.",
    log2: "``log2 x``, elementwise.",
    log10: "``log10 x``, elementwise.",
    erf: "The error function ``2 / sqrt(pi) * integral_0^x e^(-t^2) dt``, elementwise.",
    rsqrt: "``1 / sqrt(x)``, elementwise.",
    reciprocal: "``1 / x``, elementwise.",
    sign: "-1, 0 or 1 by the sign of ``x``, elementwise (the gradient is zero).",
    floor: "The largest integer <= ``x``, elementwise (the gradient is zero).",
    ceil: "The smallest integer >= ``x``, elementwise (the gradient is zero).",
    trunc: "``x`` rounded toward zero, elementwise (``fix`` is the same; the gradient is zero).",
}.items():
    _fn.__doc__ = _doc
