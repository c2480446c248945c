"""Pause Python's cyclic garbage collector while the engine makes many objects at once.

Realizing a graph (``realize``: its signature, then a cold structure's run, where autodiff
builds a node per backward op) or compiling a plan (specs, kernel calls, memory blocks: ~6-10
tracked objects a node) allocates thousands of container objects in one go.  Each 700
allocations start a young collection, which moves every survivor a generation up; the tape of
a run, alive until it ends, is promoted that way into the oldest generation, and once that has
grown by a quarter a full collection walks every tracked object of the process (the cached
plans' included).  Measured on the actor-critic of ``benchmarks/bench_eager.py`` (150
episodes, 2026-12-06, loaded 2-core machine): 14 full collections took 3.1 s of ~5 s; with
collection paused during runs and compiles, 4 took 0.5 s.  The tape dies by reference counting
when the run ends (it holds no cycles), so nothing is left for the collector, and what a
compile keeps is kept anyway.

``gc.disable`` is process-wide: a pause leaves a collector that the program turned off alone,
and two threads pausing at once may resume it early (costing only the saving, never memory:
an allocation after the pause collects as usual).  CPython's ``timeit`` pauses it the same way.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def paused(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with the cyclic garbage collector paused while it runs (see the module
    docstring)."""
    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return call
