"""Compiling kernels in a second process while this one goes on: the cold first step.

A cold first training step compiles its kernels one after another, and numba compiles under one
global lock, so a thread cannot overlap two compiles; another process can, on another core, and
its machine code reaches this one through numba's disk cache.  Some kernels are known before the
first step: the optimizer's walker and its argument types when the optimizer is built, a layer's
big kernels (the LSTM scan, layer norm, attention, the embedding, the cross-entropy, a linear
layer's bias gradient, ReLU's gradient) when the layer is built or first called.  Each is *declared*
(:func:`declare`, which compiles nothing): a helper process, started at the first declaration
(on Linux forked from this one, with numba and the kernels imported: :func:`_fork_helper`; else
a new interpreter), compiles the declared kernels one after another, while this process builds
the graph and compiles the kernels of the step in the order it reaches them.

The two meet through numba's disk cache, kernel by kernel.  Whichever process starts on a cache
entry first claims it (a file created exclusively, named by numba's own key of the entry: index
file, signature, CPU, hashes of the bytecode and closure): the helper skips an entry this process
has claimed, and this process, reaching an entry the helper has claimed, waits for the helper to
finish it and loads it from the cache (same source, closure and types: the same entry, the same
machine code and bits as a compile here).  So nothing is compiled twice, and a kernel the helper
has not reached is compiled here.  The helper takes its kernels from the end of the step: the
optimizer's walker first, then the loss's (the forward's last kernels: see :func:`_pick`), then
the backward kernels, the ones of the layers called first first (a backward pass runs the layers
in reverse; a layer's first call moves its backward kernels to its place, :func:`first_call`),
then the forward kernels, the last declared first; this process compiles from the start.  Where
it reaches a kernel the helper is compiling, it compiles meanwhile the next kernels it will need
that neither has claimed (:func:`_wait_working`), so neither core idles while the other compiles
and the two meet wherever the step's kernels balance.

Nothing of this happens, and every kernel compiles here as before, when the declared kernel is
already in memory or in the disk cache (it is loaded now: a warm process starts no helper), when
no core is free for it (fewer than 2 usable CPUs, or a load above the CPUs less one, the last
minute's average or the tasks running now where fewer, :func:`_idle_cpu`: the
helper would take turns with this process, and its start-up would only add to the same
compiles), when kernels are not cached on disk or numba's cache loader is not the one
``kernels/native/numba_cache.py`` was checked on, or with ``TINYOPT_COMPILE_AHEAD=0``
(``=1``: whatever the CPUs and the load).  A helper with nothing left to compile says so (a
file in its claims folder) and waits, blocked on its pipe, for a later declaration; this
process, at its next compile or cache load of a kernel, closes the pipe, and the helper ends
once it has compiled what it has (one ending on its own could miss a declaration already in its
pipe); a later declaration starts another.  Helpers are stopped at exit (numba writes a cache
entry to a temporary file and renames it: a stopped helper leaves no partial entry).  A forked
child neither waits for nor stops its parent's helper, and closes its copies of its pipes.
"""

from __future__ import annotations

import atexit
import base64
import gc
import importlib
import itertools
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numba

from tinyopt.kernels import jit
from tinyopt.kernels.native import numba_cache, shared_threads

FORWARD, BACKWARD, LOSS, STEP, START = 0, 1, 2, 3, 4
"""When a declared kernel first runs in a training step: the forward pass, the backward pass,
the loss (the forward's last kernels, the gradient's first), the optimizer's step; START, before
all of them, at the step's first GEMM (:func:`_first_kernels`).  The helper takes START first,
then STEP, then LOSS, then BACKWARD (see :func:`_pick`); this process runs them in the order
START, FORWARD, LOSS, BACKWARD, STEP (see :func:`_need`)."""

