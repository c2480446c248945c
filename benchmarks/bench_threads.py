"""The cost of running plans from several threads: the per-step time of the MLP 784-500-10 training
loop at batch 1 (forward, loss, backward, SGD-momentum step), where the engine's per-run overhead
weighs most, and the throughput of two threads each training its own model of that architecture
(one shared plan, one arena per run in flight).

With ``--against SRC`` the batch-1 loop is also timed with the tinyopt found in the source tree
``SRC`` (e.g. a checkout of an older commit), each tree in its own worker process, timed
interleaved (A B A B ...) and compared by medians, so the ratio holds on a busy machine.

    python benchmarks/bench_threads.py [--repeats N] [--against /path/to/other/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

WORKER = r"""
import sys, time
import numpy as np
import tinyopt as to

def stepper(batch, seed):
    to.manual_seed(seed)
    n = to.nn
    model = n.Sequential(n.Linear(784, 500), n.ReLU(), n.Linear(500, 10))
    opt = to.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(seed)
    x = rng.random((batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    def step():
        opt.zero_grad()
        loss = n.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step

step = stepper(1, 0)
for _ in range(200):
    step()
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    print((time.perf_counter() - t0) / n, flush=True)
"""


def _worker(src: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def _time(p: subprocess.Popen, n: int) -> float:
    p.stdin.write(f"{n}\n")
    p.stdin.flush()
    return float(p.stdout.readline())


def per_step(trees: list[str], repeats: int, n: int = 500) -> list[float]:
    """Median seconds per batch-1 training step in each source tree, timed interleaved."""
    workers = [_worker(src) for src in trees]
    times: list[list[float]] = [[] for _ in trees]
    try:
        for _ in range(repeats):
            for p, t in zip(workers, times):
                t.append(_time(p, n))
    finally:
        for p in workers:
            p.stdin.close()
            p.wait()
    return [statistics.median(t) for t in times]


def threaded(batch: int, steps: int, n_threads: int) -> float:
    """Seconds per step of each of ``n_threads`` threads training their own model at once."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    ns: dict = {}
    exec(WORKER.split("step = stepper")[0], ns)
    steppers = [ns["stepper"](batch, k) for k in range(n_threads)]
    for s in steppers:
        s()
    barrier = threading.Barrier(n_threads)

    def run(s):
        barrier.wait()
        for _ in range(steps):
            s()
    threads = [threading.Thread(target=run, args=(s,)) for s in steppers]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--against", help="another source tree to time the batch-1 loop with")
    args = ap.parse_args()
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src"))
    trees = [here] + ([os.path.abspath(args.against)] if args.against else [])
    t = per_step(trees, args.repeats)
    print(f"MLP batch-1 training step, this tree: {t[0] * 1e6:.1f} us")
    if args.against:
        print(f"                  {args.against}: {t[1] * 1e6:.1f} us "
              f"(this / that = {t[0] / t[1]:.3f})")
    print(f"{'batch':>6} {'1 thread':>10} {'2 threads':>10}  (seconds per step of each thread; "
          f"throughput gain = 2 * 1-thread / 2-thread)")
    for batch in (1, 32, 256):
        steps = max(20, 4000 // batch)
        one = statistics.median(threaded(batch, steps, 1) for _ in range(3))
        two = statistics.median(threaded(batch, steps, 2) for _ in range(3))
        print(f"{batch:>6} {one * 1e6:>8.0f}us {two * 1e6:>8.0f}us  gain {2 * one / two:.2f}")


if __name__ == "__main__":
    np.random.seed(0)
    main()
