"""Fused optimizer steps: one call updates every parameter of a group, in place, in parallel.

Every kernel works on a group's *flat* buffers: ``p`` (parameters), ``g`` (gradients) and the
state buffers, 1-d, C-contiguous, all of one float dtype (float32 or float64), parameter ``j``
occupying ``[seg[j], seg[j+1])``.  Per-parameter data:

- ``flags[j]`` (uint8): 1 when parameter ``j`` has a gradient.  Parameters with ``flags[j] == 0``
  are skipped exactly as PyTorch skips a parameter whose grad is None: nothing is read or written
  and their step count does not advance.
- ``steps[j]`` (float32): PyTorch's per-parameter ``state["step"]``, advanced here by one for each
  parameter with a gradient (before its update, as PyTorch does).
- ``coef[j, :]`` (buffer dtype): per-parameter scalars that depend on the step count (bias
  corrections, decayed lr), computed here in float64 from the step count exactly as PyTorch's
  host code does, then rounded once to the buffer dtype.

``hp`` holds the group's constant scalars already rounded to the buffer dtype (the host fills it
each step, as ggml's ``opt_step_adamw`` packs its scalars into a params tensor), so all element
arithmetic runs in the buffer dtype, in PyTorch's order of operations.  No fastmath: NaN and inf
propagate as in PyTorch.

Parallelism: the buffer is cut into chunks of ``chunk`` elements, ``chunk_seg[c]`` being the
parameter holding chunk ``c``'s first element; iteration ``c`` writes only its own chunk.
Optional state buffers that an option leaves unused are passed as empty arrays.

Each kernel is :func:`~tinyopt.kernels.jit.specialized` on its boolean options (maximize, weight
decay on or off, ...): ``opt_step_adam[amsgrad, maximize, wd_on, decoupled, lerp_low](...)`` is a
kernel compiled for that combination, whose inner loop holds no branch on them.
"""

from __future__ import annotations

import math

from tinyopt.kernels.jit import parallel_kernel, prange, specialized


@specialized
def opt_step_sgd(momentum_on: bool, nesterov: bool, maximize: bool, wd_on: bool):
    """SGD with momentum (Sutskever et al. 2013, http://proceedings.mlr.press/v28/sutskever13.html).

    ``opt_step_sgd[momentum_on, nesterov, maximize, wd_on](p, g, buf, seg, chunk_seg, chunk,
    flags, steps, hp)`` with ``hp = [lr, mu, 1 - tau, lambda]`` (tau: dampening, lambda: weight
    decay).  Per element::

        g <- -g if maximize;  g <- g + lambda * p if lambda != 0
        b <- g                            on a parameter's first momentum step
        b <- mu * b + (1 - tau) * g       afterwards
        g <- g + mu * b if nesterov else b      (when mu != 0)
        p <- p - lr * g

    ``steps`` counts momentum steps (it is how "first step" is known; SGD saves no ``step``).
    """
    @parallel_kernel
    def kernel(p, g, buf, seg, chunk_seg, chunk, flags, steps, hp):
        nseg = flags.shape[0]
        if momentum_on:
            for j in range(nseg):
                if flags[j] != 0:
                    steps[j] += 1
        neg_lr = -hp[0]
        mu = hp[1]
        one_m_tau = hp[2]
        lam = hp[3]
        n = p.shape[0]
        for c in prange(chunk_seg.shape[0]):
            start = c * chunk
            end = min(start + chunk, n)
            j = chunk_seg[c]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    first = steps[j] == 1
                    # slices, indexed from 0, let LLVM vectorize (no negative-index wraparound)
                    ps, gs, bs = p[i0:e], g[i0:e], buf[i0:e]
                    for i in range(e - i0):
                        gi = -gs[i] if maximize else gs[i]
                        if wd_on:
                            gi = gi + lam * ps[i]
                        if momentum_on:
                            b = bs[i]  # read even on the first step: a select, not a branch
                            b = gi if first else b * mu + one_m_tau * gi
                            bs[i] = b
                            gi = gi + mu * b if nesterov else b
                        ps[i] = ps[i] + neg_lr * gi
                i0 = e
                j += 1
    return kernel


