"""kernels/native/quiet_compile.py: numba compiles with the cyclic garbage collector paused."""

from __future__ import annotations

import gc

import numba
from numba.core import event

from tinyopt.kernels import jit
from tinyopt.kernels.native.quiet_compile import QuietDispatcher, gc_paused, quiet


def test_the_pause_nests_and_leaves_the_collector_as_it_found_it():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the outer compile is still running)
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def test_a_kernel_compiles_with_the_collector_paused():
    """The kernels' dispatchers are quiet ones, and a compile runs (and ends) paused: a cold
    first training step of the small GPT ran 1 full and 8 middle collections (~0.1-0.15 s)
    inside compiles, and none paused."""
    assert type(jit.kernel(lambda a: a)) is QuietDispatcher
    seen = []

    class Seen(event.Listener):
        def on_start(self, ev):
            seen.append(gc.isenabled())

        def on_end(self, ev):
            pass

    def plus_one(a):
        return a + 1
    d = quiet(numba.njit(cache=False)(plus_one))
    with event.install_listener("numba:compile", Seen()):
        try:
            d(1.5)
            d("no")  # a typing error: the pause still ends
        except numba.core.errors.TypingError:
            pass
    assert seen == [False, False] and gc.isenabled()
