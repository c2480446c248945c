"""numba compiles with Python's cyclic garbage collector paused.

A compile builds a great many small objects (numba's IR, types and lowering state, llvmlite's
IR), many of them in reference cycles, so the collector runs again and again while it works: each
young collection moves the survivors on, and the middle and full collections traverse them again
(a full one, every object of the process).  Measured, a cold first training step of the small GPT
(``benchmarks/bench_seq.py``, no compile-ahead helper, 5 alternating pairs, 01:51-01:53 UTC):
92 young, 8 middle and 1 full collection, 0.36-0.42 s in the collector; paused, 3 young ones
after compiles, 0.24-0.29 s (the young work stays: one collection after a compile traverses what
it allocated), the same peak RSS.  Paused for the length of a compile (or a disk-cache load), the
collector frees the compile's cycles at its first run after it: the same objects, later.

The pause is process-wide (the collector has no other switch) and nests: it ends when the
outermost compile ends, and leaves the collector off if it was off before.  It also marks the
thread as compiling a tinyopt kernel (:func:`compiling_here`), for ``lean_compile``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

from numba.core.registry import CPUDispatcher

_LOCK = threading.Lock()
_STATE = {"depth": 0, "was_enabled": False}


class _Pauses(threading.local):
    """This thread's pauses (a compile or load of a kernel), 0 until its first: a class
    attribute, so that a thread that never paused reads it without ``getattr``'s caught
    AttributeError (0.4 us against 0.07: ``lean_compile`` asks at every statement's variable list
    numba makes, on every thread)."""

    depth = 0


_THREAD = _Pauses()


def compiling_here() -> bool:
    """Whether this thread is compiling (or loading) a tinyopt kernel: inside :func:`gc_paused`."""
    return _THREAD.depth > 0


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector off for the ``with`` block (see the module docstring)."""
    with _LOCK:
        if _STATE["depth"] == 0:
            _STATE["was_enabled"] = gc.isenabled()
            gc.disable()
        _STATE["depth"] += 1
    _THREAD.depth += 1
    try:
        yield
    finally:
        _THREAD.depth -= 1
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0 and _STATE["was_enabled"]:
                gc.enable()


def _after_fork_in_child() -> None:
    # a fork keeps only the forking thread: a pause another thread was in never ends here
    global _LOCK
    _LOCK = threading.Lock()
    if _STATE["depth"] and _STATE["was_enabled"]:
        gc.enable()
    _STATE["depth"] = 0
    _THREAD.depth = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class QuietDispatcher(CPUDispatcher):
    """numba's CPU dispatcher whose compiles and disk-cache loads run in :func:`gc_paused`."""

    def compile(self, sig):
        with gc_paused():
            return super().compile(sig)


def quiet(dispatcher):
    """``dispatcher`` (numba's ``njit``) made a :class:`QuietDispatcher` (the same object and
    state, one method overridden); any other dispatcher as it is."""
    if type(dispatcher) is CPUDispatcher:
        dispatcher.__class__ = QuietDispatcher
    return dispatcher