@specialized
def opt_step_adam(amsgrad: bool, maximize: bool, wd_on: bool, decoupled: bool, lerp_low: bool):
    """Adam (Kingma & Ba 2014, https://arxiv.org/abs/1412.6980) and AdamW (Loshchilov & Hutter
    2017, https://arxiv.org/abs/1711.05101), as PyTorch computes them.

    ``opt_step_adam[amsgrad, maximize, wd_on, decoupled, lerp_low](p, g, m, v, vmax, seg,
    chunk_seg, chunk, flags, steps, coef, hp, lr, beta1, beta2)`` with
    ``hp = [1 - b1, b1', b2, 1 - b2, eps, lambda, 1 - lr * lambda]`` (``b1'`` = 1 - (1 - b1) rounded
    in the buffer dtype; ``lerp_low`` = ``hp[0] < 0.5`` picks PyTorch's lerp formula); per
    parameter, with its step t, ``coef[j] = [-lr / (1 - b1^t), sqrt(1 - b2^t)]``.  Per element::

        g <- -g if maximize
        p <- p * (1 - lr * lambda)        if decoupled (AdamW)   | g <- g + lambda * p  otherwise
        m <- lerp(m, g, 1 - b1)           (= b1 m + (1 - b1) g)
        v <- b2 v + (1 - b2) g^2
        vhat <- max(vhat, v) if amsgrad, else v
        p <- p - lr / (1 - b1^t) * m / (sqrt(vhat) / sqrt(1 - b2^t) + eps)
    """
    @parallel_kernel
    def kernel(p, g, m, v, vmax, seg, chunk_seg, chunk, flags, steps, coef, hp, lr, beta1, beta2):
        nseg = flags.shape[0]
        for j in range(nseg):
            if flags[j] != 0:
                steps[j] += 1
                t = float(steps[j])
                coef[j, 0] = -(lr / (1.0 - beta1 ** t))
                coef[j, 1] = (1.0 - beta2 ** t) ** 0.5
        w1 = hp[0]
        one_m_w1 = hp[1]
        b2 = hp[2]
        one_m_b2 = hp[3]
        eps = hp[4]
        lam = hp[5]
        decay = hp[6]
        n = p.shape[0]
        for c in prange(chunk_seg.shape[0]):
            start = c * chunk
            end = min(start + chunk, n)
            j = chunk_seg[c]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    neg_step = coef[j, 0]
                    bc2_sqrt = coef[j, 1]
                    ps, gs, ms, vs, ws = p[i0:e], g[i0:e], m[i0:e], v[i0:e], vmax[i0:e]
                    for i in range(e - i0):
                        gi = -gs[i] if maximize else gs[i]
                        pi = ps[i]
                        if wd_on:
                            if decoupled:
                                pi = pi * decay
                            else:
                                gi = gi + lam * pi
                        mi = ms[i]
                        if lerp_low:
                            mi = mi + w1 * (gi - mi)
                        else:
                            mi = gi - (gi - mi) * one_m_w1
                        ms[i] = mi
                        vi = vs[i] * b2 + one_m_b2 * gi * gi
                        vs[i] = vi
                        if amsgrad:
                            a = ws[i]
                            if vi != vi or vi > a:
                                a = vi
                            ws[i] = a
                            vi = a
                        denom = math.sqrt(vi) / bc2_sqrt + eps
                        ps[i] = pi + neg_step * mi / denom
                i0 = e
                j += 1
    return kernel


