"""Loss kernels over rows of logits: cross-entropy (with class weights and label smoothing) and
negative log-likelihood, and their gradients.

Shapes: logits ``x`` (N, C) C-contiguous float32/float64, targets ``y`` (N,) int64, class weights
``w`` (C,).  Rows whose target equals ``ignore_index`` give zero loss and zero gradient.

Targets are user data, so every kernel that indexes with them checks each one where it reads it
(one comparison per row) and reports the first out of ``[0, C)`` in ``err`` (int64 (1,)): ``err[0]``
is its row, or -1 when all are in range.  The kernel stops at that row (its output is then
incomplete); the caller raises.  No path reaches an index unchecked, whatever built the targets.
"""

from __future__ import annotations

import math

import numpy as np

from tinyopt.kernels.native import blas
from tinyopt.kernels.native.address import carray, data
from tinyopt.kernels.native.instructions import select
from tinyopt.kernels import vecmath as _V
from tinyopt.kernels.jit import c_callback, inline, kernel, parallel_kernel, prange, specialized


# Rows of a large cross-entropy (a language model's 700 x 5000 logits) run in parallel from this
# many elements, where numpy's BLAS shares numba's threads (``kernels/native/shared_threads.py``); each
# row is computed alone and the 'mean' summed in row order after all of them, so threads change
# no bit.
PARALLEL_ROWS_MIN = 1 << 20

_ROWS = 32  # rows a parallel iteration takes (with scratch of its own)

LANES = 16
"""A row's max and its sum of exponentials run in this many lanes: element ``c`` goes into lane
``c % LANES``, then the lanes are combined in order (see :func:`_exp_row`)."""


# The 'mean' reduction is folded into the row kernels (an optional output forward, an optional
# scalar gradient backward) instead of kernels of its own: each numba kernel costs its own cold
# compile, and the three it took (mean, its gradient and the weight sum both call) were ~0.6 s of
# CPU of a first training step.
@specialized
def _exp_row(fast: bool):
    """``exp_row(x, i, e, j, mx, ls) -> (m, s)``: row i of logits ``x`` (N, C): m = max_c x[i, c]
    (NaN if any is NaN), e[j, c] = exp(x[i, c] - m) rounded to x's dtype (x[i, c] - m in that
    dtype too), and s = sum_c e[j, c] in float64; ``mx`` (LANES,) of x's dtype and ``ls``
    (LANES,) float64 are scratch.  :func:`ce_exp` computes a row's exponentials with this and
    :func:`ce_rows` with these very steps written out, so both give the same bits.

    Order, fixed by C alone (never by threads): element c goes into lane c % LANES, for the max
    (NaN sticks: ``v > l or v != v``) and for the sum; then lanes 0 .. LANES-1 are combined in
    order.  So both loops vectorize (a single running max or float64 sum is a chain of
    dependent instructions: for 700 x 5000 float32 the serial max and sum took ~8 ms, the lanes
    2.1 ms, one core).  The max is exact in any order (only the sign of a zero maximum may
    differ, which changes no exponential and no loss); the sum is a different rounding of the
    same terms than a serial one, a few ulps of float64.

    ``fast`` (float32): the exponentials of ``kernels/vecmath.py`` (float64 arithmetic,
    relative error below 2e-12, so within 1 ulp of the exact float32 value: libm's ``expf``
    differed in 0.06% of the exponentials of a 700 x 5000 N(0, 9) matrix, by 1 ulp), which
    vectorize: 4.3 ms against 8.7 ms with libm for 700 x 5000, one core.  Else libm's exp.

    Inlined at one call site per kernel (:func:`ce_rows` runs its forward and gradient rows in
    one loop for that): as a function called per row (a subroutine, with row views as
    arguments) a 256 x 10 float32 cross-entropy took 49 us forward and 48 backward, inlined
    19 and 20, the same compile CPU.  :func:`ce_rows`, compiled in every first step that
    uses ``F.cross_entropy``, has the steps written out instead: numba's inlining (the
    callee's own passes, then a deep copy of its IR) took ~0.14 s of that kernel's ~0.9 s
    cold compile (fresh processes, alternating, 8 each).  Lanes past C are neither set nor
    combined (they would add -inf to the max and 0 to the sum: the same bits)."""
    # (inlined: its one call site costs less than compiling it as a function of its own)
    ex = inline(_V.exp_fast) if fast else math.exp

    @inline
    def exp_row(x, i, e, j, mx, ls):
        C = x.shape[1]
        # lanes in use, max(1, min(C, LANES)) (lanes past C would stay -inf and 0: combining
        # them changes nothing), without the builtins: each is a numba function compiled on its
        # own, ~0.03 s of a cold first step
        L = C if C < LANES else LANES
        L = L if L > 1 else 1
        for k in range(L):
            mx[k] = -math.inf
            ls[k] = 0.0
        # (one flat loop over c with the lane c % LANES, not a loop over groups of LANES around
        # one over the lanes: the same order, the same speed, less cold compile)
        for c in range(C):
            v = x[i, c]
            k = c % LANES
            mx[k] = v if v > mx[k] or v != v else mx[k]
        m = mx[0]
        for k in range(1, L):
            v = mx[k]
            m = v if v > m or v != v else m
        # the exponentials in a loop of their own, which LLVM vectorizes (as attention's rows)
        for c in range(C):
            e[j, c] = ex(x[i, c] - m)
        for c in range(C):
            ls[c % LANES] += e[j, c]
        s = 0.0
        for k in range(L):
            s += ls[k]
        return m, s
    return exp_row


