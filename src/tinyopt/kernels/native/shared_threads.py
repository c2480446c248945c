"""One thread pool for numpy's BLAS and the parallel kernels: OpenBLAS's jobs on OpenMP's threads.

numpy's bundled OpenBLAS runs its multi-threaded calls on a pthread pool of its own, whose threads
spin on the cores for a long while after every call; the parallel kernels (numba ``prange``, the
``omp`` threading layer: GNU OpenMP) run on another pool.  On a small machine each pool's spinning
threads then take the cores the other one's next call needs: on 2 cores, a kernel cut in two
right after a 2-thread GEMM took longer than whole (``kernels/chunk_threads.py``), and parallel kernels
below 4M elements lost more than they gained (``kernels/jit.py``).  PyTorch has one OpenMP pool
for both.  :func:`share` gives numpy one too: OpenBLAS (>= 0.3.27) accepts a callback that runs
its jobs (``openblas_set_threads_callback_function``), and ours, a small native function, runs
them in a GNU OpenMP parallel region (``GOMP_parallel``), on the very threads numba's ``prange``
uses.  OpenBLAS computes the same jobs whoever runs them: the same bits.

The callback cannot be Python: a GEMM of 1024 x 128 x 384 then took 1.6 ms against 0.8 ms (the
hand-off to a Python thread costs tens of microseconds).  It is built as a numba ``cfunc``
(``kernels/jit.py``'s ``c_callback``, cached on disk like the kernels), whose body is a few lines
of LLVM IR (:func:`_run_jobs`): numba cannot call a C function pointer it is given.

OpenBLAS's scratch buffers belong to job numbers (the ``thread_num`` its jobs are given), so two
calls from two Python threads must not run at the same time: the callback runs one call at a time
(a GNU OpenMP lock; OpenBLAS's own server queues concurrent calls too).  Every job of a level-3
call must run at the same time (each waits for the others' packed panels),
so all ``numjobs`` jobs need threads of their own: a parallel region of ``numjobs`` threads when
OpenMP can give one (not inside a parallel region, no thread limit or dynamic adjustment below
it), else ``numjobs - 1`` new pthreads for that call.

Fork: GNU OpenMP does not survive ``fork``; a child process removes the callback (OpenBLAS then
uses its own threads again, as it does after any fork) and runs numba's serial builds
(``kernels/jit.py``).  ``TINYOPT_SHARE_BLAS_THREADS=0`` leaves OpenBLAS's own pool alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading

from tinyopt.kernels import jit
from tinyopt.kernels.native import blas

_STATE: dict[str, object] = {"done": False, "shared": False, "setter": None}
_LOCK = threading.Lock()


def share() -> bool:
    """Make numpy's OpenBLAS run its parallel jobs on OpenMP's threads (once per process; see
    the module docstring).  True if it does."""
    if _STATE["done"]:
        return bool(_STATE["shared"])
    with _LOCK:
        if not _STATE["done"]:
            _STATE["shared"] = _install()
            _STATE["done"] = True
    return bool(_STATE["shared"])


def would_share() -> bool:
    """Whether :func:`share` would share the pools (or does): what it needs is there; compiles
    nothing.  (``kernels/compile_ahead.py`` then declares :func:`c_function`'s two.)"""
    if _STATE["done"]:
        return bool(_STATE["shared"])
    return _needs() is not None


def _needs():
    """OpenBLAS's callback setter and GNU OpenMP, where sharing is wanted and possible; or None."""
    if os.environ.get("TINYOPT_SHARE_BLAS_THREADS", "1") == "0" or jit._FORK["serial_only"]:
        return None
    import numba
    if numba.config.NUMBA_NUM_THREADS <= 1:
        return None  # one thread: nothing to share, and no native callback to compile
    setter = blas._openblas_function("openblas_set_threads_callback_function",
                                     "scipy_openblas_set_threads_callback_function64_",
                                     "scipy_openblas_set_threads_callback_function")
    gomp = _gnu_openmp()
    if setter is None or gomp is None:
        return None
    return setter, gomp


def _install() -> bool:
    needs = _needs()
    if needs is None:
        return False
    setter, _ = needs
    address = c_function("jobs").address
    setter.argtypes = [ctypes.c_void_p]
    setter.restype = None
    setter(address)
    _STATE["setter"] = setter
    jit._FORK["openmp_started"] = True
    return True


_GOMP_SYMBOLS = ("GOMP_parallel", "GOMP_critical_name_start", "GOMP_critical_name_end",
                 "omp_get_thread_num", "omp_get_num_threads", "omp_in_parallel",
                 "omp_get_dynamic", "omp_get_thread_limit")


def _gnu_openmp() -> ctypes.CDLL | None:
    """The GNU OpenMP library numba's ``omp`` threading layer runs on, or None (no such layer, or
    numba told to use another)."""
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "omp", "threadsafe",
                                                                   "forksafe"):
        return None
    try:
        omppool = _import_omppool()
    except ImportError:
        return None
    if getattr(omppool, "openmp_vendor", None) != "GNU":
        return None
    for path in blas._loaded("libgomp"):
        try:
            lib = ctypes.CDLL(path)
            if all(hasattr(lib, name) for name in _GOMP_SYMBOLS):
                return lib
        except OSError:
            continue
    return None


