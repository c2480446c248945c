"""Fused optimizer steps that need sums over each parameter: one call, two passes.

Some updates of one element depend on a sum over its whole parameter: the cautious mask's
rescaling by ``numel / (count + 1)`` (Liang et al. 2024), LAMB's and LARS's trust ratios
``||p|| / ||u||`` (You et al. 2017, 2019).  Such an algorithm is four small functions over the
flat buffers of ``kernels/optim.py`` (same arguments, same per-parameter ``scalars``):

``scalars(s, h) -> (new_s, c)``
    as in ``kernels/optim.py``: the next scalar state and the coefficients of this step.
``collect(i, p, g, s0, s1, s2, s3, h, c) -> (x0, x1, x2)``
    pass 1, element ``i``: its contributions to three per-parameter sums (float64); it may
    update state (the moments), which pass 2 then reads.
``finish(t, h, c, n) -> r``
    parameter ``j``'s sums ``t`` (3 values) and size ``n`` -> 4 coefficients of pass 2,
    rounded to the buffer dtype (as PyTorch's 0-d tensors of the buffer's dtype).
``apply(i, p, g, s0, s1, s2, s3, h, c, r)``
    pass 2, element ``i``: the update.
``summed(c) -> bool`` (optional, a fifth function; default: always)
    whether a parameter with coefficients ``c`` needs its sums: pass 1 skips ``collect`` for
    one that does not (its sums are 0; ``collect`` must then have no effect for it): LARS's
    parameters of one dimension, which take no trust ratio (pytorch-optimizer skips their
    norms too; at 1e7 pass 1 took two thirds of the step).

(A fourth state slot ``s3``, which a walker has not: Prodigy keeps four vectors.)

Pass 1 runs chunk by chunk in parallel; each piece of a parameter within a chunk (the pieces
are cut by the fixed chunk grid, not by the threads) writes its own partial sums, which are
added per parameter in chunk order: the same sums, to the bit, on any number of threads.

``reducing(factory)`` declares one, as ``kernels.optim.algorithm`` does: ``name[switches]`` is
a kernel with the walker's arguments (``kernel(pa, ga, s0, s1, s2, seg, chunk_seg, chunk, flags,
S, coef, hs) -> int``: the parameters and gradients through their address tables, as the
walker's; and ``kernel.low[mode]`` for 16-bit parameters with float32 masters), so
an optimizer calls it where it would call its walker.  The two passes cost one more read of the
state than a walker (pass 2 reads back what pass 1 wrote); the sums are computed in the pass
that updates the moments.

``collecting(factory)`` declares pass 1 alone, ``factory(*switches) -> (scalars, collect)``,
for sums the host combines over several buffers (Prodigy's, over the whole optimizer):
``kernel(pa, ga, s0, s1, s2, s3, seg, chunk_seg, chunk, flags, S, coef, hs, sums) -> int``
leaves each parameter's sums in ``sums`` (float64, ``(len(flags), 3)``); ``kernel.low[mode]``
takes the 16-bit storage first.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from tinyopt.kernels import optim as elementwise
from tinyopt.kernels.native.address import at
from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized, subroutine
from tinyopt.kernels.optim import (adam_moments, decayed_grad, lion_sign, sixteen_bit,
                                   step_prologue)
from tinyopt.kernels.native.instructions import fma


class _Reducing:
    """``reducing[switches]``: the two-pass kernel of ``factory(*switches)``, made on first use
    (``second=False``: pass 1 alone, for :func:`collecting`)."""

    def __init__(self, factory, second: bool = True):
        self._factory, self._second = factory, second
        self._kernels: dict[tuple, Any] = {}
        functools.update_wrapper(self, factory)

    def __getitem__(self, switches):
        switches = switches if isinstance(switches, tuple) else (switches,)
        kernel = self._kernels.get(switches)
        if kernel is None:
            name = self.__name__ + "_" + "".join("T" if s else "F" for s in switches)
            fns = self._factory(*switches)
            if not self._second:
                fns = (*fns, _no_finish, _no_apply)
            if len(fns) == 4:
                fns = (*fns, _always)
            wrap = _TwoPass if self._second else _Collect
            kernel = self._kernels[switches] = wrap(
                _two_pass(*fns, 0, name, self._second),
                specialized(lambda mode: wrap(_two_pass(*fns, mode, name, self._second),
                                              storage_first=True)))
        return kernel


def reducing(factory) -> _Reducing:
    """Declare a two-pass algorithm: ``factory(*switches)`` returns ``(scalars, collect, finish,
    apply)`` (see the module docstring)."""
    return _Reducing(factory)


def collecting(factory) -> _Reducing:
    """Declare pass 1 alone: ``factory(*switches)`` returns ``(scalars, collect)`` (see the module
    docstring)."""
    return _Reducing(factory, second=False)


class _TwoPass:
    """A two-pass kernel called as a walker (``low``: its 16-bit variants): it adds an empty
    fourth state slot and the scratch of the partial sums, allocated per call (a few KB where
    the step moves MB: :func:`_part`)."""

    def __init__(self, kernel, low: Any = None, storage_first: bool = False):
        self._kernel = kernel
        self.low = low
        self._k = 6 if storage_first else 5  # where the fourth slot goes

    def __call__(self, *args) -> int:
        k = self._k
        chunk_seg, flags = args[-6], args[-4]
        return self._kernel(*args[:k], args[k - 1][:0], *args[k:], _part(chunk_seg, flags),
                            np.empty((flags.shape[0], 3)))


class _Collect:
    """Pass 1 alone (``low``: its 16-bit variants): ``kernel(..., hs, sums)``, the partial sums'
    scratch added per call."""

    def __init__(self, kernel, low: Any = None, storage_first: bool = False):
        self._kernel = kernel
        self.low = low

    def __call__(self, *args) -> int:
        chunk_seg, flags = args[-7], args[-5]
        return self._kernel(*args[:-1], _part(chunk_seg, flags), args[-1])


def _flat_size(args: tuple) -> int:
    """The elements a two-pass call steps: ``seg[-1]`` (``seg`` is its eighth argument)."""
    seg = args[7]
    return int(seg[seg.shape[0] - 1])


def _part(chunk_seg: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Pass 1's scratch: the pieces' sums (a chunk count plus a parameter count of rows)."""
    return np.empty((chunk_seg.shape[0] + flags.shape[0], 3))