EXP_ARGS = 8


def exp_stats_size(N: int, itemsize: int) -> int:
    """Elements of a dtype of ``itemsize`` bytes that hold :func:`ce_exp`'s row statistics: N x 2
    float64 (whole 16 bytes per row, so the exponentials after them stay aligned)."""
    return N * 16 // itemsize


@specialized
def ce_exp(single: bool):
    """``ce_exp[single]``: a C function ``void chunk(int64 c, int64 *args)`` (float32 if
    ``single``, else float64), args = [address of x (N, C), of e (N, C), of stats (N, 2)
    float64, N, C, rows per chunk R, of work and of lanes (chunks, LANES) (scratch of x's dtype
    and float64, row c for chunk c)], that computes, for the rows i of chunk c (rows c R .. c R
    + R - 1), e[i, c] = exp(x[i, c] - m_i) in x's dtype, stats[i] = (m_i, s_i), m_i = max_c x[i,
    c] and s_i = sum_c e[i, c] (:func:`_exp_row`): what a large cross-entropy's loss and
    gradient both read (``ce_rows[True, .]`` both ways), computed once instead of once each
    way.  Each row alone: the chunks run on the shared threads
    (``shared_threads.chunk_runner``) or, R = N, as one call; a parallel build (numba parfor)
    cost ~0.6 s more of a cold first step."""
    dt = np.float32 if single else np.float64
    exp_row = _exp_row[single]

    def ce_exp_chunk(c, argp):
        args = carray(argp, (EXP_ARGS,))
        N, C, R = args[3], args[4], args[5]
        x = carray(blas.pointer(args[0], dt(0.0)), (N, C))
        e = carray(blas.pointer(args[1], dt(0.0)), (N, C))
        stats = carray(blas.pointer(args[2], 0.0), (N, 2))
        mx = carray(blas.pointer(args[6], dt(0.0)), (c + 1, LANES))[c]
        ls = carray(blas.pointer(args[7], 0.0), (c + 1, LANES))[c]
        end = (c + 1) * R
        # (not min(): numba compiles its min once per caller's flags, a C callback's are not
        # a kernel's)
        for i in range(c * R, N if N < end else end):
            m, s = exp_row(x, i, e, i, mx, ls)
            stats[i, 0] = m
            stats[i, 1] = s
    return c_callback(ce_exp_chunk, "void(int64, CPointer(int64))", nrt=False)


def ce_scratch(N: int, C: int, dtype, from_exp: bool) -> tuple[np.ndarray, np.ndarray]:
    """The scratch :func:`ce_rows` needs for N rows of C classes of ``dtype``: ``work`` (one row
    of exponentials, unless ``from_exp``, and LANES maxima per block of ``_ROWS`` rows, of
    ``dtype``) and ``lanes`` (LANES float64 sums per block).  Passed in rather than allocated in
    the kernel: numba's ``np.empty`` is a function of its own to compile for each dtype (~0.1 s
    of a cold first training step)."""
    blocks = (N + _ROWS - 1) // _ROWS
    return (np.empty((blocks, (0 if from_exp else C) + LANES), dtype),
            np.empty((blocks, LANES), np.float64))


