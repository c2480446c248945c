"""The one configured numba decorator every kernel uses.

``kernel`` compiles lazily on first call and caches the machine code on disk (``cache=True``), so
``import tinyopt`` compiles nothing.  ``parallel_kernel`` adds ``parallel=True`` for kernels whose
``prange`` iteration ``i`` writes only element ``i``.  No ``fastmath``: NaN and inf must propagate
exactly as in PyTorch.  ``specialized`` makes one kernel per combination of compile-time options.

A parallel kernel uses numba's threads only when one of its arrays has at least
``PARALLEL_MIN_ELEMENTS`` elements (environment variable ``TINYOPT_PARALLEL_MIN``, default 2**22)
and otherwise runs a serial build on the calling thread.  Why: after a parallel region numba's OpenMP threads spin
for a while, and in a training step the next BLAS call (numpy's own thread pool) then fights them
for the cores.  Measured on 2 cores, one SGD-momentum training step of the 784-500-10 MLP at batch
32 took 8.5 ms with the 400k-parameter optimizer step parallel and 0.75 ms with it serial; the
CNN at batch 256, 54 ms against 33 ms with its 1.8M-element im2col serial.

Where numba cannot cache (a read-only install whose ``__pycache__`` and ``$HOME`` are not
writable, ``NUMBA_CACHE_DIR`` unset), numba refuses ``cache=True`` outright ("no locator
available"); kernels then cache in a private folder of the temporary directory instead (made
0700, reused by later processes of the same user), with one warning, or, if even that is not
possible, compile in memory only.

Threads.  Kernels release the GIL (``nogil``), so kernels of several Python threads run at once;
parallel regions (the large work) are entered one thread at a time (see ``_run_parallel``).

Fork.  GNU OpenMP (numba's ``omp`` threading layer) does not survive ``fork``: a child that
enters a parallel region after its parent started the thread pool is killed (and a fork
``multiprocessing.Pool`` waiting for it hangs).  So in such a child every parallel kernel runs
its serial build: slower, and correct.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
import threading
import types
import warnings
from typing import Any

import numba
import numba.extending
import numpy as np

from tinyopt.kernels.native.c_function import compile_c_function
from tinyopt.kernels.native.numba_cache import loads_without_refresh
from tinyopt.kernels.native.quiet_compile import QuietDispatcher, gc_paused, quiet

# error_model="numpy": a float division by zero gives inf or NaN, as in numpy and PyTorch, instead
# of raising ZeroDivisionError, and the check it would need in every loop does not stop LLVM from
# vectorizing (Adam over 1e6 float32 in a serial build: 3.4 ms with the check, 0.45 ms without).
# no_cfunc_wrapper: numba otherwise compiles a C-callable copy of every function (for passing it
# to another jitted function as a first-class function value, which no kernel does), about 2.5 ms
# of compile per array argument: a cold first training step of the README's MLP took 2.35 s of
# CPU with it and 2.18 s without (2 interleaved runs each).
_OPTIONS = dict(cache=True, nogil=True, fastmath=False, error_model="numpy",
                no_cfunc_wrapper=True)

PARALLEL_MIN_ELEMENTS = int(os.environ.get("TINYOPT_PARALLEL_MIN", 1 << 22))


def caches_on_disk() -> bool:
    """Whether kernels keep their machine code in a disk cache (see the module docstring)."""
    return bool(_OPTIONS["cache"])


def _cannot_cache(e: RuntimeError) -> bool:
    return "cannot cache" in str(e) or "no locator available" in str(e)


def _private_cache_dir() -> str | None:
    """``<tmp>/tinyopt-numba-<uid>``, ours alone (mode 0700, not a symlink), or None."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"tinyopt-numba-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid()) \
                and stat.S_IMODE(st.st_mode) & 0o077 == 0:
            tempfile.TemporaryFile(dir=path).close()
            return path
    except OSError:
        pass
    try:  # the shared name is taken or unusable: a fresh folder for this process
        return tempfile.mkdtemp(prefix="tinyopt-numba-")
    except OSError:
        return None


