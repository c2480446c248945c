"""Compiling a kernel in a second process while this one goes on: the cold first step.

A cold first training step compiles its kernels one after another, and numba compiles under one
global lock, so a thread cannot overlap two compiles; another process can, on another core, and
its machine code reaches this one through numba's disk cache.  An optimizer knows its kernel and
its argument types when it is built, before the forward pass: :func:`start` compiles that kernel
in a helper process while this one runs (and compiles) the forward and backward kernels, and the
first step waits for the helper (:meth:`Pending.wait`) and loads the machine code from the cache.
Both processes compile the same source, closure and argument types: the same cache entry, the
same machine code, the same results as a compile here.

:func:`start` does nothing, and the first call compiles here as
before, when the kernel is already in memory or in the disk cache (it is loaded now: a warm
process starts no helper), when no core is free for it (fewer than 2 usable CPUs, or a load
average above the CPUs less one: the helper would take turns with this process, and its
start-up, ~0.4 s of CPU, would only add to the same compile), when kernels are not cached on
disk, while another helper runs (one at a time), or with ``TINYOPT_COMPILE_AHEAD=0``
(``=1``: whatever the CPUs and the load).
"""

from __future__ import annotations

import atexit
import base64
import importlib
import os
import pickle
import subprocess
import sys

import numba

from tinyopt.kernels import jit
from tinyopt.kernels.native.numba_cache import load_cached

_RUNNING: list[Pending] = []  # at most one helper at a time

# the helper's code, importing this very tinyopt (the kernel's source decides its cache entry)
_HELPER = ("import sys; sys.path.insert(0, {path!r}); "
           "from tinyopt.kernels.compile_ahead import compile_recipe; compile_recipe({recipe!r})")


class Pending:
    """A helper process compiling one kernel."""

    def __init__(self, process: subprocess.Popen):
        self._process = process
        self._owner = os.getpid()  # (a forked child neither waits for it nor stops it)

    def finished(self) -> bool:
        """Whether the helper has ended (for a forked child: whether it is not its own)."""
        return self._owner != os.getpid() or self._process.poll() is not None

    def wait(self) -> None:
        """Return once the helper has finished (its kernel is then in the disk cache, unless
        it failed: the first call then compiles it here)."""
        if self._owner == os.getpid():
            self._process.wait()
        if self in _RUNNING:
            _RUNNING.remove(self)


def _idle_cpu() -> bool:
    """Whether a core is free for a helper: the usable CPUs exceed the load (this process's
    core included; the load average of the last minute)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return cpus >= 2 and load + 1.0 <= cpus


def start(recipe: tuple, args: tuple) -> Pending | None:
    """Compile ahead, in a helper process, the dispatcher ``resolve(recipe)`` for the numba types
    of ``args`` (see the module docstring); the helper, or None where nothing was started.

    ``recipe`` is ``(module, name, method, key)``: the dispatcher is
    ``getattr(getattr(module, name), method)(key)`` in both processes."""
    mode = os.environ.get("TINYOPT_COMPILE_AHEAD", "")
    for pending in list(_RUNNING):  # (helpers that finished, their kernel not called yet)
        if pending.finished():
            _RUNNING.remove(pending)
    if mode == "0" or _RUNNING or not jit.caches_on_disk() or (mode != "1" and not _idle_cpu()):
        return None
    argtypes = tuple(numba.typeof(a) for a in args)
    if load_cached(resolve(recipe), argtypes):
        return None
    path = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _HELPER.format(path=path, recipe=base64.b64encode(
        pickle.dumps((recipe, argtypes))).decode())
    try:
        process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, ValueError):  # no interpreter to start (an embedded Python): compile here
        return None
    pending = Pending(process)
    _RUNNING.append(pending)
    return pending


def resolve(recipe: tuple):
    """The numba dispatcher ``recipe`` names (see :func:`start`)."""
    module, name, method, key = recipe
    return getattr(getattr(importlib.import_module(module), name), method)(key)


def compile_recipe(encoded: str) -> None:
    """The helper's work: compile (into the disk cache) the dispatcher and types encoded."""
    recipe, argtypes = pickle.loads(base64.b64decode(encoded))
    resolve(recipe).compile(argtypes)


@atexit.register
def _stop_helpers() -> None:
    # a process that ends before its first step does not need the kernel (numba writes a cache
    # entry to a temporary file and renames it: a stopped helper leaves no partial entry)
    for pending in list(_RUNNING):
        if pending._owner == os.getpid():
            pending._process.kill()
        pending.wait()
