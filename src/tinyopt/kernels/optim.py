"""Fused optimizer steps: one walker over a group's flat buffers, and each algorithm's math.

An optimizer step updates every parameter of a group in one call.  The group is laid out as one
index space (``tinyopt.optim.flat.FlatBuffer``), parameter ``j`` occupying ``[seg[j],
seg[j+1])``: up to three vector state buffers ``s0, s1, s2`` are flat (1-d, C-contiguous, one
float dtype), while the parameters and gradients stay where they are, reached through segment
tables of addresses (``pa[j]``, ``ga[j]``: where parameter ``j``'s storage and gradient start,
``kernels/native/address.py``), so the user's arrays, shared memory and views taken before are stepped
in place.  Per parameter:

- ``flags[j]`` (uint8): 1 when parameter ``j`` has a gradient.  Parameters with ``flags[j] == 0``
  are skipped exactly as PyTorch skips a parameter whose grad is None: nothing is read or
  written and their state (step count included) does not advance.
- ``S[j, :4]`` (float32): its scalar state (``S[j, 0]`` is PyTorch's ``state["step"]``; NAdam's
  ``mu_product``, ASGD's ``eta`` and ``mu`` follow), float32 as PyTorch keeps them.
- ``coef[j, :8]`` (buffer dtype): scratch for its coefficients of this step (``[:4]``) and
  its next scalar state until it is stored (``[4:]``).

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
parameter holding chunk ``c``'s first element; iteration ``c`` writes only its own chunk, so the
results are the same on any number of threads.  (The serial build walks the parameters one by
one instead, with the prologue inlined, every array read through a typed pointer and no
reference counting: the same bits, less code to compile.)  The parallel
build runs from ``kernels.jit.PARALLEL_MIN_ELEMENTS`` elements; an algorithm whose parallel
build measured faster from fewer elements (Adam; SGD's did not) declares a lower
``shared_min``, used where numpy's BLAS shares the kernels' OpenMP threads
(``kernels/native/shared_threads.py``: no second pool spinning on the cores) and numba has more
than one thread, from the walker's ``HOT_CALLS``-th call on (the parallel build costs several
times the serial one to compile: Adam's ~2.8 s CPU against ~0.6 s, once per disk cache) and
while it runs faster than the serial one (:class:`_SharedPoolWalker`).

Each algorithm is an :func:`algorithm` over its boolean switches:
``adam[amsgrad, maximize, wd_on, decoupled, lerp_low]`` is a kernel compiled for that
combination, whose inner loop holds no branch on them.  Every kernel returns -1, or the index of
the parameter whose coefficients overflowed.
"""

from __future__ import annotations

import functools
import math
import sys
import time

import numba
import numpy as np

from tinyopt.kernels.native import half
from tinyopt.kernels.native.address import at, data, local_copy, offset, retyped
from tinyopt.kernels import compile_ahead, jit
from tinyopt.kernels.jit import _FORK, inline, parallel_kernel, prange, specialized, subroutine
from tinyopt.kernels.native.instructions import became_inf, fma


class Algorithm:
    """``algorithm[switches]``: the fused kernel of ``factory(*switches) -> (scalars, update)``,
    made on first use and kept (see :func:`algorithm`)."""

    def __init__(self, factory, shared_min: int | None = None):
        self._factory = factory
        self._shared_min = shared_min
        self._kernels: dict[tuple, object] = {}
        functools.update_wrapper(self, factory)

    def __getitem__(self, switches):
        switches = switches if isinstance(switches, tuple) else (switches,)
        kernel = self._kernels.get(switches)
        if kernel is None:
            name = self.__name__ + "_" + "".join("T" if s else "F" for s in switches)
            kernel = walker(*self._factory(*switches), name)
            if self._shared_min is not None:
                kernel = _SharedPoolWalker(kernel, self._shared_min)
            self._kernels[switches] = kernel
        return kernel

    def serial_build(self, switches: tuple):
        """The numba dispatcher of ``self[switches]``'s serial build."""
        kernel = self[switches]
        return getattr(kernel, "_kernel", kernel).serial_build

    def compile_ahead(self, switches: tuple, args: tuple) -> None:
        """Start compiling ``self[switches]`` for the types of ``args`` (a call's arguments) in
        a helper process (``kernels/compile_ahead.py``), where such a call would take the serial
        build (as ``jit._ParallelKernel`` chooses); its first call then waits for it."""
        least = jit.PARALLEL_MIN_ELEMENTS
        if self._shared_min is not None and _FORK["openmp_started"]:
            least = min(least, self._shared_min)
        if (flat_size(args) >= least
                or getattr(sys.modules[self.__module__], self.__name__, None) is not self):
            return
        compile_ahead.declare(compile_ahead.STEP, (self.__module__, self.__name__,
                                                   ("serial_build", switches)), args)


def algorithm(factory=None, *, shared_min: int | None = None):
    """Declare an algorithm: ``factory(*switches)`` returns its ``(scalars, update)`` functions
    (see the module docstring); ``name[switches]`` is its kernel for those compile-time switches,
    which numba freezes as constants (LLVM does not unswitch an inner loop on a runtime flag, and
    a load or store under one keeps the loop from vectorizing).  ``shared_min``: the parallel
    build from that many elements on the shared thread pool (see the module docstring)."""
    if factory is None:
        return functools.partial(Algorithm, shared_min=shared_min)
    return Algorithm(factory)


HOT_CALLS = 64
"""Calls of a walker before it may take its parallel build from ``shared_min`` elements."""

TRY_EVERY, TRY_MAX = 32, 1024
"""Calls between tries of the build not in use: ``TRY_EVERY``, doubled (up to ``TRY_MAX``) each
time it lost by more than 2x."""