_declared: set[tuple] = set()
_given: dict[tuple, tuple | None] = {}  # (the backward kernels given to a helper: their types)
# the kernels given to the helper and not yet tried here while waiting for it: (recipe, argument
# types) -> (phase, order), for :func:`_wait_working`; under its own lock, held for no more than
# a look-up (a thread compiling, holding numba's lock, takes it, and :func:`declare` waits for
# numba's lock holding ``_LOCK``)
_pending: dict[tuple, tuple[int, int]] = {}
_PENDING_LOCK = threading.Lock()
UNRESOLVED: list[tuple] = []
"""Declared recipes that named no kernel here (a key or name gone stale after its kernel
changed): skipped, so the step compiles that kernel itself; tests assert there are none."""
_order = itertools.count()
_probing = threading.local()  # (.on while this thread checks the disk cache for a declared kernel)
_calling = threading.local()  # (.on while a layer's first call declares its kernels again)
_working = threading.local()  # (.on while this thread compiles a kernel instead of waiting)
_session: _Helper | None = None
_closed: list[_Helper] = []  # (helpers told nothing more is coming, still compiling what they have)
_ROLE: dict[str, str | None] = {"helper": None}  # in the helper process: its claims folder
_CLAIMED: list[str] = []  # (in the helper: the entries claimed by the kernel in hand)
_LOCK = threading.Lock()
_IDLE = "idle"  # (a file in the claims folder while the helper has nothing to compile)
# a helper is forked from this process where fork is safe enough (Linux: no system framework
# that breaks in a forked child, as macOS's), else started as a new interpreter (``_SERVE``)
_FORK = sys.platform.startswith("linux") and hasattr(os, "fork") and \
    os.environ.get("TINYOPT_COMPILE_AHEAD_FORK", "1") != "0"

# the helper's code, importing this very tinyopt (the kernel's source decides its cache entry),
# its kernels alone: ``kernels`` imports nothing else of tinyopt, and the package's own
# ``__init__`` (the engine, nn, optim) was 0.04-0.06 s of the helper's 0.31-0.34 s start-up
_SERVE = ("import sys, types; sys.path.insert(0, {path!r}); "
          "package = types.ModuleType('tinyopt'); package.__path__ = [{package!r}]; "
          "sys.modules['tinyopt'] = package; "
          "from tinyopt.kernels.compile_ahead import serve; serve({claims!r})")


class _NotCached(Exception):
    """(a declared kernel is not in the disk cache)"""


class _Taken(Exception):
    """(in the helper: this process has claimed the kernel)"""


