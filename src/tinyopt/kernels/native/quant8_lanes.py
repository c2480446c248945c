"""The 8-bit optimizers' table lookups, 16 elements at once (LLVM vectors, ``llvm.masked.gather``).

``kernels/quant8.py`` holds the quantization (codes, lookup tables, the step kernels); this holds
the lanes its kernels call per 16 elements (and per one, for a block's tail): dequantize,
quantize, and Adam's dequantize-and-update pass.  ``llvm.masked.gather`` is target-independent:
one ``vgatherdps``/``vpgatherdd`` where the CPU has AVX2 or AVX-512, and scalar loads where it
has not (LLVM's ``ScalarizeMaskedMemIntrin``), with the same bits (tests/test_native.py compiles
them for a CPU without AVX).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

from tinyopt.kernels.native.numba_cache import cached_intrinsic

KEY_SHIFT = 15
"""A float32 ``x``'s lookup key is its pattern's top 17 bits (sign, exponent, 8 mantissa bits):
a cell of relative width 2^-8, narrower than the gaps between the codes' midpoints (0.7% at
least), so the nearest code changes at most once inside a cell (``kernels.quant8.tables``
checks it)."""

_LOW = (1 << KEY_SHIFT) - 1

VECTOR = 16
"""Elements per call of the ``*_lanes`` intrinsics."""


def _lane_ops(width: int):
    """The table lookups of a step, over ``width`` elements at once as LLVM vectors with
    ``llvm.masked.gather`` (numba's loop vectorizer does not gather on x86: LLVM 20's cost
    model prefers scalar loads there; a scalar quantizer loop took 5-6 ns an element, the
    rest of the Adam step 1):

    ``dequantize(out, q, at, code, scale)``: ``out[at + i] = code[q[at + i]] * scale``;
    ``quantize(r, x, at, scale, table)``: ``r[at + i]`` = the index of the code value nearest
    ``x[at + i] * scale`` (the lower one on a tie; NaN: 0) for ``i < width``, and ``quantize_div``
    the same for ``x[at + i] / scale``, from the table of ``kernels.quant8.tables``: the cell's
    index, plus one from its threshold on.  Integer arithmetic on the pattern, no branch and no
    search: a moment's indices are as unpredictable as its values.  (bitsandbytes' CPU quantizer in
    0.50 is not exact: 0.1% of its signed and 3% of its unsigned indices are not the nearest code.)

    ``adam(p, g, at, m, v, r1, r2, code1, code2, (s1, s2), (b1, 1 - b1, b2, 1 - b2, decay, c0,
    c1))``: Adam's 8-bit update of elements ``at + i`` (the float32 operations of
    ``kernels.quant8``'s scalar Adam update in its order, so the same bits), its states
    dequantized from ``r1``, ``r2`` on the way in and left in ``m``, ``v``.  In one pass the
    dequantizing gathers overlap the update's divider (Adam 1e7, one thread: 15.0 -> 12.8 ms).
    LLVM does not vectorize a loop that dequantizes and updates: 16 elements at a time it unrolls
    the update and leaves it scalar; 32 to 128 at a time, Adam took 2.5x as long.  Holding a
    block's requantization for the next block's pass, its gathers in the same loop, gained nothing
    (13.4 ms: the gather unit is then the bound).

    The caller keeps ``at + width`` within the arrays; every index read from ``q`` (< 256) or
    computed as a key (< 2^17) is within ``code`` and ``table``."""
    f32, i32, i8 = ir.FloatType(), ir.IntType(32), ir.IntType(8)

    def vec(t):
        return ir.VectorType(t, width)

    def splat(builder, value):
        v = builder.insert_element(ir.Constant(vec(value.type), ir.Undefined), value,
                                   ir.Constant(i32, 0))
        return builder.shuffle_vector(v, v, ir.Constant(vec(i32), [0] * width))

    def elements(context, builder, sig, args, k, ty):
        """A pointer to ``width`` elements (LLVM type ``ty``) of array argument ``k`` from
        index ``at`` (argument 2) on."""
        data = context.make_array(sig.args[k])(context, builder, args[k]).data
        where = builder.gep(data, [context.cast(builder, args[2], sig.args[2], types.intp)])
        return builder.bitcast(where, vec(ty).as_pointer())

    def gather(builder, base, index, ty):
        """``base[index]`` for a vector of ``i32`` indices (nonnegative: GEP sign-extends)."""
        where = builder.gep(base, [index], inbounds=True, source_etype=ty)
        where.type = vec(ty.as_pointer())  # a vector GEP (llvmlite types GEPs as scalar)
        fnty = ir.FunctionType(vec(ty), [where.type, i32, vec(ir.IntType(1)), vec(ty)])
        name = f"llvm.masked.gather.v{width}{'f32' if ty == f32 else 'i32'}.v{width}p0"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        return builder.call(fn, [where, ir.Constant(i32, 4),
                                 ir.Constant(vec(ir.IntType(1)), [1] * width),
                                 ir.Constant(vec(ty), ir.Undefined)])

    @cached_intrinsic(key=f"width={width}")
    def dequantize(typingctx, out, q, at, code, scale):
        if not (out.dtype == code.dtype == scale == types.float32 and q.dtype == types.uint8
                and isinstance(at, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            qs = builder.load(elements(context, builder, sig, args, 1, i8), align=1)
            base = context.make_array(sig.args[3])(context, builder, args[3]).data
            values = builder.fmul(gather(builder, base, builder.zext(qs, vec(i32)), f32),
                                  splat(builder, args[4]))
            builder.store(values, elements(context, builder, sig, args, 0, f32), align=4)
            return context.get_dummy_value()
        return types.void(out, q, at, code, scale), codegen

    def quantizer(divide: bool):
        @cached_intrinsic(key=f"width={width},divide={divide}")
        def quantize(typingctx, r, x, at, scale, table):
            if not (x.dtype == scale == types.float32 and r.dtype == types.uint8
                    and table.dtype == types.uint32 and isinstance(at, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                def const(v):
                    return ir.Constant(vec(i32), [v] * width)
                xs = builder.load(elements(context, builder, sig, args, 1, f32), align=4)
                y = (builder.fdiv if divide else builder.fmul)(xs, splat(builder, args[3]))
                bits = builder.bitcast(y, vec(i32))
                key = builder.lshr(bits, const(KEY_SHIFT))
                t = builder.xor(builder.and_(bits, const(_LOW)),
                                builder.and_(builder.ashr(bits, const(31)), const(_LOW)))
                base = context.make_array(sig.args[4])(context, builder, args[4]).data
                entry = gather(builder, base, key, i32)
                index = builder.add(builder.and_(entry, const(0xFF)), builder.zext(
                    builder.icmp_unsigned(">=", t, builder.lshr(entry, const(8))), vec(i32)))
                builder.store(builder.trunc(index, vec(i8)),
                              elements(context, builder, sig, args, 0, i8), align=1)
                return context.get_dummy_value()
            return types.void(r, x, at, scale, table), codegen
        return quantize

    @cached_intrinsic(key=f"width={width}")
    def adam(typingctx, ps, gs, at, m, v, r1, r2, code1, code2, scales, k):
        f32t = types.float32
        if not (ps.dtype == gs.dtype == m.dtype == v.dtype == f32t and isinstance(at, types.Integer)
                and r1.dtype == r2.dtype == types.uint8 and scales == types.UniTuple(f32t, 2)
                and k == types.UniTuple(f32t, 7)):
            return None

        def codegen(context, builder, sig, args):
            def load(i, ty, align):
                return builder.load(elements(context, builder, sig, args, i, ty), align=align)

            def store(value, i):
                builder.store(value, elements(context, builder, sig, args, i, f32), align=4)

            def table(i):
                return context.make_array(sig.args[i])(context, builder, args[i]).data
            s1, s2 = (splat(builder, x) for x in cgutils.unpack_tuple(builder, args[9], 2))
            b1, omb1, b2, omb2, decay, c0, c1 = (splat(builder, x) for x in
                                                 cgutils.unpack_tuple(builder, args[10], 7))
            mul, add = builder.fmul, builder.fadd
            m0 = mul(gather(builder, table(7), builder.zext(load(5, i8, 1), vec(i32)), f32), s1)
            v0 = mul(gather(builder, table(8), builder.zext(load(6, i8, 1), vec(i32)), f32), s2)
            g = load(1, f32, 4)
            m1 = add(mul(m0, b1), mul(omb1, g))
            v1 = add(mul(v0, b2), mul(mul(omb2, g), g))
            sqrt = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec(f32), [vec(f32)]), f"llvm.sqrt.v{width}f32")
            step = builder.fdiv(m1, add(builder.call(sqrt, [v1]), c1))
            store(add(mul(load(0, f32, 4), decay), mul(c0, step)), 0)
            store(m1, 3)
            store(v1, 4)
            return context.get_dummy_value()
        return types.void(ps, gs, at, m, v, r1, r2, code1, code2, scales, k), codegen

    return dequantize, quantizer(False), quantizer(True), adam


dequantize_lanes, quantize_lanes, quantize_div_lanes, adam_lanes = _lane_ops(VECTOR)
dequantize_lane, quantize_lane, quantize_div_lane, adam_lane = _lane_ops(1)
