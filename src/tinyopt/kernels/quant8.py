"""8-bit optimizer state: blockwise dynamic quantization (Dettmers et al. 2022,
https://arxiv.org/abs/2110.02861) and the fused steps of the 8-bit optimizers.

A state tensor is cut into blocks of ``BLOCK`` = 256 elements; block ``b`` keeps its largest
magnitude ``absmax[b]`` (float32) and each element the index (uint8) of the nearest value of a
256-entry code ``c`` to ``x * (1 / absmax[b])`` (as bitsandbytes' GPU kernels normalize; ``x /
absmax[b]`` where ``1 / absmax[b]`` overflows): ``x ~ c[q] * absmax[b]``.  The codes are the dynamic
maps of Dettmers (2016, https://arxiv.org/abs/1511.04561) as bitsandbytes builds them
(:func:`dynamic_map`): signed for a first moment, unsigned for a second; decades 1e-6..1 with
more fraction bits for the larger ones, so relative error stays near 1-2% from the block's
maximum down to a millionth of it.

A step (``kind[...]``, one kernel per algorithm and 16-bit mode) runs over the blocks of a
group's flat buffers, parallel over chunks of ``BLOCKS_PER_CHUNK`` blocks (each block depends on
itself alone: the same bits on any number of threads).  For a block of a quantized parameter:
dequantize its states, update them and the parameter in float32 (the parameter from the updated
float32 states, as bitsandbytes), then its new absmax and the requantized indices -- the one
pass over the memory the step reads and writes (1 byte per state per element where float32
Adam moves 4).  A parameter smaller than ``min_8bit_size`` keeps float32 state (``f1``, ``f2``)
and takes bitsandbytes' 32-bit update.

Speed (1e7 elements, one thread of the 2-core Sapphire Rapids VM at 2.6 GHz, CPU time, medians,
under load 3-7, 2026-12-06): an Adam step takes 11.9-12.8 ms where float32 AdamW's takes 9.3-9.6;
Lion 9.1-9.8, SGD-momentum 8.6-9.8 (one step's time moves by up to 15% with where its parameter,
gradient and scratch happen to lie, mod 4 KiB and in huge pages or not).  Where the Adam step's time
goes (perf samples): the pass that dequantizes and updates 45%, the two requantizing loops 32%, the
prefetches of the block two ahead 18% (waiting for DRAM: see :func:`_prefetch_block`, which took the
step from 19.4 ms to 13.6; the fused pass, ``adam_lanes``, to 12.8).  Per element that is 1.5
cycles in the fused pass (bound by the divider: two 8-lane ``vsqrtps`` and two ``vdivps`` per 16
elements, 21 cycles, which float32 AdamW pays as well, its two dequantizing 16-lane ``vgatherdps``
overlapping it), 1.0 in the requantizing ``vpgatherdd`` (8 cycles each, the gather unit's
throughput: the tables' hot parts are in L1) and 0.6 waiting for memory, where float32 AdamW takes
2.4 in all (28 bytes an element at 30 GB/s).  So on one thread the exact lookups, not the bytes
moved, keep Adam slower than AdamW; with two threads AdamW is bound by the memory bandwidth the
cores share, and the 8-bit steps, which move 16 bytes an element, by each core's own work.  Tried
and dropped: one 64-bit gather of a (signed, unsigned) code pair per element pair (a 512 KiB table)
cost the same as two; dequantizing 64 elements by AVX512-VBMI byte permutes (``vpermi2b`` on the
codes' four byte planes, the bytes then widened and merged into floats) was slower than the gathers,
17.9 against 17.0 ms (the widening took ~40 shuffle uops per 64 elements, on the one port the
permutes use); prefetching each line of the block ahead inside the dequantizing loop instead of in
one burst: the same to 2%.  Taken: reading each gradient where it lies (a user's own gradient was
first copied into the flat buffer: 6.4 ms of the 27.2 the step took); earlier, a multiply by ``1 /
absmax`` instead of a division and one division in Adam's update instead of two (22.7 -> 18 ms on a
quieter machine).

Arguments of every kernel: ``q`` (the 16-bit parameters' storage, for ``low`` modes; else
empty), ``p`` (float32, flat), ``ga`` (the address of each parameter's float32 gradient, read in
place), ``seg`` (parameter ``j`` is ``p[seg[j]:seg[j + 1]]``), ``q1``, ``q2`` (uint8 state of
the 8-bit parameters, at their own offsets), ``f1``, ``f2`` (float32 state of the others),
``a1``, ``a2`` (absmax per block), ``code1``, ``code2``, the block table ``bj`` (parameter),
``blo``, ``bhi`` (element range in ``p``), ``boff`` (state offset), ``kind8`` (per parameter: 1
when quantized), ``table1``, ``table2`` (the codes' lookup tables, :func:`tables`), ``flags``
(1: has a gradient), ``steps`` (float32, already advanced), ``hs`` (host record), ``scratch``
(float32, ``(chunks, 2, BLOCK)``), ``coef`` (float32, ``(len(flags), 4)``: each parameter's
coefficients of this step, computed first).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized
from tinyopt.kernels.native.address import at, local_copy
from tinyopt.kernels.native.instructions import abs_bits, float_of_bits, prefetch_l1, prefetch_l2
from tinyopt.kernels.native.quant8_lanes import (
    KEY_SHIFT, VECTOR, adam_lane, adam_lanes, dequantize_lane, dequantize_lanes, quantize_div_lane,
    quantize_div_lanes, quantize_lane, quantize_lanes)
from tinyopt.kernels.optim import sixteen_bit

BLOCK = 256
"""Elements per quantization block (bitsandbytes' blockwise optimizers)."""

BLOCKS_PER_CHUNK = 64
"""Blocks per parallel work item (16384 elements, the walkers' chunk)."""


def _linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps, dtype=torch.float32)`` as its scalar path computes it:
    the ends rounded to float32, the values in double, the first half from ``start``, the
    second from ``end`` (torch's vectorized path rounds some values to the other neighbour:
    bitsandbytes' maps differ from these in a few codes, by one float32 ulp)."""
    a, b = float(np.float32(start)), float(np.float32(end))
    step = (b - a) / (steps - 1)
    i = np.arange(steps, dtype=np.float64)
    return np.where(i < steps // 2, a + step * i, b - step * (steps - 1 - i)).astype(np.float32)


def dynamic_map(signed: bool) -> np.ndarray:
    """The 256-value dynamic quantization code (float32, sorted) of bitsandbytes'
    ``create_dynamic_map(signed)``: signed, -0.993..1 (no -1: a block's largest negative value
    quantizes to -0.993 of itself); unsigned, 0..1.  (A few codes may differ from
    bitsandbytes' by one ulp: see :func:`_linspace_f32`.)"""
    data: list[float] = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        bounds = _linspace_f32(0.1, 1.0, items)
        means = (bounds[:-1] + bounds[1:]) / np.float32(2.0)
        scale = 10.0 ** (-6 + i)
        data += (means * np.float32(scale)).tolist()  # (a float32 tensor times a Python float)
        if signed:
            data += (means * np.float32(-scale)).tolist()
    data += [0.0, 1.0]
    return np.array(sorted(data), dtype=np.float32)


_LOW = (1 << KEY_SHIFT) - 1


def nearest(x: np.ndarray, code: np.ndarray) -> np.ndarray:
    """The index of the code value nearest each of ``x`` (float32), the lower one on a tie
    (distances in float32), 0 for NaN: the quantizer's definition, in numpy."""
    i = np.clip(np.searchsorted(code, x, side="right") - 1, 0, len(code) - 1)
    j = np.minimum(i + 1, len(code) - 1)
    with np.errstate(invalid="ignore"):
        i = i + (np.abs(x - code[j]) < np.abs(x - code[i]))
    return np.where(np.isnan(x), 0, i)


def tables(code: np.ndarray) -> np.ndarray:
    """The quantizer's lookup table for ``code`` (uint32, one entry per key, a cell of float32
    patterns): ``first | threshold << 8``, the nearest index at the cell's least value and the
    position in the cell, counted from its least value, where the nearest index becomes the
    next one (``2^15``: nowhere).  Built by bisection with :func:`nearest`, so the kernel gives
    exactly its indices.  Raises if the nearest index changes twice inside a cell."""
    keys = np.arange(1 << (32 - KEY_SHIFT), dtype=np.uint32)
    flip = np.where(keys >= (1 << (31 - KEY_SHIFT)), _LOW, 0).astype(np.uint32)

    def value(t):  # the float at position t of each cell (t counted from its least value)
        return ((keys << np.uint32(KEY_SHIFT)) | (t.astype(np.uint32) ^ flip)).view(np.float32)

    first = nearest(value(np.zeros(len(keys), np.uint32)), code)
    last = nearest(value(np.full(len(keys), _LOW, np.uint32)), code)
    finite = np.isfinite(value(np.zeros(len(keys), np.uint32)))
    finite &= np.isfinite(value(np.full(len(keys), _LOW, np.uint32)))
    if np.any((last - first)[finite] > 1):
        raise ValueError("the nearest code changes twice in a lookup cell: use more key bits")
    lo, hi = np.zeros(len(keys), np.int64), np.full(len(keys), _LOW, np.int64)
    moves = finite & (last > first)
    for _ in range(KEY_SHIFT):  # the least position whose nearest index is the cell's last
        mid = (lo + hi) // 2
        at_last = nearest(value(mid), code) == last
        hi = np.where(at_last, mid, hi)
        lo = np.where(at_last, lo, mid)
    threshold = np.where(moves, hi, 1 << KEY_SHIFT).astype(np.uint32)
    return np.where(finite, first, 0).astype(np.uint32) | (threshold << np.uint32(8))


_NORMAL = np.float32(np.finfo(np.float32).tiny)




@inline
def _dequantize_block(out, r, n, code, scale):
    """``out[:n] = code[r[:n]] * scale``."""
    whole = n - n % VECTOR  # vectors of VECTOR elements, then one at a time
    for k in range(0, whole, VECTOR):
        dequantize_lanes(out, r, k, code, scale)
    for k in range(whole, n):
        dequantize_lane(out, r, k, code, scale)


@inline
def _quantize_block(r, xs, n, m, table):
    """``r[:n]`` = the indices of the codes nearest ``xs[:n]`` normalized by their absmax
    ``m``: ``xs * (1 / m)`` as bitsandbytes' GPU kernels normalize (a multiply where a division
    took a quarter of the 8-bit Adam step), ``xs / m`` where ``1 / m`` would overflow (``m``
    subnormal) or is not finite (``m`` 0 or NaN: the block's indices are then 0)."""
    whole = n - n % VECTOR
    if m >= _NORMAL:
        inv = np.float32(1.0) / m
        for k in range(0, whole, VECTOR):
            quantize_lanes(r, xs, k, inv, table)
        for k in range(whole, n):
            quantize_lane(r, xs, k, inv, table)
    else:
        for k in range(0, whole, VECTOR):
            quantize_div_lanes(r, xs, k, m, table)
        for k in range(whole, n):
            quantize_div_lane(r, xs, k, m, table)


AHEAD = 2
"""Blocks ahead whose memory a step prefetches (:func:`_prefetch_block`)."""


@inline
def _prefetch_block(p, ga, seg, q1, q2, j, lo, hi, so, quantized, two):
    """Prefetch into L2 the lines a step of block ``[lo, hi)`` of parameter ``j`` will read:
    its parameter, gradient and (``quantized``) 8-bit states at ``so``.  Why: a block's memory
    is read in a burst between stretches of lookups, so the core waited for DRAM at each block
    (the hardware prefetchers, which follow the demand stream, fall behind it): 1e7 elements, 1
    thread, CPU time, Adam 19.4 -> 13.6 ms, Lion 12.6 -> 9.7, SGD 11.4 -> 8.6 (L2 against L1:
    the same to noise; non-temporal: Adam 35 ms; 1, 2, 4 or 8 blocks ahead: the same to noise,
    8 a little slower; every second or fourth line, the hardware left to fetch the others:
    slower, Adam 12.8 -> 12.9 to 16.1 ms)."""
    gs = at(ga[j], seg[j + 1] - seg[j], p)
    for k in range(lo, hi, 16):  # a line is 16 float32, 64 uint8
        prefetch_l2(p, k)
        prefetch_l2(gs, k - seg[j])
    if quantized:
        for k in range(so, so + hi - lo, 64):
            prefetch_l2(q1, k)
            if two:
                prefetch_l2(q2, k)


def _step_factory(functions: tuple, two: bool, mode: int, name: str):
    """The kernel of one algorithm, ``functions = (coefficients, u8, u32, lanes)``: ``u8(p, g,
    s1, s2, h, c) -> (p, s1, s2)`` for the quantized parameters, ``u32`` the same for float32
    state; ``c`` = ``coefficients(t, h)``, the parameter's at its step t; ``lanes``: None, or
    the (16-lane, 1-lane) intrinsics that dequantize and apply ``u8`` in one pass (see
    ``native/quant8_lanes.py`` and :data:`ALGORITHMS`)."""
    coefficients, u8, u32, fused_lanes = functions
    fused = fused_lanes is not None
    # (unfused, the kernel's fused branch is pruned at compile time: these are never typed)
    lanes, lanes1 = fused_lanes if fused else (dequantize_lanes, dequantize_lane)
    widen, rnd, same = sixteen_bit(mode)
    low = mode != 0

    def kernel(q, p, ga, seg, q1, q2, f1, f2, a1, a2, code1, code2, table1, table2, bj, blo,
               bhi, boff, kind8, flags, steps, hs, scratch, coef):
        nb = bj.shape[0]
        for j in range(flags.shape[0]):  # each parameter's coefficients, once
            if flags[j] != 0:
                coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3] = coefficients(float(steps[j]),
                                                                              hs[0])
        for ci in prange(scratch.shape[0]):
            h = local_copy(hs[0])  # (its fields in registers: address.local_copy)
            sc = scratch[ci]
            for b in range(ci * BLOCKS_PER_CHUNK, min((ci + 1) * BLOCKS_PER_CHUNK, nb)):
                j = bj[b]
                ahead = b + AHEAD
                if ahead < nb and flags[bj[ahead]] != 0:  # (no gradient: no address)
                    _prefetch_block(p, ga, seg, q1, q2, bj[ahead], blo[ahead], bhi[ahead],
                                    boff[ahead], kind8[bj[ahead]] != 0, two)
                if flags[j] == 0:
                    continue
                c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                lo, n, so = blo[b], bhi[b] - blo[b], boff[b]
                # the gradient where it lies (a user's own array is not copied in first: at 1e7
                # that copy took a quarter of the Adam step)
                at_j = lo - seg[j]
                gs = at(ga[j], seg[j + 1] - seg[j], p)[at_j:at_j + n]
                if low:  # a master whose 16-bit copy was written since takes the copy
                    for k in range(n):
                        x, qi = p[lo + k], q[lo + k]
                        p[lo + k] = x if same(x, qi, lo + k) else widen(qi)
                if kind8[j] != 0:
                    s1 = a1[b]
                    s2 = a2[b] if two else s1
                    ps, r1, r2 = p[lo:lo + n], q1[so:so + n], q2[so:so + n]
                    x1s, x2s = sc[0, :n], sc[1, :n]
                    b1 = b2 = np.uint32(0)  # the new absmax, as patterns (abs_bits: NaN if one is)
                    if fused:
                        whole = n - n % VECTOR
                        k7 = (h.b1, h.one_minus_b1, h.b2, h.one_minus_b2, h.decay, c[0], c[1])
                        for k in range(0, whole, VECTOR):
                            lanes(ps, gs, k, x1s, x2s, r1, r2, code1, code2, (s1, s2), k7)
                        for k in range(whole, n):
                            lanes1(ps, gs, k, x1s, x2s, r1, r2, code1, code2, (s1, s2), k7)
                        for k in range(n):
                            y = abs_bits(x1s[k])
                            b1 = y if y > b1 else b1
                            y = abs_bits(x2s[k])
                            b2 = y if y > b2 else b2
                    else:
                        _dequantize_block(x1s, r1, n, code1, s1)
                        if two:
                            _dequantize_block(x2s, r2, n, code2, s2)
                        # (the block's parameter and gradient lines from L2 into L1 at once, not
                        # as the update's loads reach them: 1e7, one thread, Lion 11.0 -> 9.1
                        # ms, SGD the same; before the dequantizing, SGD took 4% longer; in
                        # Adam's fused pass, 4% longer)
                        for k in range(0, n, 16):
                            prefetch_l1(p, lo + k)
                            prefetch_l1(gs, k)
                        for k in range(n):  # update (the parameter from the float32 states)
                            pi, x1, x2 = u8(ps[k], gs[k], x1s[k], x2s[k] if two else x1s[k],
                                            h, c)
                            ps[k] = pi
                            x1s[k] = x1
                            y = abs_bits(x1)
                            b1 = y if y > b1 else b1
                            if two:
                                x2s[k] = x2
                                y = abs_bits(x2)
                                b2 = y if y > b2 else b2
                    m1 = float_of_bits(b1)
                    a1[b] = m1
                    _quantize_block(r1, x1s, n, m1, table1)
                    if two:
                        m2 = float_of_bits(b2)
                        a2[b] = m2
                        _quantize_block(r2, x2s, n, m2, table2)
                else:
                    for k in range(n):
                        x1 = f1[so + k]
                        x2 = f2[so + k] if two else x1
                        pi, x1, x2 = u32(p[lo + k], gs[k], x1, x2, h, c)
                        p[lo + k] = pi
                        f1[so + k] = x1
                        if two:
                            f2[so + k] = x2
                if low:
                    for k in range(n):
                        q[lo + k] = rnd(p[lo + k], lo + k)
        return 0

    kernel.__name__ = kernel.__qualname__ = f"{name}_8bit_low{mode}"
    return parallel_kernel(kernel, sized_by=1)


# ---- the algorithms, as bitsandbytes computes them ---------------------------------------------
@inline
def _adam_coefficients(t, h):
    c1 = 1.0 - h.beta1 ** t
    c2 = math.sqrt(1.0 - h.beta2 ** t)
    return (np.float32(-h.lr * c2 / c1), np.float32(h.eps_wide * c2), np.float32(0.0),
            np.float32(0.0))


@inline
def _adam(p, g, m, v, h, c):
    # p + (-lr c2 / c1) m / (sqrt(v) + eps c2): one division (bitsandbytes' CPU backend divides
    # twice for its 8-bit state, sqrt(v) / c2 + eps, where its GPU kernels and its 32-bit state
    # divide once: the same update to rounding, and the divider bounds the 8-bit step)
    m = m * h.b1 + h.one_minus_b1 * g
    v = v * h.b2 + h.one_minus_b2 * g * g
    p = p * h.decay
    return p + c[0] * (m / (math.sqrt(v) + c[1])), m, v


@inline
def _lion_coefficients(t, h):
    return (np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0))