def _cache_elsewhere(error: RuntimeError) -> None:
    """numba found no writable place to cache: use a private folder, or no disk cache at all."""
    folder = _private_cache_dir()
    if folder is not None:
        os.environ["NUMBA_CACHE_DIR"] = folder  # numba re-reads its config from the environment
        numba.config.CACHE_DIR = folder
        where = f"caches compiled kernels in {folder} instead"
    else:
        _OPTIONS["cache"] = False
        where = "compiles kernels in memory only (each process compiles them again)"
    warnings.warn(f"tinyopt: numba cannot cache next to the installed package or in the user's "
                  f"cache folder ({error}); tinyopt {where}. Set NUMBA_CACHE_DIR to a writable "
                  f"folder to choose the place.", RuntimeWarning, stacklevel=3)


def _njit(fn, **options):
    """``numba.njit(**_OPTIONS, **options)(fn)``, falling back as the module docstring says."""
    try:
        dispatcher = numba.njit(**{**_OPTIONS, **options})(fn)
    except RuntimeError as e:
        if not _cannot_cache(e):
            raise
        _cache_elsewhere(e)
        dispatcher = numba.njit(**{**_OPTIONS, **options})(fn)
    return quiet(loads_without_refresh(dispatcher))


# fastmath={"reassoc"} and nothing else, for kernels that ask for it (``reassoc=True``): float sums
# may be reassociated, so LLVM vectorizes a dot product into lane-wise partial sums.  For kernels
# whose reference is a BLAS GEMM, which sums in an order of its own too.  Reassociation turns no
# finite value into NaN and no NaN into a number; only a sum that overflows in one order and not in
# another can differ.  Measured: conv2d's weight gradient for 8->16 channels 3x3 over (256, 8, 14,
# 14) float32, 25 ms without, 4.4 ms with.
_REASSOC = {"fastmath": {"reassoc"}}


# _nrt=False, for kernels that allocate nothing (``nrt=False``): no reference counting (numba's
# NRT).  With it, each array argument's count is raised on entry and dropped after its last use,
# and so is each view the kernel makes (a row ``out[i]``): ~25 lines of LLVM IR an array, which
# numba's lowering and LLVM work through in every cold compile, and the Python wrapper adopts and
# releases each argument.  The arrays are the caller's, alive for the whole call anyway.
# Measured (one process, each kernel compiled both ways, alternated, 6 rounds): bias_add 0.104 ->
# 0.093 s of CPU, sum_grad_h 0.155 -> 0.137, the elementwise add loop 0.079 -> 0.068; ce_rows's
# serial build, which reads its arrays through pointers already, 0.786 -> 0.777.
# Without NRT numba refuses, when the kernel compiles (its first call), whatever needs managed
# memory: an allocation, an array expression, an exception with a run-time value, ``a.flags``
# (a TypingError, or "NRT required but not enabled"), so no kernel runs with its memory
# unmanaged; and it refuses to return an array other than an argument.  The functions a kernel
# calls (numba's ``min``, a subroutine) compile with its flags: their allocations are refused too.
# numba's disk cache keys a function by name and signature, not by this flag: one function, one
# setting.
_NO_NRT = {"_nrt": False}


def kernel(fn=None, *, reassoc: bool = False, nrt: bool = True):
    """Compile ``fn`` with numba on first use (serial); ``@kernel(reassoc=True)``,
    ``@kernel(nrt=False)``: see above."""
    if fn is None:
        return lambda f: kernel(f, reassoc=reassoc, nrt=nrt)
    return _njit(fn, **(_REASSOC if reassoc else {}), **({} if nrt else _NO_NRT))


