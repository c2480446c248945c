"""bfloat16 matrix products on AVX512-BF16 (``vdpbf16ps``): float32 sums of exact bf16 products.

**A deviation from DESIGN.md** ("matmul goes to BLAS through numpy"; kernels are numba): numpy's
OpenBLAS exports no bfloat16 GEMM, and float32 GEMMs cannot keep up with PyTorch's Muon, whose
Newton–Schulz iteration runs in bfloat16 on oneDNN's ``vdpbf16ps`` kernels (1000 x 1000: about
20 GFLOP a step; float32's peak on the 2-core Zen 4 this was measured on is ~220 GFLOP/s, the
bf16 dot product's twice that).  So the inner loop here is hand-written LLVM IR emitted through
``numba.extending.intrinsic`` (as ``kernels/native/shared_threads.py`` does for what numba cannot
express): ``llvm.x86.avx512bf16.dpbf16ps.512``, an ISA extension numba does not reach.  Only
call these kernels where :func:`available` is True (the CPU numba compiles for has
``avx512bf16``); elsewhere the instruction does not exist.

What is computed, for bfloat16 matrices ``A`` (M x K) and ``B`` (K x N) held as their bit
patterns (``uint16``, see ``kernels/native/half.py``)::

    out = bf16(alpha * (A @ B) + beta * C)            (C optional, bf16 too; out bf16, M x N)

Each product ``A[i, k] B[k, j]`` of two bfloat16 values is exact in float32; the sum over ``k``
is float32, in the order ``k = 0, 1, 2, ...`` (``vdpbf16ps`` adds the odd product of a pair
first, then the even one, each with one float32 rounding), so the result is a float32 GEMM of the
same values up to the summation order -- and to ``vdpbf16ps``'s flushing of subnormal inputs and
outputs to zero, which oneDNN's bfloat16 GEMMs (PyTorch's) share.  The epilogue is
``fl(fl(alpha acc) + fl(beta C))`` in float32, then one rounding to nearest even
(``half.f32_to_bf16``).  NaN and inf propagate as in a float32 GEMM.

How (GotoBLAS's scheme, sized for ``vdpbf16ps``): the operands are first *packed* -- ``A`` into
panels of ``MR`` rows, ``B`` into panels of ``NR = 32`` columns, both as bf16 pairs along K
(one ``uint32`` = ``(x[2p], x[2p+1])``), zero-padded to whole panels and to an even K -- so the
micro-kernel (:func:`_tile_dot`) needs no edge cases: for each pair ``p`` it loads 64 bytes of
B's pairs for columns 0-15 and 16-31, broadcasts each of its ``MR`` rows' A pair (32 bits) and
issues ``2 MR`` ``vdpbf16ps`` into ``2 MR`` float32 accumulators that stay in registers for the
whole K block (the loop is 28 ``vdpbf16ps``, 14 ``vbroadcastss`` and two 64-byte loads per
pair, no spills: ``inspect_asm`` of :func:`gemm`).  Zero padding keeps every read in bounds and
adds only ``0 * 0`` (padded K) or lands in rows and columns that are never stored (padded M,
N).  The column panels are split between the threads (``prange``); an iteration packs its own
B panels and writes only its own columns of ``out`` (and, for a symmetric product, their
mirror rows).  Call :func:`matmul`; the other kernels are its parts.

Measured on the 2-core Zen 4 (~3.6 GHz, so a bf16 peak of ~470 GFLOP/s on both cores), 1000 x
1000 x 1000: 5.1-6.1 ms (330-390 GFLOP/s) against 9.5-10.6 ms for numpy's float32 ``a @ b``;
``x @ x.T`` as a symmetric product 2.9-3.3 ms (numpy 6.0-7.3).  Newton–Schulz (5 steps, 1000 x
1000): ~61 ms against ~117 ms on numpy's float32 BLAS (``docs/performance.md``).
"""

from __future__ import annotations

import warnings

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils

from tinyopt.kernels.jit import inline, parallel_kernel, prange
from tinyopt.kernels.native.numba_cache import cached_intrinsic
from tinyopt.kernels.native import half

MR = 14
"""Rows of a micro-tile: 2 MR = 28 accumulators plus B's two vectors in the 32 zmm registers."""
NR = 32
"""Columns of a micro-tile: two 16-lane float32 vectors."""
KC = 128
"""Pairs of K per block: a B panel block (KC x 32 pairs, 16 KB) stays in L1 while every row
panel of A passes by."""

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()


