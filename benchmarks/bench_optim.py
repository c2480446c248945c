"""Optimizer step time: tinyopt's fused kernels against the machine's bandwidth and PyTorch.

For every elementwise optimizer (SGD-momentum, Adam, AdamW, Adagrad, RMSprop, Adadelta, Adamax,
NAdam, RAdam, ASGD, Rprop) at 1e5, 1e6 and 1e7 parameters, held as one tensor and as 200
tensors, reports the median step time and the effective bandwidth (bytes read and written per
element: 28 for the ones with two state buffers, 20 for SGD-momentum, Adagrad, RMSprop, ASGD)
next to:

- the machine's bandwidth, measured in this run by a numba kernel that reads four and writes three
  float32 arrays (Adam's access pattern) of the same total size;
- PyTorch's fastest CPU mode (``fused=True`` where it has one, else ``foreach=True``) and its
  default mode, when PyTorch is installed.

``--muon-lbfgs`` times Muon (a 1000 x 1000 matrix) and LBFGS (1e6 parameters, a quadratic,
``max_iter=5``) per step against PyTorch.

Timings are interleaved (A B C A B C ...) and compared by medians, so drifting clocks and
neighbours affect every contender alike.  The last table shows 4K aliasing: Adam's kernel over
buffers whose start addresses share one offset mod 4 KiB, against tinyopt's staggered layout.

Run: ``python benchmarks/bench_optim.py [--quick] [--block N] [--only Adam,NAdam] [--sizes 1e7]
[--muon-lbfgs]``  (with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset where the environment sets them; they do not affect these kernels but do
affect numpy's BLAS).  ``--block 5`` times blocks of back-to-back calls: the cache-resident regime.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tinyopt import Parameter, optim
from tinyopt.kernels.jit import parallel_kernel, prange
from tinyopt.optim.flat import CHUNK, SCALAR_SLOTS, staggered_zeros

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

BYTES = {"SGD": 20, "Adam": 28, "AdamW": 28, "Adagrad": 20, "RMSprop": 20, "Adadelta": 28,
         "Adamax": 28, "NAdam": 28, "RAdam": 28, "ASGD": 20, "Rprop": 28}
KWARGS = {"SGD": dict(lr=1e-3, momentum=0.9), "Adam": dict(lr=1e-3), "AdamW": dict(lr=1e-3),
          "Adagrad": dict(lr=1e-3), "RMSprop": dict(lr=1e-3), "Adadelta": dict(lr=1.0),
          "Adamax": dict(lr=2e-3), "NAdam": dict(lr=2e-3), "RAdam": dict(lr=1e-3),
          "ASGD": dict(lr=1e-2), "Rprop": dict(lr=1e-2)}
TORCH_FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}  # CPU fused implementations in torch


@parallel_kernel
def _stream_4r3w(a, b, c, d, k):
    """Bandwidth probe: reads a, b, c, d and writes a, b, c (Adam's 4-read/3-write pattern)."""
    for i in prange(a.shape[0]):
        x = d[i]
        a[i] = a[i] + k * x
        b[i] = b[i] * k + x
        c[i] = c[i] * k - x


def _median_times(fns: dict[str, callable], reps: int, block: int = 1) -> dict[str, float]:
    """Median time per call, contenders interleaved; with ``block > 1`` each sample is the mean of
    ``block`` back-to-back calls after one untimed call, so a working set that fits in the caches
    stays there (the other contenders' calls evict it between samples)."""
    for fn in fns.values():  # warm up (compilation, first-touch, lazy state)
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if block > 1:
                fn()
            t0 = time.perf_counter()
            for _ in range(block):
                fn()
            times[name].append((time.perf_counter() - t0) / block)
    return {k: statistics.median(v) for k, v in times.items()}


def _sizes(n: int, count: int) -> list[int]:
    base = [n // count] * count
    base[-1] += n - sum(base)
    return base


def _tinyopt_step(name: str, sizes: list[int]):
    rng = np.random.default_rng(0)
    ps = [Parameter(rng.standard_normal(s).astype(np.float32)) for s in sizes]
    opt = getattr(optim, name)(ps, **KWARGS[name])
    for p in ps:
        p.grad = rng.standard_normal(p.shape).astype(np.float32) * 1e-3
    return opt.step


def _torch_step(name: str, sizes: list[int], fused: bool):
    gen = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in sizes]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    kw = dict(KWARGS[name])
    if fused:  # torch's fastest CPU mode: fused where it has one, else foreach
        kw["fused" if name in TORCH_FUSED else "foreach"] = True
    opt = getattr(torch.optim, name)(ps, **kw)
    return opt.step


def _probe(n: int):
    """The bandwidth probe as a contender: 28 bytes per element, like Adam."""
    arrs = [staggered_zeros(n, np.float32, k) for k in range(4)]
    for a in arrs:  # touch every page: an array never written reads the kernel's cached zero page
        a.fill(1.0)
    return lambda: _stream_4r3w(*arrs, np.float32(0.5))


def _aliasing(n: int, reps: int) -> dict[str, float]:
    """Adam's kernel over buffers at one offset mod 4 KiB (aliased) vs staggered, in GB/s."""
    out = {}
    seg = np.array([0, n], np.int64)
    chunk_seg = np.zeros((n + CHUNK - 1) // CHUNK, np.int64)
    for label, stagger in (("same offset mod 4K", 0), ("staggered", None)):
        kw = {} if stagger is None else {"stagger": stagger}
        p, g, m, v = (staggered_zeros(n, np.float32, k, **kw) for k in range(4))
        g[:] = 1e-3
        flags = np.ones(1, np.uint8)
        scalars = np.zeros((1, SCALAR_SLOTS), np.float32)
        coef = np.zeros((1, SCALAR_SLOTS), np.float32)
        empty = np.zeros(0, np.float32)
        adam = optim.Adam([Parameter(np.zeros(1, np.float32))], lr=1e-3)
        group, fb = adam.param_groups[0], adam._flat[0][0]
        host = adam._host(group, fb.round)
        hs = fb.host(host)
        kernel = adam.kernel[adam._switches(group, host)]

        def run():
            scalars[0, 0] = 0
            kernel(p, g, m, v, empty, seg, chunk_seg, CHUNK, flags, scalars, coef, hs)
        offsets = sorted({a.ctypes.data % 4096 for a in (p, g, m, v)})
        dt = _median_times({label: run}, reps)[label]
        out[f"{label} (offsets {offsets})"] = 28 * n / dt / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 1e5 and 1e6 only")
    ap.add_argument("--block", type=int, default=1,
                    help="time blocks of this many back-to-back calls (cache-resident regime)")
    ap.add_argument("--only", help="comma-separated optimizer names (default: all)")
    ap.add_argument("--sizes", help="comma-separated parameter counts, e.g. 1e5,1e7")
    ap.add_argument("--muon-lbfgs", action="store_true", help="time Muon and LBFGS only")
    args = ap.parse_args()
    if args.muon_lbfgs:
        _muon_lbfgs()
        return
    ns = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]
    if args.sizes:
        ns = [int(float(x)) for x in args.sizes.split(",")]
    names = args.only.split(",") if args.only else list(BYTES)
    if torch is not None:
        torch.set_num_threads(2)
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    import numba
    print(f"numba threads {numba.get_num_threads()}")
    for n in ns:
        reps = 7 if args.quick else (15 if n >= 10**7 else 41)
        probe = _probe(n)
        print(f"\n== {n:.0e} parameters (bw: the 4-read/3-write probe, timed interleaved with "
              f"each row)")
        print(f"{'optimizer':<9} {'tensors':>7} | {'bw GB/s':>7} | {'tinyopt ms':>10} {'GB/s':>6} "
              f"{'%bw':>5} | "
              f"{'torch fastest ms':>16} {'x':>6} | {'torch default ms':>16} {'x':>6}")
        for name in names:
            for count in (1, 200):
                sizes = _sizes(n, count)
                fns = {"bw": probe, "tinyopt": _tinyopt_step(name, sizes)}
                if torch is not None:
                    fns["fused"] = _torch_step(name, sizes, fused=True)
                    fns["default"] = _torch_step(name, sizes, fused=False)
                t = _median_times(fns, reps, args.block)
                gbs = BYTES[name] * n / t["tinyopt"] / 1e9
                bw = 28 * n / t["bw"] / 1e9
                row = (f"{name:<9} {count:>7} | {bw:>7.1f} | {t['tinyopt'] * 1e3:>10.3f} {gbs:>6.1f} "
                       f"{100 * gbs / bw:>4.0f}% | ")
                if "fused" in t:
                    row += f"{t['fused'] * 1e3:>16.3f} {t['fused'] / t['tinyopt']:>5.2f}x | "
                else:
                    row += f"{'-':>16} {'':>6} | "
                if "default" in t:
                    row += f"{t['default'] * 1e3:>16.3f} {t['default'] / t['tinyopt']:>5.2f}x"
                print(row, flush=True)
    if args.only or args.sizes:
        return
    n = 10**7 if not args.quick else 10**6
    print(f"\n== 4K aliasing: Adam kernel at {n:.0e} float32 parameters")
    for label, gbs in _aliasing(n, 15 if not args.quick else 7).items():
        print(f"{label:<50} {gbs:6.1f} GB/s")
    print("\n(x = torch time / tinyopt time: above 1 means tinyopt is faster)")


def _muon_lbfgs(reps: int = 7) -> None:
    """Per-step time of Muon (one 1000 x 1000 matrix) and LBFGS (1e6 parameters, the quadratic
    0.5 sum(a x^2), max_iter=5, no line search) against PyTorch, interleaved."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((1000, 1000)).astype(np.float32)
    g0 = rng.standard_normal((1000, 1000)).astype(np.float32)
    w = Parameter(w0.copy())
    w.grad = g0.copy()
    fns = {"tinyopt Muon": optim.Muon([w], lr=0.02).step}
    a = (1 + rng.random(10**6)).astype(np.float32)
    x = Parameter(np.ones(10**6, np.float32))
    lbfgs = optim.LBFGS([x], max_iter=5, history_size=10)

    def closure():
        xs = x.data.numpy()
        x.grad = a * xs
        return float(0.5 * np.dot(a, xs * xs))
    fns["tinyopt LBFGS"] = lambda: lbfgs.step(closure)
    if torch is not None:
        tw = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        tw.grad = torch.from_numpy(g0.copy())
        fns["torch Muon"] = torch.optim.Muon([tw], lr=0.02).step
        ta = torch.from_numpy(a)
        tx = torch.nn.Parameter(torch.ones(10**6))
        tlbfgs = torch.optim.LBFGS([tx], max_iter=5, history_size=10)

        def tclosure():
            with torch.no_grad():
                tx.grad = ta * tx
                return float(0.5 * torch.dot(ta, tx * tx))
        fns["torch LBFGS"] = lambda: tlbfgs.step(tclosure)
    t = _median_times(fns, reps)
    for name in ("Muon", "LBFGS"):
        ours = t[f"tinyopt {name}"]
        line = f"{name:<6} tinyopt {ours * 1e3:8.2f} ms"
        if f"torch {name}" in t:
            theirs = t[f"torch {name}"]
            line += f" | torch {theirs * 1e3:8.2f} ms | x {theirs / ours:5.2f}"
        print(line)
    print("(x = torch time / tinyopt time)")


if __name__ == "__main__":
    main()