# How long GNU OpenMP's idle threads spin before they sleep (iterations of a ``pause`` loop; ~30 ns
# each on the 2-core EPYC measured: ~90 ms).  GNU OpenMP's default, 300000 (~9 ms there), is
# shorter than the serial kernels between two GEMMs of a training step, and waking a sleeping
# thread cost a 1024 x 128 x 128 GEMM 0.45 -> 0.73 ms; OpenBLAS's own threads spin ~100 ms.
_SPIN_COUNT = "3000000"


def _import_omppool():
    """numba's OpenMP layer; GNU OpenMP loads with it, and reads ``GOMP_SPINCOUNT`` then: set for
    that moment alone, unless the user chose (``GOMP_SPINCOUNT``, ``OMP_WAIT_POLICY``) or the
    library is loaded already."""
    if "numba.np.ufunc.omppool" in sys.modules or _loaded_gomp() or any(
            k in os.environ for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")):
        from numba.np.ufunc import omppool
        return omppool
    os.environ["GOMP_SPINCOUNT"] = _SPIN_COUNT
    try:
        from numba.np.ufunc import omppool
    finally:
        del os.environ["GOMP_SPINCOUNT"]
    return omppool


def _loaded_gomp() -> bool:
    return bool(blas._loaded("libgomp"))


def _after_fork_in_child() -> None:
    setter = _STATE["setter"]
    if setter is not None:
        setter(None)  # back to OpenBLAS's own threads (GNU OpenMP's do not survive fork)
        _STATE["setter"], _STATE["shared"] = None, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _ir():
    from llvmlite import ir
    return ir


def _define_jobs_functions(mod):
    """Define in ``mod`` (once) the two functions the callback hands to the threads:

    ``void region(i8* args)``, the body of the parallel region: thread t of n runs jobs t, t + n,
    ...; ``i8* one_job(i8* slot)``, a pthread's start routine: the job of its slot.
    ``args`` is {dojob, numjobs, elsize, jobdata, dojob_data}; a slot is {args*, job}."""
    from numba.core import cgutils
    ir = _ir()
    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    dojob_t = ir.FunctionType(ir.VoidType(), [i32, i8p, i32])
    args_t = ir.LiteralStructType([dojob_t.as_pointer(), i32, i64, i8p, i32])
    slot_t = ir.LiteralStructType([args_t.as_pointer(), i32])
    if "tinyopt_blas_region" in mod.globals:
        return mod.globals["tinyopt_blas_region"], mod.globals["tinyopt_blas_one_job"], args_t, slot_t

    def run_job(b, args, i):
        field = [b.load(b.gep(args, [i32(0), i32(k)])) for k in range(5)]
        dojob, _, elsize, jobdata, data = field
        b.call(dojob, [i, b.gep(jobdata, [b.mul(b.sext(i, i64), elsize)]), data])
        return field[1]

    region = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "tinyopt_blas_region")
    region.linkage = "internal"
    b = ir.IRBuilder(region.append_basic_block("entry"))
    args = b.bitcast(region.args[0], args_t.as_pointer())
    numjobs = b.load(b.gep(args, [i32(0), i32(1)]))
    tid = b.call(cgutils.get_or_insert_function(mod, ir.FunctionType(i32, []),
                                                "omp_get_thread_num"), [])
    nth = b.call(cgutils.get_or_insert_function(mod, ir.FunctionType(i32, []),
                                                "omp_get_num_threads"), [])
    entry, loop = b.block, region.append_basic_block("loop")
    body, done = region.append_basic_block("job"), region.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i32)
    i.add_incoming(tid, entry)
    b.cbranch(b.icmp_signed("<", i, numjobs), body, done)
    b.position_at_end(body)
    run_job(b, args, i)
    i.add_incoming(b.add(i, nth), body)
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()

    one = ir.Function(mod, ir.FunctionType(i8p, [i8p]), "tinyopt_blas_one_job")
    one.linkage = "internal"
    b = ir.IRBuilder(one.append_basic_block("entry"))
    slot = b.bitcast(one.args[0], slot_t.as_pointer())
    run_job(b, b.load(b.gep(slot, [i32(0), i32(0)])), b.load(b.gep(slot, [i32(0), i32(1)])))
    b.ret(ir.Constant(i8p, None))
    return region, one, args_t, slot_t