class _ParallelKernel:
    """A numba kernel compiled twice, on demand: with ``parallel=True`` for large work and without
    it (``prange`` runs as ``range``) for small work (see the module docstring).  Calling the serial
    build skips numba's thread pool altogether, which costs about 25 us a call when it is told to
    use one thread."""

    def __init__(self, fn, sized_by: Any = None, shared_min: int | None = None, serial=None,
                 serial_nrt: bool = True):
        self._sized_by = sized_by
        self._shared_min = shared_min
        self._parallel = _njit(fn, parallel=True)
        # numba's disk cache keys a function by its qualified name and signature, not by the
        # parallel flag: the serial build must be a function of another name, or the two builds
        # overwrite each other's cache entries and load each other's code
        if serial is None:
            serial = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                        fn.__defaults__, fn.__closure__)
            serial.__qualname__ = fn.__qualname__ + "_serial"
        elif serial.__qualname__ == fn.__qualname__:
            raise ValueError(f"parallel_kernel: the serial build {serial.__qualname__!r} needs a "
                             f"qualified name of its own (numba's disk cache keys by it)")
        self._serial = _njit(serial, **({} if serial_nrt else _NO_NRT))
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        if _FORK["serial_only"]:
            return self._serial(*args)
        least = PARALLEL_MIN_ELEMENTS
        if self._shared_min is not None and _FORK["openmp_started"]:
            least = min(least, self._shared_min)
        if self._sized_by is not None:
            sized_by = self._sized_by
            size = args[sized_by].size if type(sized_by) is int else sized_by(args)
            if size >= least:
                return self._run_parallel(args)
            return self._serial(*args)
        for a in args:
            if type(a) is np.ndarray and a.size >= least:
                return self._run_parallel(args)
        return self._serial(*args)

    def serial(self, *args):
        """The serial build, whatever the sizes (for a caller that chooses the build itself)."""
        return self._serial(*args)

    @property
    def serial_build(self):
        """The serial build's numba dispatcher."""
        return self._serial

    def parallel(self, *args):
        """The parallel build, whatever the sizes (the serial one in a forked child, see the
        module docstring)."""
        if _FORK["serial_only"]:
            return self._serial(*args)
        return self._run_parallel(args)

    def _run_parallel(self, args):
        # One parallel region at a time in the process: numba's workqueue layer (the one left
        # where there is no OpenMP or TBB) aborts the process when two threads enter parallel
        # regions at once, and under the other layers each region already takes every core.
        with _PARALLEL_LOCK:
            _FORK["pool_started"] = True
            return self._parallel(*args)


_PARALLEL_LOCK = threading.Lock()


# pool_started: this process has run a parallel build; openmp_started: numpy's BLAS runs on GNU
# OpenMP's threads (``kernels/native/shared_threads.py``); serial_only: it is a fork of a process whose
# GNU OpenMP pool was running (see the module docstring)
_FORK = {"pool_started": False, "openmp_started": False, "serial_only": False}


