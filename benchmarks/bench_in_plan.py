"""The optimizer step inside the backward plan against the separate step (tinyopt alone).

A training step at batch 1 -- ``zero_grad``, forward, cross-entropy, then either
``loss.backward(); opt.step()`` or ``opt.fuse_with_backward(loss)`` (the same bits: checked at
the end) -- for SGD with momentum and Adam, on two MLPs:

- 784-500-10 (the issue's MLP; 397k parameters, the state in L2/L3): no parameter reaches
  ``optim.in_plan.OUTER_MIN``, so ``fuse_with_backward`` is the separate step plus one check;
- 784-2048-1024-10 (3.7M parameters, the state in DRAM): its two large weights step in their
  gradients' outer-product kernels.

Two models per case, stepped in alternating blocks (the order swapped every block) in this one
process; per-step thread CPU time, medians and minimums over the blocks.  Ratio = in-plan /
separate.

    python benchmarks/bench_in_plan.py [--blocks N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinyopt as to

F = to.nn.functional


def _model(widths):
    n = to.nn
    layers = [n.Flatten()]
    for a, b in zip(widths, widths[1:]):
        layers += [n.Linear(a, b), n.ReLU()]
    return n.Sequential(*layers[:-1])


def _case(widths, optimizer: str, blocks: int) -> str:
    x = np.random.default_rng(1).random((1, widths[0]), dtype=np.float32)
    y = np.array([3])
    runs = []
    for in_plan in (False, True):
        to.manual_seed(0)
        model = _model(widths)
        opt = (to.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if optimizer == "sgd"
               else to.optim.Adam(model.parameters(), lr=1e-3))

        def step(model=model, opt=opt, in_plan=in_plan):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if in_plan:
                opt.fuse_with_backward(loss)
            else:
                loss.backward()
                opt.step()
        runs.append((model, step))
    n_params = sum(p.numel() for p in runs[0][0].parameters())
    steps = max(1, int(2e7 // n_params))
    for _, step in runs:
        for _ in range(3):
            step()
    times: list[list[float]] = [[], []]
    for b in range(blocks):
        for k in ((0, 1) if b % 2 == 0 else (1, 0)):
            t0 = time.thread_time()
            for _ in range(steps):
                runs[k][1]()
            times[k].append((time.thread_time() - t0) / steps)
    for pa, pb in zip(runs[0][0].parameters(), runs[1][0].parameters()):
        assert np.array_equal(pa.numpy(), pb.numpy()), "the in-plan step changed the result"
    med = [statistics.median(t) for t in times]
    low = [min(t) for t in times]
    label = f"{'-'.join(map(str, widths))} {optimizer}"
    return (f"{label:>22} {med[0] * 1e6:>10.0f} {med[1] * 1e6:>10.0f} {med[1] / med[0]:>7.3f}"
            f" {low[1] / low[0]:>7.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=20)
    args = ap.parse_args()
    print(f"{'case (batch 1)':>22} {'separate':>10} {'in-plan':>10} {'ratio':>7} {'(mins)':>7}"
          "   us a step, thread CPU time", flush=True)
    for widths in ((784, 500, 10), (784, 2048, 1024, 10)):
        for optimizer in ("sgd", "adam"):
            print(_case(widths, optimizer, args.blocks), flush=True)


if __name__ == "__main__":
    main()
