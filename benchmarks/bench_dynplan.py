"""Plans over changing lengths (issue 14): a loop whose batch or sequence length changes every
step, against the same loop at one fixed length, with plans of one structure sharing their runs
(one arena grown to the largest length, one gradient scratch) and without (``TINYOPT_PLAN_SHARING=0``:
every length a plan that holds memory of its own, as before).

Cases, each trained with Adam, each row in a fresh process (peak RSS is ``resource`` maxrss):

- ``PG``: a policy-gradient loop (REINFORCE) over episodes of random lengths 10-199, policy MLP
  4-H-H-2 (``--hidden``, default 512), loss ``-(log_softmax(policy(obs))[t, a_t] * R_t).mean()``;
  ``fixed`` runs every episode at length 105.
- ``LSTM``: a language-model-like step, LSTM(32, H/4) + Linear over a batch of 8 sequences of
  random lengths 5-84 (``fixed``: 45), cross-entropy over every position.

Columns: plans compiled (cache misses), plan structures they share, time per step over the whole
loop (compiles included; wall and process CPU, the steadier one on a shared machine), bytes the
plan cache holds at the end, peak RSS of the process.

    python benchmarks/bench_dynplan.py [--steps 150] [--hidden 512]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
case, lengths, steps, hidden = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import numpy as np
import tinyopt as to
from tinyopt import nn
F = nn.functional
rng = np.random.default_rng(0)
to.manual_seed(0)
if case == "PG":
    model = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 2))
    lo, hi = 10, 200

    def step(t):
        obs = rng.standard_normal((t, 4)).astype(np.float32)
        act = rng.integers(0, 2, t)
        ret = to.tensor(rng.standard_normal(t).astype(np.float32))
        logp = F.log_softmax(model(obs), 1)
        return -(logp[np.arange(t), act] * ret).mean()
else:
    lstm, head = nn.LSTM(32, hidden // 4, batch_first=True), nn.Linear(hidden // 4, 50)
    model = nn.ModuleList([lstm, head])
    lo, hi = 5, 85

    def step(t):
        x = rng.standard_normal((8, t, 32)).astype(np.float32)
        y = rng.integers(0, 50, 8 * t)
        return F.cross_entropy(head(lstm(x)[0]).reshape(-1, 50), y)
opt = to.optim.Adam(model.parameters(), lr=1e-3)

def train(t):
    opt.zero_grad()
    loss = step(t)
    loss.backward()
    opt.step()
    return loss.item()

for t in (lo, lo + 1):  # numba's kernels loaded before the clock starts
    train(t)
to.engine.cache_clear()
sizes = rng.integers(lo, hi, steps) if lengths == "varying" else [(lo + hi) // 2] * steps
t0, c0 = time.perf_counter(), time.process_time()
for t in sizes:
    train(int(t))
ms = (time.perf_counter() - t0) / steps * 1e3
cpu_ms = (time.process_time() - c0) / steps * 1e3
info = to.engine.cache_info()
print(json.dumps({"plans": info.misses, "structures": info.structures, "ms": ms, "cpu_ms": cpu_ms,
                  "cache_mb": info.nbytes / 2**20,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(case: str, lengths: str, share: bool, steps: int, hidden: int) -> dict:
    env = dict(os.environ, TINYOPT_PLAN_SHARING="1" if share else "0")
    out = subprocess.run([sys.executable, "-c", CHILD, case, lengths, str(steps), str(hidden)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--hidden", type=int, default=512)
    args = ap.parse_args()
    print(f"{'case':>5} {'lengths':>8} {'sharing':>7} {'plans':>6} {'structs':>7} "
          f"{'ms/step':>8} {'CPU ms':>7} {'cache MB':>9} {'peak RSS MB':>12}", flush=True)
    for case in ("PG", "LSTM"):
        for lengths, share in (("fixed", True), ("varying", True), ("varying", False)):
            r = measure(case, lengths, share, args.steps, args.hidden)
            print(f"{case:>5} {lengths:>8} {'on' if share else 'off':>7} {r['plans']:>6} "
                  f"{r['structures']:>7} {r['ms']:>8.2f} {r['cpu_ms']:>7.2f} {r['cache_mb']:>9.1f} "
                  f"{r['rss_mb']:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