class _BFloat(ir.types.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it)."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


_V16F = ir.VectorType(_F32, 16)
_V16I = ir.VectorType(_I32, 16)
_V32BF = ir.VectorType(_BFloat(), 32)


def available() -> bool:
    """True if the CPU numba compiles for has AVX512-BF16 (cheap: no compiling; the answer of
    ``numba.config.CPU_FEATURES`` when the user set it, else of the host CPU, as numba's own
    target does)."""
    if _AVAILABLE:
        return _AVAILABLE[0]
    try:
        import llvmlite.binding as llvm
        from numba.core import config
        if config.CPU_NAME not in (None, "host", llvm.get_host_cpu_name()):
            features = config.CPU_FEATURES or ""
        elif config.CPU_FEATURES is not None:
            features = config.CPU_FEATURES
        else:
            features = llvm.get_host_cpu_features().flatten()
        ok = "+avx512bf16" in features.split(",") and "+avx512f" in features.split(",")
    except Exception:
        ok = False
    _AVAILABLE.append(ok)
    return ok


_AVAILABLE: list[bool] = []


def usable() -> bool:
    """:func:`available`, and the kernels compile here: checked once by a 2 x 2 x 2 product
    (the compile its first real use would do anyway).  A numba or LLVM that cannot compile the
    intrinsic (another release than the tested one, a CPU name LLVM does not know) gives False
    with a warning, and Muon takes its float32 path."""
    if not available():
        return False
    if not _USABLE:
        try:
            one = np.full((2, 2), 0x3F80, np.uint16)  # bf16 1.0
            out = np.zeros((2, 2), np.uint16)
            matmul(one, one, out)
            ok = bool((out == 0x4000).all())  # 2.0
        except Exception as e:  # noqa: BLE001 - any failure to build means: do not use it
            warnings.warn(f"tinyopt: the AVX512-BF16 GEMM is not usable here "
                          f"({type(e).__name__}: {e}); Muon computes in float32", RuntimeWarning)
            ok = False
        _USABLE.append(ok)
    return _USABLE[0]


_USABLE: list[bool] = []