def _run_jobs_typer():
    from numba import types
    from numba.core import cgutils
    from tinyopt.kernels.native.numba_cache import cached_intrinsic

    @cached_intrinsic
    def run_jobs(typingctx, dojob, numjobs, elsize, jobdata, data):
        """Run OpenBLAS's jobs ``dojob(i, jobdata + i elsize, data)``, ``i < numjobs``, each on
        a thread of its own, and return when all are done (see the module docstring)."""
        sig = types.void(types.voidptr, types.int32, types.uintp, types.voidptr, types.int32)

        def codegen(context, builder, signature, a):
            ir = _ir()
            mod = builder.module
            i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
            region, one_job, args_t, slot_t = _define_jobs_functions(mod)
            fn = lambda ret, params, name: cgutils.get_or_insert_function(
                mod, ir.FunctionType(ret, params), name)
            gomp_parallel = fn(ir.VoidType(), [region.type, i8p, i32, i32], "GOMP_parallel")
            in_parallel = fn(i32, [], "omp_in_parallel")
            dynamic = fn(i32, [], "omp_get_dynamic")
            limit = fn(i32, [], "omp_get_thread_limit")
            create = fn(i32, [i64.as_pointer(), i8p, one_job.type, i8p], "pthread_create")
            join = fn(i32, [i64, i8p.as_pointer()], "pthread_join")

            lock = mod.globals.get("tinyopt_blas_lock")
            if lock is None:
                lock = ir.GlobalVariable(mod, i8p, "tinyopt_blas_lock")
                lock.linkage = "internal"
                lock.initializer = ir.Constant(i8p, None)
            lock_fn = ir.FunctionType(ir.VoidType(), [i8p.as_pointer()])
            builder.call(cgutils.get_or_insert_function(mod, lock_fn, "GOMP_critical_name_start"),
                         [lock])
            args = cgutils.alloca_once(builder, args_t)
            dojob_t = args_t.elements[0]
            for k, v in enumerate([builder.bitcast(a[0], dojob_t), a[1], a[2], a[3], a[4]]):
                builder.store(v, builder.gep(args, [i32(0), i32(k)]))
            numjobs = a[1]
            openmp_can = builder.and_(
                builder.and_(builder.icmp_signed("==", builder.call(in_parallel, []), i32(0)),
                             builder.icmp_signed("==", builder.call(dynamic, []), i32(0))),
                builder.icmp_signed(">=", builder.call(limit, []), numjobs))
            with builder.if_else(openmp_can) as (then, otherwise):
                with then:
                    builder.call(gomp_parallel, [region, builder.bitcast(args, i8p), numjobs,
                                                 i32(0)])
                with otherwise:
                    # each job but the first on a new pthread, the first on this one
                    slots = builder.alloca(slot_t, size=numjobs)
                    tids = builder.alloca(i64, size=numjobs)
                    with cgutils.for_range(builder, numjobs) as loop:
                        j = builder.trunc(loop.index, i32)
                        slot = builder.gep(slots, [loop.index])
                        builder.store(args, builder.gep(slot, [i32(0), i32(0)]))
                        builder.store(j, builder.gep(slot, [i32(0), i32(1)]))
                    with cgutils.for_range_slice(builder, i64(1), builder.sext(numjobs, i64),
                                                 i64(1), inc=True) as (idx, _):
                        rc = builder.call(create, [builder.gep(tids, [idx]), ir.Constant(i8p, None),
                                                   one_job, builder.bitcast(
                                                       builder.gep(slots, [idx]), i8p)])
                        with builder.if_then(builder.icmp_signed("!=", rc, i32(0))):
                            builder.store(i64(0), builder.gep(tids, [idx]))
                            builder.call(one_job, [builder.bitcast(builder.gep(slots, [idx]),
                                                                   i8p)])
                    builder.call(one_job, [builder.bitcast(slots, i8p)])
                    with cgutils.for_range_slice(builder, i64(1), builder.sext(numjobs, i64),
                                                 i64(1), inc=True) as (idx, _):
                        tid = builder.load(builder.gep(tids, [idx]))
                        with builder.if_then(builder.icmp_signed("!=", tid, i64(0))):
                            builder.call(join, [tid, ir.Constant(i8p.as_pointer(), None)])
            builder.call(cgutils.get_or_insert_function(mod, lock_fn, "GOMP_critical_name_end"),
                         [lock])
            return context.get_dummy_value()
        return sig, codegen
    return run_jobs


