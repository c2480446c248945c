"""Start-up cost: ``import tinyopt``, and the time to the first finished training step in a
fresh process, with an empty numba cache (every kernel compiled) and with a warm one (kernels
loaded from the cache), for three models:

- ``mlp``: the README's MLP 784-500-10 (forward, cross-entropy, backward, Adam step), batch 32;
- ``lstm``, ``gpt``: ``bench_seq.py``'s word-level LSTM language model (2 layers, 200 wide,
  vocabulary 5000) and small GPT (2 pre-norm layers, 128 wide, block 64), Adam.

Goals (issue 27): ``import tinyopt`` <= 0.35 s; first step of the MLP <= 1.5 s cold and <= 0.2 s
warm, of the LSTM and the GPT <= 2.5 s cold.  The CPU columns (the child's process time, plus
that of the helper processes compiling a kernel ahead, ``kernels/compile_ahead.py``) say the
same on a quiet machine and stay readable on a busy one, where the wall times grow with the
other load (the helper compiles the optimizer's walker and the kernels the layers declare, and
the step waits only for those it reaches; its CPU is read once it has ended).  ``--ahead both``
runs each cold step with and without compiling ahead (rows ``cold`` and ``cold-``,
``TINYOPT_COMPILE_AHEAD=0``), one after the other; tinyopt compiles ahead only where a core is
free (``TINYOPT_COMPILE_AHEAD=1`` in the environment: always).

    python benchmarks/bench_startup.py [--models mlp,lstm,gpt] [--repeats 1] [--ahead both]
    python benchmarks/bench_startup.py --imports   # import times only: medians of 7 processes
    python benchmarks/bench_startup.py --floors [--models mlp]  # where the first step's time goes
    python benchmarks/bench_startup.py --timeline [--models gpt]  # who compiles what, and when

``--floors`` prints, cold and warm (nothing compiled ahead): each numba kernel the first step
compiles or loads (C callbacks marked ``cfunc:``), with its CPU time and, for a compile, the part
numba's own timer puts in LLVM (optimisation and machine code; the rest is numba's typing and
lowering, in Python), and numba's fixed cost on six trivial kernels (``out[i] = f(a[i])``, the
options tinyopt uses) in a fresh process: what any first step of six distinct kernels pays.

``--timeline`` prints a cold first step compiling ahead (``TINYOPT_COMPILE_AHEAD=1``) as a
timeline: each kernel compiled or loaded, by this process (``main``) or the helper, with its
start and end from the step's start and its own CPU (a compile nested in another, as one the
step runs while it waits for the helper's, is a row of its own), then each process's compile
CPU, the time the step waited for the helper and when the helper's last compile ended.  The
critical path is there: a helper that ends early leaves the main process compiling alone (move
work to the helper), a step that waits is held by the helper.  On a loaded machine the times
stretch; the order and the CPU columns stay readable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
def helpers_cpu():  # of the processes that compiled kernels ahead (``kernels/compile_ahead.py``)
    from tinyopt.kernels import compile_ahead
    compile_ahead.finish()  # (after the step: its CPU is counted once it has ended)
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
t0 = time.perf_counter()
c0 = time.process_time()
import numpy as np
import tinyopt as to
t_tinyopt = time.perf_counter() - t0
c_tinyopt = time.process_time() - c0
from tinyopt import nn, optim
t_import = time.perf_counter() - t0
c_import = time.process_time() - c0
{build}
t1 = time.perf_counter()
c1 = time.process_time()
step()
t_step = time.perf_counter() - t1
c_step = time.process_time() - c1
print(json.dumps({{"import": t_import, "first_step": t_step, "total": time.perf_counter() - t0,
                  "import_cpu": c_import, "first_step_cpu": c_step + helpers_cpu(),
                  "build": t1 - t0 - t_import, "helpers_cpu": helpers_cpu(),
                  "import_tinyopt": t_tinyopt, "import_tinyopt_cpu": c_tinyopt}}))
"""

