"""Adafactor's fused step (Shazeer & Stern 2018, https://arxiv.org/abs/1804.04235) as PyTorch
computes it: one call per group and dtype over the group's flat buffers.

Arrays (1-d, C-contiguous; ``p``, ``g``, the moments and ``coef`` of one float dtype):

- ``p``, ``g``: parameters and gradients end to end, parameter ``j`` at ``[seg[j], seg[j+1])``.
- ``dims[j] = (B, n, m)`` (int64) for a parameter of 2 or more dimensions, shaped ``(..., n, m)``
  with ``B`` the product of its leading dimensions; ``(0, 0, 0)`` for a 0-d or 1-d one.
- ``row`` (``R``, at ``[rseg[j], rseg[j+1])``, ``B n`` values) and ``col`` (``C``, at
  ``cseg[j]``, ``B m`` values): the factored second moment of a parameter of 2 or more
  dimensions (PyTorch's ``row_var`` ``(..., n, 1)`` and ``col_var`` ``(..., 1, m)``);
  ``var`` (``V``, at ``vseg[j]``, ``numel`` values): the second moment of the others.
- ``acc`` (float64, laid out like ``col``): scratch for the column sums.
- ``flags[j] != 0``: parameter ``j`` has a gradient (the others are skipped, their state does
  not advance); ``S[j, 0]``: its step (float32, as PyTorch's ``state["step"]``);
  ``coef[j, :4]``: its scratch in the buffer dtype; ``bad[j]`` (uint8) is set to 1 when its
  step size does not fit the dtype (PyTorch: "value cannot be converted to type float without
  overflow"); that parameter's values are then left as they were (its state has advanced).
- ``hs``: a 1-element record of host scalars: ``lr``, ``beta2_decay`` (tau), ``eps2``, ``d``,
  ``top`` (the dtype's largest value) in float64; ``eps1``, ``eps1_sq`` (eps1^2), ``decay``
  (1 - lr lambda) and ``one`` in the buffer dtype.

Per parameter, with ``t`` its new step, in PyTorch's order and rounding::

    w = t^tau,  rho = min(lr, 1 / sqrt t),  alpha = max(eps2, ||p|| / sqrt(numel)) rho
    p <- p (1 - lr lambda)                                        (if lambda != 0)
    R <- lerp(R, ||G_row||^2 / m, w),  C <- lerp(C, ||G_col||^2 / n, w)
    V_hat = R C / max(mean_rows(R), eps1)      (0-d, 1-d: V <- lerp(V, G^2, w), V_hat = V)
    U = G / sqrt(max(V_hat, eps1^2))            (rsqrt, then times G)
    p <- p - alpha / max(1, ||U|| / (sqrt(numel) d)) U

with ``G = -g`` if maximize.  Norms and sums accumulate in float64 and are rounded to the
buffer dtype, as PyTorch returns them as tensors of that dtype; the sums over a row (``||p||^2``,
``||G_row||^2``, ``||U||^2``) add element ``k`` into lane ``k % 16`` and the lanes in order at the
end, so the passes vectorize (the column sums and the row mean add in row order).  Each
factored parameter's row mean is computed once per step (kept in the column-sum scratch for the
update pass).  ``U`` is never stored: it is
recomputed from ``G`` and the moments for its norm and for the update (three reads of ``g``,
two of ``p``, one write of ``p``).  Parallel over parameters: iteration ``j`` writes only
parameter ``j``'s slices and rows.

``mode`` (``kernels.optim.F16``/``BF16``, 0 for none): the parameters are 16-bit, ``q`` their
storage (uint16 bit patterns) and ``p`` their float32 masters; an element whose ``q`` is no
longer the rounding of its master takes ``q``, widened, as its master first, and every updated
master is written back rounded to ``q`` (as the walker's ``kernel.low``).
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized, subroutine
from tinyopt.kernels.optim import (F16, _round_bf16, _round_f16, _same_bf16, _same_f16,
                                   _widen_bf16, _widen_f16)


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
def _update_squares(gr, cb, r, mean, unit, eps1_sq, maximize, lane_u):
    """One row of the norm pass: ``lane_u`` += U^2 by lanes, ``U = g rsqrt(max(R_i C_k /
    mean, eps1^2))`` (``maximize``: a compile-time constant of the caller)."""
    m = gr.shape[0]
    full = m - m % LANES
    for k0 in range(0, full, LANES):
        for k in range(LANES):
            gi = -gr[k0 + k] if maximize else gr[k0 + k]
            u = _inverse_root(r * cb[k0 + k] / mean, unit, eps1_sq) * gi
            lane_u[k] += float(u) * u
    for k in range(m - full):
        gi = -gr[full + k] if maximize else gr[full + k]
        u = _inverse_root(r * cb[full + k] / mean, unit, eps1_sq) * gi
        lane_u[k] += float(u) * u


@specialized
def adafactor(maximize: bool, wd_on: bool, mode: int):
    """``adafactor[maximize, wd_on, mode]``: the step for those compile-time switches (see the
    module docstring): ``kernel(q, p, g, row, col, var, acc, seg, rseg, cseg, vseg, dims, flags,
    S, coef, bad, hs) -> None``."""
    low = mode != 0
    widen = _widen_f16 if mode == F16 else _widen_bf16
    rnd = _round_f16 if mode == F16 else _round_bf16
    same = _same_f16 if mode == F16 else _same_bf16

    def one(j, q, p, g, row, col, var, acc, seg, rseg, cseg, vseg, dims, S, coef, bad, h):
        lo, hi = seg[j], seg[j + 1]
        numel = hi - lo
        ps, gs = p[lo:hi], g[lo:hi]
        qs = q[lo:hi] if low else q
        S[j, 0] = S[j, 0] + np.float32(1)
        t = float(S[j, 0])
        w = _rounded(coef, j, t ** h.beta2_decay)
        w_c = h.one - w
        w_low = abs(w) < 0.5
        inv_t = 1.0 / t ** 0.5
        rho = inv_t if inv_t < h.lr else h.lr
        # the record's fields as locals: loaded inside a loop that stores to p, they could alias
        # it, and the loop would stay scalar
        unit, eps1_sq, decay = h.one, h.eps1_sq, h.decay
        B, n, m = dims[j, 0], dims[j, 1], dims[j, 2]
        lane_p = np.zeros(LANES)  # sum of p^2, by lanes
        lane_u = np.zeros(LANES)  # sum of U^2, by lanes
        lane_g = np.zeros(LANES)  # a row's sum of g^2, by lanes
        if n > 0:
            rs, cs = row[rseg[j]:rseg[j + 1]], col[cseg[j]:cseg[j + 1]]
            ac = acc[cseg[j]:cseg[j + 1]]
            coef[j, 1] = m
            coef[j, 2] = n
            for b in range(B):
                acb = ac[b * m:(b + 1) * m]
                for k in range(m):
                    acb[k] = 0.0
                for i in range(n):
                    base = (b * n + i) * m
                    pr, gr = ps[base:base + m], gs[base:base + m]
                    if low:
                        qr = qs[base:base + m]
                        for k in range(m):
                            x, qi = pr[k], qr[k]
                            pr[k] = x if same(x, qi, 0) else widen(qi)
                    _squares(pr, gr, acb, lane_p, lane_g)
                    nrm = _rounded(coef, j, math.sqrt(_lanes_total(lane_g)))
                    rs[b * n + i] = _lerp(rs[b * n + i], nrm * nrm / coef[j, 1], w, w_c,
                                          w_low)
                for k in range(m):
                    nrm = _rounded(coef, j, math.sqrt(acb[k]))
                    cs[b * m + k] = _lerp(cs[b * m + k], nrm * nrm / coef[j, 2], w, w_c,
                                          w_low)
            for b in range(B):
                s = 0.0
                for i in range(n):
                    s += float(rs[b * n + i])
                # the mean's rounding, kept for the update pass in the column sums' scratch
                # (no longer needed: acb[0] of this b)
                mean = np.maximum(_rounded(coef, j, s / n), h.eps1)
                ac[b * m] = mean
                cb = cs[b * m:(b + 1) * m]
                for i in range(n):
                    base = (b * n + i) * m
                    _update_squares(gs[base:base + m], cb, rs[b * n + i], mean, unit, eps1_sq,
                                    maximize, lane_u)
        else:
            vs = var[vseg[j]:vseg[j + 1]]
            for i in range(numel):
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
        rms = float(_rounded(coef, j, math.sqrt(_lanes_total(lane_p)))) / numel ** 0.5
        alpha = (rms if rms > h.eps2 else h.eps2) * rho
        ratio = float(_rounded(coef, j, math.sqrt(_lanes_total(lane_u)))) / (numel ** 0.5 * h.d)
        step = -alpha / (ratio if ratio > 1.0 else 1.0)
        if abs(step) > h.top and not math.isinf(step):
            bad[j] = 1
            return
        a = _rounded(coef, j, step)
        if n > 0:
            rs, cs = row[rseg[j]:rseg[j + 1]], col[cseg[j]:cseg[j + 1]]
            ac = acc[cseg[j]:cseg[j + 1]]
            for b in range(B):
                coef[j, 3] = ac[b * m]  # (this b's mean, in the buffer dtype)
                mean = coef[j, 3]
                cb = cs[b * m:(b + 1) * m]
                for i in range(n):
                    base = (b * n + i) * m
                    pr, gr = ps[base:base + m], gs[base:base + m]
                    r = rs[b * n + i]
                    for k in range(m):
                        gi = -gr[k] if maximize else gr[k]
                        u = _inverse_root(r * cb[k] / mean, unit, eps1_sq) * gi
                        pi = pr[k] * decay if wd_on else pr[k]
                        pr[k] = pi + a * u
                    if low:
                        qr = qs[base:base + m]
                        for k in range(m):
                            qr[k] = rnd(pr[k], 0)
        else:
            vs = var[vseg[j]:vseg[j + 1]]
            for i in range(numel):
                gi = -gs[i] if maximize else gs[i]
                u = _inverse_root(vs[i], unit, eps1_sq) * gi
                pi = ps[i] * decay if wd_on else ps[i]
                ps[i] = pi + a * u
                if low:
                    qs[i] = rnd(ps[i], 0)

    name = f"adafactor_{'T' if maximize else 'F'}{'T' if wd_on else 'F'}{mode}"
    # a call per parameter, not inlined into the parallel loop; named apart for numba's cache
    one.__qualname__ = f"{name}_one"
    subroutine(one)

    def kernel(q, p, g, row, col, var, acc, seg, rseg, cseg, vseg, dims, flags, S, coef, bad,
               hs):
        for j in prange(flags.shape[0]):
            if flags[j] != 0:
                h = hs[0]  # read in the loop: numba's parallel regions mistype an outside record
                one(j, q, p, g, row, col, var, acc, seg, rseg, cseg, vseg, dims, S, coef, bad, h)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return parallel_kernel(kernel, sized_by=1)
