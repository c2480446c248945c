"""Where the optimizer walker's parallel build pays: one Adam (or SGD-momentum) step over N
float32 parameters right after a GEMM on BLAS's threads (as in a training step, where BLAS's
threads are still spinning when the optimizer runs), with the walker's serial build and with its
parallel one (numba ``prange``), interleaved, medians of the step's wall time.

As in a training step, numpy's BLAS first moves onto the kernels' OpenMP threads
(``kernels/native/shared_threads.py``, which the first plan compile does; ``--own-pool`` leaves OpenBLAS
on its own pool).  The walker takes its parallel build from ``kernels.jit.PARALLEL_MIN_ELEMENTS``
elements (2**22), or, on the shared pool, from the algorithm's ``shared_min``; issue 12's LSTM
LM steps 2.65M parameters, the 784-500-10 MLP 397,510.  Run it with the default threads (2 here)
and on a quiet machine: the figures decide those thresholds.

    python benchmarks/bench_adam_threads.py [--sizes 4e5,1e6,2.65e6,4e6] [--repeats 200]
                                            [--optimizer adam,sgd] [--own-pool]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4e5,1e6,1.5e6,2.65e6,4e6")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.002,
                    help="seconds between steps (other work of a training step)")
    ap.add_argument("--optimizer", default="adam",
                    help="comma-separated: adam (Adam), sgd (SGD with momentum 0.9)")
    ap.add_argument("--own-pool", action="store_true",
                    help="leave numpy's OpenBLAS on its own thread pool")
    args = ap.parse_args()
    import tinyopt as to
    from tinyopt.kernels import jit
    from tinyopt.kernels.native import shared_threads

    shared = False if args.own_pool else shared_threads.share()
    print(f"BLAS on the kernels' OpenMP threads: {shared}", flush=True)

    rng = np.random.default_rng(0)
    a = rng.random((700, 200), dtype=np.float32)  # the LSTM LM's 700 x 200 @ 200 x 800 GEMM
    b = rng.random((200, 800), dtype=np.float32)
    c = np.empty((700, 800), np.float32)
    print(f"{'optimizer':>9} {'params':>9} {'serial':>10} {'parallel':>10} {'par/ser':>8}",
          flush=True)
    for name, n in ((o, int(float(s))) for o in args.optimizer.split(",")
                    for s in args.sizes.split(",")):
        p = to.nn.Parameter(np.zeros(n, np.float32))
        p.grad = np.full(n, 1e-3, np.float32)
        opt = (to.optim.Adam([p], lr=1e-3) if name == "adam" else
               to.optim.SGD([p], lr=1e-3, momentum=0.9))
        times: dict[str, list[float]] = {"serial": [], "parallel": []}
        saved = jit.PARALLEL_MIN_ELEMENTS, jit._FORK["openmp_started"]

        def force(build: str) -> None:  # (a kernel's shared_min applies only on the shared pool)
            jit.PARALLEL_MIN_ELEMENTS = 0 if build == "parallel" else 1 << 62
            jit._FORK["openmp_started"] = saved[1] and build == "parallel"
        try:
            for build in ("serial", "parallel"):  # compile and warm both
                force(build)
                for _ in range(5):
                    opt.step()
            for k in range(2 * args.repeats):
                build = ("serial", "parallel")[k % 2]
                force(build)
                np.matmul(a, b, out=c)
                t0 = time.perf_counter()
                opt.step()
                times[build].append(time.perf_counter() - t0)
                time.sleep(args.gap)
        finally:
            jit.PARALLEL_MIN_ELEMENTS, jit._FORK["openmp_started"] = saved
        ser, par = (statistics.median(times[k]) for k in ("serial", "parallel"))
        print(f"{name:>9} {n:>9} {ser * 1e3:>8.3f}ms {par * 1e3:>8.3f}ms {par / ser:>8.2f}",
              flush=True)


if __name__ == "__main__":
    main()