# the model, optimizer and batch of each case, built before the clock starts: ``step()``
MLP = r"""
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
opt = optim.Adam(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
x = rng.random((32, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, 32)

def step():
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
"""
SEQ = r"""
sys.path.insert(0, {here!r})
import bench_seq
step = bench_seq.stepper("tinyopt", {kind!r})
"""

MODELS = ("mlp", "lstm", "gpt")


def child(model: str) -> str:
    """The code of a fresh process that times ``model``'s first training step."""
    build = MLP if model == "mlp" else SEQ.format(
        here=os.path.dirname(os.path.abspath(__file__)), kind=model)
    return CHILD.format(build=build)


def run(cache_dir: str, code: str, ahead: bool = True) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    if not ahead:
        env["TINYOPT_COMPILE_AHEAD"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# the first step's kernels: CPU of each dispatcher or C callback compile or cache load (nested
# ones indented)
KERNELS = r"""
import json, time
from numba.core import ccallback, dispatcher
rows, depth = [], [0]
def timed(name, compile, hit, llvm):
    row = len(rows); rows.append(None); depth[0] += 1
    c = time.thread_time()
    try:
        return compile()
    finally:
        depth[0] -= 1
        rows[row] = ("  " * depth[0] + name, time.thread_time() - c, hit(), llvm())
compile = dispatcher.Dispatcher.compile
def timed_dispatcher(self, sig):
    if self.overloads.get(tuple(sig)) is not None:
        return compile(self, sig)
    hits = sum(self._cache_hits.values())
    def llvm():  # numba's own timer of the time spent in LLVM (optimisation and code generation)
        try:
            return self.overloads[tuple(sig)].metadata["timers"]["llvm_lock"]
        except (KeyError, TypeError, AttributeError):
            return 0.0
    return timed(self.py_func.__qualname__.split(".")[-1], lambda: compile(self, sig),
                 lambda: sum(self._cache_hits.values()) > hits, llvm)
dispatcher.Dispatcher.compile = timed_dispatcher
compile_c = ccallback.CFunc.compile
def timed_cfunc(self):
    return timed("cfunc:" + self._pyfunc.__qualname__.split(".")[-1], lambda: compile_c(self),
                 lambda: self._cache_hits > 0, lambda: 0.0)
ccallback.CFunc.compile = timed_cfunc
"""


def with_kernels(code: str) -> str:
    """``code`` with the kernel table above, printed with its figures."""
    return KERNELS + code.replace('print(json.dumps({', 'print(json.dumps({"kernels": rows, ')


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


def floors(models: list[str]) -> None:
    """The per-kernel table and numba's fixed cost (see the module docstring)."""
    for model in models:
        with tempfile.TemporaryDirectory() as cache:
            steps = {name: run(cache, with_kernels(child(model)), ahead=False)
                     for name in ("cold", "warm")}
        for name, r in steps.items():
            print(f"{model} {name} first step: {r['first_step']:.3f} s wall, "
                  f"{r['first_step_cpu']:.3f} s CPU; numba kernels (CPU s, compile or cache load; "
                  f"of a compile, the seconds in LLVM):")
            for label, cpu, hit, llvm in r["kernels"]:
                print(f"  {label:<38} {cpu:6.3f}  {'load' if hit else 'compile'}"
                      + ("" if hit or label.strip().startswith("cfunc:")
                         else f"  LLVM {llvm:6.3f}"))
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


# ``--timeline``: loaded by every process of the run, the helper compiling ahead included (its
# folder first on PYTHONPATH), this logs each top-level kernel compile or cache load (name, start,
# end, CPU s, loaded) to <folder>/<pid>.log; the clock (perf_counter) is the system's monotonic
# one, the same in both processes
TIMELINE_SITE = r"""
import os, time
from numba.core import ccallback, dispatcher
_logs = {}
def _log():  # (this process's: a helper forked from the timed one has a file of its own)
    pid = os.getpid()
    if pid not in _logs:
        _logs[pid] = open(os.path.join(os.environ["TINYOPT_BENCH_TIMELINE"], f"{pid}.log"), "a",
                          buffering=1)
    return _logs[pid]
_inner = []  # (the CPU of the compiles nested in each open one)
def _timed(name, compile, hits):
    # each compile or load with its own CPU, nested ones on rows of their own: a kernel the step
    # compiles while it waits for the helper's (``compile_ahead._wait_working``) is its own row
    t0, c0, h0 = time.perf_counter(), time.thread_time(), hits()
    _inner.append(0.0)
    try:
        return compile()
    finally:
        cpu = time.thread_time() - c0
        inner = _inner.pop()
        if _inner:
            _inner[-1] += cpu
        _log().write(f"{name}\t{t0}\t{time.perf_counter()}\t{cpu - inner}\t"
                     f"{int(hits() > h0)}\n")
_compile = dispatcher.Dispatcher.compile
def _dispatcher_compile(self, sig):
    if self.overloads.get(tuple(sig)) is not None:
        return _compile(self, sig)
    return _timed(self.py_func.__qualname__.split(".")[-1], lambda: _compile(self, sig),
                  lambda: sum(self._cache_hits.values()))
dispatcher.Dispatcher.compile = _dispatcher_compile
_compile_c = ccallback.CFunc.compile
ccallback.CFunc.compile = lambda self: _timed(
    "cfunc:" + self._pyfunc.__qualname__.split(".")[-1], lambda: _compile_c(self),
    lambda: self._cache_hits)
"""
# (in the timed process, before its step: the step's start and end, and its waits for the helper)
TIMELINE_STEP = r"""
import os as _os
from tinyopt.kernels import compile_ahead as _ahead
_tl = open(_os.path.join(_os.environ["TINYOPT_BENCH_TIMELINE"], f"{_os.getpid()}.log"), "a",
           buffering=1)
_wait_for = _ahead._Helper.wait_for
def _timed_wait(self, entry):
    t0 = time.perf_counter()
    try:
        return _wait_for(self, entry)
    finally:
        _tl.write(f"(waits for the helper)\t{t0}\t{time.perf_counter()}\t0\t0\n")
_ahead._Helper.wait_for = _timed_wait
_step = step
def step():
    t0 = time.perf_counter()
    _step()
    _tl.write(f"(step)\t{t0}\t{time.perf_counter()}\t0\t0\n")
"""


def probe(hit: bool, cpu: float) -> bool:
    """Whether a logged compile is none: a declaration's look into the cache, or the helper
    finding a kernel the step has claimed."""
    return not hit and cpu < 0.003


def timeline(models: list[str]) -> None:
    """A cold first step compiling ahead (``TINYOPT_COMPILE_AHEAD=1``): each process's kernel
    compiles and cache loads in time order, from the step's start (see the module docstring)."""
    for model in models:
        with tempfile.TemporaryDirectory() as folder:
            site, logs = os.path.join(folder, "site"), os.path.join(folder, "logs")
            os.makedirs(site)
            os.makedirs(logs)
            with open(os.path.join(site, "sitecustomize.py"), "w") as f:
                f.write(TIMELINE_SITE)
            code = child(model).replace("t1 = time.perf_counter()",
                                        TIMELINE_STEP + "t1 = time.perf_counter()", 1)
            env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(folder, "cache"),
                       TINYOPT_COMPILE_AHEAD="1", TINYOPT_BENCH_TIMELINE=logs,
                       PYTHONPATH=os.pathsep.join([site, *sys.path]))
            subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True)
            rows = []
            for name in os.listdir(logs):
                with open(os.path.join(logs, name)) as f:
                    for line in f:
                        kernel, t0, t1, cpu, hit = line.rstrip("\n").split("\t")
                        rows.append((name, kernel, float(t0), float(t1), float(cpu), hit == "1"))
        [(main, _, start, end, _, _)] = [r for r in rows if r[1] == "(step)"]
        print(f"{model}: cold first step {end - start:.3f} s wall, compiling ahead; from its start "
              f"(s): process, kernel, start, end, CPU s, compile or cache load")
        cpu = {"main": [0.0, 0.0], "helper": [0.0, 0.0]}
        for pid, kernel, t0, t1, c, hit in sorted(rows, key=lambda r: r[2]):
            if kernel == "(step)":
                continue
            who = "main" if pid == main else "helper"
            if not (kernel.startswith("(") or probe(hit, c)):
                print(f"  {who:<6} {kernel:<34} {t0 - start:7.3f} {t1 - start:7.3f} {c:6.3f}  "
                      + ("load" if hit else "compile"))
            if not (hit or kernel.startswith("(")):
                cpu[who][0] += c
            if kernel.startswith("(waits") and pid == main and start <= t0 <= end:
                cpu["main"][1] += t1 - t0
        last = max((r[3] for r in rows if r[0] != main and not r[1].startswith("(")
                    and not probe(r[5], r[4])), default=start)
        print(f"  compiles: main {cpu['main'][0]:.3f} s CPU, helper {cpu['helper'][0]:.3f} s CPU; "
              f"main waited for the helper {cpu['main'][1]:.3f} s; the helper's last compile ended "
              f"{last - start:.3f} s into the step ({end - last:.3f} s before its end)")


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=1, help="fresh caches per model")
    ap.add_argument("--imports", action="store_true")
    ap.add_argument("--floors", action="store_true")
    ap.add_argument("--timeline", action="store_true")
    ap.add_argument("--ahead", choices=("on", "off", "both"), default="on",
                    help="compile the optimizer's kernel ahead in a helper process")
    args = ap.parse_args()
    models = args.models.split(",")
    unknown = set(models) - set(MODELS)
    if unknown:
        ap.error(f"unknown model {sorted(unknown)[0]!r}; expected some of {', '.join(MODELS)}")
    if args.imports:
        imports()
        return
    if args.floors:
        floors(models)
        return
    if args.timeline:
        timeline(models)
        return
    print(f"{'':>10} {'import':>9} {'build':>7} {'first step':>11} {'total':>9}   "
          f"{'import cpu':>10} {'step cpu':>9} {'(helper)':>8}   {'import tinyopt':>14} "
          f"{'(cpu)':>7}")
    for model in models:
        for _ in range(args.repeats):
            rows = []
            if args.ahead != "on":
                with tempfile.TemporaryDirectory() as cache:
                    rows.append(("cold-", run(cache, child(model), ahead=False)))
            if args.ahead != "off":
                with tempfile.TemporaryDirectory() as cache:
                    rows.append(("cold", run(cache, child(model))))
                    rows.append(("warm", run(cache, child(model))))
            for name, r in rows:
                print(f"{model:>4} {name:>5} {r['import']:>8.3f}s {r['build']:>6.3f}s "
                      f"{r['first_step']:>10.3f}s {r['total']:>8.3f}s   {r['import_cpu']:>9.3f}s "
                      f"{r['first_step_cpu']:>8.3f}s {r['helpers_cpu']:>7.3f}s   "
                      f"{r['import_tinyopt']:>13.3f}s {r['import_tinyopt_cpu']:>6.3f}s",
                      flush=True)
    print("import: numpy, tinyopt, tinyopt.nn and tinyopt.optim; build: the model, optimizer and "
          "batch (a kernel compiled ahead starts there); step cpu: the first step's CPU and the "
          "helpers' (a kernel compiled ahead in another process, all of theirs); import tinyopt: "
          "numpy and tinyopt alone")
    print("goals: import tinyopt <= 0.35 s; first step of the mlp <= 1.5 s cold, <= 0.2 s warm; "
          "of the lstm and gpt <= 2.5 s cold")


if __name__ == "__main__":
    main()