class _SharedPoolWalker:
    """A walker that may take its parallel build from ``shared_min`` elements where numpy's BLAS
    runs on the kernels' OpenMP threads and numba has more than one (with one, a parallel region
    costs ~25 us more than the serial build); elsewhere the walker's own choice.

    Two rules keep the parallel build from costing more than it saves.  It is used only once the
    walker has been called ``HOT_CALLS`` times (a JIT's tiered compilation: the costlier build,
    ~3x the serial one's compile, for work that proved to repeat).  And then each call takes the
    build whose wall time per element has been lower (an average over its recent calls), trying
    the other one every ``TRY_EVERY`` calls or less often while it keeps losing: a parallel region
    waits for all its threads, so on cores busy with other processes a thread that is not
    scheduled stalls it by a time slice (the MLP's step at batch 1 took 9x longer so), while on
    free cores the 784-500-10 MLP's Adam takes ~0.7x the serial time.  Both builds compute the
    same bits (iteration c writes chunk c alone), so the choice changes only the time."""

    __slots__ = ("_kernel", "_shared_min", "_calls", "_cost", "_gap", "_next_try", "low")

    def __init__(self, kernel, shared_min: int):
        self._kernel = kernel
        self._shared_min = shared_min
        self._calls = 0
        self._cost = [0.0, 0.0]  # ns per element, serial and parallel (0: not measured yet)
        self._gap = TRY_EVERY
        self._next_try = HOT_CALLS
        self.low = kernel.low

    def __call__(self, *args):
        size = flat_size(args)
        if (size < self._shared_min or not _FORK["openmp_started"]
                or numba.config.NUMBA_NUM_THREADS == 1):
            return self._kernel(*args)
        n = self._calls = self._calls + 1
        if n < HOT_CALLS:
            return self._kernel(*args)
        cost = self._cost
        if not cost[0] or not cost[1]:  # each build's first figure (the parallel one's first
            build = 0 if not cost[0] else 1  # call may compile it: it is tried again later)
            best = -1
        else:
            best = 1 if cost[1] < cost[0] else 0
            build = 1 - best if n >= self._next_try else best
        t0 = time.perf_counter_ns()
        bad = self._kernel.parallel(*args) if build else self._kernel(*args)
        dt = (time.perf_counter_ns() - t0) / size + 1e-9
        if build == best:
            cost[build] = 0.75 * cost[build] + 0.25 * dt
        else:  # a try (or a first figure): its own figure, and the next try sooner or later
            cost[build] = dt
            lost = best >= 0 and dt > 2 * cost[best]
            self._gap = min(2 * self._gap, TRY_MAX) if lost else TRY_EVERY
            self._next_try = n + self._gap
        return bad

    def serial(self, *args):
        return self._kernel.serial(*args)

    def parallel(self, *args):
        return self._kernel.parallel(*args)


def flat_size(args: tuple) -> int:
    """The elements a walker call steps: ``seg[-1]`` (its arguments' sixth)."""
    seg = args[5]
    return int(seg[seg.shape[0] - 1])


def step_prologue(scalars, name: str):
    """The prologue of a fused step, ``prologue(flags, S, coef, h) -> int``: every flagged
    parameter's coefficients of this step (``coef[j, :4]``), then, none overflowing, its next
    scalar state (``S[j]``); -1, or the index of the parameter whose coefficients overflowed
    (nothing written to ``S`` then).  Compiled as a call under the qualified name ``name`` (see
    :func:`walker`): it is not inlined, as numba's parallel array analysis trips over the
    tuples it returns.  Its steps, over typed pointers, are :func:`prologue_steps`'s."""
    steps = prologue_steps(scalars)

    def prologue(flags, S, coef, h):
        return steps(data(flags), data(S), data(coef), flags.shape[0], S.shape[1], coef.shape[1],
                     h)

    prologue.__qualname__ = name
    subroutine(prologue)
    return prologue


def prologue_steps(scalars):
    """The prologue's steps (see :func:`step_prologue`), ``steps(fp, sp, cp, nseg, ws, wc, h) ->
    int`` over typed pointers to ``flags``, ``S`` and ``coef``'s data (``nseg`` parameters,
    rows of ``ws`` and ``wc`` elements), inlined: the serial walker hands it the pointers it
    reads through anyway (each array it passed instead cost ~40 lines of IR to copy and count
    references)."""

    @inline
    def steps(fp, sp, cp, nseg, ws, wc, h):
        # one ``scalars`` per parameter: its next scalar state waits in coef[j, 4:] until no
        # coefficient overflowed (stored there and then in S it rounds as stored in S at once:
        # the buffer dtype is float32 or float64, S float32).  S's row is handed to ``scalars``
        # as a tuple of its 4 float32 values, what indexing the row gave.
        j = _ZERO
        while j < nseg:
            if fp[j] != 0:
                sj, cj = offset(sp, j * ws), offset(cp, j * wc)  # (rows j)
                sn, cn = scalars((sj[0], sj[1], sj[2], sj[3]), h)
                cj[0], cj[1], cj[2], cj[3] = cn
                if became_inf((cj[0], cj[1], cj[2], cj[3]), cn):
                    return j
                cj[4], cj[5], cj[6], cj[7] = sn
            j += 1
        j = _ZERO
        while j < nseg:
            if fp[j] != 0:
                sj, cj = offset(sp, j * ws), offset(cp, j * wc)
                sj[0], sj[1], sj[2], sj[3] = cj[4], cj[5], cj[6], cj[7]
            j += 1
        return -1

    return steps


_ZERO = np.int64(0)
"""The first index of the walkers' ``while`` loops: an int64 from the start, where a literal
``0`` is typed ``Literal[int](0)`` until its loop's ``+= 1`` widens it, and numba's type
inference then runs a third pass over the whole kernel (~0.04 s of Adam's cold compile)."""


