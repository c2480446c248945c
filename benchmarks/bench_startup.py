"""Start-up cost: ``import tinyopt``, and the time to the first finished training step of the MLP
784-500-10 (forward, cross-entropy, backward, Adam step) in a fresh process, with an empty numba
cache (every kernel compiled) and with a warm one (kernels loaded from the cache).

Goals (issue 14): ``import tinyopt`` <= 0.35 s; first step <= 1.0 s cold and <= 0.25 s warm.
The CPU columns (the child's process time) say the same on a quiet machine and stay readable on a
busy one, where the wall times grow with the other load.

    python benchmarks/bench_startup.py
    python benchmarks/bench_startup.py --imports   # import times only: medians of 7 processes
    python benchmarks/bench_startup.py --floors    # where the first step's time goes (below)

``--floors`` prints, cold and warm: each numba kernel the MLP's first step compiles or loads,
with its CPU time and, for a compile, the part numba's own timer puts in LLVM (optimisation and
machine code; the rest is numba's typing and lowering, in Python), and numba's fixed cost on six trivial kernels (``out[i] = f(a[i])``, the
options tinyopt uses) in a fresh process: what any first step of six distinct kernels pays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time
t0 = time.perf_counter()
c0 = time.process_time()
import numpy as np
import tinyopt as to
t_tinyopt = time.perf_counter() - t0
c_tinyopt = time.process_time() - c0
from tinyopt import nn, optim
t_import = time.perf_counter() - t0
c_import = time.process_time() - c0
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
opt = optim.Adam(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
x = rng.random((32, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, 32)
t1 = time.perf_counter()
c1 = time.process_time()
opt.zero_grad()
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()
loss.item()
t_step = time.perf_counter() - t1
c_step = time.process_time() - c1
print(json.dumps({"import": t_import, "first_step": t_step, "total": time.perf_counter() - t0,
                  "import_cpu": c_import, "first_step_cpu": c_step,
                  "import_tinyopt": t_tinyopt, "import_tinyopt_cpu": c_tinyopt}))
"""


def run(cache_dir: str, child: str = CHILD) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# the first step's kernels: CPU of each dispatcher compile or cache load (nested ones indented)
KERNELS = r"""
import json, time
from numba.core import dispatcher
rows, depth = [], [0]
compile = dispatcher.Dispatcher.compile
def timed(self, sig):
    if self.overloads.get(tuple(sig)) is not None:
        return compile(self, sig)
    hits = sum(self._cache_hits.values())
    row = len(rows); rows.append(None); depth[0] += 1
    c = time.thread_time()
    llvm = 0.0
    try:
        entry = compile(self, sig)
        try:  # numba's own timer of the time spent in LLVM (optimisation and code generation)
            llvm = self.overloads[tuple(sig)].metadata["timers"]["llvm_lock"]
        except (KeyError, TypeError, AttributeError):
            pass
        return entry
    finally:
        depth[0] -= 1
        rows[row] = ("  " * depth[0] + self.py_func.__qualname__.split(".")[-1],
                     time.thread_time() - c, sum(self._cache_hits.values()) > hits, llvm)
dispatcher.Dispatcher.compile = timed
""" + CHILD.replace('print(json.dumps({', 'print(json.dumps({"kernels": rows, ')

TRIVIAL = """
import numba
@numba.njit(cache=True, nogil=True, error_model="numpy")
def k{0}(a, out):
    for i in range(out.shape[0]):
        out[i] = a[i] * {0}
"""
SIX = r"""
import json, sys, time
c0 = time.process_time()
import numba, numpy as np
sys.path.insert(0, {folder!r})
import trivial_kernels as t
c_numba = time.process_time() - c0
a = np.ones(10, np.float32); o = np.empty_like(a)
times = []
for k in (t.k1, t.k2, t.k3, t.k4, t.k5, t.k6):
    c = time.process_time(); k(a, o); times.append(time.process_time() - c)
print(json.dumps({{"numba": c_numba, "kernels": times}}))
"""


