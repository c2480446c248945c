"""Start-up cost: ``import tinyopt``, and the time to the first finished training step of the MLP
784-500-10 (forward, cross-entropy, backward, Adam step) in a fresh process, with an empty numba
cache (every kernel compiled) and with a warm one (kernels loaded from the cache).

Goals: import well under 0.5 s; first step under 10 s cold and under 1 s warm.

    python benchmarks/bench_startup.py
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
import numpy as np
import tinyopt as to
from tinyopt import nn, optim
t_import = time.perf_counter() - t0
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
opt = optim.Adam(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
x = rng.random((32, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, 32)
t1 = time.perf_counter()
opt.zero_grad()
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()
loss.item()
t_step = time.perf_counter() - t1
print(json.dumps({"import": t_import, "first_step": t_step, "total": time.perf_counter() - t0}))
"""


def run(cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        cold = run(cache)
        warm = run(cache)
    print(f"{'':>6} {'import':>9} {'first step':>11} {'total':>9}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:>6} {r['import']:>8.3f}s {r['first_step']:>10.3f}s {r['total']:>8.3f}s")
    print("goals: import < 0.5 s; first step < 10 s cold, < 1 s warm")


if __name__ == "__main__":
    main()
