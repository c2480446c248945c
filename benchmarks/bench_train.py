"""Training-step time — forward, loss, backward, parameter update (SGD with momentum) — of the MLP
784-500-10 at batch 1, 32 and 256 and of the CNN (ggml's mnist-cnn) at batch 256: tinyopt against
the same model in PyTorch eager (when installed).

Each library runs in its own worker process and the two are timed interleaved (A B A B ...),
compared by medians.  Separate processes, and a pause before each timed block, matter: numba and
PyTorch each bring an OpenMP runtime whose threads keep spinning for a while after their work, and
on a small machine one library's spinning threads steal the cores the other one is timed on.

Targets: MLP batch 256 no slower than PyTorch (ratio <= 1), batch 1 at least 2x faster (ratio
<= 0.5), CNN within 1.5x (ratio <= 1.5).  Ratio = tinyopt time / PyTorch time.

    python benchmarks/bench_train.py [--repeats N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np


def build(lib, kind: str):
    n = lib.nn
    if kind == "MLP":
        return n.Sequential(n.Flatten(), n.Linear(784, 500), n.ReLU(), n.Linear(500, 10))
    return n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(8, 16, 3, padding=1), n.ReLU(), n.MaxPool2d(2), n.Flatten(),
                        n.Linear(784, 10))


def _stepper(lib_name: str, kind: str, batch: int):
    """A function running one training step, on identical weights and data in both libraries."""
    import tinyopt as to
    to.manual_seed(0)
    ref = build(to, kind)
    rng = np.random.default_rng(batch)
    x = rng.random((batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    if lib_name == "tinyopt":
        model, F = ref, to.nn.functional
        opt = to.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        import torch
        model, F = build(torch, kind), torch.nn.functional
        with torch.no_grad():
            for pt, p in zip(model.parameters(), ref.parameters()):
                pt.copy_(torch.from_numpy(p.data))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def worker(conn, lib_name: str) -> None:
    """Serve commands: ("case", kind, batch) builds a case; ("run", n) times n steps."""
    step = None
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            step = _stepper(lib_name, cmd[1], cmd[2])
            conn.send(step())  # the first loss, to check both libraries compute the same thing
            step()
        elif cmd[0] == "run":
            t0 = time.perf_counter()
            for _ in range(cmd[1]):
                step()
            conn.send((time.perf_counter() - t0) / cmd[1])
        else:
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--settle", type=float, default=0.3,
                    help="seconds to pause before each timed block (idle threads go to sleep)")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        libs = ["tinyopt", "torch"]
    except ImportError:
        libs = ["tinyopt"]
        print("PyTorch not installed: tinyopt times only")
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for lib in libs:
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(b, lib), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    print(f"{'case':>12} {'tinyopt':>11} {'torch':>11} {'ratio':>6}  target")
    for kind, batch, target in (("MLP", 1, 0.5), ("MLP", 32, None), ("MLP", 256, 1.0),
                                ("CNN", 256, 1.5)):
        losses = []
        for c in pipes:
            c.send(("case", kind, batch))
        losses = [c.recv() for c in pipes]
        if len(losses) == 2:
            assert abs(losses[0] - losses[1]) < 1e-3 * max(1.0, abs(losses[1])), losses
        inner = max(1, 1024 // batch) if kind == "MLP" else 2
        times: list[list[float]] = [[] for _ in pipes]
        for _ in range(args.repeats):
            for k, c in enumerate(pipes):
                time.sleep(args.settle)
                c.send(("run", inner))
                times[k].append(c.recv())
        med = [statistics.median(t) for t in times]
        label = f"{kind} b={batch}"
        if len(med) == 2:
            goal = f"<= {target}" if target else ""
            print(f"{label:>12} {med[0] * 1e3:>9.3f}ms {med[1] * 1e3:>9.3f}ms "
                  f"{med[0] / med[1]:>6.2f}  {goal}")
        else:
            print(f"{label:>12} {med[0] * 1e3:>9.3f}ms")
    for c in pipes:
        c.send(("stop",))
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