def _after_fork_in_child() -> None:
    global _PARALLEL_LOCK
    _PARALLEL_LOCK = threading.Lock()  # a thread of the parent may have held it
    if _FORK["openmp_started"]:
        _FORK["serial_only"] = True
        _FORK["openmp_started"] = _FORK["pool_started"] = False
    elif _FORK["pool_started"]:
        try:
            layer = numba.threading_layer()
        except ValueError:  # no parallel region actually ran
            return
        _FORK["serial_only"] = layer == "omp"
        _FORK["pool_started"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def parallel_kernel(fn=None, *, sized_by: Any = None, shared_min: int | None = None,
                    serial=None, serial_nrt: bool = True):
    """Compile ``fn`` with numba on first use, with ``prange`` loops run in parallel.

    ``sized_by=k``: argument ``k`` alone decides between the builds (the largest array; checking
    one argument instead of all of a dozen saves about 1 us a call); or ``sized_by=f``:
    ``f(args)`` is the size (a kernel whose storage is reached through addresses).  ``shared_min=n``: where
    numpy's BLAS runs on numba's OpenMP threads (``kernels/native/shared_threads.py``: no second pool
    to fight), the parallel build already from ``n`` elements (the lower of ``n`` and
    ``PARALLEL_MIN_ELEMENTS``).  ``serial=g``: the serial build compiles ``g`` (same arguments,
    same results, a qualified name of its own) instead of ``fn`` with ``prange`` as ``range``: a
    loop written for one thread, which may compile to less code.  ``serial_nrt=False``: the
    serial build without numba's reference counting (NRT), for one that allocates nothing (numba
    refuses to compile an allocation then): each array argument's reference count is otherwise
    raised on entry and dropped after its last use, ~25 lines of LLVM IR each (the Adam walker's
    11 arrays: 2362 -> 1547 lines before optimisation; see ``_NO_NRT``).  The parallel build
    keeps NRT: numba's parfors may allocate (a reduction's per-thread partial results).
    """
    if fn is None:
        return functools.partial(_ParallelKernel, sized_by=sized_by, shared_min=shared_min,
                                 serial=serial, serial_nrt=serial_nrt)
    return _ParallelKernel(fn, sized_by, shared_min, serial, serial_nrt)


class _CCallback:
    """A C function compiled by numba (``cfunc``) when made, cached on disk like the kernels
    (and loaded from there without numba's context refresh)."""

    def __init__(self, fn, signature: str, reassoc: bool = False, nrt: bool = True):
        options = {k: v for k, v in _OPTIONS.items() if k not in ("cache", "no_cfunc_wrapper")}
        if reassoc:
            options.update(_REASSOC)
        if not nrt:
            options.update(_NO_NRT)
        try:
            cf = compile_c_function(fn, signature, options, _OPTIONS["cache"])
        except RuntimeError as e:
            if not _cannot_cache(e):
                raise
            _cache_elsewhere(e)
            cf = compile_c_function(fn, signature, options, _OPTIONS["cache"])
        self.address: int = cf.address
        self._cfunc = cf  # keeps the machine code alive


def c_callback(fn, signature: str, reassoc: bool = False, nrt: bool = True) -> _CCallback:
    """Compile ``fn`` now as a C function of ``signature`` (for a C library to call back), with
    the kernels' options and disk cache; its address is ``.address``.  ``reassoc``, ``nrt``: as
    :func:`kernel`'s (its arguments are pointers and integers, but each array it makes over
    them with ``carray`` is counted all the same: a NULL count, a no-op when it runs, yet its
    calls are in the IR)."""
    return _CCallback(fn, signature, reassoc, nrt)


class _Specialized:
    def __init__(self, factory):
        self._make = functools.cache(factory)
        self.made: dict[tuple, object] = {}  # the kernels made so far, by options (for tests)
        functools.update_wrapper(self, factory)

    def __getitem__(self, options):
        key = options if isinstance(options, tuple) else (options,)
        made = self._make(*key)
        self.made.setdefault(key, made)
        return made


def specialized(factory):
    """Turn ``factory(*options) -> kernel`` into ``kernels[options]``: one kernel per combination
    of compile-time options, made on first use and kept.

    The kernel reads the options as closure variables, which numba freezes as constants, so each
    combination compiles to loops without those branches.  Why: LLVM does not unswitch an inner loop
    on a runtime flag, and a load or store under such a flag keeps the loop from vectorizing
    (RMSprop over 1e7 float32 took 4.8-5.8 ms with runtime flags, 3.2-3.5 ms specialized).
    ``cache=True`` still applies: numba keys its on-disk cache on the closure values too.
    """
    return _Specialized(factory)


prange = numba.prange


class _Inline:
    """A function numba inlines into its callers before type inference (see :func:`inline`)."""

    targetoptions = {"inline": "always"}  # what numba's InlineInlinables pass looks for

    def __init__(self, fn):
        self.py_func = fn
        self._dispatcher = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        return self.py_func(*args)

    def __reduce__(self):
        # the function alone, so the disk-cache key of a kernel holding this in a closure is the
        # same in every process (a numba dispatcher would pickle with a per-process id)
        return _Inline, (self.py_func,)


@numba.extending.typeof_impl.register(_Inline)
def _typeof_inline(val, c):
    # the name itself still has to be typed where the call was inlined (numba drops the dead
    # load later), and a call that was not inlined compiles as an ordinary function
    if val._dispatcher is None:
        val._dispatcher = numba.njit(**_OPTIONS, inline="always")(val.py_func)
    return numba.types.Dispatcher(val._dispatcher)


def inline(fn):
    """Make ``fn`` callable from kernels, compiled into each caller at numba's IR level (as if its
    body were written there), with the caller's options.

    For small per-element functions a walker calls in its inner loop (``kernels/optim.py``): the
    inlined body vectorizes exactly as the hand-written loop did (Adam over 1e6 float32: same
    time, same ``vsqrtps``).

    numba's untyped ``InlineInlinables`` pass inlines a call to anything with ``targetoptions
    {"inline": "always"}`` and a ``py_func`` before the caller is typed, so ``fn`` is never
    compiled on its own.  (``register_jitable(inline="always")``, used before, inlines after
    typing and compiles ``fn`` in full for every signature first, only to learn its type: a cold
    first Adam step took 2.6-3.2 s of CPU that way and 1.2-1.6 s this way, 3 interleaved runs
    on the shared machine.)  The wrapper pickles by value, so a kernel that holds it in a closure
    still hits numba's disk cache (a closure over a numba dispatcher does not: the dispatcher
    pickles with a per-process id, and every process would recompile).
    """
    return _Inline(fn)


def subroutine(fn):
    """Make ``fn`` callable from kernels as a function of its own (compiled once per caller
    signature, not inlined), with the same disk-cache property as :func:`inline`."""
    from numba.extending import register_jitable

    register_jitable(no_cfunc_wrapper=True)(fn)  # (see ``_OPTIONS``)
    return fn


CALLEES: set = set()
"""The Python functions of the kernels :func:`callee` made."""


class _Callee(QuietDispatcher):
    """A kernel other kernels call (:func:`callee`): compiled for the types of a call's
    arguments without their literal values (a call ``f(args, 13, ...)`` would compile a
    version for the constant 13, another for each other constant), as numba types a call of a
    :func:`subroutine`."""

    def get_call_template(self, args, kws):
        unliteral = numba.types.unliteral
        return super().get_call_template(tuple(map(unliteral, args)),
                                         {k: unliteral(v) for k, v in kws.items()})


def callee(fn):
    """Make ``fn`` callable from kernels as a function of its own, as :func:`subroutine` does,
    but as a kernel (a numba dispatcher, cached on disk), so that a process needing it after
    another compiled it loads it.  For a function that kernels compiled in two processes call:
    a subroutine compiles in each process that compiles a caller (attention's ``_pair_gemm``,
    0.07-0.08 s of CPU, in both the training process and its compile-ahead helper of the small
    GPT's cold first step).  ``kernels/compile_ahead.py`` neither claims one nor waits for it:
    whichever process needs it first compiles it, and the other loads it if it is done.  The
    callers' machine code is the subroutine's, instruction for instruction (the GPT's attention
    chunks, the pair GEMM compiled in the same process or loaded from the cache: only the
    name of its unused environment symbol, which spells its compile options, differs)."""
    CALLEES.add(fn)
    dispatcher = _njit(fn)
    if type(dispatcher) is QuietDispatcher:
        dispatcher.__class__ = _Callee
    return dispatcher


class _LazyUfunc:
    """A numba ufunc built on first call, so importing a kernel module compiles nothing.

    Calls whose operands are all C-contiguous arrays of ``out``'s shape and dtype (most calls in a
    plan) run a plain numba loop over the flat arrays instead: the same scalar function on the same
    types, so the same values, but compiled per dtype on demand and loaded from the disk cache,
    where numba builds a ufunc's loops for every signature and its wrapper in every process
    (about 0.1 s a ufunc: most of a warm first training step).  So do calls whose operands
    have ``out``'s dtype and are broadcast as one value or as ``out``'s trailing dimensions
    (:func:`_broadcast_modes`; a loop per pattern).  Other calls whose operands all have
    ``out``'s dtype (strided, or broadcast otherwise) take a ufunc of that one signature, the
    loop numpy would pick among all of them: the tiny GPT's first step built ``add`` for int64,
    float32 and float64 (0.45-0.58 s of CPU cold, under load) and then for float32 alone.
    """

    def __init__(self, fn, signatures: list[str]):
        self._fn = fn
        self._signatures = signatures
        self._ufunc = None
        self._typed: dict[np.dtype, object] = {}
        self._loop = None
        self._in_place: dict[tuple[int, ...], object] = {}
        self._broadcast: dict[tuple[int, ...], object] = {}
        # the dtypes with a signature T(T, ..., T): only those take the flat loop, so a call the
        # ufunc would reject or cast (no signature for its types) still goes to the ufunc
        self._flat_types = {np.dtype(ret) for ret, ins in (_parse(s) for s in signatures)
                            if all(t == ret for t in ins) and ret in _NUMPY_NAMES}
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, out=None):
        # (a set of dtypes, not of names: numpy's ``dtype.name`` is a Python property of ~20
        # calls, 2-3 us, on every elementwise op of every step)
        if out is not None and len(args) <= 5 and out.dtype in self._flat_types:
            flat = out.flags.c_contiguous
            if flat:  # the common case first: operands laid out exactly as out (C order)
                dt, shape, strides = out.dtype, out.shape, out.strides
                for a in args:
                    if (type(a) is not np.ndarray or a.dtype != dt or a.shape != shape
                            or a.strides != strides):
                        break
                else:
                    if self._loop is None:
                        self._loop = _flat_loop(self._fn, len(args))
                    if len(shape) == 1:
                        self._loop(*args, out)
                    else:
                        self._loop(*[a.reshape(-1) for a in args], out.reshape(-1))
                    return out
            for a in args:
                if type(a) is not np.ndarray or a.dtype != out.dtype:
                    break
                if flat and (a.shape != out.shape or not a.flags.c_contiguous):
                    flat = False
            else:
                if flat:
                    if self._loop is None:
                        self._loop = _flat_loop(self._fn, len(args))
                    self._loop(*[a.reshape(-1) for a in args], out.reshape(-1))
                    return out
                # every operand of out's dtype, laid out as out, one value broadcast (a scalar
                # operand, a scalar's gradient) or out's trailing dimensions repeated (a bias, a
                # position table): a loop reading each where broadcasting puts it, the same fn
                # on the same values (a warm process loads it from the disk cache, where numba
                # builds a ufunc again and refreshes its contexts: ``x ** 2`` and its gradient
                # cost ~0.15 s of a warm first step, a GPT's token + position sum ~0.25 s)
                how = _broadcast_modes(args, out) if len(args) <= 3 else None
                if how is not None:
                    modes, n = how
                    loop = self._broadcast.get(modes)
                    if loop is None:
                        loop = self._broadcast[modes] = _broadcast_loop(self._fn, modes)
                    loop(*[_one_value(a) if m == 0 else a.reshape(-1)
                           for a, m in zip(args, modes)], n, out.reshape(-1))
                    return out
                # else (broadcast or strided) the ufunc of that one signature, which numpy's
                # type resolution would pick among all of them anyway
                typed = self._typed.get(out.dtype)
                if typed is None:
                    sig = f"{out.dtype.name}({', '.join([out.dtype.name] * len(args))})"
                    typed = self._typed[out.dtype] = self._build([sig])
                return typed(*args, out=out)
        if self._ufunc is None:
            self._ufunc = self._build(self._signatures)
        return self._ufunc(*args, out=out)

    def flat_loop(self) -> tuple[object, set[np.dtype]] | None:
        """``(loop, dtypes)``: the loop ``__call__``'s first case runs (every operand a
        C-contiguous array of ``out``'s shape and dtype, ``loop(*ins, out)``) and the dtypes it
        takes it for; None until a call (or :attr:`flat_kernel`) has built it."""
        return None if self._loop is None else (self._loop, self._flat_types)

    @property
    def flat_kernel(self):
        """The numba dispatcher of ``__call__``'s first case's loop (built now if no call has
        built it yet; nothing is compiled): for a helper process to compile ahead
        (``nn/kernels_ahead.py``)."""
        if self._loop is None:
            self._loop = _flat_loop(self._fn, len(_parse(self._signatures[0])[1]))
        return self._loop

    def bound(self, out: np.ndarray, *ins: np.ndarray):
        """``self(*ins, out=out)`` for these very arrays as a call made once (a plan binds its
        fixed arrays so): the flat loop over their flattened views, where ``__call__`` would take
        it (every operand a C-contiguous array of out's shape and dtype); else None."""
        if not (type(out) is np.ndarray and len(ins) <= 5 and out.dtype in self._flat_types
                and out.flags.c_contiguous):
            return None
        for a in ins:
            if (type(a) is not np.ndarray or a.dtype != out.dtype or a.shape != out.shape
                    or not a.flags.c_contiguous):
                return None
        # an input that is out itself (a plan writes an elementwise op into its dying input):
        # read it through out, since LLVM's overlap check sends a loop over two pointers to one
        # buffer to its scalar version (2.5x the time of a vectorized add in cache)
        at = out.__array_interface__["data"][0]
        same = tuple(k for k, a in enumerate(ins) if a.__array_interface__["data"][0] == at)
        if same and len(ins) <= 2:
            loop = self._in_place.get((len(ins), *same))
            if loop is None:
                loop = self._in_place[(len(ins), *same)] = _in_place_loop(self._fn, len(ins),
                                                                          same)
            rest = [a.reshape(-1) for k, a in enumerate(ins) if k not in same]
            return functools.partial(loop, *rest, out.reshape(-1))
        if self._loop is None:
            self._loop = _flat_loop(self._fn, len(ins))
        return functools.partial(self._loop, *[a.reshape(-1) for a in ins], out.reshape(-1))

    def _build(self, signatures: list[str]):
        try:
            with gc_paused():  # (numba compiles every signature now)
                built = numba.vectorize(signatures, cache=_OPTIONS["cache"])(self._fn)
        except RuntimeError as e:
            if not _cannot_cache(e):
                raise
            _cache_elsewhere(e)
            with gc_paused():
                built = numba.vectorize(signatures, cache=_OPTIONS["cache"])(self._fn)
        # every loop is compiled up front, so call numpy's ufunc itself: numba's DUFunc wrapper
        # adds about 1 us a call, which small graphs pay on every op
        return getattr(built, "ufunc", built)