_run_jobs = None


def _callback_body(sync, dojob, numjobs, elsize, jobdata, data):
    _run_jobs(dojob, numjobs, elsize, jobdata, data)


# ---- independent chunks of a serial kernel on the same threads ---------------------------------
#
# A ``prange`` kernel's parallel build is a numba parfor: about 1 s of cold compile each (layer
# norm and softmax made parallel that way pushed the tiny GPT's cold first step from 9.5 to 15.1
# s).  :func:`chunk_runner` runs a *serial* C function ``void chunk(int64 c, void *args)`` for
# c = 0 .. n-1 on the OpenMP threads instead: one small native runner, compiled once for every
# kernel, and each kernel a plain serial ``cfunc`` (``kernels/jit.py`` ``c_callback``).  The
# threads take chunks from a shared counter (an atomic add), so which thread runs which chunk
# varies from run to run: a chunk must write only what no other chunk reads or writes, and then
# the result does not depend on the threads.

def _run_chunks_typer():
    from numba import types
    from numba.core import cgutils
    from tinyopt.kernels.native.numba_cache import cached_intrinsic

    @cached_intrinsic
    def run_chunks(typingctx, fn, n, args, nthreads):
        """``fn(c, args)`` for c < n, on ``nthreads`` OpenMP threads (on this thread alone when
        ``nthreads`` <= 1: no OpenMP call at all)."""
        sig = types.void(types.voidptr, types.int64, types.voidptr, types.int64)

        def codegen(context, builder, signature, a):
            ir = _ir()
            mod = builder.module
            i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
            chunk_t = ir.FunctionType(ir.VoidType(), [i64, i8p])
            data_t = ir.LiteralStructType([chunk_t.as_pointer(), i64, i8p, i64])
            region = mod.globals.get("tinyopt_chunks_region")
            if region is None:
                region = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]),
                                     "tinyopt_chunks_region")
                region.linkage = "internal"
                b = ir.IRBuilder(region.append_basic_block("entry"))
                data = b.bitcast(region.args[0], data_t.as_pointer())
                fnp = b.load(b.gep(data, [i32(0), i32(0)]))
                count = b.load(b.gep(data, [i32(0), i32(1)]))
                argp = b.load(b.gep(data, [i32(0), i32(2)]))
                counter = b.gep(data, [i32(0), i32(3)])
                loop, body = region.append_basic_block("loop"), region.append_basic_block("body")
                done = region.append_basic_block("done")
                b.branch(loop)
                b.position_at_end(loop)
                c = b.atomic_rmw("add", counter, i64(1), "monotonic")
                b.cbranch(b.icmp_signed("<", c, count), body, done)
                b.position_at_end(body)
                b.call(fnp, [c, argp])
                b.branch(loop)
                b.position_at_end(done)
                b.ret_void()
            data = cgutils.alloca_once(builder, data_t)
            fnp = builder.bitcast(a[0], chunk_t.as_pointer())
            for k, v in enumerate([fnp, a[1], a[2], i64(0)]):
                builder.store(v, builder.gep(data, [i32(0), i32(k)]))
            gomp_parallel = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [region.type, i8p, i32, i32]), "GOMP_parallel")
            with builder.if_else(builder.icmp_signed(">", a[3], i64(1))) as (then, otherwise):
                with then:
                    builder.call(gomp_parallel, [region, builder.bitcast(data, i8p),
                                                 builder.trunc(a[3], i32), i32(0)])
                with otherwise:
                    builder.call(region, [builder.bitcast(data, i8p)])
            return context.get_dummy_value()
        return sig, codegen
    return run_chunks