@inline
def _no_finish(t, h, c, n):
    return (0.0, 0.0, 0.0, 0.0)


@inline
def _no_apply(i, p, g, s0, s1, s2, s3, h, c, r):
    pass


@inline
def _always(c):
    return True


def _finisher(finish, name: str, second: bool):
    """Pass 1's pieces added per parameter in chunk order, then (for a second pass) ``finish``
    of each (into ``coef[j, 4:]``)."""

    def combine(n, seg, chunk_seg, chunk, flags, coef, h, part, sums):
        sums[:, :] = 0.0
        for ci in range(chunk_seg.shape[0]):
            start = ci * chunk
            end = min(start + chunk, n)
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    for k in range(3):
                        sums[j, k] += part[ci + j, k]
                i0 = e
                j += 1
        for j in range(flags.shape[0]):
            if second and flags[j] != 0:
                c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                r = finish((sums[j, 0], sums[j, 1], sums[j, 2]), h, c, seg[j + 1] - seg[j])
                coef[j, 4], coef[j, 5], coef[j, 6], coef[j, 7] = r

    combine.__qualname__ = f"{name}_combine"
    subroutine(combine)
    return combine


SUM_BLOCK = 256
"""Elements of a block of pass 1 (its contributions are buffered, then added)."""


def _two_pass(scalars, collect, finish, apply, summed, mode: int, name: str,
              second: bool = True):
    """The kernel; ``mode`` 0: over ``p`` itself, else 16-bit parameters ``q`` with float32
    masters ``p`` (``kernels.optim.F16``, ``BF16``, ``BF16_SR``: as the walker's ``low``);
    ``second=False``: pass 1 and the per-parameter sums alone."""
    name = f"{name}_low{mode}" if mode else name
    name = name if second else f"{name}_collect"
    prologue = step_prologue(scalars, f"{name}_reduce_prologue")
    combine = _finisher(finish, name, second)
    widen, rnd, same = sixteen_bit(mode)
    low = mode != 0

    def kernel(qa, p, ga, s0, s1, s2, s3, seg, chunk_seg, chunk, flags, S, coef, hs, part, sums):
        bad = prologue(flags, S, coef, hs[0])
        if bad >= 0:
            return bad
        n = seg[seg.shape[0] - 1]
        for ci in prange(chunk_seg.shape[0]):
            h = hs[0]  # (read in the loop: numba's parallel regions mistype an outer record)
            # (pass 1's block buffers: 6 KiB a chunk, against the chunk's 64 KiB a vector)
            buf0, buf1, buf2 = np.empty(SUM_BLOCK), np.empty(SUM_BLOCK), np.empty(SUM_BLOCK)
            start = ci * chunk
            end = min(start + chunk, n)
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                    lo, size = i0 - seg[j], seg[j + 1] - seg[j]
                    gs = at(ga[j], size, s0)[lo:lo + e - i0]
                    if low:  # the float32 masters (flat); the 16-bit storage at qa
                        ps = p[i0:e]
                    else:  # the parameters' storage at qa
                        ps = at(qa[j], size, s0)[lo:lo + e - i0]
                    a, b, d = s0[i0:e], s1[i0:e], s2[i0:e]
                    f = s3[i0:e]
                    t0 = t1 = t2 = 0.0
                    if low:  # a master whose 16-bit copy was written since takes the copy
                        qs = at(qa[j], size, np.uint16)[lo:lo + e - i0]
                        for i in range(e - i0):
                            x, qi = ps[i], qs[i]
                            ps[i] = x if same(x, qi, i0 + i) else widen(qi)
                    # a block's contributions first, into buffers: that loop vectorizes (with
                    # the sums in it, LLVM kept collect scalar: Lamb at 1e7, one thread, 37 ms
                    # CPU, 21 this way), then their sums, four at a time, in element order
                    m = e - i0 if summed(c) else 0
                    full = m - m % SUM_BLOCK
                    for r in range(0, full, SUM_BLOCK):
                        for k in range(SUM_BLOCK):
                            x0, x1, x2 = collect(r + k, ps, gs, a, b, d, f, h, c)
                            buf0[k] = x0
                            buf1[k] = x1
                            buf2[k] = x2
                        for k in range(0, SUM_BLOCK, 4):
                            t0 += (buf0[k] + buf0[k + 1]) + (buf0[k + 2] + buf0[k + 3])
                            t1 += (buf1[k] + buf1[k + 1]) + (buf1[k + 2] + buf1[k + 3])
                            t2 += (buf2[k] + buf2[k + 1]) + (buf2[k + 2] + buf2[k + 3])
                    for i in range(full, m):
                        x0, x1, x2 = collect(i, ps, gs, a, b, d, f, h, c)
                        t0, t1, t2 = t0 + x0, t1 + x1, t2 + x2
                    part[ci + j, 0], part[ci + j, 1], part[ci + j, 2] = t0, t1, t2
                i0 = e
                j += 1
        combine(n, seg, chunk_seg, chunk, flags, coef, hs[0], part, sums)
        if not second:
            return -1
        for ci in prange(chunk_seg.shape[0]):
            h = hs[0]
            start = ci * chunk
            end = min(start + chunk, n)
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                    r = (coef[j, 4], coef[j, 5], coef[j, 6], coef[j, 7])
                    lo, size = i0 - seg[j], seg[j + 1] - seg[j]
                    gs = at(ga[j], size, s0)[lo:lo + e - i0]
                    if low:
                        ps = p[i0:e]
                    else:
                        ps = at(qa[j], size, s0)[lo:lo + e - i0]
                    a, b, d = s0[i0:e], s1[i0:e], s2[i0:e]
                    f = s3[i0:e]
                    for i in range(e - i0):
                        apply(i, ps, gs, a, b, d, f, h, c, r)
                    if low:
                        qs = at(qa[j], size, np.uint16)[lo:lo + e - i0]
                        for i in range(e - i0):
                            qs[i] = rnd(ps[i], i0 + i)
                i0 = e
                j += 1
        return -1

    kernel.__name__ = kernel.__qualname__ = f"{name}_two_pass"
    compiled = parallel_kernel(kernel, sized_by=_flat_size)
    if low:
        return compiled
    # over the parameters' storage: their addresses where the 16-bit ones' go, no masters
    return lambda pa, *args: compiled(pa, args[1][:0], *args)


