"""Loading a cached kernel without numba's context refresh (numba internals: its cache class).

numba's ``Cache.load_overload`` refreshes the target context before it loads machine code from
the disk cache: it imports numba's ~70 implementation modules (arraymath, linalg, typed dicts,
random, ...) and installs their ~2300 typing and lowering templates.  In a process that only
loads cached kernels, that was 0.2-0.3 s of a 0.35-0.4 s warm first training step, and nothing
of it is used: the loaded machine code is called from Python through the dispatcher, and every
real compile refreshes the contexts itself (``CompilerBase.__init__``), as does a lowering
lookup that misses (``BaseContext.get_function``).  What loading does need is what the refresh
puts into LLVM's symbol table, which the object code links against: the NRT functions
(``rtsys.initialize``), the hash secret (``numba.cpython.hashing``'s import) and whatever a
third-party numba extension adds (``entrypoints.init_all``); parallel kernels restart their
thread pool through their own ``reload_init``.  In numba 0.68.1 that is every symbol a refresh
adds (counted by wrapping ``llvmlite.binding.add_symbol``); a symbol missing at load time would
crash the process, so this runs only on the numba versions it was checked on and otherwise
keeps numba's own path.  ``TINYOPT_NUMBA_LAZY_LOAD=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickletools

import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target
from numba.core.serialize import dumps
from numba.extending import intrinsic

from tinyopt.kernels.native import lean_compile

CHECKED_VERSIONS = ("0.68.",)
_RUNTIME_READY: list[bool] = []

SOURCE_ROOTS: list[str] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
"""Folders whose Python files' paths and bytes key every cached kernel (``sources_digest``):
tinyopt's ``kernels`` package, where every kernel and every function a kernel calls lives.
numba keys a kernel by its own file, bytecode and closure only, so a kernel that inlines a
function of another file (attention's ``exp`` from ``vecmath``) would load stale machine code
once that file changed: an upgrade leaves ``__pycache__``'s entries behind."""
_DIGEST: list[str] = []


def sources_digest() -> str:
    """A hash of the files under ``SOURCE_ROOTS`` (relative paths and bytes), once a process."""
    if not _DIGEST:
        h = hashlib.sha256()
        for root in SOURCE_ROOTS:
            paths = sorted(os.path.relpath(os.path.join(folder, name), root)
                           for folder, _, names in os.walk(root) for name in names
                           if name.endswith(".py"))
            for path in paths:
                with open(os.path.join(root, path), "rb") as f:
                    h.update(path.encode() + b"\0" + f.read() + b"\0")
        _DIGEST.append(h.hexdigest())
    return _DIGEST[0]


_CLOSURES: dict[bytes, str] = {}
_MARK = object()


def closure_digest(pickled: bytes) -> str:
    """A hash of the object graph a pickle rebuilds, whatever objects it shared.

    numba keys a kernel's cache entry by the hash of its pickled closure, and a pickle writes an
    object seen before as a reference to it (its memo): the same closure pickles to other bytes
    when equal objects are one object in this process and two in another.  That sharing follows
    how the module was loaded: the functions a kernel closes over pickle by value with their code,
    and code compiled from source shares its names and constants otherwise than code loaded from
    a ``.pyc``.  So the first process after an editable install, and a test run's main process,
    keyed the Adafactor, SGD and RNN kernels apart from every later process (and from their own
    compile-ahead helper), which compiled them all again.  Here every value the pickle builds is
    named by the hash of the opcode and argument that built it and of its inputs' names; a
    reference names what it refers to; the hash covers the value left at the end and every
    value the pickle discards (a ``POP``: a call made for its effect, such as filling a cell), so
    any difference in what the pickle rebuilds changes it, and a difference in sharing alone
    does not.  Once a process per distinct pickle (~3 ms a kernel)."""
    seen = hashlib.sha256(pickled).digest()
    known = _CLOSURES.get(seen)
    if known is not None:
        return known
    stack: list = []
    memo: dict = {}
    discarded: list[bytes] = []
    for op, arg, _ in pickletools.genops(pickled):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "MARK":
            stack.append(_MARK)
        elif name == "STOP":
            digest = hashlib.sha256(repr((stack.pop(), discarded)).encode()).hexdigest()
            _CLOSURES[seen] = digest
            return digest
        else:
            before = op.stack_before
            if pickletools.markobject in before:  # (the items above the last mark, and
                mark = len(stack) - 1 - stack[::-1].index(_MARK)  # those below it)
                below = before.index(pickletools.markobject)
                inputs = stack[mark - below:mark] + stack[mark + 1:]
                del stack[mark - below:]
            else:
                inputs = stack[len(stack) - len(before):] if before else []
                del stack[len(stack) - len(before):]
            if name == "DUP":
                stack += inputs * 2
                continue
            built = hashlib.sha256(repr((name, arg, inputs)).encode()).digest()
            if op.stack_after:
                stack.append(built)
            else:
                discarded.append(built)
    raise ValueError("a pickle without STOP")


@contextlib.contextmanager
def compiler_lock_if_free():
    """numba's global compiler lock, taken where no thread holds it (no wait): yields whether
    this thread holds it, and releases it on leaving.  (A process forked while another thread
    holds it would hold it forever: that thread does not exist in the child.)"""
    lock = getattr(global_compiler_lock, "_lock", None)  # (numba's acquire only waits)
    if lock is None or not lock.acquire(blocking=False):
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def refresh_contexts() -> None:
    """Install numba's typing and lowering templates now (its contexts' refresh: ~0.12 s of CPU,
    which the first compile of a process pays otherwise), for a process about to fork one that
    compiles (``compile_ahead._fork_helper``): the child starts with them, and the refresh each
    would pay at its first compile is paid once.  Call with numba's compiler lock held."""
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


AROUND_LOAD: list = []
"""At most one ``around(cache, sig, target_context, load)`` that every disk-cache load of a
kernel goes through (``load()`` loads it: the machine code, or None and numba compiles it):
``kernels/compile_ahead.py``'s, while a helper process compiles kernels."""


def _lazy_load_cache_class():
    """``FunctionCache`` whose ``load_overload`` skips the refresh, or None where it does not
    apply (another numba version, a numba whose cache class is not the one read above)."""
    if os.environ.get("TINYOPT_NUMBA_LAZY_LOAD", "1") == "0" or \
            not numba.__version__.startswith(CHECKED_VERSIONS):
        return None
    from numba.core import caching
    if caching.FunctionCache.load_overload is not caching.Cache.load_overload or not all(
            hasattr(caching.Cache, name) for name in
            ("_load_overload", "_guard_against_spurious_io_errors")):
        return None

    class LoadWithoutRefresh(caching.FunctionCache):
        def load_overload(self, sig, target_context):
            # numba calls this under its global compiler lock, before it compiles: the place
            # where a kernel compiled in another process is waited for (``AROUND_LOAD``)
            if AROUND_LOAD:
                return AROUND_LOAD[0](self, sig, target_context,
                                      lambda: self._load_now(sig, target_context))
            return self._load_now(sig, target_context)

        def _load_now(self, sig, target_context):
            if not _runtime_ready(target_context):
                loaded = super().load_overload(sig, target_context)
            else:
                with self._guard_against_spurious_io_errors():
                    loaded = self._load_overload(sig, target_context)
            if loaded is None:  # (numba compiles it next: its compiler's modules are imported)
                lean_compile.install()
            return loaded

        def _index_key(self, sig, codegen):
            # numba's key (signature, CPU, bytecode, closure: its closure hash replaced by one
            # that the sharing of equal objects does not change, see ``closure_digest``) and
            # the kernels' sources, so a change in a file the kernel calls into compiles it again
            fn = self._py_func
            cells = () if fn.__closure__ is None else tuple(c.cell_contents
                                                            for c in fn.__closure__)
            return (sig, codegen.magic_tuple(),
                    (hashlib.sha256(fn.__code__.co_code).hexdigest(),
                     closure_digest(dumps(cells)) if cells else hashlib.sha256(b"").hexdigest()),
                    sources_digest())

        def entry_id(self, sig, target_context) -> str:
            """The cache entry's identity, the same in every process: its index file and
            key (signature, CPU, hashes of the bytecode, of the closure and of the sources)."""
            key = self._index_key(sig, target_context.codegen())
            return hashlib.sha1(repr((self._cache_file._index_path, key)).encode()).hexdigest()

    return LoadWithoutRefresh


def _runtime_ready(target_context) -> bool:
    """Put into LLVM's symbol table what numba's refresh would (see above); False if that
    failed, and numba's own refresh then runs."""
    if not _RUNTIME_READY:
        try:
            from numba.core.entrypoints import init_all
            from numba.core.runtime import nrt

            nrt.rtsys.initialize(target_context)
            import numba.cpython.hashing  # noqa: F401  (its import adds the hash secret)
            init_all()
        except Exception:
            return False
        _RUNTIME_READY.append(True)
    return True


LOAD_WITHOUT_REFRESH = _lazy_load_cache_class()


def disk_cache_of(dispatcher):
    """numba's disk cache object of ``dispatcher`` (None for a dispatcher without one)."""
    return getattr(dispatcher, "_cache", None)


def loads_without_refresh(dispatcher):
    """``dispatcher`` with its disk cache switched to ``LOAD_WITHOUT_REFRESH``."""
    lazy = LOAD_WITHOUT_REFRESH
    cache = disk_cache_of(dispatcher)
    if lazy is not None and type(cache) is lazy.__base__:
        cache.__class__ = lazy  # the same object and state, one method overridden
    return dispatcher


def cached_intrinsic(defn=None, *, key: str = ""):
    """numba's ``@intrinsic``, with an identity that is the same in every process: the function's
    module and qualified name (plus ``key``, for a factory that makes several of one name).

    numba keys a kernel's disk cache by its bytecode and the pickled contents of its closure.
    Kernels built inside a factory close over functions that pickle by value, with the globals
    they call; an intrinsic among them pickles with its ``uuid``, which numba draws afresh in each
    process (``uuid1``), so such a kernel's key never matched the one saved and every process
    compiled it again (the Adam walker, once ``decayed_grad`` called ``instructions.fma``).  Use it
    for intrinsics made once per process (at module level, or by a factory run once per key)."""
    if defn is None:
        return lambda d: cached_intrinsic(d, key=key)
    made = intrinsic(defn)
    made._set_uuid(f"tinyopt:{defn.__module__}.{defn.__qualname__}" + (f"[{key}]" if key else ""))
    return made


def load_cached(dispatcher, argtypes: tuple) -> bool:
    """Give ``dispatcher`` its machine code for ``argtypes`` (numba types) from memory or the disk
    cache, as its first call of those types would (numba's ``Dispatcher.compile`` up to its
    compile); False, having compiled nothing, when the disk cache does not hold it."""
    with global_compiler_lock:
        if dispatcher.overloads.get(tuple(argtypes)) is not None:
            return True
        cache = disk_cache_of(dispatcher)
        cres = None if cache is None else cache.load_overload(tuple(argtypes),
                                                              dispatcher.targetctx)
        if cres is None:
            return False
        dispatcher._cache_hits[tuple(argtypes)] += 1
        dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        dispatcher.add_overload(cres)
        return True
