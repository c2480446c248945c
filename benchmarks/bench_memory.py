"""Peak memory (resident set, ``resource`` maxrss) of training runs: tinyopt against the same run in
PyTorch (when installed), each run in a fresh process of its own.

Cases: the CNN (ggml's mnist-cnn) training at batch 256; the MLP 784-500-10 at batch 256; the
MNIST CNN of ``examples/mnist_cnn.py`` as an MNIST script runs it: training at batch 64 with a last
partial batch of 40 (another graph size), then evaluating 5 batches of 1000 without gradients.
Each trains with Adam for ``--steps`` steps on random data.  The
first line, ``import``, is the process after importing the library and building nothing: the
floor every case stands on.

Goal (issue 14): every case at or below PyTorch's peak.

    python benchmarks/bench_memory.py [--steps N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
lib_name, case, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
import numpy as np
if lib_name == "torch":
    import torch as lib
    lib.manual_seed(0)
    no_grad = lib.no_grad
    def batch(a):
        return lib.from_numpy(a)
else:
    import tinyopt as lib
    no_grad = lib.no_grad
    def batch(a):
        return a
n = lib.nn
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if case != "import":
    if case == "MLP":
        model = n.Sequential(n.Flatten(), n.Linear(784, 500), n.ReLU(), n.Linear(500, 10))
        train_batch, test_batch = 256, 0
    else:
        model = n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                             n.Conv2d(8, 16, 3, padding=1), n.ReLU(), n.MaxPool2d(2),
                             n.Flatten(), n.Linear(784, 10))
        train_batch, test_batch = (256, 0) if case == "CNN" else (64, 1000)
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    F = n.functional
    sizes = [train_batch] * steps + ([40] if test_batch else [])  # an epoch's last partial batch
    for size in sizes:
        x = batch(rng.random((size, 1, 28, 28), dtype=np.float32))
        y = batch(rng.integers(0, 10, size))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    if test_batch:
        correct = 0
        with no_grad():
            for _ in range(5):
                x = batch(rng.random((test_batch, 1, 28, 28), dtype=np.float32))
                y = batch(rng.integers(0, 10, test_batch))
                correct += int((model(x).argmax(1) == y).sum().item())
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"maxrss_mb": rss / 1024, "import_mb": rss0 / 1024}))
"""

CASES = ("import", "CNN", "MLP", "MNIST-CNN")


def measure(lib: str, case: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, lib, case, str(steps)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    # not imported here: a child's maxrss starts at its parent's peak (Linux keeps it across
    # fork and exec), so the parent stays small
    libs = ["tinyopt", "torch"] if importlib.util.find_spec("torch") else ["tinyopt"]
    if len(libs) == 1:
        print("PyTorch not installed: tinyopt figures only")
    print(f"{'case':>10} " + " ".join(f"{lib + ' MB':>11}" for lib in libs)
          + ("  ratio  (<= 1: goal)" if len(libs) == 2 else ""), flush=True)
    for case in CASES:
        mb = [measure(lib, case, args.steps)["maxrss_mb"] for lib in libs]
        line = f"{case:>10} " + " ".join(f"{v:>11.1f}" for v in mb)
        if len(mb) == 2:
            line += f"  {mb[0] / mb[1]:>5.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