# ---- the cautious option (Liang et al. 2024, https://arxiv.org/abs/2411.16085) -------------------
# An update u keeps only the elements where it agrees in sign with the gradient g, rescaled so
# that its size stays about the same (C-Optim's and pytorch-optimizer's rule):
#
#     mask = (u g > 0);   u <- u * mask * numel / (sum(mask) + 1)
#
# Pass 1 updates the state and counts the agreeing elements; pass 2 recomputes u from the state
# (bit for bit as pass 1 did) and applies it.


@inline
def _cautious_finish(t, h, c, n):
    return (n / (t[0] + 1.0), 0.0, 0.0, 0.0)


@reducing
def cautious_lion(maximize: bool, wd_on: bool):
    """Lion (``kernels.optim.lion``) with the cautious mask: u = sign(b1 m + (1 - b1) g)."""
    scalars = elementwise.lion._factory(maximize, wd_on)[0]

    @inline
    def collect(i, p, g, m, _s1, _s2, _s3, h, c):
        gi = -g[i] if maximize else g[i]
        x = m[i] * h.beta1 + h.one_minus_beta1 * gi
        # sign(x) g > 0, as conversions of comparisons (selects here kept the loop scalar)
        return np.float64((x > 0) & (gi > 0)) + np.float64((x < 0) & (gi < 0)), 0.0, 0.0

    @inline
    def apply(i, p, g, m, _s1, _s2, _s3, h, c, r):
        gi = -g[i] if maximize else g[i]
        pi = p[i] * h.decay if wd_on else p[i]
        mi = m[i]
        u = lion_sign(mi, gi, h)
        mask = r[0] if u * gi > 0 else h.zero
        p[i] = pi + h.neg_lr * (u * mask)
        m[i] = mi * h.b2 + h.one_minus_b2 * gi

    return scalars, collect, _cautious_finish, apply


