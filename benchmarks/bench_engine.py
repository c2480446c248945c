"""Forward + backward of an MLP 784-500-10 with cross-entropy: tinyopt against the same math
hand-written in numpy, in the same run.

Prints, per batch size, the median time of each and the ratio tinyopt / numpy (targets: <= 1.1 at
batch 256, <= 2.0 at batch 1).  Timings are interleaved (A B A B ...) so machine noise hits both.

    python benchmarks/bench_engine.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinyopt as to
from tinyopt.engine.ops import cross_entropy, linear, relu


def make_params(rng):
    w1 = rng.standard_normal((500, 784)).astype(np.float32) * 0.05
    w2 = rng.standard_normal((10, 500)).astype(np.float32) * 0.05
    return w1, np.zeros(500, np.float32), w2, np.zeros(10, np.float32)


def numpy_step(params, x, y):
    """Loss and gradients of the MLP, by hand (what tinyopt's plan computes)."""
    w1, b1, w2, b2 = params
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    o = a @ w2.T + b2
    m = o.max(1, keepdims=True)
    e = np.exp(o - m)
    s = e.sum(1, keepdims=True)
    n = len(y)
    loss = float(np.mean(np.log(s[:, 0]) + m[:, 0] - o[np.arange(n), y]))
    g = e / s
    g[np.arange(n), y] -= 1
    g /= n
    gw2, gb2 = g.T @ a, g.sum(0)
    ga = g @ w2
    ga[h <= 0] = 0
    gw1, gb1 = ga.T @ x, ga.sum(0)
    return loss, (gw1, gb1, gw2, gb2)


def tinyopt_step(params, x, y):
    for p in params:
        p.grad = None
    w1, b1, w2, b2 = params
    loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y)
    loss.backward()
    return loss.item()


def bench(batch: int, repeats: int, rng) -> tuple[float, float]:
    raw = make_params(rng)
    params = [to.Parameter(p.copy()) for p in raw]
    x = rng.random((batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    ref_loss, ref_grads = numpy_step(raw, x, y)
    loss = tinyopt_step(params, x, y)
    assert abs(loss - ref_loss) < 1e-4, (loss, ref_loss)
    for p, g in zip(params, ref_grads):
        np.testing.assert_allclose(p.grad, g, rtol=1e-3, atol=1e-5)
    inner = max(1, 2000 // batch)
    t_to, t_np = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            tinyopt_step(params, x, y)
        t1 = time.perf_counter()
        for _ in range(inner):
            numpy_step(raw, x, y)
        t2 = time.perf_counter()
        t_to.append((t1 - t0) / inner)
        t_np.append((t2 - t1) / inner)
    return statistics.median(t_to), statistics.median(t_np)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'batch':>6} {'tinyopt':>12} {'numpy':>12} {'ratio':>7}  target")
    for batch, target in ((1, 2.0), (32, None), (256, 1.1)):
        t, n = bench(batch, args.repeats, rng)
        goal = f"<= {target}" if target else ""
        print(f"{batch:>6} {t * 1e6:>10.1f}us {n * 1e6:>10.1f}us {t / n:>7.2f}  {goal}")
    print("plan cache:", to.engine.cache_info())


if __name__ == "__main__":
    main()