def walker(scalars, update, name: str):
    """The fused step of one algorithm: ``kernel(pa, ga, s0, s1, s2, seg, chunk_seg, chunk,
    flags, S, coef, hs) -> int`` (see the module docstring; ``pa``/``ga`` int64 address tables,
    ``hs`` a 1-element record array).

    ``name`` names the compiled functions: numba names a function's machine code after its
    qualified name, and two cached kernels whose subroutines share one (every walker's
    ``prologue``), compiled in different processes and loaded into one, resolve each other's
    calls (Rprop ran SGD's prologue).  So every algorithm and switch combination gets its own.
    """

    prologue = step_prologue(scalars, f"{name}_prologue")
    steps = prologue_steps(scalars)

    def kernel(pa, ga, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs):
        bad = prologue(flags, S, coef, hs[0])
        if bad >= 0:
            return bad
        n = seg[seg.shape[0] - 1]
        for ci in prange(chunk_seg.shape[0]):
            h = local_copy(hs[0])  # (in the loop: parallel regions mistype a record from outside)
            start = ci * chunk
            # (not min(): a function numba compiles on its own, ~0.02 s of a cold first step)
            end = start + chunk if start + chunk < n else n
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = seg[j + 1] if seg[j + 1] < end else end
                if flags[j] != 0:
                    cj = coef[j]
                    c = (cj[0], cj[1], cj[2], cj[3])
                    # views indexed from 0 let LLVM vectorize (no negative-index wraparound);
                    # p's and g's at their chunk's first address (a slice of the segment's
                    # view: more code to compile for the same view)
                    lo = (i0 - seg[j]) * s0.itemsize
                    ps = at(pa[j] + lo, e - i0, s0)
                    gs = at(ga[j] + lo, e - i0, s0)
                    a, b, d = s0[i0:e], s1[i0:e], s2[i0:e]
                    for i in range(e - i0):
                        update(i, ps, gs, a, b, d, h, c)
                i0 = e
                j += 1
        return -1

    def serial(pa, ga, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs):
        # the same updates, parameter by parameter (each element's update is independent of
        # the order, so the same bits as the chunks'); the prologue inlined (numba's parallel
        # analysis, not the serial build, trips over its tuples): ~0.1 s less to compile than
        # the chunked loop with the prologue as a call.  Every array through a typed pointer
        # (``update`` indexes them from 0 as it did views: a pointer access is 2 lines of
        # LLVM IR, an array's ~30) and ``while`` loops (a range loop's iterator is ~130 lines
        # more), and no reference counting (``serial_nrt``): Adam's build went 5435 -> 1547
        # lines of IR before optimisation and its cold compile ~0.45 -> ~0.33 s of CPU.
        h = local_copy(hs[0])
        fp, cp, nseg, wc = data(flags), data(coef), flags.shape[0], coef.shape[1]
        bad = steps(fp, data(S), cp, nseg, S.shape[1], wc, h)
        if bad >= 0:
            return bad
        sg, pp, gp = data(seg), data(pa), data(ga)
        v0, v1, v2 = data(s0), data(s1), data(s2)  # (unused slots: empty, never read)
        j = _ZERO
        while j < nseg:
            if fp[j] != 0:
                cj = offset(cp, j * wc)
                c = (cj[0], cj[1], cj[2], cj[3])
                lo, n = sg[j], sg[j + 1] - sg[j]
                ps, gs = retyped(pp[j], v0), retyped(gp[j], v0)
                a, b, d = offset(v0, lo), offset(v1, lo), offset(v2, lo)
                i = _ZERO
                while i < n:
                    update(i, ps, gs, a, b, d, h, c)
                    i += 1
            j += 1
        return -1

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    serial.__name__ = serial.__qualname__ = f"{name}_kernel_serial"
    fused = parallel_kernel(kernel, sized_by=flat_size, serial=serial, serial_nrt=False)
    fused.low = specialized(lambda mode: _low_walker(prologue, update, mode, name))
    return fused


# ---- 16-bit parameters with float32 master weights ---------------------------------------------
F16, BF16, BF16_SR = 1, 2, 3
"""Modes of ``kernel.low[mode]``: the storage type of the parameters, and how they are rounded."""

LOW_MODES = {"float16": F16, "bfloat16": BF16}
"""The mode of each 16-bit storage dtype, by numpy name (round to nearest even)."""


def sixteen_bit(mode: int) -> tuple:
    """The element functions of 16-bit ``mode`` (F16, BF16, BF16_SR; 0: F16's, unused):
    ``(widen, round, same)``: ``load_*(q)``, ``store_*(x, i)`` and ``unchanged_*(x, q, i)``,
    whether ``q`` is still the rounding of its master ``x`` (a NaN master may take ``q``: it is
    NaN too).  Plain functions for the kernels' closures, not the intrinsics: those would
    defeat the disk cache."""
    widen = load_bf16 if mode in (BF16, BF16_SR) else load_f16
    rnd = {BF16: store_bf16, BF16_SR: store_bf16_sr}.get(mode, store_f16)
    same = {BF16: unchanged_bf16, BF16_SR: unchanged_bf16_sr}.get(mode, unchanged_f16)
    return widen, rnd, same


def _low_walker(prologue, update, mode, name: str):
    """``kernel.low[mode]``: the same step over float32 master weights, state and gradients,
    which also writes each updated parameter rounded to 16 bits (DeepSpeed's step-plus-copy):
    ``kernel(qa, p, ga, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs) -> int`` with
    ``qa`` the addresses of the parameters' 16-bit storage (float16 or bfloat16 bit patterns,
    read as uint16; ``mode`` F16, BF16 or BF16_SR for stochastic rounding) and ``p`` their
    float32 masters (flat).

    ``q`` is what users see and write: an element whose ``q`` is no longer the rounding of its
    master (a loaded model state dict, ``p.data[...] = x``) takes ``q``, widened, as its master
    before it steps.  The check costs no memory traffic (``q``'s line is read to be written).
    """
    widen, rnd, same = sixteen_bit(mode)

    def kernel(qa, p, ga, s0, s1, s2, seg, chunk_seg, chunk, flags, S, coef, hs):
        bad = prologue(flags, S, coef, hs[0])
        if bad >= 0:
            return bad
        n = p.shape[0]
        for ci in prange(chunk_seg.shape[0]):
            h = local_copy(hs[0])
            start = ci * chunk
            # (not min(): a function numba compiles on its own, ~0.02 s of a cold first step)
            end = start + chunk if start + chunk < n else n
            j = chunk_seg[ci]
            i0 = start
            while i0 < end:
                e = seg[j + 1] if seg[j + 1] < end else end
                if flags[j] != 0:
                    c = (coef[j, 0], coef[j, 1], coef[j, 2], coef[j, 3])
                    lo, size = i0 - seg[j], seg[j + 1] - seg[j]
                    qs = at(qa[j], size, np.uint16)[lo:lo + e - i0]
                    gs = at(ga[j], size, p)[lo:lo + e - i0]
                    ps, a, b, d = p[i0:e], s0[i0:e], s1[i0:e], s2[i0:e]
                    for i in range(e - i0):
                        x, qi = ps[i], qs[i]
                        ps[i] = x if same(x, qi, i0 + i) else widen(qi)  # a store, not a branch
                        update(i, ps, gs, a, b, d, h, c)
                        qs[i] = rnd(ps[i], i0 + i)
                i0 = e
                j += 1
        return -1

    kernel.__name__ = kernel.__qualname__ = f"{name}_low{mode}_kernel"
    return parallel_kernel(kernel, sized_by=1)


