"""Which results depend on the thread counts: run as ``python docs/thread_bits.py``.

Computes the results below in child processes that differ only in ``OPENBLAS_NUM_THREADS`` (the
BLAS that numpy's matrix products run on) or only in ``NUMBA_NUM_THREADS`` (tinyopt's parallel
kernels), and prints, for each, whether its bits were the same at every count.  The output is
quoted in ``docs/threads.md``; ``tests/test_shared_threads.py`` asserts the kernels' half.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys


def results() -> dict[str, str]:
    """A hash of the bits of each result, computed in this process."""
    import numpy as np

    import tinyopt as to
    from tinyopt import nn

    def bits(a) -> str:
        return hashlib.sha1(np.ascontiguousarray(np.asarray(a)).tobytes()).hexdigest()

    rng = np.random.default_rng(0)
    out = {}
    for m, k, n in ((256, 784, 500), (256, 500, 10), (512, 512, 512), (784, 256, 500)):
        a, b = (rng.standard_normal(s, dtype=np.float32) for s in ((m, k), (k, n)))
        out[f"matmul {m}x{k} @ {k}x{n} (BLAS)"] = bits((to.tensor(a) @ to.tensor(b)).numpy())
    big = rng.standard_normal(1 << 22, dtype=np.float32)  # large enough for the parallel builds
    out["sum of 2^22 elements"] = bits(to.tensor(big).sum().numpy())
    out["exp of 2^22 elements"] = bits(to.tensor(big).exp().numpy())
    out["softmax over 1024 x 4096"] = bits(to.tensor(big.reshape(1024, 4096)).softmax(1).numpy())
    to.manual_seed(0)
    out["conv2d of 32 x 3 x 32 x 32"] = bits(nn.Conv2d(3, 16, 3)(
        rng.standard_normal((32, 3, 32, 32), dtype=np.float32)).detach().numpy())
    p = nn.Parameter(to.tensor(big.copy()))
    p.grad = to.tensor(big[::-1].copy())
    to.optim.AdamW([p], lr=1e-3).step()
    out["AdamW step over 2^22 elements"] = bits(p.detach().numpy())
    to.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
    opt = to.optim.Adam(mlp.parameters(), lr=1e-3)
    x, y = rng.standard_normal((256, 784), dtype=np.float32), rng.integers(0, 10, 256)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x), y).backward()
        opt.step()
    out["784-500-10 MLP, 3 Adam steps at batch 256"] = bits(
        np.concatenate([q.detach().numpy().ravel() for q in mlp.parameters()]))
    return out


def _child(blas: int, kernels: int) -> dict[str, str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), NUMBA_NUM_THREADS=str(kernels),
               OMP_NUM_THREADS=str(kernels))
    text = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True,
                          capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in text.splitlines())


def main() -> None:
    top = max(2, min(os.cpu_count() or 2, 4))
    base = _child(1, 1)
    blas = [_child(n, 1) for n in range(2, top + 1)]
    kernels = [_child(1, n) for n in range(2, top + 1)]
    print(f"threads 1..{top}: same bits at every BLAS count / at every kernel count")
    for name, h in base.items():
        same_blas = all(r[name] == h for r in blas)
        same_kernels = all(r[name] == h for r in kernels)
        print(f"  {name:<42} {'yes' if same_blas else 'NO':>4} / {'yes' if same_kernels else 'NO'}")


if __name__ == "__main__":
    if "--child" in sys.argv:
        for k, v in results().items():
            print(k, v)
    else:
        main()
