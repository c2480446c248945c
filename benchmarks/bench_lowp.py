"""Adam over 16-bit parameters with float32 master weights: speed against the bandwidth probe,
and memory against float32.

For 10^7 parameters (one tensor) in float32, bfloat16 (round to nearest even), bfloat16 with
``stochastic_rounding=True`` and float16, reports the median step time and the effective
bandwidth for the bytes the step really moves per element:

- float32: p, g, m, v read; p, m, v written: 28 B;
- 16-bit: the 16-bit parameter q, master p, g, m, v read; q, p, m, v written: 32 B (q is read to
  check it is still the rounding of its master, see ``kernels/optim.py``);

next to the machine's bandwidth, measured in the same run by a numba kernel that reads four and
writes three float32 arrays (Adam's float32 pattern) of the same length.  Timings are interleaved
(A B C D probe A B C D probe ...) and compared by medians, so neighbours on a shared machine slow
every contender alike.  The memory table gives the bytes of the parameters the model holds
(halved in 16 bits) and of everything the optimizer holds (the masters make it grow).

Run: ``python benchmarks/bench_lowp.py [--n 10000000] [--reps 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tinyopt import Parameter, optim
from tinyopt.kernels.jit import parallel_kernel, prange

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - the lowp extra
    raise SystemExit("bench_lowp.py needs ml_dtypes (pip install 'tinyopt[lowp]')") from None

BF16 = np.dtype(ml_dtypes.bfloat16)
CASES = {  # name: (dtype, Adam keywords, bytes moved per element)
    "float32": (np.dtype(np.float32), {}, 28),
    "bfloat16": (BF16, {}, 32),
    "bfloat16 stochastic": (BF16, {"stochastic_rounding": True}, 32),
    "float16": (np.dtype(np.float16), {}, 32),
}


@parallel_kernel
def _stream_4r3w(a, b, c, d, k):
    """Bandwidth probe: reads a, b, c, d and writes a, b, c (Adam's float32 pattern)."""
    for i in prange(a.shape[0]):
        x = d[i]
        a[i] = a[i] + k * x
        b[i] = b[i] * k + x
        c[i] = c[i] * k - x


def _adam(dtype: np.dtype, n: int, kw: dict) -> tuple[optim.Adam, Parameter]:
    rng = np.random.default_rng(0)
    p = Parameter(rng.standard_normal(n, dtype=np.float32).astype(dtype))
    opt = optim.Adam([p], lr=1e-4, **kw)
    p.grad = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-2)
    return opt, p


def _optimizer_bytes(opt: optim.Adam) -> int:
    total = 0
    for buffers in opt._flat:
        for fb in buffers:
            arrays = [fb.masters, fb.grad, *fb.vectors.values(),
                      *(fb.param_view(j) for j in range(len(fb.params)))]
            total += sum(a.nbytes for a in arrays if a is not None)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    n = args.n

    steps, params, opts = {}, {}, {}
    for name, (dtype, kw, _) in CASES.items():
        opt, p = _adam(dtype, n, kw)
        steps[name], params[name], opts[name] = opt.step, p, opt
    probe = [np.ones(n, np.float32) for _ in range(4)]
    steps["probe"] = lambda: _stream_4r3w(*probe, np.float32(0.999))

    for fn in steps.values():  # compile, first touch, lazy state
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.reps):
        for name, fn in steps.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    probe_bw = 28 * n / med["probe"]

    print(f"Adam step over {n:.0e} parameters (one tensor); medians of {args.reps} interleaved "
          f"runs; probe (4 reads + 3 writes of float32): {probe_bw / 1e9:.1f} GB/s\n")
    print(f"{'parameters':<22}{'ms':>9}{'B/elem':>8}{'GB/s':>8}{'x probe':>9}")
    for name, (_, _, nbytes) in CASES.items():
        bw = nbytes * n / med[name]
        print(f"{name:<22}{med[name] * 1e3:9.2f}{nbytes:8d}{bw / 1e9:8.1f}{bw / probe_bw:9.2f}")

    f32 = params["float32"]._data.nbytes
    print(f"\n{'memory':<22}{'parameters MB':>15}{'x float32':>11}{'optimizer MB':>14}"
          f"{'x float32':>11}")
    opt32 = _optimizer_bytes(opts["float32"])
    for name in CASES:
        pb, ob = params[name]._data.nbytes, _optimizer_bytes(opts[name])
        print(f"{name:<22}{pb / 1e6:15.1f}{pb / f32:11.2f}{ob / 1e6:14.1f}{ob / opt32:11.2f}")


if __name__ == "__main__":
    main()
