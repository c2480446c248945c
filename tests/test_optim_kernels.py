"""kernels/optim.py: the walker's kernels, compiled and cached per algorithm and switch set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

_STEP = """
import numpy as np
from numba.core import compiler
compiled = []  # every function numba compiles (not loads), by qualified name
compile_extra = compiler.compile_extra
def logged(typingctx, targetctx, func, *args, **kwargs):
    compiled.append(getattr(func, "__qualname__", "?"))
    return compile_extra(typingctx, targetctx, func, *args, **kwargs)
compiler.compile_extra = logged
from numba.core import codegen
# each library's LLVM IR before optimisation: (lines, whether it counts references, and for a
# serial walker the gathers in its optimised IR)
ir_sizes = {}
add_ir_module = codegen.CPUCodeLibrary.add_ir_module
def measured(self, module):
    text = str(module)
    lines, counts, packed = ir_sizes.get(self.name, (0, False, None))
    ir_sizes[self.name] = (lines + text.count("\\n"), counts or "NRT_incref" in text, packed)
    return add_ir_module(self, module)
codegen.CPUCodeLibrary.add_ir_module = measured
finalize = codegen.CPUCodeLibrary.finalize
def finalized(self):
    finalize(self)
    if self.name.endswith("_kernel_serial"):
        gathers = self.get_llvm_str().count("@llvm.masked.gather")
        ir_sizes[self.name] = ir_sizes.get(self.name, (0, False, None))[:2] + (gathers,)
codegen.CPUCodeLibrary.finalize = finalized
from tinyopt import Parameter, optim
out = {}
for name, kw in %r:
    p = Parameter(np.linspace(-1, 1, 6).astype(np.float32))
    opt = getattr(optim, name)([p], **kw)
    for t in range(3):
        p.grad = np.cos(np.arange(6) + t).astype(np.float32)
        opt.step()
    out[name] = (p._data.tolist(), float(opt._flat[0][0].steps[0]), sorted(opt.state[p]))
