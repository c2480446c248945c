"""An optimizer step taken one parameter at a time, inside a plan run (ggml's ``gb_opt``).

``kernels/optim.py`` steps a whole flat buffer in one call: a prologue computes every
parameter's coefficients (and raises nothing: it returns the index of one that overflows), then
the elements.  When the step runs inside the backward plan, each parameter is updated as soon as
its gradient is final, so the same work is cut in three, over the same ``scalars``/``update``
functions of the algorithm (the same arithmetic, so the same bits):

``coefs(flags, S, coef, hs) -> int``
    the prologue's first half: ``coef[j]`` of every parameter with ``flags[j] != 0``; -1, or
    the first ``j`` whose coefficients overflow the buffer dtype.  Changes no state.
``advance(flags, S, hs)``
    its second half: the next scalar state (``step`` ...) of those parameters.
``segment(p, g, s0, s1, s2, lo, hi, j, coef, hs)``
    elements ``[lo, hi)`` of the buffers (parameter ``j``'s), as the walker's inner loop.
``outer(a, b, p, g, s0, s1, s2, lo, j, coef, hs)``
    parameter ``j`` whose gradient is the outer product ``a b^T`` (a linear layer's weight at
    batch 1: ``a`` (m,), ``b`` (n,)), a block of rows at a time: ``g[lo + r n + c] = a[r] *
    b[c]`` (one product, as ``kernels.linalg.outer``), then the update of that block while it
    is in cache.  The gradient is still stored (``p.grad`` is what ``backward`` leaves), but
    not read back from memory, and the separate outer-product pass is gone.

``for_algorithm(alg, switches)`` gives the four, compiled on first use and kept; ``alg`` is a
``kernels.optim.algorithm``.  Serial builds: a segment is one parameter (397k elements for the
784-500-10 MLP's first weight: about 0.25 ms of Adam), far below where threads pay off here.
"""

from __future__ import annotations

from tinyopt.kernels.jit import kernel
from tinyopt.kernels.native.address import local_copy
from tinyopt.kernels.optim import coefficient_overflowed

BLOCK = 8192
"""Elements of gradient ``outer`` writes before stepping them (whole rows; 32 KiB of float32,
in L1/L2 when the update reads them back).  Measured against the outer product followed by the
step (one thread, Adam): 2048 x 2048 float32, 6.5 ms against 7.4 ms (the state is in DRAM);
500 x 784, no difference (277 against 268 us, in L3: Adam is bound by its divisions there)."""

_MADE: dict[tuple, tuple] = {}


def for_algorithm(alg, switches: tuple) -> tuple:
    """``(coefs, advance, segment, outer)`` for algorithm ``alg`` compiled with ``switches``."""
    key = (alg.__name__, switches)
    made = _MADE.get(key)
    if made is None:
        made = _MADE[key] = _make(*alg._factory(*switches),
                                  alg.__name__ + "_" + "".join("T" if s else "F" for s in switches))
    return made


def _make(scalars, update, name: str) -> tuple:
    # each function gets a name of its own: numba keys cached machine code by qualified name (see
    # ``kernels.optim.walker``)
    def coefs(flags, S, coef, hs):
        h = hs[0]
        for j in range(flags.shape[0]):
            if flags[j] != 0:
                cn = scalars(S[j], h)[1]
                coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3] = cn
                if coefficient_overflowed(coef[j], cn):
                    return j
        return -1

    def advance(flags, S, hs):
        h = hs[0]
        for j in range(flags.shape[0]):
            if flags[j] != 0:
                sn = scalars(S[j], h)[0]
                S[j, 0], S[j, 1], S[j, 2], S[j, 3] = sn

    def segment(p, g, s0, s1, s2, lo, hi, j, coef, hs):
        h = local_copy(hs[0])  # (a copy: its fields stay in registers)
        c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
        ps, gs, a, b, d = p[lo:hi], g[lo:hi], s0[lo:hi], s1[lo:hi], s2[lo:hi]
        for i in range(hi - lo):
            update(i, ps, gs, a, b, d, h, c)

    def outer(x, y, p, g, s0, s1, s2, lo, j, coef, hs):
        h = local_copy(hs[0])
        c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
        n = y.shape[0]
        m = x.shape[0]
        rows = max(1, BLOCK // n)
        for r0 in range(0, m, rows):
            r1 = min(r0 + rows, m)
            for r in range(r0, r1):
                xr = x[r]
                gr = g[lo + r * n:lo + (r + 1) * n]
                for k in range(n):
                    gr[k] = xr * y[k]
            i0, i1 = lo + r0 * n, lo + r1 * n
            ps, gs, a, b, d = p[i0:i1], g[i0:i1], s0[i0:i1], s1[i0:i1], s2[i0:i1]
            for i in range(i1 - i0):
                update(i, ps, gs, a, b, d, h, c)

    fns = []
    for fn in (coefs, advance, segment, outer):
        fn.__name__ = fn.__qualname__ = f"{name}_{fn.__name__}_in_plan"
        fns.append(kernel(fn))
    return tuple(fns)