@reducing
def cautious_adam(amsgrad: bool, maximize: bool, wd_on: bool, decoupled: bool, lerp_low: bool):
    """Adam/AdamW (``kernels.optim.adam``) with the cautious mask on u = m / (sqrt(v) ...):
    ``p <- p - lr / (1 - b1^t) * (m * mask) / (sqrt(vhat) / sqrt(1 - b2^t) + eps)``, the mask
    from the signs of m and the gradient (with L2 decay, g + lambda p)."""
    scalars = elementwise.adam._factory(amsgrad, maximize, wd_on, decoupled, lerp_low)[0]

    @inline
    def collect(i, p, g, m, v, vhat, _s3, h, c):
        pi, gi, mi, vi = adam_moments(i, p, g, m, v, h, maximize, wd_on, decoupled, lerp_low)
        if amsgrad:
            a = vhat[i]
            if vi != vi or vi > a:
                a = vi
            vhat[i] = a
        return np.float64(mi * gi > 0), 0.0, 0.0

    @inline
    def apply(i, p, g, m, v, vhat, _s3, h, c, r):
        pi, gi = decayed_grad(i, p, g, h, maximize, wd_on, decoupled, False)
        mi = m[i]
        vi = vhat[i] if amsgrad else v[i]
        mask = r[0] if mi * gi > 0 else h.zero
        p[i] = pi + c[0] * (mi * mask) / (math.sqrt(vi) / c[1] + h.eps)

    return scalars, collect, _cautious_finish, apply


@reducing
def cautious_sgd(momentum_on: bool, nesterov: bool, maximize: bool, wd_on: bool):
    """SGD (``kernels.optim.sgd``) with the cautious mask on its step direction u (the
    momentum buffer, or g + mu b with Nesterov; g without momentum)."""
    scalars = elementwise.sgd._factory(momentum_on, nesterov, maximize, wd_on)[0]

    @inline
    def direction(i, p, g, b, h, c, store):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        u = gi
        if momentum_on:
            if store:
                bi = b[i]
                bi = gi if c[0] == 1 else bi * h.momentum + h.one_minus_dampening * gi
                b[i] = bi
            else:
                bi = b[i]
            u = gi + h.momentum * bi if nesterov else bi
        return u, gi

    @inline
    def collect(i, p, g, b, _s1, _s2, _s3, h, c):
        u, gi = direction(i, p, g, b, h, c, True)
        return np.float64(u * gi > 0), 0.0, 0.0  # (a conversion, not a branch)

    @inline
    def apply(i, p, g, b, _s1, _s2, _s3, h, c, r):
        u, gi = direction(i, p, g, b, h, c, False)
        mask = r[0] if u * gi > 0 else h.zero
        p[i] = p[i] + h.neg_lr * (u * mask)

    return scalars, collect, _cautious_finish, apply