@inline
def load_f16(q):
    return half.f16_to_f32(q)


@inline
def load_bf16(q):
    return half.bf16_to_f32(q)


@inline
def store_bf16_sr(x, i):
    return half.f32_to_bf16_sr(x, i)


@inline
def store_f16(x, i):
    return half.f32_to_f16(x)


@inline
def store_bf16(x, i):
    return half.f32_to_bf16(x)


@inline
def unchanged_f16(x, q, i):
    return half.f32_to_f16(x) == q


@inline
def unchanged_bf16(x, q, i):
    return half.f32_to_bf16_unless_nan(x) == q


@inline
def unchanged_bf16_sr(x, q, i):
    return half.f32_to_bf16_sr(x, i) == q


@inline
def coefficient_overflowed(stored, c):
    """Whether a finite coefficient became inf when stored in the buffer dtype (``stored``: the
    4 stored values, an array or a tuple; ``c``: the 4 computed ones), as
    ``instructions.became_inf`` computes it."""
    return became_inf((stored[0], stored[1], stored[2], stored[3]), c)


@inline
def _next_step(s):
    """``step + 1`` as PyTorch's float32 ``state["step"] += 1`` computes it."""
    return float(np.float32(s[0] + np.float32(1)))


@inline
def _lerp(a, b, w, w_c, low):
    """``torch.lerp(a, b, w)``: ``a + w (b - a)`` for ``w < 0.5``, else ``b - (b - a)(1 - w)``
    (``w_c`` is ``1 - w`` rounded in the buffer dtype)."""
    return a + w * (b - a) if low else b - (b - a) * w_c


@inline
def lerp_fused(a, b, w, w_c, low):
    """``torch.lerp(a, b, w)`` to the bit, as PyTorch's CPU kernel rounds it: ``fma(w, b - a,
    a)`` for ``w < 0.5``, else ``fma(-(1 - w), b - a, b)``: one rounding where :func:`_lerp` has
    two (a quarter of the elements differ by an ulp; ``kernels/averaging.py``)."""
    return fma(w, b - a, a) if low else fma(-w_c, b - a, b)


@inline
def decayed_grad(i, p, g, h, maximize, wd_on, decoupled, fused):
    """Element ``i``'s parameter and gradient after the gradient's sign (maximize) and the weight
    decay: ``p (1 - lr lambda)`` if decoupled (``h.decay``), else ``g + lambda p`` (``fused``:
    rounded once, as PyTorch's CPU ``g.add_(p, alpha=lambda)``, a fused multiply-add)."""
    gi = -g[i] if maximize else g[i]
    pi = p[i]
    if wd_on:
        if decoupled:
            pi = pi * h.decay
        elif fused:
            gi = fma(pi, h.weight_decay, gi)
        else:
            gi = gi + h.weight_decay * pi
    return pi, gi


@inline
def adam_moments(i, p, g, m, v, h, maximize, wd_on, decoupled, lerp_low):
    """Adam's first half, shared by Adam, NAdam and RAdam: element ``i``'s gradient (negated if
    maximize, plus lambda p unless decoupled), its parameter (times ``h.decay`` = 1 - lr lambda
    if decoupled), and the moments, stored::

        m <- lerp(m, g, 1 - b1);  v <- b2 v + (1 - b2) g^2

    Returns ``(p, g, m, v)``; the switches are the caller's compile-time constants."""
    pi, gi = decayed_grad(i, p, g, h, maximize, wd_on, decoupled, False)
    mi = _lerp(m[i], gi, h.w, h.w_c, lerp_low)
    m[i] = mi
    vi = v[i] * h.b2 + h.one_minus_b2 * gi * gi
    v[i] = vi
    return pi, gi, mi, vi


@algorithm
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

    return scalars, update


ADAM_SHARED_MIN = 1 << 17
"""Adam's walker on the shared pool may run in parallel from this many elements (2 threads right
after a GEMM, ``benchmarks/bench_adam_threads.py``: 0.97x the serial time at 1e5 elements, 0.81x
at 2e5, 0.73x at 4e5; SGD's 1.03x, 0.98x, and stalls at 4e5)."""


@algorithm(shared_min=ADAM_SHARED_MIN)
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
        pi, gi, mi, vi = adam_moments(i, p, g, m, v, h, maximize, wd_on, decoupled, lerp_low)
        if amsgrad:
            a = vhat[i]
            if vi != vi or vi > a:
                a = vi
            vhat[i] = a
            vi = a
        p[i] = pi + c[0] * mi / (math.sqrt(vi) / c[1] + h.eps)

    return scalars, update


@algorithm
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

    return scalars, update


@algorithm
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

    return scalars, update


@inline
def _max_nan(a, b):
    """``torch.maximum``: the larger, NaN when either is NaN."""
    return a if (a > b or a != a) else b


