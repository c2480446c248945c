"""Adafactor's fused step (Shazeer & Stern 2018, https://arxiv.org/abs/1804.04235) as PyTorch
computes it: one call per group and dtype over the group's flat buffers.

Arrays (1-d, C-contiguous; ``p``, ``g``, the moments and ``coef`` of one float dtype):

- ``p``, ``g``: parameters and gradients end to end, parameter ``j`` at ``[seg[j], seg[j+1])``.
- ``dims[j] = (B, n, m, R, S)`` (int64) for a parameter of 2 or more dimensions, shaped
  ``(..., n, m)`` with ``B`` the product of its leading dimensions (``R``, ``S``: its work
  items, below); zeros for a 0-d or 1-d one.  ``items``, ``iseg``, ``pseg``, ``bseg``: the
  work items (:func:`layout`).
- ``row`` (``R``, at ``[rseg[j], rseg[j+1])``, ``B n`` values) and ``col`` (``C``, at
  ``cseg[j]``, ``B m`` values): the factored second moment of a parameter of 2 or more
  dimensions (PyTorch's ``row_var`` ``(..., n, 1)`` and ``col_var`` ``(..., 1, m)``);
  ``var`` (``V``, at ``vseg[j]``, ``numel`` values): the second moment of the others.
- scratch: ``cpart`` (float64, at ``pseg[j]``): the column partial sums, ``S`` of ``m`` per
  matrix; ``means`` (float64, at ``bseg[j]``): each matrix's row mean, rounded to the buffer
  dtype; ``lanes`` (float64, an item's 16 lanes of ``||p||^2`` then of ``||U||^2``) and
  ``icoef`` (the buffer dtype, for rounding) per item.
- ``flags[j] != 0``: parameter ``j`` has a gradient (the others are skipped, their state does
  not advance); ``S[j, 0]``: its step (float32, as PyTorch's ``state["step"]``);
  ``coef[j, :4]``: its scratch in the buffer dtype (``w``, ``m``, ``n``, the step size);
  ``bad[j]`` (uint8) is set to 1 when its
  step size does not fit the dtype (PyTorch: "value cannot be converted to type float without
  overflow"); that parameter's values are then left as they were (its state has advanced).
- ``hs``: a 1-element record of host scalars: ``lr``, ``beta2_decay`` (tau), ``eps2``, ``d``,
  ``top`` (the dtype's largest value), ``kept`` (:data:`KEPT_ELEMENTS`) in float64; ``eps1``,
  ``eps1_sq`` (eps1^2), ``decay`` (1 - lr lambda) and ``one`` in the buffer dtype.

Per parameter, with ``t`` its new step, in PyTorch's order and rounding::

    w = t^tau,  rho = min(lr, 1 / sqrt t),  alpha = max(eps2, ||p|| / sqrt(numel)) rho
    p <- p (1 - lr lambda)                                        (if lambda != 0)
    R <- lerp(R, ||G_row||^2 / m, w),  C <- lerp(C, ||G_col||^2 / n, w)
    V_hat = R C / max(mean_rows(R), eps1)      (0-d, 1-d: V <- lerp(V, G^2, w), V_hat = V)
    U = G / sqrt(max(V_hat, eps1^2))            (rsqrt, then times G)
    p <- p - alpha / max(1, ||U|| / (sqrt(numel) d)) U

with ``G = -g`` if maximize.  Norms and sums accumulate in float64 and are rounded to the
buffer dtype, as PyTorch returns them as tensors of that dtype.  ``U`` is not stored with
the state: it is recomputed from ``G`` and the moments for its norm and for the update (three
reads of ``g``, two of ``p``, one write of ``p``), except that a factored parameter of one work
item and at most :data:`KEPT_ELEMENTS` elements keeps its ``U`` from the norm pass in an array
of its size made by that item, which its update reads (the same values: one square root and
one division per element fewer, and the item's rows are still in cache).  Each factored
parameter's row means are computed once per step (kept for the update pass).

Work items and the summation order (fixed by the shapes, never by the threads, so the bits do
not depend on them).  A factored parameter's ``B n`` rows are cut into items of ``R =
max(MIN_ROWS, ROWS_ELEMENTS // m)`` rows: when ``n <= R`` an item holds ``R // n`` whole
matrices, otherwise each matrix is ``S = ceil(n / R)`` items of ``R`` rows (the last shorter);
a 0-d or 1-d parameter is one item.  Within an item the sums over elements (``||p||^2``,
``||U||^2``, and each row's ``||G_row||^2``) add element ``k`` of a row into lane ``k % 16``,
rows in order (so the passes vectorize); the column sums of an item's rows add in row order.
Then the items' lanes are added lane by lane in item order and the lanes in order; a matrix's
column partial sums in item order; the row mean adds in row order.  A parameter of one item
(up to ``R`` rows, or whole matrices fitting in one) sums exactly as a serial pass over it.
The passes: items' statistics (``R``, column partials; whole matrices also ``C``, the mean and
``U^2``; a parameter of one item also its step size and update, while its rows are in cache),
in parallel; matrices cut into items: ``C`` and the mean, then the items' ``U^2``, in
parallel; each other parameter's step size (serial, a few flops); their items' updates, in
parallel.
Iteration ``t`` of a parallel pass writes only item ``t``'s rows, lanes and partial sums (and
``C`` and the mean of matrices it holds whole, or of the matrix whose first item it is; and
the step size, ``bad`` flag and values of a parameter that is item ``t`` alone).

The row mean's division (``recip``, float32 buffers whose ``eps1^2`` is a normal float32,
``>= 2^-126``): ``V_hat = fl32(x / mean)`` with ``x = fl32(R_i C_k)`` is computed as
``fl32(x * fl64(1 / mean))``, in float64, the same bits with one division of the three per
element fewer (the ``U^2`` and update passes are bound by the divider: float32 sqrt and
division).  Why the same: the float64 product is within ``2^-52`` (relative) of ``x / mean``,
while a quotient of two float32 values in the normal range is never a float32 rounding midpoint
and lies at least ``2^-49`` (relative) from every one (writing ``x = X 2^a``, ``mean = B 2^c``
and a midpoint ``M 2^e``, with ``X, B < 2^24`` and ``M`` odd in ``(2^24, 2^25)``:
``x - M 2^e mean`` is a nonzero multiple of ``2^(c+e)`` or of ``2^a``), so both round alike.
Below ``2^-126`` they may differ, and the clamp to ``eps1^2`` (``eps1^2 if eps1^2 > v else v``,
which keeps a NaN as ``np.maximum``) maps both to ``eps1^2``.  ``mean >= eps1 >= 2^-63``, so
``1 / mean`` and the product neither overflow nor underflow in float64; NaN, inf and ``mean =
inf`` come out as from the division.  One thread over 1e7 float32 parameters (10000 x 1000)
on the shared 2-core Zen 4: 15.1 ms a step with the division, 9.6 ms with the product (one
process, interleaved, the machine loaded).

``mode`` (``kernels.optim.F16``/``BF16``, 0 for none): the parameters are 16-bit, ``q`` their
storage (uint16 bit patterns) and ``p`` their float32 masters; an element whose ``q`` is no
longer the rounding of its master takes ``q``, widened, as its master first, and every updated
master is written back rounded to ``q`` (as the walker's ``kernel.low``).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized, subroutine
from tinyopt.kernels.optim import (F16, store_bf16, store_f16, unchanged_bf16, unchanged_f16,
                                   load_bf16, load_f16)


@inline
def _rounded(coef, j, x):
    """``x`` rounded to the buffer dtype (stored in parameter ``j``'s scratch and read back)."""
    coef[j, 0] = x
    return coef[j, 0]


def _lerp(a, b, w, w_c, low):
    """``torch.lerp(a, b, w)``: ``a + w (b - a)`` for ``|w| < 0.5``, else ``b - (b - a)(1 - w)``
    (``w_c``: ``1 - w`` in the buffer dtype)."""
    if low:
        return a + w * (b - a)
    return b - (b - a) * w_c


# a call, not inlined: the inlined select, used three times, trips numba's SSA checks
# (NumbaIRAssumptionWarning); the factors are small, and ``variance`` belongs to 1-d parameters
subroutine(_lerp)


@inline
def _inverse_root(v, unit, eps1_sq):
    """``rsqrt(max(v, eps1^2))``, as PyTorch's ``clamp_`` then ``rsqrt_`` (``unit``: 1 in the
    buffer dtype)."""
    return unit / math.sqrt(np.maximum(v, eps1_sq))  # (a NaN stays NaN, as clamp's)


@inline
def _estimate(r, c, mean, inv_mean, unit, eps1_sq, recip):
    """``rsqrt(max(r c / mean, eps1^2))``, the inverse root of ``V_hat``.  ``recip`` (a
    compile-time constant of the caller; float32 buffers with ``eps1^2`` normal): the same bits
    with one division fewer, ``r c`` times ``inv_mean = 1 / mean`` in float64 rounded to float32
    (see the module docstring), and the clamp as ``eps1^2 if eps1^2 > v else v``, which keeps a
    NaN ``v`` as ``np.maximum`` does (``eps1^2`` is never NaN)."""
    if recip:
        v = np.float32(np.float64(r * c) * inv_mean)
        return unit / math.sqrt(eps1_sq if eps1_sq > v else v)
    return _inverse_root(r * c / mean, unit, eps1_sq)


LANES = 16
"""Partial sums of the norms: element ``k`` of a row adds into lane ``k % LANES`` (so the sums
vectorize); the lanes are added in order at the end."""


@inline
def _lanes_total(lanes):
    """The lanes added in order (float64)."""
    t = 0.0
    for k in range(LANES):
        t += lanes[k]
    return t


@inline
def _squares(pr, gr, acb, lane_p, lane_g):
    """One row of the statistics pass: ``lane_p`` += p^2 and ``lane_g`` (reset first) +=
    g^2 by lanes (element ``k`` into lane ``k % LANES``), ``acb[k]`` += g^2 (float64)."""
    m = pr.shape[0]
    for k in range(LANES):
        lane_g[k] = 0.0
    full = m - m % LANES
    for k0 in range(0, full, LANES):
        for k in range(LANES):
            x = float(pr[k0 + k])
            gi = float(gr[k0 + k])
            lane_p[k] += x * x
            lane_g[k] += gi * gi
            acb[k0 + k] += gi * gi
    for k in range(m - full):
        x = float(pr[full + k])
        gi = float(gr[full + k])
        lane_p[k] += x * x
        lane_g[k] += gi * gi
        acb[full + k] += gi * gi

@inline
def _update_squares(gr, cb, r, mean, inv_mean, unit, eps1_sq, maximize, recip, lane_u):
    """One row of the norm pass: ``lane_u`` += U^2 by lanes, ``U = g rsqrt(max(R_i C_k /
    mean, eps1^2))`` (``maximize``, ``recip``: compile-time constants of the caller)."""
    m = gr.shape[0]
    full = m - m % LANES
    for k0 in range(0, full, LANES):
        for k in range(LANES):
            gi = -gr[k0 + k] if maximize else gr[k0 + k]
            u = _estimate(r, cb[k0 + k], mean, inv_mean, unit, eps1_sq, recip) * gi
            lane_u[k] += float(u) * u
    for k in range(m - full):
        gi = -gr[full + k] if maximize else gr[full + k]
        u = _estimate(r, cb[full + k], mean, inv_mean, unit, eps1_sq, recip) * gi
        lane_u[k] += float(u) * u


@inline
def _update_squares_kept(gr, cb, r, mean, inv_mean, unit, eps1_sq, maximize, recip, lane_u, ur):
    """:func:`_update_squares`, also keeping each ``U`` in ``ur`` (for the update)."""
    m = gr.shape[0]
    full = m - m % LANES
    for k0 in range(0, full, LANES):
        for k in range(LANES):
            gi = -gr[k0 + k] if maximize else gr[k0 + k]
            u = _estimate(r, cb[k0 + k], mean, inv_mean, unit, eps1_sq, recip) * gi
            ur[k0 + k] = u
            lane_u[k] += float(u) * u
    for k in range(m - full):
        gi = -gr[full + k] if maximize else gr[full + k]
        u = _estimate(r, cb[full + k], mean, inv_mean, unit, eps1_sq, recip) * gi
        ur[full + k] = u
        lane_u[k] += float(u) * u


ROWS_ELEMENTS = 1 << 16
"""A factored parameter's rows are cut into items of ``max(MIN_ROWS, ROWS_ELEMENTS // m)``
rows (see :func:`layout`): the unit of parallel work and of the summation order."""
MIN_ROWS = 16
KEPT_ELEMENTS = 1 << 17
"""A factored parameter of one item and at most this many elements keeps its ``U`` from the
norm pass for the update (an array of its size, made by the item; the host scalar ``kept``)."""


def layout(dims: np.ndarray) -> tuple[np.ndarray, ...]:
    """The work items of parameters shaped ``dims[j] = (B, n, m)`` (``(0, 0, 0)``: 0-d or 1-d):
    ``(dims5, items, iseg, pseg, bseg, sizes)`` with ``dims5[j] = (B, n, m, R, S)`` (``R`` rows
    per item, ``S`` items per matrix: 1 when ``n <= R``), ``items[t] = (j, b0, b1, i0, i1)``
    (rows ``i0 <= i < i1`` of matrices ``b0 <= b < b1``; a 0-d or 1-d parameter is one item),
    parameter ``j``'s items at ``[iseg[j], iseg[j+1])`` in row order, its column partial sums
    (``S`` of ``m`` per matrix) at ``pseg[j]`` and its row means (one per matrix) at
    ``bseg[j]``; ``sizes = (len(cpart), len(means))``.  Fixed by the shapes alone, never by the
    threads."""
    dims5 = np.zeros((len(dims), 5), np.int64)
    items, iseg, pseg, bseg = [], [0], [0], [0]
    for j, (B, n, m) in enumerate(dims.tolist()):
        if n == 0:
            items.append((j, 0, 0, 0, 0))
            S = 1
        else:
            R = max(MIN_ROWS, ROWS_ELEMENTS // m)
            if n <= R:  # whole matrices, as many as fit in an item
                S, per = 1, max(1, R // n)
                items += [(j, b, min(B, b + per), 0, n) for b in range(0, B, per)]
            else:  # each matrix cut into S row ranges
                S = -(-n // R)
                items += [(j, b, b + 1, s * R, min(n, (s + 1) * R))
                          for b in range(B) for s in range(S)]
            dims5[j] = (B, n, m, R, S)
        iseg.append(len(items))
        pseg.append(pseg[-1] + (B * S * m if n else 0))
        bseg.append(bseg[-1] + (B if n else 0))
    return (dims5, np.array(items, np.int64).reshape(-1, 5), np.array(iseg, np.int64),
            np.array(pseg, np.int64), np.array(bseg, np.int64), (pseg[-1], bseg[-1]))


@specialized
def adafactor(maximize: bool, wd_on: bool, mode: int, recip: bool = False):
    """``adafactor[maximize, wd_on, mode, recip]``: the step for those compile-time switches
    (see the module docstring; ``recip`` only for float32 buffers with ``eps1^2`` normal):
    ``kernel(q, p, g, row, col, var, cpart, means, lanes, icoef, seg, rseg, cseg, vseg, pseg,
    bseg, dims, items, iseg, flags, S, coef, bad, hs) -> None``."""
    low = mode != 0
    widen = load_f16 if mode == F16 else load_bf16
    rnd = store_f16 if mode == F16 else store_bf16
    same = unchanged_f16 if mode == F16 else unchanged_bf16

    def start(j, S, coef, h):
        """Parameter ``j``'s new step and ``w`` (in ``coef[j, 0]``)."""
        S[j, 0] = S[j, 0] + np.float32(1)
        t = float(S[j, 0])
        coef[j, 0] = t ** h.beta2_decay

    def finish(j, b, t, g, row, col, cpart, means, lanes, icoef, seg, rseg, cseg, pseg, bseg,
               dims, items, coef, us, h):
        """Matrix ``b`` of parameter ``j`` once all its rows' statistics are in (``t``: the
        item doing it): ``C`` from the column partial sums added in item order, the row mean,
        and, when one item holds the whole matrix, its rows' ``U^2`` lanes (and, when ``us``
        is not empty, the ``U`` themselves, at the parameter's own offsets)."""
        n, m, S = dims[j, 1], dims[j, 2], dims[j, 4]
        w = coef[j, 0]
        w_c = h.one - w
        w_low = abs(w) < 0.5
        rs, cs = row[rseg[j]:rseg[j + 1]], col[cseg[j]:cseg[j + 1]]
        first = cpart[pseg[j] + b * S * m:pseg[j] + (b * S + 1) * m]
        for s in range(1, S):
            other = cpart[pseg[j] + (b * S + s) * m:pseg[j] + (b * S + s + 1) * m]
            for k in range(m):
                first[k] += other[k]
        for k in range(m):
            nrm = _rounded(icoef, t, math.sqrt(first[k]))
            cs[b * m + k] = _lerp(cs[b * m + k], nrm * nrm / coef[j, 2], w, w_c, w_low)
        tot = 0.0
        for i in range(n):
            tot += float(rs[b * n + i])
        mean = np.maximum(_rounded(icoef, t, tot / n), h.eps1)
        means[bseg[j] + b] = mean
        inv_mean = 1.0 / np.float64(mean)
        if S == 1:
            lo = seg[j]
            gs = g[lo:seg[j + 1]]
            cb = cs[b * m:(b + 1) * m]
            lane_u = lanes[t, LANES:]
            if us.shape[0] > 0:
                for i in range(n):
                    base = (b * n + i) * m
                    _update_squares_kept(gs[base:base + m], cb, rs[b * n + i], mean, inv_mean,
                                         h.one, h.eps1_sq, maximize, recip, lane_u,
                                         us[base:base + m])
            else:
                for i in range(n):
                    base = (b * n + i) * m
                    _update_squares(gs[base:base + m], cb, rs[b * n + i], mean, inv_mean,
                                    h.one, h.eps1_sq, maximize, recip, lane_u)

    def statistics(t, q, p, g, row, var, cpart, lanes, icoef, seg, rseg, vseg, pseg, dims,
                   items, coef, h):
        """Item ``t``'s statistics pass: ``p^2`` lanes, row norms and ``R``, its column partial
        sums; a 0-d or 1-d parameter's whole first pass (``V``, ``p^2`` and ``U^2``)."""
        j, b0, b1, i0, i1 = items[t, 0], items[t, 1], items[t, 2], items[t, 3], items[t, 4]
        lo, hi = seg[j], seg[j + 1]
        ps, gs = p[lo:hi], g[lo:hi]
        qs = q[lo:hi] if low else q
        w = coef[j, 0]
        w_c = h.one - w
        w_low = abs(w) < 0.5
        unit, eps1_sq = h.one, h.eps1_sq
        n, m, R, S = dims[j, 1], dims[j, 2], dims[j, 3], dims[j, 4]
        lane_p, lane_u = lanes[t, :LANES], lanes[t, LANES:]
        for k in range(LANES):
            lane_p[k] = 0.0
            lane_u[k] = 0.0
        if n > 0:
            rs = row[rseg[j]:rseg[j + 1]]
            lane_g = np.zeros(LANES)  # a row's sum of g^2, by lanes
            slot = i0 // R
            for b in range(b0, b1):
                acb = cpart[pseg[j] + (b * S + slot) * m:pseg[j] + (b * S + slot + 1) * m]
                for k in range(m):
                    acb[k] = 0.0
                for i in range(i0, i1):
                    base = (b * n + i) * m
                    pr, gr = ps[base:base + m], gs[base:base + m]
                    if low:
                        qr = qs[base:base + m]
                        for k in range(m):
                            x, qi = pr[k], qr[k]
                            pr[k] = x if same(x, qi, 0) else widen(qi)
                    _squares(pr, gr, acb, lane_p, lane_g)
                    nrm = _rounded(icoef, t, math.sqrt(_lanes_total(lane_g)))
                    rs[b * n + i] = _lerp(rs[b * n + i], nrm * nrm / coef[j, 1], w, w_c,
                                          w_low)
        else:
            vs = var[vseg[j]:vseg[j + 1]]
            for i in range(hi - lo):
                if low:
                    x, qi = ps[i], qs[i]
                    ps[i] = x if same(x, qi, 0) else widen(qi)
                x = float(ps[i])
                lane_p[0] += x * x
                gi = -gs[i] if maximize else gs[i]
                v = _lerp(vs[i], gi * gi, w, w_c, w_low)
                vs[i] = v
                u = _inverse_root(v, unit, eps1_sq) * gi
                lane_u[0] += float(u) * u

    def norms(t, g, row, col, means, lanes, icoef, seg, rseg, cseg, dims, items, h):
        """Item ``t``'s ``U^2`` lanes (an item of a matrix cut into several)."""
        j, b, i0, i1 = items[t, 0], items[t, 1], items[t, 3], items[t, 4]
        n, m = dims[j, 1], dims[j, 2]
        gs = g[seg[j]:seg[j + 1]]
        rs, cs = row[rseg[j]:rseg[j + 1]], col[cseg[j]:cseg[j + 1]]
        icoef[t, 1] = means[b]
        mean = icoef[t, 1]
        inv_mean = 1.0 / np.float64(mean)
        cb = cs[b * m:(b + 1) * m]
        lane_u = lanes[t, LANES:]
        for i in range(i0, i1):
            base = (b * n + i) * m
            _update_squares(gs[base:base + m], cb, rs[b * n + i], mean, inv_mean, h.one,
                            h.eps1_sq, maximize, recip, lane_u)

    def step_size(j, seg, lanes, iseg, S, coef, bad, h):
        """Parameter ``j``'s step size, from its items' lanes added in item order, into
        ``coef[j, 3]``; ``bad[j] = 1`` when it does not fit the dtype."""
        t0, t1 = iseg[j], iseg[j + 1]
        for t in range(t0 + 1, t1):
            for k in range(2 * LANES):
                lanes[t0, k] += lanes[t, k]
        numel = seg[j + 1] - seg[j]
        st = float(S[j, 0])
        inv_t = 1.0 / st ** 0.5
        rho = inv_t if inv_t < h.lr else h.lr
        coef[j, 3] = math.sqrt(_lanes_total(lanes[t0, :LANES]))  # (rounded to the dtype)
        rms = float(coef[j, 3]) / numel ** 0.5
        alpha = (rms if rms > h.eps2 else h.eps2) * rho
        coef[j, 3] = math.sqrt(_lanes_total(lanes[t0, LANES:]))
        ratio = float(coef[j, 3]) / (numel ** 0.5 * h.d)
        step = -alpha / (ratio if ratio > 1.0 else 1.0)
        if abs(step) > h.top and not math.isinf(step):
            bad[j] = 1
        else:
            coef[j, 3] = step

    def update(t, q, p, g, row, col, var, means, icoef, seg, rseg, cseg, vseg, bseg, dims,
               items, coef, us, h):
        """Item ``t``'s update ``p <- p (1 - lr lambda) + a U`` (and the 16-bit copy), with the
        ``U`` kept in ``us`` by the norm pass unless it is empty."""
        j, b0, b1, i0, i1 = items[t, 0], items[t, 1], items[t, 2], items[t, 3], items[t, 4]
        lo, hi = seg[j], seg[j + 1]
        ps, gs = p[lo:hi], g[lo:hi]
        qs = q[lo:hi] if low else q
        unit, eps1_sq, decay = h.one, h.eps1_sq, h.decay
        a = coef[j, 3]
        n, m = dims[j, 1], dims[j, 2]
        if n > 0:
            rs, cs = row[rseg[j]:rseg[j + 1]], col[cseg[j]:cseg[j + 1]]
            for b in range(b0, b1):
                icoef[t, 1] = means[bseg[j] + b]
                mean = icoef[t, 1]
                inv_mean = 1.0 / np.float64(mean)
                cb = cs[b * m:(b + 1) * m]
                for i in range(i0, i1):
                    base = (b * n + i) * m
                    pr, gr = ps[base:base + m], gs[base:base + m]
                    r = rs[b * n + i]
                    if us.shape[0] > 0:
                        ur = us[base:base + m]
                        for k in range(m):
                            pi = pr[k] * decay if wd_on else pr[k]
                            pr[k] = pi + a * ur[k]
                    else:
                        for k in range(m):
                            gi = -gr[k] if maximize else gr[k]
                            u = _estimate(r, cb[k], mean, inv_mean, unit, eps1_sq, recip) * gi
                            pi = pr[k] * decay if wd_on else pr[k]
                            pr[k] = pi + a * u
                    if low:
                        qr = qs[base:base + m]
                        for k in range(m):
                            qr[k] = rnd(pr[k], 0)
        else:
            vs = var[vseg[j]:vseg[j + 1]]
            for i in range(hi - lo):
                gi = -gs[i] if maximize else gs[i]
                u = _inverse_root(vs[i], unit, eps1_sq) * gi
                pi = ps[i] * decay if wd_on else ps[i]
                ps[i] = pi + a * u
                if low:
                    qs[i] = rnd(ps[i], 0)

    name = (f"adafactor_{'T' if maximize else 'F'}{'T' if wd_on else 'F'}{mode}"
            f"{'R' if recip else ''}")
    # calls, not inlined into the parallel loops; named apart for numba's cache
    for f in (start, finish, statistics, norms, step_size, update):
        f.__qualname__ = f"{name}_{f.__name__}"
        subroutine(f)

    def kernel(q, p, g, row, col, var, cpart, means, lanes, icoef, seg, rseg, cseg, vseg, pseg,
               bseg, dims, items, iseg, flags, S, coef, bad, hs):
        nparams = flags.shape[0]
        nitems = items.shape[0]
        for j in range(nparams):
            if flags[j] != 0:
                start(j, S, coef, hs[0])
                coef[j, 1] = dims[j, 2]
                coef[j, 2] = dims[j, 1]
        # (each parallel loop reads the record itself: numba's parallel regions mistype one
        # read outside; and its own names, private to its region.  The item passed on is an
        # int64: a parallel loop's index is typed int64 when the kernel is typed and uint64 in
        # its parfor function, and numba compiled every subroutine for both, ~3 s of the
        # parallel build's cold compile)
        for t1 in prange(nitems):
            j1 = items[t1, 0]
            if flags[j1] != 0:
                h1 = hs[0]
                alone1 = iseg[j1 + 1] - iseg[j1] == 1
                size1 = seg[j1 + 1] - seg[j1]
                # a factored parameter of one item keeps its U for the update (p[:0]: none)
                keep1 = alone1 and dims[j1, 1] > 0 and size1 <= h1.kept
                us1 = np.empty(size1, p.dtype) if keep1 else p[:0]
                statistics(np.int64(t1), q, p, g, row, var, cpart, lanes, icoef, seg, rseg,
                           vseg, pseg, dims, items, coef, h1)
                # whole matrices: C, the mean, the U^2 lanes.  finish is called from the kernel
                # alone: numba builds a subroutine once per caller's compile flags, and called
                # from statistics too it compiled twice (~1.2 s of a cold first step)
                if dims[j1, 1] > 0 and dims[j1, 4] == 1:
                    for b1 in range(items[t1, 1], items[t1, 2]):
                        finish(j1, b1, np.int64(t1), g, row, col, cpart, means, lanes, icoef,
                               seg, rseg, cseg, pseg, bseg, dims, items, coef, us1, h1)
                if alone1:  # a parameter of one item: all of its step
                    step_size(j1, seg, lanes, iseg, S, coef, bad, h1)
                    if bad[j1] == 0:
                        update(np.int64(t1), q, p, g, row, col, var, means, icoef, seg, rseg,
                               cseg, vseg, bseg, dims, items, coef, us1, h1)
        for t2 in prange(nitems):  # matrices cut into several items: C and the row mean
            j2 = items[t2, 0]
            if flags[j2] != 0 and dims[j2, 4] > 1 and items[t2, 3] == 0:
                h2 = hs[0]
                finish(j2, items[t2, 1], np.int64(t2), g, row, col, cpart, means, lanes, icoef,
                       seg, rseg, cseg, pseg, bseg, dims, items, coef, p[:0], h2)
        for t3 in prange(nitems):  # ... and their U^2 lanes
            j3 = items[t3, 0]
            if flags[j3] != 0 and dims[j3, 4] > 1:
                h3 = hs[0]
                norms(np.int64(t3), g, row, col, means[bseg[j3]:bseg[j3 + 1]], lanes, icoef,
                      seg, rseg, cseg, dims, items, h3)
        for j in range(nparams):
            if flags[j] != 0 and iseg[j + 1] - iseg[j] > 1:
                step_size(j, seg, lanes, iseg, S, coef, bad, hs[0])
        for t5 in prange(nitems):
            j5 = items[t5, 0]
            if flags[j5] != 0 and bad[j5] == 0 and iseg[j5 + 1] - iseg[j5] > 1:
                h5 = hs[0]
                update(np.int64(t5), q, p, g, row, col, var, means, icoef, seg, rseg, cseg, vseg,
                       bseg, dims, items, coef, p[:0], h5)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return parallel_kernel(kernel, sized_by=1)
