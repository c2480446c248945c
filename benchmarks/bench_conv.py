"""Forward + backward time of the issue-3 CNN (conv 3x3 1->8 pad 1, ReLU, maxpool 2, conv 3x3 8->16
pad 1, ReLU, maxpool 2, linear 784->10, cross-entropy) at batch 256 against PyTorch when installed.
Runs are interleaved and the ratio of medians is reported, since the machine is shared and noisy.

``--shapes`` instead times one 3x3 convolution's forward + backward over a grid of channel counts
and sizes both ways tinyopt can run it -- the direct kernels and im2col + GEMM -- interleaved:
the measurement behind ``engine/ops/conv.py: _direct``.

    python benchmarks/bench_conv.py [--reps 30] [--batch 256]
    python benchmarks/bench_conv.py --shapes [--reps 9]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tinyopt as to
from tinyopt.engine.ops import conv2d, cross_entropy, linear, max_pool2d, relu


def _params(rng):
    shapes = [(8, 1, 3, 3), (8,), (16, 8, 3, 3), (16,), (10, 784), (10,)]
    return [(rng.standard_normal(s) * 0.1).astype(np.float32) for s in shapes]


def tinyopt_step(ps, x, y):
    w1, b1, w2, b2, w3, b3 = ps
    for p in ps:
        p.grad = None
    h = max_pool2d(relu(conv2d(x, w1, b1, padding=1)), 2)
    h = max_pool2d(relu(conv2d(h, w2, b2, padding=1)), 2)
    loss = cross_entropy(linear(h.reshape(x.shape[0], -1), w3, b3), y)
    loss.backward()
    return loss


def torch_step(torch, ps, x, y):
    F = torch.nn.functional
    w1, b1, w2, b2, w3, b3 = ps
    for p in ps:
        p.grad = None
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1)), 2)
    loss = F.cross_entropy(F.linear(h.reshape(x.shape[0], -1), w3, b3), y)
    loss.backward()
    return loss


SHAPES = [  # (N, C, OC, H)
    (32, 1, 8, 28), (32, 1, 32, 28), (32, 3, 16, 32), (32, 3, 64, 32), (32, 8, 16, 14),
    (32, 16, 32, 14), (32, 32, 32, 14), (32, 32, 64, 8), (32, 64, 64, 8), (32, 64, 128, 8),
    (32, 128, 128, 4), (8, 16, 16, 56), (8, 64, 64, 28),
]


def shapes(reps: int) -> None:
    """Direct kernels against im2col + GEMM, one conv layer (3x3, padding 1) at a time."""
    from tinyopt.engine.ops import conv as conv_ops
    choose = conv_ops._direct
    rng = np.random.default_rng(0)
    print(f"{'N':>3} {'C':>4} {'OC':>4} {'H':>3} {'direct':>9} {'gemm':>9} {'d/g':>5}  chosen")
    for N, C, OC, H in SHAPES:
        x = rng.standard_normal((N, C, H, H)).astype(np.float32)
        w = to.Parameter((rng.standard_normal((OC, C, 3, 3)) * 0.1).astype(np.float32))
        b = to.Parameter(np.zeros(OC, np.float32))
        g = rng.standard_normal((N, OC, H, H)).astype(np.float32)
        xin = to.Parameter(x)

        def run(direct: bool) -> float:
            conv_ops._direct = lambda *a: direct
            try:
                for p in (xin, w, b):
                    p.grad = None
                t0 = time.perf_counter()
                (conv2d(xin, w, b, padding=1) * g).sum().backward()
                return time.perf_counter() - t0
            finally:
                conv_ops._direct = choose
        for d in (True, False, True, False):
            run(d)  # compile and warm up
        times = {True: [], False: []}
        for _ in range(reps):
            for d in (True, False):
                times[d].append(run(d))
        td, tg = (float(np.median(times[d])) * 1e3 for d in (True, False))
        pick = "direct" if choose(C, OC, 3, 3, (1, 1), 1) else "gemm"
        print(f"{N:>3} {C:>4} {OC:>4} {H:>3} {td:>7.2f}ms {tg:>7.2f}ms {td / tg:>5.2f}  {pick}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--shapes", action="store_true",
                    help="direct kernels against im2col + GEMM over a grid of conv shapes")
    args = ap.parse_args()
    if args.shapes:
        shapes(args.reps)
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    arrays = _params(rng)
    ps = [to.Parameter(a.copy()) for a in arrays]
    runs = {"tinyopt": lambda: tinyopt_step(ps, x, y)}
    try:
        import torch
        tps = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
        tx, ty = torch.tensor(x), torch.tensor(y)
        runs["torch"] = lambda: torch_step(torch, tps, tx, ty)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    except ImportError:
        print("torch not installed: tinyopt times only")
    times = {k: [] for k in runs}
    for f in runs.values():
        for _ in range(3):
            f()   # compile / warm up
    for _ in range(args.reps):
        for k, f in runs.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    for k, v in med.items():
        print(f"CNN fwd+bwd batch {args.batch}: {k:8s} median {v:7.2f} ms "
              f"(min {min(times[k]) * 1e3:.2f})")
    if "torch" in med:
        print(f"ratio tinyopt / torch (medians): {med['tinyopt'] / med['torch']:.2f}")


if __name__ == "__main__":
    main()
