"""Single instructions that numba's Python does not spell, as intrinsics inlined into kernels.

- :func:`fma`: ``x * y + z`` rounded once (``llvm.fma``), as PyTorch's CPU kernels compute
  ``lerp``, ``add(alpha=)`` and ``addcmul``;
- :data:`prefetch_l1`, :data:`prefetch_l2`: a hint that an element's cache line will be read
  soon (``llvm.prefetch``);
- :func:`abs_bits`, :func:`float_of_bits`: a float32's bit pattern and back (``bitcast``);
- :func:`select`: ``a if c else b`` without a branch (``select``);
- :func:`became_inf`: whether a finite value of a 4-tuple became inf where it was stored
  (``llvm.fabs`` and compares, straight-line).

All are target-independent LLVM: ``llvm.fma`` is one ``vfmadd`` where the CPU has FMA and a call
to libm's correctly rounded ``fma`` where it has not (the same bits), ``llvm.prefetch`` is dropped
where the CPU has no prefetch instruction (a hint: never a fault, never a change of result).
"""

from __future__ import annotations

import math

from llvmlite import ir
from numba import types
from numba.core import cgutils

from tinyopt.kernels.native.numba_cache import cached_intrinsic


@cached_intrinsic
def fma(typingctx, x, y, z):
    """``x * y + z`` rounded once (LLVM's ``llvm.fma``: a ``vfmadd`` on CPUs that have one), as
    PyTorch's CPU kernels compute ``lerp``, ``add(alpha=)`` and ``addcmul``."""
    if not (isinstance(x, types.Float) and x == y == z):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return x(x, y, z), codegen


def _prefetcher(locality: int):
    """An intrinsic ``prefetch(a, i)``: a hint that ``a[i]``'s cache line will be read soon,
    ``llvm.prefetch`` with ``locality`` 3 (into L1: ``prefetcht0``) or 2 (into L2:
    ``prefetcht1``).  It never faults; callers keep ``i`` within ``a`` all the same."""
    @cached_intrinsic(key=f"locality={locality}")
    def prefetch(typingctx, a, i):
        if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            where = builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
            where = builder.bitcast(where, ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [where.type, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [where, ir.Constant(i32, 0), ir.Constant(i32, locality),
                              ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return types.void(a, i), codegen
    return prefetch


prefetch_l2, prefetch_l1 = _prefetcher(2), _prefetcher(3)


@cached_intrinsic
def abs_bits(typingctx, x):
    """The pattern of ``|x|`` (float32) as uint32: ordered as the magnitudes, a NaN above inf,
    so an integer maximum is the absmax, NaN if one is NaN, and it vectorizes, where a float
    maximum that keeps NaN does not."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], ir.IntType(32))
        return builder.and_(bits, ir.Constant(ir.IntType(32), 0x7FFFFFFF))
    return types.uint32(types.float32), codegen


@cached_intrinsic
def float_of_bits(typingctx, u):
    """The float32 of pattern ``u`` (uint32 or int32; numpy's ``.view(np.float32)``, which numba
    compiles as a function of its own, ~0.03 s of a cold first step)."""
    if u not in (types.uint32, types.int32):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(u), codegen


@cached_intrinsic
def select(typingctx, c, a, b):
    """``a if c else b`` (``c`` a boolean; ``a`` and ``b`` numbers, both evaluated, converted to
    their common type as the conditional expression converts them): LLVM's ``select``, the
    instruction LLVM makes of such a conditional anyway.  Why: numba's front end builds a
    conditional expression as four blocks of its own, and the cost of inlining a function
    (``jit.inline``) grows with its blocks times its variables (each block is copied with the
    function's whole scope); a call is one statement."""
    if not (isinstance(c, types.Boolean) and isinstance(a, types.Number)
            and isinstance(b, types.Number)):
        return None
    t = typingctx.unify_types(a, b)
    if t is None:
        return None

    def codegen(context, builder, signature, args):
        x = context.cast(builder, args[1], signature.args[1], t)
        y = context.cast(builder, args[2], signature.args[2], t)
        return builder.select(args[0], x, y)
    return t(c, a, b), codegen


@cached_intrinsic
def became_inf(typingctx, stored, c):
    """``any(isinf(stored[k]) and not isinf(c[k]) for k < 4)`` over two 4-tuples of floats (NaN
    is not inf): whether a finite value ``c[k]`` overflowed where it was stored (the optimizer
    walkers' coefficients, PyTorch's "value cannot be converted to type float without
    overflow").  Straight-line IR: as an inlined Python expression (16 ``abs``, 8 comparisons,
    7 ``&``/``|``) it cost numba's inlining, typing and lowering of every term in each walker's
    cold compile."""
    if not all(isinstance(t, types.BaseTuple) and len(t) == 4
               and all(isinstance(x, types.Float) for x in t) for t in (stored, c)):
        return None

    def codegen(context, builder, signature, args):
        out = ir.Constant(ir.IntType(1), 0)
        for k in range(4):
            inf = [builder.fcmp_ordered("==", builder.call(
                       builder.module.declare_intrinsic("llvm.fabs", [x.type]), [x]),
                       ir.Constant(x.type, math.inf))
                   for x in (builder.extract_value(args[0], k), builder.extract_value(args[1], k))]
            out = builder.or_(out, builder.and_(inf[0], builder.not_(inf[1])))
        return out

    return types.boolean(stored, c), codegen