@algorithm
def adadelta(maximize: bool, wd_on: bool):
    """Adadelta (Zeiler 2012, https://arxiv.org/abs/1212.5701) as PyTorch computes it.

    State: v (square_avg), u (acc_delta).  Host: ``rho``, ``one_minus_rho``, ``eps``,
    ``weight_decay`` (lambda), ``neg_lr``.  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        v <- rho v + (1 - rho) g^2
        delta <- sqrt(u + eps) / sqrt(v + eps) * g
        u <- rho u + (1 - rho) delta^2
        p <- p - lr delta
    """
    @inline
    def scalars(s, h):
        return (_next_step(s), 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, v, u, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        vi = v[i] * h.rho + h.one_minus_rho * gi * gi
        v[i] = vi
        delta = math.sqrt(u[i] + h.eps) / math.sqrt(vi + h.eps) * gi
        u[i] = u[i] * h.rho + h.one_minus_rho * delta * delta
        p[i] = p[i] + h.neg_lr * delta

    return scalars, update


@algorithm
def adamax(maximize: bool, wd_on: bool, lerp_low: bool):
    """Adamax (Kingma & Ba 2014, section 7, https://arxiv.org/abs/1412.6980) as PyTorch computes it.

    State: m (exp_avg), u (exp_inf).  Host: ``lr``, ``beta1`` (float64); ``w`` = 1 - b1 and
    ``w_c`` (m's lerp weight), ``b2``, ``eps``, ``weight_decay`` (lambda).  Per parameter with
    step t: ``c = (-lr / (1 - b1^t),)``.  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        m <- lerp(m, g, 1 - b1)
        u <- max(b2 u, |g| + eps)          (NaN if either is NaN)
        p <- p - lr / (1 - b1^t) * m / u
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (-(h.lr / (1.0 - h.beta1 ** t)), 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, m, u, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        mi = _lerp(m[i], gi, h.w, h.w_c, lerp_low)
        m[i] = mi
        ui = _max_nan(u[i] * h.b2, abs(gi) + h.eps)
        u[i] = ui
        p[i] = p[i] + c[0] * mi / ui

    return scalars, update


@algorithm
def nadam(maximize: bool, wd_on: bool, decoupled: bool, lerp_low: bool):
    """NAdam (Dozat 2016, https://openreview.net/forum?id=OM0jvwB8jIp57ZJjtNEZ) as PyTorch
    computes it; with decoupled weight decay, NAdamW.

    State: m (exp_avg), v (exp_avg_sq); scalar ``mu_product`` (``S[j, 1]``, float32).  Host:
    ``lr``, ``beta1``, ``beta2``, ``psi`` (momentum_decay; float64); ``w`` = 1 - b1 and ``w_c``
    (m's lerp weight), ``b2``, ``one_minus_b2``, ``eps``, ``weight_decay`` (lambda), ``decay`` =
    1 - lr lambda.  Per parameter with step t::

        mu_t = b1 (1 - 0.96^(t psi) / 2),   mu_{t+1} = b1 (1 - 0.96^((t + 1) psi) / 2)
        prod_t = prod_{t-1} * mu_t          (float32, as PyTorch's mu_product tensor)
        c = (1 - b2^t, -lr (1 - mu_t) / (1 - prod_t), -lr mu_{t+1} / (1 - prod_t mu_{t+1}))

    Per element::

        g <- -g if maximize
        p <- p (1 - lr lambda) if decoupled | g <- g + lambda p otherwise
        m <- lerp(m, g, 1 - b1);  v <- b2 v + (1 - b2) g^2
        d <- sqrt(v / (1 - b2^t)) + eps
        p <- p + c1 g / d + c2 m / d
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        mu = h.beta1 * (1.0 - 0.5 * 0.96 ** (t * h.psi))
        mu_next = h.beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1.0) * h.psi))
        prod = float(s[1] * np.float32(mu))
        return (t, prod, 0.0, 0.0), (1.0 - h.beta2 ** t, -h.lr * (1.0 - mu) / (1.0 - prod),
                                     (-h.lr * mu_next) / (1.0 - prod * mu_next), 0.0)

    @inline
    def update(i, p, g, m, v, _s2, h, c):
        pi, gi, mi, vi = adam_moments(i, p, g, m, v, h, maximize, wd_on, decoupled, lerp_low)
        d = math.sqrt(vi / c[0]) + h.eps
        pi = pi + c[1] * gi / d
        p[i] = pi + c[2] * mi / d

    return scalars, update


@algorithm
def radam(maximize: bool, wd_on: bool, decoupled: bool, lerp_low: bool):
    """RAdam (Liu et al. 2019, https://arxiv.org/abs/1908.03265) as PyTorch computes it.

    State: m (exp_avg), v (exp_avg_sq).  Host: ``beta1``, ``beta2`` (float64); ``lr``, ``w`` =
    1 - b1 and ``w_c``, ``b2``, ``one_minus_b2``, ``eps``, ``weight_decay`` (lambda), ``decay`` =
    1 - lr lambda, ``one``.  Per parameter with step t::

        rho_inf = 2 / (1 - b2) - 1,   rho_t = rho_inf - 2 t b2^t / (1 - b2^t)
        r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
        c = (1 - b1^t, sqrt(1 - b2^t), r_t, rho_t > 5)

    Per element::

        g <- -g if maximize
        p <- p (1 - lr lambda) if decoupled | g <- g + lambda p otherwise
        m <- lerp(m, g, 1 - b1);  v <- b2 v + (1 - b2) g^2
        x <- m / (1 - b1^t) * lr
        x <- x * (sqrt(1 - b2^t) / (sqrt(v) + eps)) * r_t    when rho_t > 5
        p <- p - x
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        bc2 = 1.0 - h.beta2 ** t
        rho_inf = 2.0 / (1.0 - h.beta2) - 1.0
        rho_t = rho_inf - 2.0 * t * (h.beta2 ** t) / bc2
        # the square root's argument is positive when rho_t > 5 (rho_t <= rho_inf)
        rect = math.sqrt(max((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                             / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.0))
        return (t, 0.0, 0.0, 0.0), (1.0 - h.beta1 ** t, bc2 ** 0.5, rect, (rho_t > 5.0) * 1.0)

    @inline
    def update(i, p, g, m, v, _s2, h, c):
        pi, gi, mi, vi = adam_moments(i, p, g, m, v, h, maximize, wd_on, decoupled, lerp_low)
        x = mi / c[0] * h.lr
        # sqrt(1 - b2^t) / (sqrt(v) + eps), as PyTorch's float / tensor computes it, when
        # rho_t > 5: a select, not a branch (a branch in the loop kept it from vectorizing)
        xr = x * (h.one / (math.sqrt(vi) + h.eps) * c[1]) * c[2]
        p[i] = pi - (xr if c[3] != 0 else x)

    return scalars, update


@algorithm
def asgd(maximize: bool, wd_on: bool):
    """Averaged SGD (Polyak & Juditsky 1992, https://doi.org/10.1137/0330046) as PyTorch
    computes it.

    State: ax; scalars ``eta`` (``S[j, 1]``) and ``mu`` (``S[j, 2]``), float32.  Host: ``lr``,
    ``lambd``, ``alpha``, ``t0`` (float64); ``weight_decay`` (lambda).  Per parameter with step
    t: ``c = (1 - lambd eta, -eta, mu)`` from the current eta and mu, then
    ``eta <- lr / (1 + lambd lr t)^alpha`` and ``mu <- 1 / max(1, t - t0)``.  Per element::

        g <- -g if maximize;  g <- g + lambda p if lambda != 0
        p <- p (1 - lambd eta) - eta g
        ax <- p if mu == 1, else ax + (p - ax) mu
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        eta = float(s[1])
        new_eta = float(np.float32(h.lr / ((1.0 + h.lambd * h.lr * t) ** h.alpha)))
        new_mu = float(np.float32(1.0 / max(1.0, t - h.t0)))
        return (t, new_eta, new_mu, 0.0), (1.0 - h.lambd * eta, -eta, float(s[2]), 0.0)

    @inline
    def update(i, p, g, ax, _s1, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        if wd_on:
            gi = gi + h.weight_decay * p[i]
        pi = p[i] * c[0]
        pi = pi + c[1] * gi
        p[i] = pi
        a = ax[i]
        ax[i] = pi if c[2] == 1 else a + (pi - a) * c[2]

    return scalars, update


@algorithm
def rprop(maximize: bool):
    """Rprop (Riedmiller & Braun 1993, https://doi.org/10.1109/ICNN.1993.298623) as PyTorch
    computes it.

    State: prev, s (step_size, starting at lr).  Host: ``eta_minus``, ``eta_plus``,
    ``step_min``, ``step_max`` (float64), which every parameter takes as its coefficients ``c``
    (rounded to the buffer dtype).  Per element::

        g <- -g if maximize
        f <- eta_plus if g prev > 0, eta_minus if g prev < 0, else 1   (sign of NaN is 0)
        s <- clamp(s f, step_min, step_max)
        g <- 0 if f == eta_minus
        p <- p - sign(g) s;   prev <- g
    """
    @inline
    def scalars(s, h):
        return (_next_step(s), 0.0, 0.0, 0.0), (h.eta_plus, h.eta_minus, h.step_min, h.step_max)

    @inline
    def update(i, p, g, prev, ss, _s2, h, c):
        # the constants from c, not from the record h: loads from h in the loop keep LLVM from
        # vectorizing this body (stores to p, prev, s may alias them; 0 packed AVX2 ops against
        # 18 with them in registers: Rprop ran ~3x slower than the others at the same bytes)
        eta_plus, eta_minus, step_min, step_max = c
        one = eta_minus / eta_minus  # 1 in the buffer dtype (0 < eta_minus < 1)
        gi = -g[i] if maximize else g[i]
        x = gi * prev[i]
        f = eta_plus if x > 0 else one
        f = eta_minus if x < 0 else f
        st = ss[i] * f
        # NaN stays NaN, and a NaN bound makes the step NaN, as torch.clamp
        st = step_min if st < step_min or step_min != step_min else st
        st = step_max if st > step_max or step_max != step_max else st
        ss[i] = st
        gi = one - one if f == eta_minus else gi
        p[i] = p[i] + (-one) * ((gi > 0) * one - (gi < 0) * one) * st  # -sign(g) s, as addcmul
        prev[i] = gi

    return scalars, update


@algorithm
def muon_momentum(nesterov: bool, lerp_low: bool, lerp_nesterov_low: bool):
    """Muon's elementwise first half (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/)
    as PyTorch computes it: the momentum and the matrix handed to Newton–Schulz.

    State: b (momentum_buffer); ``s1`` is u, scratch the update is written to (not state).
    ``S[j, 0]`` counts steps (how a parameter's state is known to exist; Muon saves no
    ``step``).  Host: ``w`` = 1 - mu and ``w_c`` (b's lerp weight), ``mu`` and ``mu_c`` = 1 - mu
    (the Nesterov lerp's).  Per element::

        b <- lerp(b, g, 1 - mu)
        u <- lerp(g, b, mu) if nesterov else b
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, b, u, _s2, h, c):
        gi = g[i]
        bi = _lerp(b[i], gi, h.w, h.w_c, lerp_low)
        b[i] = bi
        if nesterov:
            # (written out: a second inlined select trips numba's SSA checks)
            if lerp_nesterov_low:
                u[i] = gi + h.mu * (bi - gi)
            else:
                u[i] = bi - (bi - gi) * h.mu_c
        else:
            u[i] = bi

    return scalars, update


@algorithm
def muon_apply(wd_on: bool):
    """Muon's elementwise second half: decoupled weight decay and the orthogonalized step.

    ``s0`` is o = -lr' NS(u) (computed per matrix through BLAS, lr' the shape-adjusted lr).
    Host: ``decay`` = 1 - lr lambda.  Per element::

        p <- p (1 - lr lambda) + o
    """
    @inline
    def scalars(s, h):
        return (float(s[0]), float(s[1]), float(s[2]), float(s[3])), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, o, _s1, _s2, h, c):
        pi = p[i] * h.decay if wd_on else p[i]
        p[i] = pi + o[i]

    return scalars, update


# ---- optimizers PyTorch does not ship (issue 31) -----------------------------------------------
@algorithm
def schedule_free(adaptive: bool, radam: bool, wd_on: bool, lerp_low: bool):
    """Schedule-Free SGD, AdamW and RAdam (Defazio et al. 2024, https://arxiv.org/abs/2405.15682)
    as the ``schedulefree`` package computes them: ``p`` holds y (the point the gradient is taken
    at, in train mode), ``s0`` z (the SGD/Adam iterate), ``s1`` v (exp_avg_sq, when adaptive).
    x, the average the model evaluates at, is never stored: ``x = (y - (1 - beta1) z) / beta1``.

    ``S[j, 0]`` counts a parameter's steps (its first step copies y into z; the state dict holds
    no ``step``).  Host (the group's step k, 0-based, and its weight ``c_{k+1}``): ``bc2`` =
    1 - b2^(k+1), ``b2``, ``one_minus_b2``, ``eps``, ``weight_decay`` (lambda), ``ckp1`` and
    ``ckp1_c`` = 1 - ckp1 (y's lerp weight towards z), ``y_alpha`` = lr (beta1 (1 - ckp1) - 1),
    ``neg_lr`` = -lr (lr warmed up, or rectified for RAdam), ``adam`` (RAdam: 1 once rho_t > 4,
    else 0: an SGD step).  Per element::

        z <- y on the parameter's first step
        v <- b2 v + (1 - b2) g^2;  g <- g / (sqrt(v / (1 - b2^(k+1))) + eps)   (adaptive)
        g <- g + lambda y                                                        (lambda != 0)
        y <- lerp(y, z, ckp1) + lr (beta1 (1 - ckp1) - 1) g
        z <- z - lr g
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        return (t, 0.0, 0.0, 0.0), (t, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, z, v, _s2, h, c):
        yi = p[i]
        zi = yi if c[0] == 1 else z[i]  # (read either way: a select, not a branch)
        gi = g[i]
        if adaptive:
            vi = v[i] * h.b2 + h.one_minus_b2 * gi * gi
            v[i] = vi
            gn = gi / (math.sqrt(vi / h.bc2) + h.eps)
            gi = (gn if h.adam != 0 else gi) if radam else gn
        if wd_on:
            gi = gi + h.weight_decay * yi
        yi = _lerp(yi, zi, h.ckp1, h.ckp1_c, lerp_low)
        p[i] = yi + h.y_alpha * gi
        z[i] = zi + h.neg_lr * gi

    return scalars, update


@algorithm
def schedule_free_swap(lerp_low: bool):
    """Schedule-Free's ``train()``/``eval()``: y <-> x for the parameters with state (``flags``
    there mark them), ``p <- lerp(p, z, w)`` with ``w`` = 1 - beta1 (x to y) or 1 - 1/beta1 (y to
    x), as the ``schedulefree`` package's ``p.lerp_(z, w)``.  Host: ``w`` and ``w_c`` = 1 - w.
    Scalar state unchanged."""
    @inline
    def scalars(s, h):
        return (float(s[0]), float(s[1]), float(s[2]), float(s[3])), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, z, _s1, _s2, h, c):
        p[i] = _lerp(p[i], z[i], h.w, h.w_c, lerp_low)

    return scalars, update


@inline
def lion_sign(m, g, h):
    """Lion's direction ``sign(b1 m + (1 - b1) g)`` in the buffer dtype (0 for 0 and NaN, as
    ``torch.sign``), as lion-pytorch computes its argument."""
    x = m * h.beta1 + h.one_minus_beta1 * g
    u = h.one if x > 0 else h.zero
    return -h.one if x < 0 else u


@algorithm
def lion(maximize: bool, wd_on: bool):
    """Lion (Chen et al. 2023, https://arxiv.org/abs/2302.06675) as ``lion-pytorch`` computes it.

    State: m (exp_avg).  ``S[j, 0]`` counts steps (Lion saves none).  Host: ``decay`` = 1 - lr
    lambda, ``beta1``, ``one_minus_beta1``, ``b2``, ``one_minus_b2``, ``neg_lr``, ``one``,
    ``zero``.  Per element::

        g <- -g if maximize
        p <- p (1 - lr lambda)
        u <- sign(b1 m + (1 - b1) g)             (sign(0) = sign(NaN) = 0, as torch.sign)
        p <- p - lr u
        m <- b2 m + (1 - b2) g
    """
    @inline
    def scalars(s, h):
        return (_next_step(s), 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, m, _s1, _s2, h, c):
        gi = -g[i] if maximize else g[i]
        pi = p[i] * h.decay if wd_on else p[i]
        mi = m[i]
        p[i] = pi + h.neg_lr * lion_sign(mi, gi, h)
        m[i] = mi * h.b2 + h.one_minus_b2 * gi

    return scalars, update


@algorithm
def adopt(maximize: bool, wd_on: bool, decoupled: bool, clip_on: bool, clip_given: bool,
          lerp_low: bool):
    """ADOPT (Taniguchi et al. 2024, https://arxiv.org/abs/2411.02853) as ``pytorch_optimizer``
    and the authors' code compute it: the gradient normalized by the second moment of the
    steps before, then the momentum.

    State: m (exp_avg), v (exp_avg_sq).  The clip is t^(1/4) (the default ``clip_lambda``), or
    with ``clip_given`` ``S[j, 3]``, written by the host (``clip_lambda(t)``, float32).  Host: ``decay`` = 1 - lr lambda (or 1 - lambda, fixed),
    ``weight_decay`` (lambda), ``eps``, ``w`` = 1 - b1 and ``w_c`` (m's lerp weight), ``b2``,
    ``one_minus_b2``, ``neg_lr``.  Per parameter with step t: ``c = (t == 1, clip)``.  Per
    element::

        g <- -g if maximize;  p <- p (1 - lr lambda) if decoupled | g <- g + lambda p
        t == 1:  v <- v + g^2                                  (nothing else moves)
        else:    n <- clamp(g / max(sqrt(v), eps), -clip, clip)
                 m <- lerp(m, n, 1 - b1);  p <- p - lr m;  v <- b2 v + (1 - b2) g^2

    (``g + lambda p``, the lerp, ``- lr m`` and the ``+`` of ``v`` are fused multiply-adds, as
    pytorch-optimizer's ``add(alpha=)``, ``lerp`` and ``addcmul`` round on a CPU.)
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        clip = float(s[3]) if clip_given else t ** 0.25
        return (t, float(s[1]), float(s[2]), float(s[3])), ((t == 1.0) * 1.0, clip, 0.0, 0.0)

    @inline
    def update(i, p, g, m, v, _s2, h, c):
        pi, gi = decayed_grad(i, p, g, h, maximize, wd_on, decoupled, True)
        vi = v[i]
        d = math.sqrt(vi)
        d = h.eps if d < h.eps else d  # clamp(min=eps): NaN stays NaN
        n = gi / d
        if clip_on:
            n = -c[1] if n < -c[1] else n
            n = c[1] if n > c[1] else n
        mi = m[i]
        mn = lerp_fused(mi, n, h.w, h.w_c, lerp_low)
        first = c[0] != 0
        m[i] = mi if first else mn
        p[i] = pi if first else fma(mn, h.neg_lr, pi)
        v[i] = fma(gi, gi, vi) if first else fma(h.one_minus_b2 * gi, gi, vi * h.b2)

    return scalars, update


@algorithm
def ademamix(maximize: bool, wd_on: bool, decoupled: bool, warmup: bool, lerp_low: bool):
    """AdEMAMix (Pagliardini et al. 2024, https://arxiv.org/abs/2409.03137) as
    ``pytorch_optimizer`` computes it: Adam plus a slow momentum ``m2`` (beta3 near 1) weighted
    by alpha, both warmed up over ``T`` steps (the paper's schedulers).

    State: m1 (exp_avg), v (exp_avg_sq), m2 (exp_avg_slow).  Host: ``beta1``, ``beta2``,
    ``beta3``, ``alpha``, ``T`` (float64); ``w`` = 1 - b1 and ``w_c``, ``b2``,
    ``one_minus_b2``, ``eps``, ``weight_decay`` (lambda), ``decay``, ``neg_lr``, ``one``.  Per
    parameter with step t::

        alpha_t = min(t alpha / T, alpha)                                   (alpha if no T)
        beta3_t = min(exp(ln b1 ln b3 / ((1 - t/T) ln b3 + (t/T) ln b1)), b3)  (b3 if no T)
        c = (1 - b1^t, sqrt(1 - b2^t), alpha_t, 1 - beta3_t)

    Per element::

        g <- -g if maximize;  p <- p (1 - lr lambda) if decoupled | g <- g + lambda p
        m1 <- lerp(m1, g, 1 - b1);  v <- b2 v + (1 - b2) g^2;  m2 <- lerp(m2, g, 1 - beta3_t)
        p <- p - lr (m1 / (1 - b1^t) + alpha_t m2) / (sqrt(v) / sqrt(1 - b2^t) + eps)

    rounded as the reference's PyTorch ops round on a CPU: ``g + lambda p``, the lerps,
    ``+ (1 - b2) g^2`` and ``+ alpha_t m2`` are fused multiply-adds (float32: the same bits as
    pytorch-optimizer but where PyTorch's sqrt, not correctly rounded, is an ulp off).
    """
    @inline
    def scalars(s, h):
        t = _next_step(s)
        alpha, b3 = h.alpha, h.beta3
        if warmup:
            alpha = min(t * h.alpha / h.T, h.alpha)
            lb1, lb3 = math.log(h.beta1), math.log(h.beta3)
            b3 = min(math.exp(lb1 * lb3 / ((1.0 - t / h.T) * lb3 + (t / h.T) * lb1)), h.beta3)
        return (t, 0.0, 0.0, 0.0), (1.0 - h.beta1 ** t, math.sqrt(1.0 - h.beta2 ** t), alpha,
                                     1.0 - b3)

    @inline
    def update(i, p, g, m1, v, m2, h, c):
        # pytorch-optimizer's ops in its order, each rounded as PyTorch's CPU kernels round it:
        # add(alpha=), lerp and addcmul are fused multiply-adds there
        pi, gi = decayed_grad(i, p, g, h, maximize, wd_on, decoupled, True)
        mi = lerp_fused(m1[i], gi, h.w, h.w_c, lerp_low)
        m1[i] = mi
        vi = fma(h.one_minus_b2 * gi, gi, v[i] * h.b2)
        v[i] = vi
        w3 = c[3]
        s = lerp_fused(m2[i], gi, w3, h.one - w3, abs(w3) < 0.5)
        m2[i] = s
        d = math.sqrt(vi) / c[1] + h.eps
        u = fma(s, c[2], mi / c[0])
        p[i] = pi + h.neg_lr * u / d

    return scalars, update


@algorithm
def prodigy(beta1_on: bool, decoupled: bool, coupled: bool):
    """Prodigy's step (Mishchenko & Defazio 2023, https://arxiv.org/abs/2306.06101) as
    ``prodigyopt`` computes it, once d is known (``kernels.optim_reduce.prodigy_collect`` did the
    moments and d's sums).

    State: m (exp_avg, with beta1 > 0), v (exp_avg_sq).  Host: ``d_eps`` = d eps (the new d),
    ``decay_alpha`` = -lambda dlr, ``neg_dlr`` = -dlr, ``neg_dlr_d`` = -dlr d (dlr: the old d
    times lr), ``weight_decay`` (lambda).  Scalar state unchanged.  Per element::

        p <- p - lambda dlr p                                   (decoupled decay)
        p <- p - dlr m / (sqrt(v) + d eps)                      (beta1 > 0)
        p <- p - dlr d (g + lambda p) / (sqrt(v) + d eps)       (beta1 = 0; + lambda p if coupled)

    (``+ lambda p`` and the decay are fused multiply-adds, as PyTorch's ``add(alpha=)``.)
    """
    @inline
    def scalars(s, h):
        return (float(s[0]), float(s[1]), float(s[2]), float(s[3])), (0.0, 0.0, 0.0, 0.0)

    @inline
    def update(i, p, g, m, v, _s2, h, c):
        d = math.sqrt(v[i]) + h.d_eps
        pi = p[i]
        gi = fma(pi, h.weight_decay, g[i]) if coupled else g[i]
        if decoupled:
            pi = fma(pi, h.decay_alpha, pi)
        if beta1_on:
            p[i] = pi + h.neg_dlr * m[i] / d
        else:
            p[i] = pi + h.neg_dlr_d * gi / d

    return scalars, update