_run_chunks = None


def _runner_body(fn, n, args, nthreads):
    _run_chunks(fn, n, args, nthreads)


def _add_symbols(gomp) -> None:
    """The C functions' calls into GNU OpenMP and pthreads, resolved for LLVM (in every process
    that compiles them: a helper compiling them ahead, ``kernels/compile_ahead.py``, too)."""
    import llvmlite.binding as llvm
    libc = ctypes.CDLL(None)
    for lib, names in ((gomp, _GOMP_SYMBOLS), (libc, ("pthread_create", "pthread_join"))):
        for name in names:
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)


@functools.cache
def c_function(kind: str):
    """This module's C function ``kind``, compiled (or loaded from the disk cache) on first use
    and kept: ``"jobs"``, OpenBLAS's thread callback, ``void cb(int sync, dojob, int numjobs,
    size_t elsize, void *jobdata, int data)``; ``"chunks"``, :func:`chunk_runner`'s ``void
    run(fn, int64 n, void *args, int64 nthreads)``.  The first C functions a training step
    with a GEMM runs, which ``kernels/compile_ahead.py`` declares (:func:`would_share`)."""
    global _run_jobs, _run_chunks
    needs = _needs()
    if needs is None:
        raise RuntimeError("numpy's OpenBLAS and numba's GNU OpenMP cannot share threads here")
    _add_symbols(needs[1])
    if kind == "jobs":
        if _run_jobs is None:
            _run_jobs = _run_jobs_typer()
        return jit.c_callback(_callback_body, "void(int32, voidptr, int32, uintp, voidptr, int32)")
    if kind == "chunks":
        if _run_chunks is None:
            _run_chunks = _run_chunks_typer()
        return jit.c_callback(_runner_body, "void(voidptr, int64, voidptr, int64)")
    raise ValueError(f"no C function {kind!r} in shared_threads")


_RUNNER: list = []


class _Serial:
    """The chunks one after the other on the calling thread (through ctypes)."""

    parallel = False

    def __init__(self):
        self._calls: dict[int, object] = {}

    def __call__(self, chunk: int, n: int, args: int) -> None:
        call = self._calls.get(chunk)
        if call is None:
            call = self._calls[chunk] = ctypes.CFUNCTYPE(None, ctypes.c_int64,
                                                         ctypes.c_void_p)(chunk)
        for c in range(n):
            call(c, args)


_SERIAL = _Serial()


def chunk_runner():
    """``run(chunk_address, n, args_address)``: the chunks ``c < n`` of a C function ``void
    chunk(int64 c, void *args)``, on the OpenMP threads numpy's BLAS shares (see above;
    ``run.parallel`` is True) or, where :func:`share` did not share them or in a forked child,
    one after the other on the calling thread (``run.parallel`` False: a caller may then make
    one chunk of all its work)."""
    if not share() or jit._FORK["serial_only"]:
        return _SERIAL
    if not _RUNNER:
        with _LOCK:
            if not _RUNNER:
                cb = c_function("chunks")
                native = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                          ctypes.c_int64)(cb.address)
                import numba

                def run(chunk: int, n: int, args: int) -> None:
                    with jit._PARALLEL_LOCK:
                        native(chunk, n, args, min(n, numba.get_num_threads()))
                run.parallel = True
                run._keep = (cb, native)
                _RUNNER.append(run)
    return _RUNNER[0]