def floors() -> None:
    """The per-kernel table and numba's fixed cost (see the module docstring)."""
    with tempfile.TemporaryDirectory() as cache:
        steps = {name: run(cache, KERNELS) for name in ("cold", "warm")}
    for name, r in steps.items():
        print(f"{name} first step: {r['first_step']:.3f} s wall, {r['first_step_cpu']:.3f} s CPU;"
              f" numba kernels (CPU s, compile or cache load; of a compile, the seconds in LLVM):")
        for label, cpu, hit, llvm in r["kernels"]:
            print(f"  {label:<38} {cpu:6.3f}  {'load' if hit else 'compile'}"
                  + ("" if hit else f"  LLVM {llvm:6.3f}"))
        top = [k for k in r["kernels"] if not k[0].startswith(" ")]
        print(f"  {'sum (top level)':<38} {sum(k[1] for k in top):6.3f}"
              + (f"           LLVM {sum(k[3] for k in top):6.3f}" if name == "cold" else ""))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "trivial_kernels.py"), "w") as f:
            f.write("".join(TRIVIAL.format(i) for i in range(1, 7)))
        cache = os.path.join(folder, "cache")
        six = {name: run(cache, SIX.format(folder=folder)) for name in ("cold", "warm")}
    print("numba alone, six trivial kernels in a fresh process (CPU s; numba's own cache path):")
    for name, r in six.items():
        print(f"  {name}: import numba {r['numba']:.3f}; kernels "
              + " ".join(f"{t:.3f}" for t in r["kernels"]) + f"; sum {sum(r['kernels']):.3f}")


IMPORTS = {"numpy": "import numpy", "numba": "import numba", "tinyopt": "import tinyopt",
           "tinyopt, nn, optim": "import tinyopt; from tinyopt import nn, optim"}
TIMED = r"""
import time
t0, c0 = time.perf_counter(), time.process_time()
{}
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def imports(repeats: int = 7) -> None:
    """Wall and CPU time of each import in ``IMPORTS``, fresh processes, interleaved; medians."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in IMPORTS}
    for _ in range(repeats):
        for name, code in IMPORTS.items():
            out = subprocess.run([sys.executable, "-c", TIMED.format(code)], capture_output=True,
                                 text=True, check=True).stdout.split()
            times[name].append((float(out[0]), float(out[1])))
    print(f"{'import':>20} {'wall':>8} {'cpu':>8}   (medians of {repeats} fresh processes)")
    for name, ts in times.items():
        wall, cpu = (sorted(t[i] for t in ts)[len(ts) // 2] for i in (0, 1))
        print(f"{name:>20} {wall:>7.3f}s {cpu:>7.3f}s")
    print("goal: import tinyopt <= 0.35 s")


def main() -> None:
    if "--imports" in sys.argv:
        imports()
        return
    if "--floors" in sys.argv:
        floors()
        return
    with tempfile.TemporaryDirectory() as cache:
        cold = run(cache)
        warm = run(cache)
    print(f"{'':>6} {'import':>9} {'first step':>11} {'total':>9}   {'import cpu':>10} "
          f"{'step cpu':>9}   {'import tinyopt':>14} {'(cpu)':>7}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:>6} {r['import']:>8.3f}s {r['first_step']:>10.3f}s {r['total']:>8.3f}s   "
              f"{r['import_cpu']:>9.3f}s {r['first_step_cpu']:>8.3f}s   "
              f"{r['import_tinyopt']:>13.3f}s {r['import_tinyopt_cpu']:>6.3f}s")
    print("import: numpy, tinyopt, tinyopt.nn and tinyopt.optim; import tinyopt: numpy and "
          "tinyopt alone")
    print("goals: import tinyopt <= 0.35 s; first step <= 1.0 s cold, <= 0.25 s warm")


if __name__ == "__main__":
    main()