# ---- trust ratios: LAMB and LARS -----------------------------------------------------------------
@reducing
def lamb(maximize: bool, wd_on: bool, decoupled: bool, adam: bool):
    """LAMB (You et al. 2019, https://arxiv.org/abs/1904.00962, v3: the moments without bias
    correction, the step size with the first one's) as ``pytorch_optimizer.Lamb`` computes it.

    State: m (exp_avg), v (exp_avg_sq); scalars ``weight_norm``, ``adam_norm``,
    ``trust_ratio`` (``S[j, 1:4]``, copied there by the host from ``r[1:4]``).  Host: ``beta1``,
    ``beta3`` (1 - b1 with grad averaging, else 1), ``b2``, ``one_minus_b2``, ``eps``,
    ``weight_decay`` (lambda), ``decay`` (1 - lr lambda, or 1 - lambda fixed), ``lr``,
    ``beta1_wide``, ``clamp`` (float64).  Per parameter with step t: ``c = (-lr / (1 -
    b1^t),)``.  Per element, pass 1 (its sums: ||p||^2 and ||u||^2)::

        g <- -g if maximize
        m <- b1 m + beta3 g;  v <- b2 v + (1 - b2) g^2
        p' = p (1 - lr lambda) if decoupled, else p
        u = m / (sqrt(v) + eps)  (+ lambda p' if not decoupled)

    Per parameter: ``wn = min(||p'||, clamp)``, ``un = ||u||``, ``trust = wn / (un + eps)``
    (1 where either is 0, or with ``adam``).  Pass 2: ``p <- p' - lr / (1 - b1^t) trust u``.
    """
    @inline
    def scalars(s, h):
        t = elementwise._next_step(s)
        return (t, float(s[1]), float(s[2]), float(s[3])), \
            (-(h.lr / (1.0 - h.beta1_wide ** t)), 0.0, 0.0, 0.0)

    @inline
    def direction(i, p, m, v, h):
        pi = p[i] * h.decay if (wd_on and decoupled) else p[i]
        u = m[i] / (math.sqrt(v[i]) + h.eps)
        if wd_on and not decoupled:
            u = u + h.weight_decay * pi
        return pi, u

    @inline
    def collect(i, p, g, m, v, _s2, _s3, h, c):
        gi = -g[i] if maximize else g[i]
        m[i] = m[i] * h.beta1 + h.beta3 * gi
        v[i] = v[i] * h.b2 + h.one_minus_b2 * gi * gi
        pi, u = direction(i, p, m, v, h)
        return pi * pi, u * u, 0.0

    @inline
    def finish(t, h, c, n):
        wn = min(math.sqrt(t[0]), h.clamp)
        un = math.sqrt(t[1])
        trust = 1.0 if (wn == 0.0 or un == 0.0) else wn / (un + h.eps)
        return (c[0] * (1.0 if adam else trust), wn, un, trust)

    @inline
    def apply(i, p, g, m, v, _s2, _s3, h, c, r):
        pi, u = direction(i, p, m, v, h)
        p[i] = pi + r[0] * u

    return scalars, collect, finish, apply