@cached_intrinsic
def _tile_dot(typingctx, ap, a_off, bp, b_off, kpairs, acc, c_off, first):
    """``acc[c_off + 32 r + j] (+)= sum_p A-pair(ap[a_off + MR p + r]) . B-pair(bp[b_off + 32 p
    + j])`` for r < MR, j < 32, p < kpairs (``kpairs`` >= 1; starts from 0 when ``first``): the
    micro-kernel, one ``vdpbf16ps`` per row and 16 columns and pair.  ``ap``, ``bp`` uint32
    (bf16 pairs), ``acc`` float32, all 1-d contiguous; the caller checks the bounds."""
    u32 = types.Array(types.uint32, 1, "C")
    if (ap != u32 or bp != u32 or acc != types.Array(types.float32, 1, "C")
            or not all(isinstance(t, types.Integer) for t in (a_off, b_off, kpairs, c_off))
            or first != types.boolean):
        return None
    sig = types.void(ap, types.int64, bp, types.int64, types.int64, acc, types.int64,
                     types.boolean)

    def codegen(context, builder, signature, args):
        mod = builder.module
        dot = cgutils.get_or_insert_function(
            mod, ir.FunctionType(_V16F, [_V16F, _V32BF, _V32BF]),
            "llvm.x86.avx512bf16.dpbf16ps.512")
        a_arr, a_off, b_arr, b_off, kp, c_arr, c_off, first = args
        data = lambda ty, v: context.make_array(ty)(context, builder, v).data
        a_base = builder.gep(data(signature.args[0], a_arr), [a_off])
        b_base = builder.bitcast(builder.gep(data(signature.args[2], b_arr), [b_off]),
                                 _V32BF.as_pointer())
        c_base = builder.bitcast(builder.gep(data(signature.args[5], c_arr), [c_off]),
                                 _V16F.as_pointer())
        zero = ir.Constant(_V16F, None)
        init = [builder.select(first, zero, builder.load(builder.gep(c_base, [_I64(v)]),
                                                         align=4))
                for v in range(2 * MR)]
        entry = builder.block
        loop = builder.append_basic_block("tile_k")
        done = builder.append_basic_block("tile_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        p = builder.phi(_I64)
        p.add_incoming(_I64(0), entry)
        accs = []
        for v in range(2 * MR):
            phi = builder.phi(_V16F)
            phi.add_incoming(init[v], entry)
            accs.append(phi)
        b0 = builder.load(builder.gep(b_base, [builder.mul(p, _I64(2))]), align=4)
        b1 = builder.load(builder.gep(b_base, [builder.add(builder.mul(p, _I64(2)), _I64(1))]),
                          align=4)
        a_row = builder.gep(a_base, [builder.mul(p, _I64(MR))])
        new = []
        for r in range(MR):
            pair = builder.load(builder.gep(a_row, [_I64(r)]), align=4)
            vec = builder.insert_element(ir.Constant(_V16I, None), pair, _I32(0))
            vec = builder.shuffle_vector(vec, ir.Constant(_V16I, None),
                                         ir.Constant(_V16I, None))
            a = builder.bitcast(vec, _V32BF)
            new.append(builder.call(dot, [accs[2 * r], a, b0]))
            new.append(builder.call(dot, [accs[2 * r + 1], a, b1]))
        p_next = builder.add(p, _I64(1))
        p.add_incoming(p_next, loop)
        for phi, v in zip(accs, new):
            phi.add_incoming(v, loop)
        builder.cbranch(builder.icmp_signed("<", p_next, kp), loop, done)
        builder.position_at_end(done)
        for v in range(2 * MR):
            builder.store(new[v], builder.gep(c_base, [_I64(v)]), align=4)
        return context.get_dummy_value()
    return sig, codegen


# ---- packing (bf16 patterns as uint16 in, pairs as uint32 out) --------------------------------

def panels(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(row panels, column panels, pairs of K) of an M x K by K x N product: the packed
    buffers hold ``MR * pairs`` uint32 per row panel and ``NR * pairs`` per column panel."""
    return -(-m // MR), -(-n // NR), max(1, -(-k // 2))


# (Indices are unsigned where a loop should vectorize along contiguous memory: numba adds no
# negative-index wraparound then, whose select kept the loops from vectorizing: the epilogue of a
# 1000 x 1000 product took 1.17 ms with signed indices and 0.15 ms with these; packing B, 0.47
# -> 0.30 ms.  Where the stores are strided (packing A, or B from B.T) signed indices are kept:
# unsigned ones let LLVM vectorize the stores into scatters, 0.13 -> 0.39 ms packing A, and
# 0.25 -> 0.46 ms packing B.T.)

@parallel_kernel(sized_by=0)
def pack_rows(a, ap):
    """Pack ``a`` (M x K uint16 bf16 patterns, C-contiguous) as the A operand:
    ``ap[(I KP + p) MR + r] = a[I MR + r, 2p] | a[I MR + r, 2p + 1] << 16`` (uint32, 1-d),
    zero outside ``a``; ``ap`` holds ``panels(M, ., K)``'s row panels times ``MR * KP``."""
    m, k = a.shape
    kp = max(1, (k + 1) // 2)
    npan = (m + MR - 1) // MR
    if ap.shape[0] < npan * MR * kp:
        raise ValueError("pack_rows: ap is too small")
    for i in prange(npan * MR):
        _pack_pairs(a, i, i < m, ap, (i // MR) * kp * MR + i % MR, MR, kp)


@inline
def _pack_pairs(x, i, valid, dst, base, stride, kp):
    """``dst[base + p stride] = x[i, 2p] | x[i, 2p + 1] << 16`` for ``p < kp``, zero past
    ``x``'s K, and zero throughout when not ``valid`` (``i`` is then not read): row ``i`` of A,
    or column ``i`` of B from ``B.T``, as strided pairs."""
    k = x.shape[1]
    if valid:
        for p in range(k // 2):
            dst[base + p * stride] = np.uint32(x[i, 2 * p]) | (np.uint32(x[i, 2 * p + 1])
                                                               << np.uint32(16))
        for p in range(k // 2, kp):
            dst[base + p * stride] = np.uint32(x[i, 2 * p]) if 2 * p < k else np.uint32(0)
    else:
        for p in range(kp):
            dst[base + p * stride] = 0


@inline
def _pack_panel(b, bp, jp, kp):
    """Column panel ``jp`` of ``b`` (K x N) as the B operand: ``bp[(jp KP + p) NR + c] =
    b[2p, jp NR + c] | b[2p + 1, jp NR + c] << 16``, zero outside ``b``."""
    k, n = b.shape
    bf = b.reshape(-1)
    j0 = jp * NR
    w = np.uint64(min(NR, n - j0))
    for p in range(kp):
        base = np.uint64((jp * kp + p) * NR)
        r0 = np.uint64(2 * p * n + j0)
        if 2 * p + 1 < k:
            for c in range(w):
                bp[base + c] = np.uint32(bf[r0 + c]) | (np.uint32(bf[r0 + n + c])
                                                       << np.uint32(16))
        elif 2 * p < k:
            for c in range(w):
                bp[base + c] = np.uint32(bf[r0 + c])
        else:
            w = np.uint64(0)
        for c in range(w, NR):
            bp[base + c] = 0


@inline
def _pack_panel_t(bt, bp, jp, kp):
    """Column panel ``jp`` of ``B = bt.T`` (``bt`` N x K) as the B operand:
    ``bp[(jp KP + p) NR + c] = bt[jp NR + c, 2p] | bt[jp NR + c, 2p + 1] << 16``, zero outside."""
    for c in range(NR):
        j = jp * NR + c
        _pack_pairs(bt, j, j < bt.shape[0], bp, jp * kp * NR + c, NR, kp)


# ---- the product ------------------------------------------------------------------------------

@parallel_kernel(sized_by=2)
def gemm(ap, kp, b, b_transposed, bp, alpha, beta, c, out, upper, acc):
    """``out = bf16(alpha * (A @ B) + beta * c)``, ``A`` packed in ``ap`` (:func:`pack_rows`,
    ``kp`` pairs of K), ``B`` = ``b`` (K x N) or ``b.T`` (``b`` N x K) when ``b_transposed``;
    ``b``, ``c``, ``out`` uint16 bf16 patterns, C-contiguous (``c`` M x N, or with no elements:
    then no ``beta c`` term; ``out`` must not be ``b``); ``alpha``, ``beta`` float32; ``bp``
    uint32 scratch of ``NR * kp`` per column panel (B's packed panels), ``acc`` float32 scratch
    (:func:`acc_size`).

    Column panels ``q`` and ``N/NR - 1 - q`` go to one parallel iteration, which packs them
    into their own part of ``bp``, multiplies them by every row panel (K in blocks of ``KC``
    pairs, the partial sums in its own part of ``acc``) and writes their columns of ``out``.
    ``upper`` (a square product the caller knows is symmetric): only the row panels that reach
    the diagonal; the iteration writes elements ``i <= j`` of its columns and, transposed, the
    ``j > i`` of its columns' rows -- each element of ``out`` written by one iteration only,
    and every iteration the same work."""
    m, n = out.shape
    pm = (m + MR - 1) // MR
    pn = (n + NR - 1) // NR
    half_n = (pn + 1) // 2
    has_c = c.size > 0
    kb = b.shape[1] if b_transposed else b.shape[0]
    nb = b.shape[0] if b_transposed else b.shape[1]
    if (ap.shape[0] < pm * MR * kp or bp.shape[0] < pn * NR * kp or kp < 1
            or kp != max(1, (kb + 1) // 2) or nb != n or (upper and m != n)
            or acc.shape[0] < half_n * pm * MR * NR
            or (has_c and (c.shape[0] != m or c.shape[1] != n))):
        raise ValueError("gemm: buffers do not match the shapes")
    of = out.reshape(-1)
    cf = c.reshape(-1)
    for qq in prange(half_n):
        q = np.int64(qq)  # (prange's index may be unsigned: pn - 1 - q would be a float)
        a0 = q * pm * MR * NR
        for side in range(2):
            jp = q if side == 0 else pn - 1 - q
            if side == 1 and jp == q:
                break
            if b_transposed:
                _pack_panel_t(b, bp, jp, kp)
            else:
                _pack_panel(b, bp, jp, kp)
            j0 = jp * NR
            w = min(NR, n - j0)
            rows = pm
            if upper:  # the row panels that reach the diagonal of these columns
                rows = min(pm, (j0 + w - 1) // MR + 1)
            for k0 in range(0, kp, KC):
                kc = min(KC, kp - k0)
                for ip in range(rows):
                    _tile_dot(ap, (ip * kp + k0) * MR, bp, (jp * kp + k0) * NR, kc, acc,
                              a0 + ip * MR * NR, k0 == 0)
            for ip in range(rows):
                i0 = ip * MR
                h = min(MR, m - i0)
                t = a0 + ip * MR * NR
                if not upper or i0 + h - 1 < j0:  # the whole tile is written as it stands
                    for r in range(h):
                        o = np.uint64((i0 + r) * n + j0)
                        ta = np.uint64(t + r * NR)
                        if has_c:
                            for j in range(np.uint64(w)):
                                v = alpha * acc[ta + j] + beta * half.bf16_to_f32(cf[o + j])
                                of[o + j] = half.f32_to_bf16(v)
                        else:
                            for j in range(np.uint64(w)):
                                of[o + j] = half.f32_to_bf16(alpha * acc[ta + j])
                    if upper:
                        for j in range(np.uint64(w)):
                            o = np.uint64((j0 + j) * n + i0)
                            for r in range(np.uint64(h)):
                                of[o + r] = of[np.uint64((i0 + r) * n + j0) + j]
                else:  # a tile across the diagonal: its elements i <= j, and their mirrors
                    for r in range(h):
                        for j in range(max(0, i0 + r - j0), w):
                            v = alpha * acc[t + r * NR + j]
                            if has_c:
                                v = v + beta * half.bf16_to_f32(c[i0 + r, j0 + j])
                            bits = half.f32_to_bf16(v)
                            out[i0 + r, j0 + j] = bits
                            out[j0 + j, i0 + r] = bits


def acc_size(m: int, n: int) -> int:
    """The float32 elements :func:`gemm` needs as ``acc`` for an M x N product."""
    pm, pn = -(-m // MR), -(-n // NR)
    return (pn + 1) // 2 * pm * MR * NR


def _aligned(work: dict, key: str, size: int, dtype) -> np.ndarray:
    """``work[key]``, a 1-d array of at least ``size`` elements starting on a 64-byte line
    (so no 64-byte load of a packed panel splits two cache lines), made when missing."""
    have = work.get(key)
    if have is None or have.shape[0] < size:
        raw = np.empty(size * np.dtype(dtype).itemsize + 64, np.uint8)
        start = -raw.ctypes.data % 64
        have = work[key] = raw[start:start + size * np.dtype(dtype).itemsize].view(dtype)
    return have[:size]


_NO_C = np.zeros((0, 0), np.uint16)

SERIAL_BELOW = 1 << 21
"""Products of fewer multiply-adds (M N K) run on the calling thread: waking the threads costs
more than they save there (Newton–Schulz on 64 x 64, 15 products of 2^18: 0.28 ms with
threads, 0.23 ms without)."""


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, b_transposed: bool = False,
           alpha: float = 1.0, beta: float = 0.0, c: np.ndarray | None = None,
           symmetric: bool = False, work: dict | None = None) -> None:
    """``out = bf16(alpha * (a @ b) + beta * c)`` (``b.T`` for ``b`` when ``b_transposed``): all
    bf16 patterns (uint16, 2-d, C-contiguous), ``c`` M x N or None (then no ``beta c`` term).
    ``symmetric``: the caller knows the product is symmetric (``x @ x.T``, or ``s @ s.T`` with
    ``s`` symmetric, and ``c`` symmetric): only the tiles on and above the diagonal are
    computed, and mirrored -- the same bits as computing all, since element ``(j, i)`` is
    the same float32 sum, in the same order, of the same products as ``(i, j)``.  ``work``: a
    dict that keeps the packed buffers between calls."""
    work = {} if work is None else work
    for name, x in (("a", a), ("b", b), ("out", out), ("c", c)):
        if x is not None and (x.dtype != np.uint16 or x.ndim != 2 or not x.flags.c_contiguous):
            raise ValueError(f"matmul: {name} must be a 2-d C-contiguous uint16 array (bf16 "
                             f"patterns), not {x.dtype} {x.shape}")
    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    if (b.shape[1] if b_transposed else b.shape[0]) != k or out.shape != (m, n):
        raise ValueError(f"matmul: shapes {a.shape} @ {b.shape}{'.T' if b_transposed else ''}"
                         f" -> {out.shape} do not match")
    if symmetric and m != n:
        raise ValueError("matmul: a symmetric product is square")
    if out is b or (c is not None and c.shape != out.shape):
        raise ValueError("matmul: out must not be b, and c must have out's shape")
    pm, pn, kp = panels(m, n, k)
    ap = _aligned(work, "a", pm * MR * kp, np.uint32)
    bp = _aligned(work, "b", pn * NR * kp, np.uint32)
    acc = _aligned(work, "acc", acc_size(m, n), np.float32)
    serial = m * n * k < SERIAL_BELOW
    (pack_rows.serial if serial else pack_rows.parallel)(a, ap)
    (gemm.serial if serial else gemm.parallel)(
        ap, kp, b, b_transposed, bp, np.float32(alpha), np.float32(beta),
        _NO_C if c is None else c, out, symmetric, acc)