@specialized
def ce_rows(from_exp: bool, single: bool):
    """``ce_rows[from_exp, single](grad, g, x, y, w, ignore_index, eps, mean, rows, out, err, e,
    stats, work, lanes)``: the cross-entropy of each row of logits ``x`` (N, C) (``grad`` False)
    or its gradient (``grad`` True), each row alone (rows in parallel for large ``x``).  One
    kernel both ways: they share their target checks, weight sums and row exponentials, and each
    numba kernel costs its own cold compile (the two as kernels of their own took ~0.2 s more of
    a cold first training step).

    Forward: rows[i] = (1-eps) w[y_i] (-log p_i[y_i]) + (eps/C) sum_c w_c (-log p_i[c]), p_i =
    softmax(x_i) (the label-smoothed, class-weighted cross-entropy of row i), with -log p_i[c] =
    lse_i - x[i, c], lse_i = m_i + log s_i (:func:`_exp_row`; float32 ``x``: ``single``).
    ``mean`` (1,) gets the 'mean' reduction, as PyTorch's: sum_i rows[i] / sum_i w[y_i] over
    rows not ignored (0/0 = NaN when every row is); ``mean`` of shape (0,): no reduction.

    Gradient: d/dx of the rows times g: out[i, k] = g_i ((1-eps) w[y_i] (p_k - [k = y_i]) +
    (eps/C) (p_k sum_c w_c - w_k)), p_k = e[i, k] / s_i; on an ignored row 0 p_k, as PyTorch's
    log_softmax backward (0 - p_k 0): NaN where p_k is (a NaN or +inf in the row), else 0.
    ``mean`` of shape (0,): ``g`` (N,) holds each row's g_i.  ``mean`` (1,): ``g`` (1,) is the
    gradient of the 'mean' reduction, and every g_i its share, g[0] / sum_i w[y_i] over rows
    not ignored, stored in ``mean[0]`` (so rounded to its dtype, as a gradient array would be).

    ``from_exp``: m_i, s_i are read from ``stats`` (N, 2) and the gradient's exponentials from
    ``e`` (N, C) (:func:`ce_exp`, the same values; a serial kernel: what is left is light, and
    a parallel build costs ~1.6 s of a cold first step against ~0.8 s); else computed (the
    gradient's into ``out``; ``e``, ``stats`` unused).  ``work``, ``lanes``: scratch of
    :func:`ce_scratch`.  Arguments one way does not use are passed empty.  A target out of
    range: nothing is computed (``err[0]`` its row).

    Every array must be C-contiguous (another layout is a typing error): the kernel reads them
    through typed pointers (:func:`native.address.data`), and its loops are ``while`` loops and its
    conditional expressions ``select``, because the serial build is compiled in the first step
    of every model trained with ``F.cross_entropy`` and its cold compile is numba's front end
    and LLVM working through its IR: an array access is ~30 lines of IR, a pointer's 2, and a
    ``for`` loop over a range ~130 lines more than a ``while`` loop (numba's range iterator).
    Its IR before optimisation went 6100 -> 2350 lines and its cold compile (float32, fresh
    process, alternating pairs, load 0.9-2.7) 0.68-0.80 -> 0.52-0.65 s of CPU (the parallel
    build's 2.4 -> 1.9 s), the same bits over 22500 results (NaN and inf logits, weights,
    smoothing, ignore_index, C = 1 .. 5000, N = 0 .. 700, all builds)."""
    ex = inline(_V.exp_fast) if single else math.exp  # (as _exp_row's)

    def rows_kernel(serial: bool):
        """The kernel: its parallel build, or (``serial``) its serial build and ``from_exp``'s
        kernel, the same steps over one block of every row."""
        def ce_rows_kernel(grad, g, x, y, w, ignore_index, eps, mean, rows, out, err, e, stats,
                           work, lanes):
            N, C = x.shape
            # every array through a typed pointer to its data (see address.data and the docstring)
            xp = data(x)
            yp = data(y)
            wp = data(w)
            gp = data(g)
            meanp = data(mean)
            rowsp = data(rows)
            outp = data(out)
            errp = data(err)
            workp = data(work)
            lanesp = data(lanes)
            sp = data(stats)
            er = data(e) if from_exp else outp  # (the gradient's exponentials)
            # each target checked where it is read, and ws = sum_i w[y_i] over rows not
            # ignored, in order, in one loop (written out, not inlined helpers: numba's
            # inlining of a function costs ~0.01-0.05 s of a cold compile each)
            errp[0] = -1
            ws = 0.0
            i = 0
            while i < N:
                t = yp[i]
                if t != ignore_index:
                    if (t < 0) | (t >= C):
                        errp[0] = i
                        return
                    ws += wp[t]
                i += 1
            reduced = mean.shape[0] != 0
            if reduced & grad:  # each row's share of the mean's gradient (in mean's dtype)
                meanp[0] = gp[0] / ws
            wsum = 0.0
            c = 0
            while grad & (c < C):
                wsum += wp[c]
                c += 1
            # (forward: a row's exponentials into its block's row of work; gradient: into its
            # row of out)
            dst = outp if grad else workp
            W = work.shape[1]  # (a block's row of work: the exponentials, then LANES maxima)
            # lanes in use, max(1, min(C, LANES)) (see _exp_row; all LANES of them always
            # compiled ~0.015 s faster and made 256 x 10 rows ~15% slower)
            L = select(C < LANES, C, LANES)
            L = select(L > 1, L, 1)
            # blocks of _ROWS rows, each with its row of work and of lanes (run in parallel);
            # the serial build, one block of every row: a loop LLVM removes, where blocks of
            # rows took ~0.03 s more of its cold compile.  (The count computed first: numba
            # takes a prange of a conditional expression for a serial loop.)
            blocks = 1 if serial else (N + _ROWS - 1) // _ROWS
            # one loop both ways, so a row's exponentials are one copy of their code
            for blk in prange(blocks):
                # (int64: a parallel build's block number is unsigned, and numba unifies an
                # unsigned and a signed integer as a float)
                b = np.int64(blk)
                end = N if serial else (b + 1) * _ROWS
                mo = b * W + W - LANES  # (the block's lanes: maxima in work, sums in lanes)
                lb = b * LANES
                for i in range(b * _ROWS, select(N < end, N, end)):
                    t = yp[i]
                    if (not grad) & (t == ignore_index):
                        rowsp[i] = 0.0
                        continue
                    r = i * C  # (row i of x, out and e)
                    if from_exp:
                        m, s = sp[2 * i], sp[2 * i + 1]
                    else:
                        # _exp_row's steps written out (not inlined: numba's inlining of it
                        # took ~0.14 s of this kernel's ~0.9 s cold compile), so the same bits
                        # as ce_exp's (tests/test_ops_loss.py compares the two)
                        d = select(grad, r, b * W)
                        k = 0
                        while k < L:
                            workp[mo + k] = -math.inf
                            lanesp[lb + k] = 0.0
                            k += 1
                        c = 0
                        while c < C:
                            v = xp[r + c]
                            k = mo + c % LANES
                            mk = workp[k]
                            workp[k] = select((v > mk) | (v != v), v, mk)
                            c += 1
                        m = workp[mo]
                        k = 1
                        while k < L:
                            v = workp[mo + k]
                            m = select((v > m) | (v != v), v, m)
                            k += 1
                        # the row copied, then its exponentials in place: a plan writes the
                        # gradient over the logits (out is x), and a loop reading x and writing
                        # out failed LLVM's overlap check there and ran its scalar copy (1024 x 65
                        # float32: 570 us against 205 us; 64 x 5000: 2.5 ms against 0.78 ms)
                        c = 0
                        while c < C:
                            dst[d + c] = xp[r + c]
                            c += 1
                        c = 0
                        while c < C:
                            dst[d + c] = ex(dst[d + c] - m)
                            c += 1
                        c = 0
                        while c < C:
                            lanesp[lb + c % LANES] += dst[d + c]
                            c += 1
                        s = 0.0
                        k = 0
                        while k < L:
                            s += lanesp[lb + k]
                            k += 1
                    if not grad:
                        lse = m + math.log(s)
                        loss = (1.0 - eps) * wp[t] * (lse - xp[r + t])
                        if eps != 0.0:
                            smooth = 0.0
                            c = 0
                            while c < C:
                                smooth += wp[c] * (lse - xp[r + c])
                                c += 1
                            loss += eps / C * smooth
                        rowsp[i] = loss
                        continue
                    inv = 1.0 / s
                    if t == ignore_index:
                        c = 0
                        while c < C:
                            outp[r + c] = 0.0 * (er[r + c] * inv)
                            c += 1
                    else:
                        gi = meanp[0] if reduced else gp[i]
                        a = gi * (1.0 - eps) * wp[t]
                        bc = gi * eps / C
                        c = 0
                        while c < C:
                            p = er[r + c] * inv
                            outp[r + c] = a * p + bc * (p * wsum - wp[c])
                            c += 1
                        outp[r + t] -= a
            if reduced & (not grad):  # sum_i rows_i / ws, summed in order in float64
                acc = 0.0
                i = 0
                while i < N:
                    acc += rowsp[i]
                    i += 1
                meanp[0] = acc / ws
        return ce_rows_kernel

    if from_exp:
        return kernel(rows_kernel(True), nrt=False)
    serial = rows_kernel(True)
    serial.__name__ = "ce_rows_kernel_serial"
    serial.__qualname__ += "_serial"  # (numba's disk cache keys a kernel by it)
    return parallel_kernel(rows_kernel(False), sized_by=2, shared_min=PARALLEL_ROWS_MIN,
                           serial=serial, serial_nrt=False)


