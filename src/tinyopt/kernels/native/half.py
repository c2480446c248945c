"""Exact conversions between float32 and the 16-bit floats, for kernels that store them.

numba has no float16 or bfloat16 arithmetic, so 16-bit floats live in kernels as their bit
patterns (``uint16``) and are widened to float32 to compute and rounded back to store:

- **float16** (IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits; bias 15; subnormals
  below 2^-14, largest finite 65504).
- **bfloat16** (the top half of a float32: 1 sign, 8 exponent, 7 mantissa bits; float32's range
  and subnormals).

Widening is exact.  Rounding is to nearest, ties to even, with IEEE's overflow to inf and
gradual underflow through the subnormals (``tests/test_half.py`` checks all 65,536 patterns and
every rounding boundary):

- float16 is LLVM's ``fpext``/``fptrunc`` to ``half``, which x86's F16C (``vcvtph2ps``,
  ``vcvtps2ph``, eight at a time) and ARM do in hardware: IEEE 754's conversions, bit for bit
  numpy's except that a signaling NaN comes out quiet (IEEE 754-2019 6.2: an operation on a
  signaling NaN delivers a quiet one; numpy's software conversion keeps it signaling).
- bfloat16 is integer arithmetic on the float32 pattern, bit for bit ml_dtypes' (a NaN becomes
  the quiet NaN ``0x7fc0`` with its sign).

Stochastic rounding (bfloat16): ``x`` rounds up (away from zero) to the next bfloat16 with
probability equal to its distance from the one below, by adding 16 random bits to the float32
pattern and truncating (Gupta et al. 2015, https://arxiv.org/abs/1502.02551).  The random bits
are a hash of the value and of its position, so a rounding is reproducible, the same whatever
the threads, and can be recomputed from what it rounded.

The scalar functions are numba intrinsics: a few LLVM instructions on 32-bit integers emitted
into the kernel that calls them, so loops over them vectorize (numba's own integer arithmetic
would widen every step to 64 bits).  The kernels ``widen_*`` / ``round_*`` convert whole arrays
(1-d, contiguous, the 16-bit side as ``uint16`` views).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

from tinyopt.kernels.jit import parallel_kernel, prange
from tinyopt.kernels.native.numba_cache import cached_intrinsic


_INF32 = 0x7F800000


@cached_intrinsic
def f16_to_f32(typingctx, h):
    """The float32 equal to the float16 with bit pattern ``h`` (uint16): exact."""
    if h != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@cached_intrinsic
def f32_to_f16(typingctx, x):
    """The bit pattern (uint16) of float32 ``x`` rounded to the nearest float16, ties to even."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@cached_intrinsic
def bf16_to_f32(typingctx, h):
    """The float32 equal to the bfloat16 with bit pattern ``h`` (uint16): exact."""
    if h != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        f = builder.shl(builder.zext(args[0], _I32), _I32(16))
        return builder.bitcast(f, ir.FloatType())
    return types.float32(types.uint16), codegen


@cached_intrinsic
def f32_to_bf16(typingctx, x):
    """The bit pattern (uint16) of float32 ``x`` rounded to the nearest bfloat16, ties to even
    (a NaN becomes the quiet NaN with its sign, as ml_dtypes rounds it)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f = builder.bitcast(args[0], _I32)
        odd = builder.and_(builder.lshr(f, _I32(16)), _I32(1))
        return _bf16_or_nan(builder, f, builder.add(builder.add(f, _I32(0x7FFF)), odd))
    return types.uint16(types.float32), codegen


@cached_intrinsic
def f32_to_bf16_unless_nan(typingctx, x):
    """:func:`f32_to_bf16` for a ``x`` that is not NaN, in fewer instructions (a NaN gives a
    pattern that may not be a NaN)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f = builder.bitcast(args[0], _I32)
        odd = builder.and_(builder.lshr(f, _I32(16)), _I32(1))
        rounded = builder.add(builder.add(f, _I32(0x7FFF)), odd)
        return builder.trunc(builder.lshr(rounded, _I32(16)), ir.IntType(16))
    return types.uint16(types.float32), codegen


@cached_intrinsic
def f32_to_bf16_sr(typingctx, x, i):
    """The bit pattern (uint16) of float32 ``x`` at position ``i`` stochastically rounded to
    bfloat16 (see the module docstring): ``(bits(x) + r) >> 16`` with ``r`` = 16 bits of
    murmur3's 32-bit finalizer over ``bits(x) ^ (i * 0x9E3779B9)``.  A value between the largest
    bfloat16 and 2^128 may round to inf; NaN becomes the quiet NaN with its sign."""
    if x != types.float32 or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        f = builder.bitcast(args[0], _I32)
        pos = args[1]
        pos = builder.trunc(pos, _I32) if i.bitwidth > 32 else builder.zext(pos, _I32) \
            if i.bitwidth < 32 else pos
        h = builder.xor(f, builder.mul(pos, _I32(0x9E3779B9)))
        for mult, shift in ((0x85EBCA6B, 16), (0xC2B2AE35, 13), (None, 16)):
            h = builder.xor(h, builder.lshr(h, _I32(shift)))
            if mult is not None:
                h = builder.mul(h, _I32(mult))
        return _bf16_or_nan(builder, f, builder.add(f, builder.and_(h, _I32(0xFFFF))))
    return types.uint16(types.float32, i), codegen


_I32 = ir.IntType(32)


def _bf16_or_nan(builder, f, rounded):
    """IR: the top half of ``rounded`` as i16, or the quiet NaN with ``f``'s sign if ``f`` is a
    NaN (one select, so loops over it vectorize)."""
    top = builder.trunc(builder.lshr(rounded, _I32(16)), ir.IntType(16))
    nan = builder.trunc(builder.or_(builder.and_(builder.lshr(f, _I32(16)), _I32(0x8000)),
                                    _I32(0x7FC0)), ir.IntType(16))
    is_nan = builder.icmp_unsigned(">", builder.and_(f, _I32(0x7FFFFFFF)), _I32(_INF32))
    return builder.select(is_nan, nan, top)


# ---- whole arrays (1-d, contiguous; 16-bit floats as uint16 views) ---------------------------
# kernels rather than numpy ufuncs: numpy would warn about the overflow and invalid flags that
# rounding inf, NaN and large values raises in the FPU, as numpy's own casts do not


@parallel_kernel
def widen_f16(h, out):
    """out[i] = float16 pattern h[i] as float32 (exact)."""
    for i in prange(h.shape[0]):
        out[i] = f16_to_f32(h[i])


@parallel_kernel
def widen_bf16(h, out):
    """out[i] = bfloat16 pattern h[i] as float32 (exact)."""
    for i in prange(h.shape[0]):
        out[i] = bf16_to_f32(h[i])


@parallel_kernel
def round_f16(x, out):
    """out[i] = float32 x[i] rounded to float16 (its pattern), to nearest even."""
    for i in prange(x.shape[0]):
        out[i] = f32_to_f16(x[i])


@parallel_kernel
def round_bf16(x, out):
    """out[i] = float32 x[i] rounded to bfloat16 (its pattern), to nearest even."""
    for i in prange(x.shape[0]):
        out[i] = f32_to_bf16(x[i])