@reducing
def lars(maximize: bool, momentum_on: bool, nesterov: bool):
    """LARS (You et al. 2017, https://arxiv.org/abs/1708.03888) as ``pytorch_optimizer.LARS``
    computes it: parameters of 2 or more dimensions take the layer-wise trust ratio and the
    weight decay; others plain SGD.

    State: b (momentum_buffer, from 0).  ``S[j, 3]`` is 1 for a parameter of 2 or more
    dimensions (written by the host).  Host: ``weight_decay`` (lambda), ``tc`` (trust
    coefficient, float64), ``momentum`` (mu), ``one_minus_dampening``, ``neg_lr``.  Pass 1
    (parameters of 2 or more dimensions): the sums ||p||^2 and ||g||^2 (g negated if
    maximize).  Per parameter (2-d and up):
    ``trust = tc ||p|| / (||g|| + lambda ||p||)`` (1 where ||p|| = 0 or the denominator is 0).
    Pass 2, per element::

        g <- (g + lambda p) trust          (2-d and up)
        b <- mu b + (1 - tau) g;  g <- g + mu b if nesterov else b      (mu > 0)
        p <- p - lr g
    """
    @inline
    def scalars(s, h):
        return (elementwise._next_step(s), float(s[1]), float(s[2]), float(s[3])), \
            (float(s[3]), 0.0, 0.0, 0.0)

    @inline
    def collect(i, p, g, b, _s1, _s2, _s3, h, c):
        gi = -g[i] if maximize else g[i]
        return p[i] * p[i], gi * gi, 0.0

    @inline
    def finish(t, h, c, n):
        pn, gn = math.sqrt(t[0]), math.sqrt(t[1])
        d = gn + h.weight_decay_wide * pn
        trust = h.tc * pn / d if (pn > 0.0 and d > 0.0) else 1.0
        return (trust if c[0] != 0 else 1.0, 0.0, 0.0, 0.0)

    @inline
    def apply(i, p, g, b, _s1, _s2, _s3, h, c, r):
        gi = -g[i] if maximize else g[i]
        pi = p[i]
        gi = (gi + h.weight_decay * pi) * r[0] if c[0] != 0 else gi
        if momentum_on:
            bi = b[i] * h.momentum + h.one_minus_dampening * gi
            b[i] = bi
            gi = gi + h.momentum * bi if nesterov else bi
        p[i] = pi + h.neg_lr * gi

    @inline
    def summed(c):  # (a parameter of one dimension takes no trust ratio)
        return c[0] != 0

    return scalars, collect, finish, apply, summed


# ---- Prodigy's first pass: its sums are over the whole optimizer --------------------------------
@collecting
def prodigy_collect(beta1_on: bool, coupled: bool, lr_on: bool):
    """Prodigy's moments and its two sums (Mishchenko & Defazio 2023,
    https://arxiv.org/abs/2306.06101) as ``prodigyopt`` computes them; the host adds the sums of
    every parameter of every group into d's estimate, then ``kernels.optim.prodigy`` steps.

    State: m (exp_avg, with beta1 > 0), v (exp_avg_sq), s, p0 (the parameter at its first
    step).  ``S[j, 0]`` counts steps.  Host: ``b1``, ``m_alpha`` = d (1 - b1), ``b2``,
    ``v_value`` = d^2 (1 - b2), ``b3``, ``s_alpha`` = (d / d0) dlr (or (d / d0) d with
    safeguard warmup), ``weight_decay`` (lambda, coupled).  Per element (``lr_on``: the
    group's lr > 0), its sums ``g (p0 - p)`` and ``|s|``::

        g <- g + lambda p     (coupled decay);     p0 <- p at the parameter's first step
        m <- b1 m + d (1 - b1) g;  v <- b2 v + d^2 (1 - b2) g^2;  s <- b3 s + s_alpha g

    Each ``+`` of a product is a fused multiply-add, as PyTorch's ``add(alpha=)`` and
    ``addcmul`` round on a CPU; ``g (p0 - p)`` is a float64 product, summed in float64 (the
    reference sums in float32, in BLAS's and ATen's orders: the one difference left).
    """
    @inline
    def scalars(s, h):
        t = elementwise._next_step(s)
        return (t, 0.0, 0.0, 0.0), ((t == 1.0) * 1.0, 0.0, 0.0, 0.0)

    @inline
    def collect(i, p, g, m, v, s, p0, h, c):
        gi = g[i]
        pi = p[i]
        if coupled:
            gi = fma(pi, h.weight_decay, gi)
        q = pi if c[0] != 0 else p0[i]
        p0[i] = q
        if not lr_on:
            return 0.0, 0.0, 0.0
        if beta1_on:
            m[i] = fma(gi, h.m_alpha, m[i] * h.b1)
        v[i] = fma(h.v_value * gi, gi, v[i] * h.b2)
        si = fma(gi, h.s_alpha, s[i] * h.b3)
        s[i] = si
        return np.float64(gi) * np.float64(q - pi), abs(si), 0.0

    return scalars, collect