_NUMPY_NAMES = {"float32", "float64", "int8", "int16", "int32", "int64", "uint8"}
"""The numba type names of signatures that name the numpy dtype of the same name."""


def _parse(signature: str) -> tuple[str, list[str]]:
    """``"float32(float32, float32)"`` -> ``("float32", ["float32", "float32"])``."""
    ret, _, ins = signature.replace(" ", "").rstrip(")").partition("(")
    return ret, ins.split(",")


def _flat_loop(fn, arity: int):
    """``loop(*ins, out)``: out[i] = fn(ins[0][i], ...) over 1-d arrays, as a cached kernel (up to
    five inputs; None beyond).  This loop and those below count no references (``_NO_NRT``):
    they allocate nothing, and ``fn`` is a scalar function (see :func:`ufunc`)."""
    fn = inline(fn)
    if arity == 1:
        def loop1(a, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i])
        return _njit(loop1, **_NO_NRT)
    if arity == 2:
        def loop2(a, b, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i], b[i])
        return _njit(loop2, **_NO_NRT)
    if arity == 3:
        def loop3(a, b, c, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i], b[i], c[i])
        return _njit(loop3, **_NO_NRT)
    if arity == 4:
        def loop4(a, b, c, d, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i], b[i], c[i], d[i])
        return _njit(loop4, **_NO_NRT)
    if arity == 5:
        def loop5(a, b, c, d, e, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i], b[i], c[i], d[i], e[i])
        return _njit(loop5, **_NO_NRT)
    return None