@inline
def _lion(p, g, m, v, h, c):
    p = p * h.decay
    x = m * h.b1 + g * h.one_minus_b1
    u = h.one if x > 0 else h.zero
    u = -h.one if x < 0 else u
    return p + h.neg_lr * u, m * h.b2 + h.one_minus_b2 * g, v


@inline
def _momentum_coefficients(t, h):
    first = np.float32(1.0) if t == 1.0 else np.float32(0.0)
    return (first, np.float32(0.0), np.float32(0.0), np.float32(0.0))


@inline
def _momentum8(p, g, m, v, h, c):
    g = g + h.weight_decay * p
    m = g if c[0] != 0 else m * h.b1 + g
    return p + h.neg_lr * m, m, v


@inline
def _momentum32(p, g, m, v, h, c):
    g = g + h.weight_decay * p if h.wd_on != 0 else g
    m = g if c[0] != 0 else m * h.b1 + g
    return p + h.neg_lr * m, m, v


ALGORITHMS = {
    "adam": ((_adam_coefficients, _adam, _adam, (adam_lanes, adam_lane)), True),
    "lion": ((_lion_coefficients, _lion, _lion, None), False),
    "momentum": ((_momentum_coefficients, _momentum8, _momentum32, None), False),
}
"""name -> ((coefficients, 8-bit update, 32-bit update, fused lanes or None), two states)."""

step = specialized(lambda name, mode: _step_factory(*ALGORITHMS[name], mode, name))
"""``step[name, mode]``: the 8-bit step of algorithm ``name`` (16-bit ``mode`` or 0)."""
