"""Fused optimizer steps: one walker over a group's flat buffers, and each algorithm's math.

An optimizer step updates every parameter of a group in one call.  The group lives in flat
buffers (``tinyopt.optim.flat.FlatBuffer``): ``p`` (parameters), ``g`` (gradients) and up to
three vector state buffers ``s0, s1, s2``, 1-d, C-contiguous, all of one float dtype, parameter
``j`` occupying ``[seg[j], seg[j+1])``.  Per parameter:

- ``flags[j]`` (uint8): 1 when parameter ``j`` has a gradient.  Parameters with ``flags[j] == 0``
  are skipped exactly as PyTorch skips a parameter whose grad is None: nothing is read or
  written and their state (step count included) does not advance.
- ``S[j, :4]`` (float32): its scalar state (``S[j, 0]`` is PyTorch's ``state["step"]``; NAdam's
  ``mu_product``, ASGD's ``eta`` and ``mu`` follow), float32 as PyTorch keeps them.
- ``coef[j, :4]`` (buffer dtype): scratch for its coefficients of this step.

An algorithm is two small functions (MLX's ``init``/``apply`` split, on ggml's "host computes the
scalars, the kernel does the elements"):

``scalars(s, h) -> (new_s, c)``
    from parameter ``j``'s scalar state ``s = S[j]`` and the host scalars: its next scalar state
    (4 values) and its 4 coefficients for this step (bias corrections, decayed lr), in float64
    as PyTorch's host code computes them.  Pure: the walker computes every parameter's
    coefficients first, and if one does not fit the buffer dtype (PyTorch: "value cannot be
    converted to type float without overflow") returns that parameter's index having changed
    nothing; otherwise it stores the new scalar state and runs the elements.
``update(i, p, g, s0, s1, s2, h, c)``
    element ``i`` of one parameter's slices, with ``c`` its coefficients: the per-element math
    in the paper's symbols, in the buffer dtype and in PyTorch's order of operations.  Slots an
    algorithm (or an option) leaves unused are passed empty and never touched.

``h`` is the algorithm's named host scalars: a numpy record the host fills every step (so
``param_groups`` may change between steps with no recompilation).  Fields the element math uses
are already rounded to the buffer dtype, as PyTorch rounds an op's scalar argument; fields the
scalar arithmetic uses are float64.  No fastmath: NaN and inf propagate as in PyTorch.

Parallelism: the buffer is cut into chunks of ``chunk`` elements, ``chunk_seg[c]`` being the
parameter holding chunk ``c``'s first element; iteration ``c`` writes only its own chunk.

Each algorithm is :func:`~tinyopt.kernels.jit.specialized` on its boolean switches:
``adam[amsgrad, maximize, wd_on, decoupled, lerp_low]`` is a kernel compiled for that
combination, whose inner loop holds no branch on them.  Every kernel returns -1, or the index of
the parameter whose coefficients overflowed.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels import half
from tinyopt.kernels.jit import inline, parallel_kernel, prange, specialized, subroutine


def walker(scalars, update):
    """The fused step of one algorithm: ``kernel(p, g, s0, s1, s2, seg, chunk_seg, chunk, flags,
    S, coef, hs) -> int`` (see the module docstring; ``hs`` is a 1-element record array)."""

    def prologue(flags, S, coef, h):
        nseg = flags.shape[0]
        for j in range(nseg):
            if flags[j] != 0:
                cn = scalars(S[j], h)[1]
                coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3] = cn
                if _overflowed(coef[j], cn):
                    return j
        for j in range(nseg):
            if flags[j] != 0:
                sn = scalars(S[j], h)[0]
                S[j, 0], S[j, 1], S[j, 2], S[j, 3] = sn
        return -1

    # a call, not inlined: numba's parallel array analysis trips over the tuples it returns
    subroutine(prologue)

    def kernel(p, g, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs):
        bad = prologue(flags, S, coef, hs[0])
        if bad >= 0:
            return bad
        n = p.shape[0]
        for ci in prange(chunk_seg.shape[0]):
            h = hs[0]  # read in the loop: numba's parallel regions mistype a record from outside
            start = ci * chunk
            end = min(start + chunk, n)
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                    # slices, indexed from 0, let LLVM vectorize (no negative-index wraparound)
                    ps, gs, a, b, d = p[i0:e], g[i0:e], s0[i0:e], s1[i0:e], s2[i0:e]
                    for i in range(e - i0):
                        update(i, ps, gs, a, b, d, h, c)
                i0 = e
                j += 1
        return -1

    fused = parallel_kernel(kernel, sized_by=0)
    fused.low = specialized(lambda mode: _low_walker(prologue, update, mode))
    return fused


# ---- 16-bit parameters with float32 master weights ---------------------------------------------
F16, BF16, BF16_SR = 1, 2, 3
"""Modes of ``kernel.low[mode]``: the storage type of the parameters, and how they are rounded."""

LOW_MODES = {"float16": F16, "bfloat16": BF16}
"""The mode of each 16-bit storage dtype, by numpy name (round to nearest even)."""


def _low_walker(prologue, update, mode):
    """``kernel.low[mode]``: the same step over float32 master weights, state and gradients,
    which also writes each updated parameter rounded to 16 bits (DeepSpeed's step-plus-copy):
    ``kernel(q, p, g, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs) -> int`` with ``q``
    the parameters' uint16 storage (float16 or bfloat16 bit patterns, ``mode`` F16, BF16 or
    BF16_SR for stochastic rounding) and ``p`` their float32 masters.

    ``q`` is what users see and write: an element whose ``q`` is no longer the rounding of its
    master (a loaded model state dict, ``p.data[...] = x``) takes ``q``, widened, as its master
    before it steps.  The check costs no memory traffic (``q``'s line is read to be written).
    """
    # (plain functions in the closure, not the intrinsics: those would defeat the disk cache)
    widen = _widen_f16 if mode == F16 else _widen_bf16
    rnd = {F16: _round_f16, BF16: _round_bf16, BF16_SR: _round_bf16_sr}[mode]
    # whether q is still the rounding of its master (a NaN master may take q: it is NaN too)
    same = {F16: _same_f16, BF16: _same_bf16, BF16_SR: _same_bf16_sr}[mode]

    def kernel(q, p, g, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs):
        bad = prologue(flags, S, coef, hs[0])
        if bad >= 0:
            return bad
        n = p.shape[0]
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
                    qs, ps, gs, a, b, d = q[i0:e], p[i0:e], g[i0:e], s0[i0:e], s1[i0:e], s2[i0:e]
                    for i in range(e - i0):
                        x, qi = ps[i], qs[i]
                        ps[i] = x if same(x, qi, i0 + i) else widen(qi)  # a store, not a branch
                        update(i, ps, gs, a, b, d, h, c)
                        qs[i] = rnd(ps[i], i0 + i)
                i0 = e
                j += 1
        return -1

    return parallel_kernel(kernel, sized_by=0)


@inline
def _widen_f16(q):
    return half.f16_to_f32(q)


@inline
def _widen_bf16(q):
    return half.bf16_to_f32(q)


@inline
def _round_bf16_sr(x, i):
    return half.f32_to_bf16_sr(x, i)


@inline
def _round_f16(x, i):
    return half.f32_to_f16(x)


@inline
def _round_bf16(x, i):
    return half.f32_to_bf16(x)


@inline
def _same_f16(x, q, i):
    return half.f32_to_f16(x) == q


@inline
def _same_bf16(x, q, i):
    return half.f32_to_bf16_unless_nan(x) == q


@inline
def _same_bf16_sr(x, q, i):
    return half.f32_to_bf16_sr(x, i) == q


@inline
def _overflowed(stored, c):
    """Whether a finite coefficient became inf when stored in the buffer dtype."""
    return ((math.isinf(stored[0]) and not math.isinf(c[0]))
            or (math.isinf(stored[1]) and not math.isinf(c[1]))
            or (math.isinf(stored[2]) and not math.isinf(c[2]))
            or (math.isinf(stored[3]) and not math.isinf(c[3])))


@inline
def _next_step(s):
    """``step + 1`` as PyTorch's float32 ``state["step"] += 1`` computes it."""
    return float(np.float32(s[0] + np.float32(1)))


@inline
def _lerp(a, b, w, w_c, low):
    """``torch.lerp(a, b, w)``: ``a + w (b - a)`` for ``w < 0.5``, else ``b - (b - a)(1 - w)``
    (``w_c`` is ``1 - w`` rounded in the buffer dtype)."""
    return a + w * (b - a) if low else b - (b - a) * w_c


@specialized
def sgd(momentum_on: bool, nesterov: bool, maximize: bool, wd_on: bool):
    """SGD with momentum (Sutskever et al. 2013, http://proceedings.mlr.press/v28/sutskever13.html).

    State: ``s0`` = b (momentum_buffer).  ``S[j, 0]`` counts momentum steps, ``c[0]`` being
    the count (how the first one is known; SGD saves no ``step``).  Host: ``neg_lr``, ``momentum`` (mu), ``one_minus_dampening``
    (1 - tau), ``weight_decay`` (lambda).  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        b <- g on a parameter's first momentum step, mu b + (1 - tau) g afterwards
        g <- g + mu b if nesterov else b      (when mu != 0)
        p <- p - lr g
    """
    @inline
    def scalars(s, h):
        t = float(s[0])
        if momentum_on:
            t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (t, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, b, _s1, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        if momentum_on:
            bi = b[i]  # read even on the first step: a select, not a branch
            bi = gi if c[0] == 1 else bi * h.momentum + h.one_minus_dampening * gi
            b[i] = bi
            gi = gi + h.momentum * bi if nesterov else bi
        p[i] = p[i] + h.neg_lr * gi

    return walker(scalars, update)


@specialized
def adam(amsgrad: bool, maximize: bool, wd_on: bool, decoupled: bool, lerp_low: bool):
    """Adam (Kingma & Ba 2014, https://arxiv.org/abs/1412.6980) and AdamW (Loshchilov & Hutter
    2017, https://arxiv.org/abs/1711.05101), as PyTorch computes them.

    State: m (exp_avg), v (exp_avg_sq), vhat (max_exp_avg_sq, with amsgrad).  Host: ``lr``,
    ``beta1``, ``beta2`` (float64, for the coefficients); ``w`` = 1 - b1 and ``w_c`` = 1 - w
    (m's lerp weight), ``b2``, ``one_minus_b2``, ``eps``, ``weight_decay`` (lambda),
    ``decay`` = 1 - lr lambda.  Per parameter with step t: ``c = (-lr / (1 - b1^t),
    sqrt(1 - b2^t))``.  Per element::

        g <- -g if maximize
        p <- p (1 - lr lambda)      if decoupled (AdamW)   | g <- g + lambda p  otherwise
        m <- lerp(m, g, 1 - b1)     (= b1 m + (1 - b1) g)
        v <- b2 v + (1 - b2) g^2
        vhat <- max(vhat, v) if amsgrad, else v
        p <- p - lr / (1 - b1^t) * m / (sqrt(vhat) / sqrt(1 - b2^t) + eps)
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (-(h.lr / (1.0 - h.beta1 ** t)), (1.0 - h.beta2 ** t) ** 0.5,
                                     0.0, 0.0)

    @inline
    def update(i, p, g, m, v, vhat, h, c):
        gi = -g[i] if maximize else g[i]
        pi = p[i]
        if wd_on:
            if decoupled:
                pi = pi * h.decay
            else:
                gi = gi + h.weight_decay * pi
        mi = _lerp(m[i], gi, h.w, h.w_c, lerp_low)
        m[i] = mi
        vi = v[i] * h.b2 + h.one_minus_b2 * gi * gi
        v[i] = vi
        if amsgrad:
            a = vhat[i]
            if vi != vi or vi > a:
                a = vi
            vhat[i] = a
            vi = a
        p[i] = pi + c[0] * mi / (math.sqrt(vi) / c[1] + h.eps)

    return walker(scalars, update)


@specialized
def adagrad(maximize: bool, wd_on: bool):
    """Adagrad (Duchi et al. 2011, https://jmlr.org/papers/v12/duchi11a.html) as PyTorch computes it.

    State: s (sum).  Host: ``lr``, ``lr_decay`` (eta, float64), ``weight_decay`` (lambda),
    ``eps``.  Per parameter with step t: ``c = (-lr / (1 + (t - 1) eta),)``.  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        s <- s + g^2
        p <- p - lr / (1 + (t - 1) eta) * g / (sqrt(s) + eps)
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (-(h.lr / (1.0 + (t - 1.0) * h.lr_decay)), 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, sq, _s1, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        si = sq[i] + gi * gi
        sq[i] = si
        p[i] = p[i] + c[0] * gi / (math.sqrt(si) + h.eps)

    return walker(scalars, update)


@specialized
def rmsprop(centered: bool, momentum_on: bool, maximize: bool, wd_on: bool, lerp_low: bool):
    """RMSprop (Hinton, Lecture 6e, https://www.cs.toronto.edu/~tijmen/csc321/slides/lecture_slides_lec6.pdf;
    centered: Graves 2013, https://arxiv.org/abs/1308.0850) as PyTorch computes it.

    State: v (square_avg), b (momentum_buffer, momentum > 0), gbar (grad_avg, centered).  Host:
    ``alpha``, ``w`` = 1 - alpha and ``w_c`` = 1 - w (gbar's lerp weight), ``eps``,
    ``weight_decay`` (lambda), ``momentum`` (mu), ``neg_lr``.  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        v <- alpha v + (1 - alpha) g^2
        if centered: gbar <- lerp(gbar, g, 1 - alpha);  d <- sqrt(v - gbar^2) + eps
        else:        d <- sqrt(v) + eps
        if mu > 0:   b <- mu b + g / d;  p <- p - lr b
        else:        p <- p - lr g / d
    """
    @inline
    def scalars(s, h):
        return (_next_step(s), 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, v, b, gbar, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        vi = v[i] * h.alpha + h.w * gi * gi
        v[i] = vi
        if centered:
            ga = _lerp(gbar[i], gi, h.w, h.w_c, lerp_low)
            gbar[i] = ga
            d = math.sqrt(vi + (-ga) * ga) + h.eps
        else:
            d = math.sqrt(vi) + h.eps
        if momentum_on:
            bi = b[i] * h.momentum + gi / d
            b[i] = bi
            p[i] = p[i] + h.neg_lr * bi
        else:
            p[i] = p[i] + h.neg_lr * gi / d

    return walker(scalars, update)