def _broadcast_modes(args: tuple, out: np.ndarray) -> tuple[tuple[int, ...], int] | None:
    """How each operand of a call into a C-contiguous ``out`` is read, and the tile length ``n``:
    1, laid out as ``out`` (C-contiguous, of its shape); 0, one value that broadcasting repeats
    (one element and no more dimensions than ``out``, or of ``out``'s shape with all strides 0);
    2, C-contiguous trailing dimensions of ``out`` (after leading 1s: a bias row, a position
    table), repeated every ``n`` elements of ``out`` (all such operands the same size ``n``;
    ``n`` is ``out.size`` when there are none).  None where an operand is none of these, or is
    repeated from memory ``out`` may overlap (numpy's ufunc reads such an operand from a copy)."""
    if not out.flags.c_contiguous or out.size == 0:
        return None
    modes, n = [], 0
    for a in args:
        if a.shape == out.shape and a.flags.c_contiguous:
            modes.append(1)
        elif (a.size == 1 and a.ndim <= out.ndim) or (
                a.shape == out.shape and not any(a.strides)):
            modes.append(0)
        else:
            core = a.shape
            while core and core[0] == 1:
                core = core[1:]
            if (not core or len(core) > out.ndim or core != out.shape[out.ndim - len(core):]
                    or not a.flags.c_contiguous or (n and a.size != n)):
                return None
            n = a.size
            modes.append(2)
        if modes[-1] != 1 and np.may_share_memory(a, out):
            return None
    return tuple(modes), n or out.size