@specialized
def opt_step_adagrad(maximize: bool, wd_on: bool):
    """Adagrad (Duchi et al. 2011, https://jmlr.org/papers/v12/duchi11a.html) as PyTorch computes it.

    ``opt_step_adagrad[maximize, wd_on](p, g, s, seg, chunk_seg, chunk, flags, steps, coef, hp,
    lr, lr_decay)`` with ``hp = [lambda, eps]``; per parameter with step t,
    ``coef[j, 0] = -lr / (1 + (t - 1) * lr_decay)``.  Per element::

        g <- -g if maximize;  g <- g + lambda * p if lambda != 0
        s <- s + g^2
        p <- p - clr * g / (sqrt(s) + eps)
    """
    @parallel_kernel
    def kernel(p, g, s, seg, chunk_seg, chunk, flags, steps, coef, hp, lr, lr_decay):
        nseg = flags.shape[0]
        for j in range(nseg):
            if flags[j] != 0:
                steps[j] += 1
                t = float(steps[j])
                coef[j, 0] = -(lr / (1.0 + (t - 1.0) * lr_decay))
        lam = hp[0]
        eps = hp[1]
        n = p.shape[0]
        for c in prange(chunk_seg.shape[0]):
            start = c * chunk
            end = min(start + chunk, n)
            j = chunk_seg[c]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    neg_clr = coef[j, 0]
                    ps, gs, ss = p[i0:e], g[i0:e], s[i0:e]
                    for i in range(e - i0):
                        gi = -gs[i] if maximize else gs[i]
                        if wd_on:
                            gi = gi + lam * ps[i]
                        si = ss[i] + gi * gi
                        ss[i] = si
                        ps[i] = ps[i] + neg_clr * gi / (math.sqrt(si) + eps)
                i0 = e
                j += 1
    return kernel


@specialized
def opt_step_rmsprop(centered: bool, momentum_on: bool, maximize: bool, wd_on: bool,
                     lerp_low: bool):
    """RMSprop (Hinton, Lecture 6e, https://www.cs.toronto.edu/~tijmen/csc321/slides/lecture_slides_lec6.pdf;
    centered: Graves 2013, https://arxiv.org/abs/1308.0850) as PyTorch computes it.

    ``opt_step_rmsprop[centered, momentum_on, maximize, wd_on, lerp_low](p, g, sq, gavg, buf, seg,
    chunk_seg, chunk, flags, steps, hp)`` with ``hp = [alpha, 1 - alpha, alpha', eps, lambda, mu,
    -lr]`` (``alpha'`` = 1 - (1 - alpha) rounded in the buffer dtype, for the lerp; ``lerp_low`` =
    ``hp[1] < 0.5`` picks PyTorch's lerp formula).  Per element::

        g <- -g if maximize;  g <- g + lambda * p if lambda != 0
        v <- alpha v + (1 - alpha) g^2
        if centered: gbar <- lerp(gbar, g, 1 - alpha);  d <- sqrt(v - gbar^2) + eps
        else:        d <- sqrt(v) + eps
        if mu > 0:   b <- mu b + g / d;  p <- p - lr b
        else:        p <- p - lr g / d
    """
    @parallel_kernel
    def kernel(p, g, sq, gavg, buf, seg, chunk_seg, chunk, flags, steps, hp):
        nseg = flags.shape[0]
        for j in range(nseg):
            if flags[j] != 0:
                steps[j] += 1
        alpha = hp[0]
        w = hp[1]
        one_m_w = hp[2]
        eps = hp[3]
        lam = hp[4]
        mu = hp[5]
        neg_lr = hp[6]
        n = p.shape[0]
        for c in prange(chunk_seg.shape[0]):
            start = c * chunk
            end = min(start + chunk, n)
            j = chunk_seg[c]
            i0 = start
            while i0 < end:
                e = min(seg[j + 1], end)
                if flags[j] != 0:
                    ps, gs, qs, gas, bs = p[i0:e], g[i0:e], sq[i0:e], gavg[i0:e], buf[i0:e]
                    for i in range(e - i0):
                        gi = -gs[i] if maximize else gs[i]
                        if wd_on:
                            gi = gi + lam * ps[i]
                        vi = qs[i] * alpha + w * gi * gi
                        qs[i] = vi
                        if centered:
                            ga = gas[i]
                            if lerp_low:
                                ga = ga + w * (gi - ga)
                            else:
                                ga = gi - (gi - ga) * one_m_w
                            gas[i] = ga
                            d = math.sqrt(vi + (-ga) * ga) + eps
                        else:
                            d = math.sqrt(vi) + eps
                        if momentum_on:
                            b = bs[i] * mu + gi / d
                            bs[i] = b
                            ps[i] = ps[i] + neg_lr * b
                        else:
                            ps[i] = ps[i] + neg_lr * gi / d
                i0 = e
                j += 1
    return kernel