print(repr((out, compiled, ir_sizes)))
"""
SGD, ADAM, LION = ("SGD", dict(lr=0.1)), ("Adam", dict(lr=0.01)), ("Lion", dict(lr=0.01))


def _run(cases, cache, compiled: list | None = None, ir_sizes: dict | None = None):
    """The steps' results in a fresh process (``compiled``: extended by the functions numba
    compiled there; ``ir_sizes``: updated with each library's IR lines and reference counting)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=SRC)
    res = subprocess.run([sys.executable, "-c", _STEP % (cases,)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out, names, sizes = eval(res.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    if compiled is not None:
        compiled.extend(names)
    if ir_sizes is not None:
        ir_sizes.update(sizes)
    return out


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """SGD's and Adam's steps, each alone in a fresh process with an empty cache (Lion's after
    Adam's): their results and what numba compiled for each (and its IR's size)."""
    compiled, ir_sizes = {"SGD": [], "Adam": []}, {}
    out = {**_run([SGD], tmp_path_factory.mktemp("sgd"), compiled["SGD"], ir_sizes),
           **_run([ADAM, LION], tmp_path_factory.mktemp("adam"), compiled["Adam"], ir_sizes)}
    return out, compiled, ir_sizes


def test_kernels_cached_by_separate_processes_load_together(tmp_path, cold):
    """Each walker kernel's subroutine used to have one qualified name for every algorithm: two
    kernels compiled in different processes, then loaded from numba's disk cache into one,
    resolved each other's calls (Rprop ran SGD's per-parameter prologue: no step counted, no
    state).  Every algorithm and switch set now names its own machine code."""
    sgd, adam = SGD, ADAM
    alone = {name: cold[0][name] for name in ("SGD", "Adam")}
    _run([sgd], tmp_path / "c")
    _run([adam], tmp_path / "c")   # compiled in another process, same cache
    together = _run([sgd, adam], tmp_path / "c")  # both loaded from the cache
    assert together == alone
    assert together["Adam"][1] == 3
    assert together["Adam"][2] == ["exp_avg", "exp_avg_sq", "step"]
    np.testing.assert_array_equal(together["SGD"][0], alone["SGD"][0])


def test_a_cold_step_compiles_the_serial_walker_alone(cold):
    """A step below the parallel threshold compiles the walker's serial build and nothing else of
    the optimizer: its prologue inlined, not a function of its own (~0.05 s of CPU, as a call
    it was also optimized again inside the walker's module), and no parallel build."""
    for name, kernel in (("SGD", "sgd_FFFF_kernel_serial"), ("Adam", "adam_FFFFT_kernel_serial")):
        walkers = [f for f in cold[1][name] if f.startswith(name.lower() + "_")]
        assert walkers == [kernel], cold[1][name]


def test_the_serial_walker_is_little_ir_and_counts_no_references(cold):
    """The serial walker, compiled in every model's first step, reads its arrays through typed
    pointers in ``while`` loops and counts no references (``serial_nrt=False``): Adam's LLVM IR
    before optimisation was 5435 lines (~30 a numpy array access, each array argument's
    reference counting ~25 more), now ~1550, and its cold compile ~0.45 -> ~0.33 s of CPU."""
    for kernel in ("sgd_FFFF_kernel_serial", "adam_FFFFT_kernel_serial"):
        lines, counts_references, _ = cold[2][kernel]
        assert lines < 2000 and not counts_references, (kernel, lines)


def test_the_serial_walker_reads_the_host_scalars_from_registers(cold):
    """The serial walker hands ``update`` a copy of the host scalars' record on its stack
    (``address.local_copy``).  Fields read from the record itself may change with every store
    to the parameters and state (the record might be what was stored to): LLVM vectorized
    Lion's loop with a gather of ``h.one`` or ``h.zero`` per element for its sign (1.1 ms a step
    of 1e6 float32 elements, 0.17-0.2 ms with the copy, whose fields are registers)."""
    for kernel in ("lion_FF_kernel_serial", "adam_FFFFT_kernel_serial", "sgd_FFFF_kernel_serial"):
        assert cold[2][kernel][2] == 0, (kernel, cold[2][kernel])


def test_adam_on_the_shared_pool_steps_in_parallel_with_the_serial_bits(monkeypatch):
    """Where numpy's BLAS shares the kernels' OpenMP threads and numba has two or more, Adam's
    walker may take its parallel build from ``ADAM_SHARED_MIN`` elements (not only from
    ``PARALLEL_MIN_ELEMENTS``): the same bits as the serial build, NaN, inf and -0.0 included,
    over parameters whose chunks straddle their boundaries; with one thread, the serial build."""
    import numba

    from tinyopt import Parameter, optim
    from tinyopt.kernels import jit
    from tinyopt.kernels import optim as K

    rng = np.random.default_rng(5)
    sizes = (K.ADAM_SHARED_MIN - 5000, 7, 9000)
    grads = [rng.standard_normal((3, n)).astype(np.float32) for n in sizes]
    grads[0][:, :4] = [np.nan, np.inf, -np.inf, -0.0]
    kernel = K.adam[(False, False, False, False, True)]  # Adam's defaults
    builds = kernel._kernel
    calls = []

    def run(threads: int, cost: list[float]):
        monkeypatch.setitem(jit._FORK, "openmp_started", True)
        monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", threads)
        monkeypatch.setattr(kernel, "_calls", K.HOT_CALLS)
        monkeypatch.setattr(kernel, "_cost", cost)  # (serial, parallel): no try in 3 calls
        monkeypatch.setattr(kernel, "_next_try", 10 ** 9)
        params = [Parameter(np.linspace(-1, 1, n, dtype=np.float32)) for n in sizes]
        opt = optim.Adam(params, lr=1e-2)
        seen = []
        monkeypatch.setattr(kernel, "_kernel", _Spy(builds, seen))
        for t in range(3):
            for p, g in zip(params, grads):
                p.grad = g[t].copy()
            opt.step()
        calls.append(seen)
        return [p._data.tobytes() for p in params] + [
            opt.state[p][k].numpy().tobytes() for p in params for k in ("exp_avg", "exp_avg_sq")]

    assert run(2, [1e15, 1.0]) == run(2, [1.0, 1e15]) == run(1, [1e15, 1.0])
    assert calls == [["parallel"] * 3, ["call"] * 3, ["call"] * 3]


def test_the_shared_pool_walker_takes_the_faster_build_and_tries_the_other(monkeypatch):
    """After ``HOT_CALLS`` calls, the build with the lower recent wall time per element: a
    parallel build that starts to stall (busy cores) is left at once, tried less and less
    often while it keeps losing, and taken again once it is faster.  (The builds advance the
    walker's clock by their time instead of sleeping: the same figures on a busy machine.)"""
    import numba

    from tinyopt.kernels import jit
    from tinyopt.kernels import optim as K

    monkeypatch.setitem(jit._FORK, "openmp_started", True)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 2)
    monkeypatch.setattr(K, "HOT_CALLS", 3)
    monkeypatch.setattr(K, "TRY_EVERY", 4)
    monkeypatch.setattr(K, "TRY_MAX", 16)
    took = []
    delay = {"call": 0.0, "parallel": 0.0}
    now = [0]

    class Clock:
        @staticmethod
        def perf_counter_ns() -> int:
            return now[0]

    monkeypatch.setattr(K, "time", Clock)

    class Builds:
        low = None

        def __call__(self, *args):
            took.append("s")
            now[0] += int(delay["call"] * 1e9)
            return -1

        def parallel(self, *args):
            took.append("p")
            now[0] += int(delay["parallel"] * 1e9)
            return -1

    walker = K._SharedPoolWalker(Builds(), shared_min=100)
    x = np.empty(1000, np.float32)
    args = (x, x, x, x, x, np.array([0, x.size], np.int64))  # (seg, args[5], sizes the call)

    def calls(n: int) -> str:
        del took[:]
        for _ in range(n):
            assert walker(*args) == -1
        return "".join(took)

    delay.update(call=0.02, parallel=0.005)  # two threads: faster
    assert calls(3) == "sss"  # below HOT_CALLS, then the serial build's first figure
    assert calls(30).count("p") >= 20  # the parallel one's, then mostly parallel, tries of serial
    delay.update(parallel=0.1)  # now the parallel build stalls
    stalled = calls(30)
    assert "s" in stalled[:2] and stalled.count("p") <= 5
    assert walker._gap == K.TRY_MAX  # the losing build's tries backed off to every 16 calls
    delay.update(parallel=0.005)
    assert calls(40)[-15:].count("p") >= 11  # faster again: taken again after a try
    small = np.array([0, 10], np.int64)  # below shared_min
    assert walker(*args[:5], small) == -1 and took[-1] == "s"


class _Spy:
    """A walker's builds, recording which one each step took."""

    def __init__(self, kernel, seen):
        self._k, self._seen = kernel, seen

    def __call__(self, *args):
        self._seen.append("call")
        return self._k(*args)

    def parallel(self, *args):
        self._seen.append("parallel")
        return self._k.parallel(*args)