def _one_value(a: np.ndarray) -> np.ndarray:
    """A 1-element 1-d view of the value a mode-0 operand repeats (see
    :func:`_broadcast_modes`)."""
    return a.reshape(1) if a.size == 1 else a[(0,) * (a.ndim - 1)][:1]


def _broadcast_loop(fn, modes: tuple[int, ...]):
    """``loop(*ins, n, out)``: for each block ``o`` of ``n`` elements of ``out`` (1-d) and ``j``
    in it, out[o n + j] = fn(...) of each input at o n + j (mode 1), j (mode 2) or 0 (mode 0;
    see :func:`_broadcast_modes`), 1 to 3 inputs.  The modes are compile-time constants."""
    fn = inline(fn)
    # input k is read at (o n) f_k + j t_k
    (f0, t0), (f1, t1), (f2, t2) = [(int(m == 1), int(m != 0))
                                    for m in modes + (0,) * (3 - len(modes))]
    if len(modes) == 1:
        def bcast1(a, n, out):
            for o in range(out.shape[0] // n):
                base = o * n
                for j in range(n):
                    out[base + j] = fn(a[base * f0 + j * t0])
        return _njit(bcast1, **_NO_NRT)
    if len(modes) == 2:
        def bcast2(a, b, n, out):
            for o in range(out.shape[0] // n):
                base = o * n
                for j in range(n):
                    out[base + j] = fn(a[base * f0 + j * t0], b[base * f1 + j * t1])
        return _njit(bcast2, **_NO_NRT)

    def bcast3(a, b, c, n, out):
        for o in range(out.shape[0] // n):
            base = o * n
            for j in range(n):
                out[base + j] = fn(a[base * f0 + j * t0], b[base * f1 + j * t1],
                                   c[base * f2 + j * t2])
    return _njit(bcast3, **_NO_NRT)


def _in_place_loop(fn, arity: int, same: tuple[int, ...]):
    """``loop(*others, out)``: :func:`_flat_loop`'s loop for inputs ``same`` (positions) that are
    ``out`` itself, read through ``out``: the same ``fn`` on the same values, in the same order."""
    fn = inline(fn)
    if arity == 1:
        def self1(out):
            for i in range(out.shape[0]):
                out[i] = fn(out[i])
        return _njit(self1, **_NO_NRT)
    if same == (0,):
        def first2(b, out):
            for i in range(out.shape[0]):
                out[i] = fn(out[i], b[i])
        return _njit(first2, **_NO_NRT)
    if same == (1,):
        def second2(a, out):
            for i in range(out.shape[0]):
                out[i] = fn(a[i], out[i])
        return _njit(second2, **_NO_NRT)

    def both2(out):
        for i in range(out.shape[0]):
            x = out[i]
            out[i] = fn(x, x)
    return _njit(both2, **_NO_NRT)


def ufunc(*signatures: str):
    """Make a scalar function an elementwise kernel: a numpy ufunc (broadcasting, ``out=``) compiled
    by numba for the given signatures on first use, with ``cache=True``.  The function allocates
    nothing (its loops compile without reference counting, ``_NO_NRT``: numba refuses it)."""
    def wrap(fn):
        return _LazyUfunc(fn, list(signatures))
    return wrap