def _claim(claims: str, entry: str) -> bool:
    """Claim the cache entry ``entry`` for this process: False if the other one has."""
    try:
        os.close(os.open(os.path.join(claims, entry), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:  # (the folder is gone: the helper's session is over)
        return True
    return True


class _Helper:
    """A helper process compiling declared kernels, and this process's side of their claims."""

    def __init__(self, process, claims: str, stdin=None, stdout=None):
        # (a subprocess.Popen and its pipes, or a forked helper, :class:`_Forked`, and its)
        self.process, self.claims = process, claims
        self.stdin = stdin if stdin is not None else process.stdin
        self.stdout = stdout if stdout is not None else process.stdout
        self.owner = os.getpid()  # (a forked child neither waits for it nor stops it)
        self.done: set[str] = set()
        self.ended = self.closed = False
        self._rest = b""  # (a line of stdout read in part)

    def send(self, item: tuple) -> bool:
        """Queue ``item`` (order, phase, recipe, argument types); False if the helper ended."""
        if not self.running():
            return False
        try:
            self.stdin.write(base64.b64encode(pickle.dumps(item)) + b"\n")
            self.stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def running(self) -> bool:
        """Whether the helper may still compile (for this process: a forked child's is not)."""
        if self.owner != os.getpid():
            return False
        if not self.ended and self.process.poll() is not None:  # (what it did is in the cache)
            while not self.ended and self._ready():  # (the entries it wrote before it ended)
                self._read()
            self.ended = True
            shutil.rmtree(self.claims, ignore_errors=True)
        return not self.ended

    def wait_for(self, entry: str | None) -> None:
        """Return once the helper has finished cache entry ``entry`` (or has ended; None: once
        it has ended)."""
        while entry not in self.done and not self.ended:
            self._read()

    def finished(self, entry: str) -> bool:
        """Whether the helper has finished cache entry ``entry`` (or has ended), now."""
        while entry not in self.done and not self.ended:
            if not self._ready():
                return False
            self._read()
        return True

    def _ready(self) -> bool:
        # whether the helper's stdout has something to read now (an entry, or its end)
        try:
            return bool(select.select([self.stdout], [], [], 0)[0])
        except (OSError, ValueError):  # (no select on a pipe here: not known)
            return False

    def _read(self) -> None:
        # the entries the helper reports done, one a line (raw reads: a buffered reader could
        # hold lines that select does not see)
        try:
            data = os.read(self.stdout.fileno(), 1 << 16)
        except (OSError, ValueError):
            data = b""
        if not data:
            self.ended = True
            return
        *lines, self._rest = (self._rest + data).split(b"\n")
        self.done.update(line.strip().decode() for line in lines)

    def idle(self) -> bool:
        """Whether the helper has compiled all it was given (it says so in its claims folder)."""
        return os.path.exists(os.path.join(self.claims, _IDLE))

    def close(self) -> None:
        """Tell the helper nothing more is coming: it ends once it has compiled what it has."""
        self.closed = True
        try:
            self.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        if self.owner == os.getpid():
            self.process.kill()
            self.process.wait()
            self.ended = True
            for pipe in (self.stdin, self.stdout):
                try:
                    pipe.close()
                except OSError:  # (nothing is left unwritten: each item is flushed)
                    pass
            shutil.rmtree(self.claims, ignore_errors=True)


def finish() -> None:
    """Wait until the helper has compiled what it was given and ended (for benchmarks and
    tests: a training step waits only for the kernels it runs); a later declaration starts
    another."""
    for helper in [*_closed, *([_session] if _session is not None else [])]:
        if helper.owner == os.getpid():
            helper.close()
            helper.wait_for(None)
            helper.process.wait()


def _idle_cpu() -> bool:
    """Whether a core is free for a helper: the usable CPUs exceed the load, this process's core
    included: the load average of the last minute or, where lower, the tasks running now.

    (Why both: the average is a minute late.  After a minute of work that has ended, a pip
    install or the previous run of a script, it stays near 1 for a while on an idle machine, and
    a cold first step of the small GPT compiled everything here, 4.5 s instead of 2.4.  The
    tasks running now, Linux's count in ``/proc/loadavg``, see the idle machine; they miss a
    busy task that is waiting for a moment, so the helper may then take turns with it, which
    slows this process's compiles by about what the helper's save.)"""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    now = _running_now()
    if now is not None:  # (this process is one of them)
        load = min(load, float(now))
    return cpus >= 2 and load + 1.0 <= cpus


def _running_now() -> int | None:
    """The tasks (threads) running or ready to run now, this one included: Linux's count in
    ``/proc/loadavg``; None elsewhere."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


class _Forked:
    """A helper forked from this process: the part of ``subprocess.Popen`` :class:`_Helper`
    uses (and the tests)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # (reaped elsewhere: a SIGCHLD handler)
                self.returncode = 0
                return 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is None:
                try:
                    self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
                except ChildProcessError:
                    self.returncode = 0
            elif time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"helper {self.pid}", timeout)
            else:
                time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fork_helper(claims: str) -> _Helper | None:
    """A helper forked from this process (Linux): it starts with numba and the kernels already
    imported, where a new interpreter spends ~0.3 s of CPU importing them (the helper's first
    compile started 0.3-0.5 s into a cold first step), and shares this process's memory until
    it writes.  None if the fork fails."""
    # numba's compiler lock taken across the fork, where it is free: another thread holding it
    # would hold it in the child too, where that thread does not exist (never released); and a
    # thread waiting for it here, holding this module's lock (:func:`declare`), could deadlock
    # with the compiling thread waiting for this module's lock (:func:`_wait_working`)
    with numba_cache.compiler_lock_if_free() as held:
        if not held:
            return None
        # (numba's templates installed here first: the helper starts with them, and this
        # process, which compiles what the helper has not reached, would install them at its
        # first compile anyway; ~0.12 s of the helper's CPU before its first compile)
        numba_cache.refresh_contexts()
        into, feed = os.pipe()
        answers, out = os.pipe()
        try:
            with warnings.catch_warnings():  # (Python 3.12 warns of forking a process with
                warnings.simplefilter("ignore", DeprecationWarning)  # threads: the child only
                pid = os.fork()  # compiles)
        except OSError:
            for fd in (into, feed, answers, out):
                os.close(fd)
            return None
    # (the lock released in the helper too: its copy, owned by its one thread)
    if pid == 0:  # the helper
        code = 1
        try:
            os.close(feed)
            os.close(answers)
            # no hold on the parent's standard streams (one reading this process's output to
            # its end would wait for the helper too), nor numba's warnings on the user's stderr
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            gc.freeze()  # (the parent's objects: never collected here, their pages not touched)
            serve(claims, into, out)
            code = 0
        finally:
            os._exit(code)  # (none of the parent's exit handlers or buffers)
    os.close(into)
    os.close(out)
    helper = _Helper(_Forked(pid), claims, os.fdopen(feed, "wb"), os.fdopen(answers, "rb"))
    return helper


def _start_helper() -> _Helper | None:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        claims = tempfile.mkdtemp(prefix="tinyopt-ahead-")
    except OSError:
        return None
    if _FORK:
        helper = _fork_helper(claims)
        if helper is not None:
            return helper
    code = _SERVE.format(path=os.path.dirname(package), package=package, claims=claims)
    try:
        process = subprocess.Popen([sys.executable, "-c", code],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    except (OSError, ValueError):  # no interpreter to start (an embedded Python): compile here
        shutil.rmtree(claims, ignore_errors=True)
        return None
    return _Helper(process, claims)


def declare(phase: int, recipe: tuple, args: tuple | None = None) -> None:
    """Have a helper process compile the kernel ``recipe`` names (see :func:`resolve`) while
    this process goes on, where it is not cached yet (see the module docstring); ``phase``
    (``FORWARD``, ``LOSS``, ``BACKWARD``, ``STEP``): when the training step first runs it.  A
    recipe naming a C function (compiled when made) takes no ``args``; one naming a numba
    dispatcher takes example arguments of a call (arrays of its dtypes, dimensions and layouts;
    only their numba types matter).  Cheap, and compiles nothing here: a recipe declared before
    returns at once (but see :func:`first_call`)."""
    if (recipe, args is None) in _declared and not (phase == BACKWARD and
                                                    getattr(_calling, "on", False)):
        return
    with _LOCK:  # (layers built on two threads at once: one helper)
        _declare(phase, recipe, args)


def helping() -> bool:
    """Whether a helper process compiles kernels for this one now."""
    return _session is not None and _session.running()


def first_call(declarations) -> None:
    """A layer's first call: ``declarations()`` declares its kernels again, and those of its
    backward kernels given to the helper take their place in the order the step will need them
    (the step runs the backward kernels of the layers called last first; a layer declares its
    kernels when it is built, and layers are not always called in the order they were built,
    nor is a kernel two layers share needed at the first one's backward)."""
    _calling.on = True
    try:
        declarations()
    finally:
        _calling.on = False


def _declare(phase: int, recipe: tuple, args: tuple | None) -> None:
    global _session
    key = (recipe, args is None)
    if key in _declared:
        if key in _given and _session is not None:  # (a first call: later in the order)
            item = (next(_order), phase, recipe, _given[key])
            if _session.send(item):
                with _PENDING_LOCK:
                    if (recipe, item[3]) in _pending:
                        _pending[recipe, item[3]] = (phase, item[0])
        return
    _declared.add(key)
    mode = os.environ.get("TINYOPT_COMPILE_AHEAD", "")
    # (a core free for a helper: checked where none is running; a running one is given the
    # kernel, though its own work now fills the core it took)
    if (mode == "0" or not jit.caches_on_disk() or numba_cache.LOAD_WITHOUT_REFRESH is None
            or (mode != "1" and not helping() and not _idle_cpu())):
        return
    argtypes = None if args is None else tuple(numba.typeof(a) for a in args)
    if _cached(recipe, argtypes):
        return
    item = (next(_order), phase, recipe, argtypes)
    if _session is None or not _session.send(item):
        if _session is not None and _session.closed and _session.running():
            _closed.append(_session)  # (it ends once done: what it has is compiled)
        elif _session is not None:
            _session.stop()
        _session = _start_helper()
        with _PENDING_LOCK:  # (given to a helper that has ended: cached, or to compile here)
            _pending.clear()
        if _session is not None:
            _first_kernels()
        if _session is not None and not _session.send(item):
            _session.stop()
            _session = None
    if _session is not None:
        with _PENDING_LOCK:
            _pending[recipe, argtypes] = (phase, item[0])
        if phase == BACKWARD:
            _given[key] = argtypes


def _first_kernels() -> None:
    """Declare, as a helper starts, the C functions a step runs at its first GEMM where numpy's
    BLAS shares numba's threads (``native/shared_threads.py``: OpenBLAS's thread callback and the
    chunk runner), so that it compiles them first: this process needs them within the step's
    first kernels, where the helper, started as the model is built, has them ready (the small
    GPT's cold first step compiled them here, ~0.08 s of CPU, while the helper idled at its end)."""
    if shared_threads.would_share():
        for kind in ("jobs", "chunks"):
            _declare(START, ("tinyopt.kernels.native.shared_threads", ("c_function", kind)), None)


def _cached(recipe: tuple, argtypes: tuple | None) -> bool:
    """Whether the kernel is in memory or the disk cache (loaded now if so); compiles nothing."""
    _probing.on = True
    try:
        target = resolve(recipe)  # (a C function is made from the cache, or not at all)
        return argtypes is None or numba_cache.load_cached(target, argtypes)
    except _NotCached:
        return False
    except Exception:  # a recipe that does not resolve here compiles nowhere else either
        UNRESOLVED.append(recipe)
        return True
    finally:
        _probing.on = False


def resolve(recipe: tuple):
    """The kernel ``recipe`` names: ``(module, step, ...)`` from the module, each step an
    attribute (a str) or a call ``(method, argument)``: ``("tinyopt.kernels.rnn",
    "lstm_scan_chunks", ("__getitem__", True))`` is the C function ``rnn.lstm_scan_chunks[True]``,
    ``("tinyopt.kernels.norm", "layer_norm_apply", "serial_build")`` a dispatcher."""
    target = importlib.import_module(recipe[0])
    for step in recipe[1:]:
        target = getattr(target, step) if isinstance(step, str) else \
            getattr(target, step[0])(step[1])
    return target


def _around_load(cache, sig, target_context, load):
    """Every disk-cache load of a kernel (``numba_cache.AROUND_LOAD``), before numba compiles
    it on a miss: here, claim the entry or wait for the helper's; in the helper, claim it or
    give it up (see the module docstring).  A function kernels call (``jit.callee``), loaded
    inside the compile of a caller, is neither: loaded if either process has compiled it, else
    compiled (a claim lost would end the helper's compile of its caller, or hold this process
    until the helper had finished its whole caller)."""
    if cache._py_func in jit.CALLEES:  # (see jit.callee: loaded if done, else compiled)
        return load()
    claims = _ROLE["helper"]
    if claims is not None:
        entry = cache.entry_id(sig, target_context)
        if not _claim(claims, entry):
            raise _Taken
        _CLAIMED.append(entry)
        return load()
    if getattr(_probing, "on", False):
        loaded = load()
        if loaded is None:
            raise _NotCached
        return loaded
    helper = _session
    if helper is not None and helper.running():
        if not helper.closed and helper.idle():  # (see the module docstring)
            helper.close()
        entry = cache.entry_id(sig, target_context)
        if not _claim(helper.claims, entry):
            if getattr(_working, "on", False):
                # (a kernel in the helper's hands, done or not, is no work to take meanwhile;
                # nor is it loaded here: this may be the very kernel waited for, whose outer
                # compile, under way, loads it)
                raise _Taken
            _wait_working(helper, entry)
    return load()


def _wait_working(helper: _Helper, entry: str) -> None:
    """Wait until the helper has finished cache entry ``entry``, compiling meanwhile the
    kernels given to it that this process will need first and nobody has claimed (each takes
    its claim here, so the helper skips it): a wait is a core idle while the other compiles,
    and the two processes meet in the middle of the step's kernels wherever that falls.  A
    kernel the helper has claimed is left to it (:func:`_around_load`)."""
    while not helper.finished(entry):
        with _PENDING_LOCK:  # (layers built on another thread may declare meanwhile)
            key = min(_pending, key=lambda k: _need(*_pending[k])) if _pending else None
            if key is not None:
                del _pending[key]
        if key is None:
            helper.wait_for(entry)
            return
        recipe, argtypes = key
        _working.on = True
        try:
            target = resolve(recipe)  # (a C function compiles as it is made)
            if argtypes is not None:
                target.compile(argtypes)
        except Exception:  # _Taken (the helper's), or a failure: compiled when reached then
            pass
        finally:
            _working.on = False


def _need(phase: int, order: int) -> tuple[int, int]:
    """When the step first runs a kernel declared in ``phase`` as the ``order``-th (smallest
    first): the START kernels, the forward kernels in the order declared, the loss's, the
    backward kernels of the layers called last first, the optimizer's step (the helper takes the
    reverse, :func:`_pick`, but for the START kernels, which it takes first, and the loss's,
    which it takes right after the step's: see there)."""
    rank = {START: -1, FORWARD: 0, LOSS: 1, BACKWARD: 2, STEP: 3}[phase]
    return rank, -order if phase == BACKWARD else order


def _pick(items: list[tuple]) -> tuple:
    """The item the step runs last: the latest phase; of the forward kernels the last declared,
    of the others the first (the backward pass runs the layers in reverse).  But the START
    kernels first, which the step runs among its first and the helper has time for as the model
    is built (:func:`_first_kernels`).  The loss's kernels
    come before the backward ones, though the step runs them first: declared as the forward
    pass is built, they end it, and this process, compiling the forward kernels, reached them
    before the helper had compiled the backward ones (a small GPT: its cross-entropy, ~0.9 s
    of compile, in this process from 2.2 s into the step while the helper idled from 2.5 s);
    where this process then reaches a kernel the helper is compiling, it compiles the next it
    needs meanwhile (:func:`_wait_working`)."""
    last = max(item[1] for item in items)
    same = [item for item in items if item[1] == last]
    return (max if last == FORWARD else min)(same, key=lambda item: item[0])


def serve(claims: str, into: int = 0, out: int = 1) -> None:
    """The helper's work: compile (into the disk cache) the kernels declared on file descriptor
    ``into`` (stdin), one at a time (:func:`_pick`), writing each claimed cache entry to ``out``
    (stdout) when its kernel is done; end once ``into`` is closed and nothing is left."""
    _ROLE["helper"] = claims
    # no cyclic garbage collection while compiling (one when idle): a compile makes hundreds
    # of thousands of objects, each 700 allocations start a young collection that promotes the
    # survivors, and the full collections walk numba's typing and compiled state again and
    # again: 0.26-0.39 s of the helper's ~3 s of CPU for the small GPT's and the LSTM's
    # kernels (loaded machine), for ~20 MB more peak memory
    gc.disable()
    items: list[tuple] = []
    given: set[tuple] = set()
    arrived = threading.Condition()
    ended = []

    def add(item: tuple) -> None:
        # a kernel declared again (a layer's first call) takes its new place in the order, if
        # it is still to be compiled
        key = item[2:]
        for i, pending in enumerate(items):
            if pending[2:] == key:
                items[i] = item
                return
        if key not in given:
            given.add(key)
            items.append(item)

    def read() -> None:
        # (unbuffered: a thread blocked in a read of sys.stdin would hold its lock, and the
        # interpreter's shutdown, taking it, would abort)
        rest = b""
        while block := os.read(into, 1 << 16):
            *lines, rest = (rest + block).split(b"\n")
            with arrived:
                for line in lines:
                    add(pickle.loads(base64.b64decode(line)))
                arrived.notify()
        with arrived:
            ended.append(True)
            arrived.notify()

    threading.Thread(target=read, daemon=True).start()
    idle = os.path.join(claims, _IDLE)
    with arrived:
        while not items and not ended:
            arrived.wait()
    while True:
        with arrived:
            # (idle, it says so and waits: this process ends it by closing its stdin, so that
            # nothing it has written is left unread; a helper ending on its own could miss a
            # declaration on its way, whose kernel, if the step never ran it, would stay
            # uncached and start a helper in every later process)
            if not items and not ended:
                _claim(claims, _IDLE)
                while not items and not ended:
                    arrived.wait()
                try:
                    os.remove(idle)
                except OSError:
                    pass
            if not items:
                return
            item = _pick(items)
            items.remove(item)
        _, _, recipe, argtypes = item
        try:
            target = resolve(recipe)  # (a C function compiles as it is made)
            if argtypes is not None:
                target.compile(argtypes)
        except Exception:  # _Taken, or a failure: this process compiles it then
            pass
        if _CLAIMED:  # (one write, below the pipe's atomic size for a few entries)
            os.write(out, "".join(entry + "\n" for entry in _CLAIMED).encode())
        _CLAIMED.clear()
        if not items:  # (nothing to compile for now: the collection held off, see above)
            gc.collect()


def _forget() -> None:
    global _session
    # a forked child (a helper, or the user's) keeps no end of its parent's helpers' pipes: a
    # write end left open would keep a helper from ever seeing its input end
    for helper in [*_closed, *([_session] if _session is not None else [])]:
        for pipe in (helper.stdin, helper.stdout):
            try:
                pipe.close()  # (nothing is left unwritten: each item is flushed)
            except OSError:
                pass
    _session = None  # (a forked child's own declarations start a helper of its own)
    _closed.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
numba_cache.AROUND_LOAD[:] = [_around_load]


@atexit.register
def _stop_helper() -> None:
    # a process that ends before its first step does not need the kernels
    for helper in [*_closed, *([_session] if _session is not None else [])]:
        helper.stop()
