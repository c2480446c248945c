"""Training-step time — forward, loss, backward, parameter update (SGD with momentum, and Adam) — of
the MLP 784-500-10 at batch 1, 32 and 256 and of the CNN (ggml's mnist-cnn) at batch 32 and 256:
tinyopt against the same model in PyTorch eager (when installed; Adam with ``fused=True``).

Each library runs in its own worker process and the two are timed interleaved (A B A B ...),
compared by medians.  Separate processes, and a pause before each timed block, matter: numba and
PyTorch each bring an OpenMP runtime whose threads keep spinning for a while after their work, and
on a small machine one library's spinning threads steal the cores the other one is timed on.

RES is a residual MLP of many small ops (six pre-norm blocks x + fc2(gelu(fc1(layer_norm(x)))),
about 200 graph nodes a step): per-step Python overhead.

Targets (issue 14): MLP batch 1 at least 2x faster than PyTorch (ratio <= 0.5) with either
optimizer, MLP batch 256 and the CNN at batch 32 and 256 ratio <= 0.8, RES no slower than PyTorch
eager (ratio <= 1).  Ratio = tinyopt time / PyTorch time.

    python benchmarks/bench_train.py [--repeats N] [--only MLP|CNN|RES] [--batch 256]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from harness import (libraries, pin_threads, seconds_per_step, start_workers, stop_workers,
                     timed_blocks)


def _residual(lib, d: int):
    """x + fc2(gelu(fc1(layer_norm(x)))): a pre-norm residual MLP block."""
    n = lib.nn

    class Block(n.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc1, self.fc2 = n.LayerNorm(d), n.Linear(d, 2 * d), n.Linear(2 * d, d)

        def forward(self, x):
            return x + self.fc2(n.functional.gelu(self.fc1(self.norm(x))))
    return Block()


def build(lib, kind: str):
    n = lib.nn
    if kind == "MLP":
        return n.Sequential(n.Flatten(), n.Linear(784, 500), n.ReLU(), n.Linear(500, 10))
    if kind == "RES":  # many small ops: about 200 nodes forward and backward
        return n.Sequential(n.Flatten(), n.Linear(784, 64), *[_residual(lib, 64) for _ in range(6)],
                            n.LayerNorm(64), n.Linear(64, 10))
    return n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(8, 16, 3, padding=1), n.ReLU(), n.MaxPool2d(2), n.Flatten(),
                        n.Linear(784, 10))


def _optimizer(lib, name: str, params, torch_fused: bool):
    if name == "sgd":
        return lib.optim.SGD(params, lr=0.01, momentum=0.9)
    return lib.optim.Adam(params, lr=1e-3, **({"fused": True} if torch_fused else {}))


def _stepper(lib_name: str, kind: str, batch: int, optimizer: str):
    """A function running one training step, on identical weights and data in both libraries."""
    import tinyopt as to
    to.manual_seed(0)
    ref = build(to, kind)
    rng = np.random.default_rng(batch)
    x = rng.random((batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    if lib_name == "tinyopt":
        model, F = ref, to.nn.functional
        opt = _optimizer(to, optimizer, model.parameters(), False)
    else:
        import torch
        model, F = build(torch, kind), torch.nn.functional
        with torch.no_grad():
            for pt, p in zip(model.parameters(), ref.parameters()):
                pt.copy_(torch.from_numpy(p.numpy()))
        opt = _optimizer(torch, optimizer, model.parameters(), True)
        x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def worker(conn, lib_name: str) -> None:
    """Serve commands: ("case", kind, batch, optimizer) builds a case; ("run", n) times n
    steps."""
    step = None
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            step = _stepper(lib_name, *cmd[1:])
            conn.send(step())  # the first loss, to check both libraries compute the same thing
            step()
        elif cmd[0] == "run":
            conn.send(seconds_per_step(step, cmd[1]))
        else:
            return


CASES = [(kind, batch, opt, target) for kind, batch, target in
         (("MLP", 1, 0.5), ("MLP", 32, None), ("MLP", 256, 0.8), ("CNN", 32, 0.8),
          ("CNN", 256, 0.8), ("RES", 1, 1.0), ("RES", 32, 1.0)) for opt in ("sgd", "adam")]


def _case(pipes, kind: str, batch: int, optimizer: str, target, args) -> None:
    """Time one case in every worker, interleaved, and print its line."""
    for c in pipes:
        c.send(("case", kind, batch, optimizer))
    losses = [c.recv() for c in pipes]
    if len(losses) == 2:
        assert abs(losses[0] - losses[1]) < 1e-3 * max(1.0, abs(losses[1])), losses
    inner = max(1, 1024 // batch) if kind != "CNN" else max(1, 512 // batch)
    times = timed_blocks(pipes, ("run", inner), args.repeats, args.settle)
    med = [statistics.median(t) for t in times]
    label = f"{kind} b={batch} {optimizer}"
    if len(med) == 2:
        goal = f"<= {target}" if target else ""
        print(f"{label:>17} {med[0] * 1e3:>9.3f}ms {med[1] * 1e3:>9.3f}ms "
              f"{med[0] / med[1]:>6.2f}  {goal}", flush=True)
    else:
        print(f"{label:>17} {med[0] * 1e3:>9.3f}ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--settle", type=float, default=0.3,
                    help="seconds to pause before each timed block (idle threads go to sleep)")
    ap.add_argument("--only", choices=["MLP", "CNN", "RES"], help="run one model's cases")
    ap.add_argument("--batch", type=int, help="run one batch size's cases")
    ap.add_argument("--threads", type=int,
                    help="threads for both libraries (torch, BLAS, numba); default: each "
                         "library's own (on a machine busy with other work, 1 gives steadier "
                         "ratios)")
    args = ap.parse_args()
    pin_threads(args.threads)
    pipes, procs = start_workers(worker, libraries())
    print(f"{'case':>17} {'tinyopt':>11} {'torch':>11} {'ratio':>6}  target", flush=True)
    for kind, batch, optimizer, target in CASES:
        if args.only in (None, kind) and args.batch in (None, batch):
            _case(pipes, kind, batch, optimizer, target, args)
    stop_workers(pipes, procs)


if __name__ == "__main__":
    main()