@inline
def _weight_sum(y, w, ignore_index, err):
    """sum_i w[y_i] over rows not ignored, in order in float64; err[0] = the first row whose
    target is out of range (the sum is then partial)."""
    C = w.shape[0]
    ws = 0.0
    for i in range(y.shape[0]):
        t = y[i]
        if t != ignore_index:
            if t < 0 or t >= C:
                err[0] = i
                return ws
            ws += w[t]
    return ws


@inline
def _mean(rows, wsum):
    """sum_i rows_i / wsum, summed in order in float64."""
    acc = 0.0
    for i in range(rows.shape[0]):
        acc += rows[i]
    return acc / wsum


@inline
def _mean_share(g, y, w, ignore_index, share, err):
    """The gradient of the 'mean' reduction reaching each row, g[0] / sum_i w[y_i] over rows not
    ignored, stored in ``share[0]`` (so rounded to its dtype, as a gradient array would be);
    False (err[0] its row) on a target out of range."""
    ws = _weight_sum(y, w, ignore_index, err)
    if err[0] >= 0:
        return False
    share[0] = g[0] / ws
    return True


@kernel
def nll_rows(logp, y, w, ignore_index, out, total, err):
    """out[i] = -w[y_i] logp[i, y_i] (0 for ignored rows); ``total`` as in :func:`ce_rows`."""
    C = logp.shape[1]
    err[0] = -1
    wsum = 0.0
    for i in range(logp.shape[0]):
        t = y[i]
        if t == ignore_index:
            out[i] = 0.0
        elif t < 0 or t >= C:
            err[0] = i
            return
        else:
            wsum += w[t]
            out[i] = -w[t] * logp[i, t]
    if total.shape[0] != 0:
        total[0] = _mean(out, wsum)


@kernel
def nll_rows_grad(g, y, w, ignore_index, share, out, err):
    """out[i, c] = -g_i w[y_i] where c = y_i, else 0; ``share`` as ``mean`` in the gradient of
    :func:`ce_rows`."""
    N, C = out.shape
    err[0] = -1
    mean = share.shape[0] != 0
    if mean and not _mean_share(g, y, w, ignore_index, share, err):
        return
    for i in range(N):
        for c in range(C):
            out[i, c] = 0.0
        t = y[i]
        if t == ignore_index:
            continue
        if t < 0 or t >= C:
            err[0] = i
            return
        gi = share[0] if mean else g[i]
        out[i, t] = -gi * w[t]


@kernel
def one_hot(y, out, err):
    """out[i, c] = 1 where c = y_i, else 0 (int64)."""
    N, C = out.shape
    err[0] = -1
    for i in range(N):
        for c in range(C):
            out[i, c] = 0
        t = y[i]
        if t < 0 or t >= C:
            err[0] = i
            return
        out[i, t] = 1
