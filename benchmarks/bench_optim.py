"""Optimizer step time: tinyopt's fused kernels against the machine's bandwidth and PyTorch.

For every elementwise optimizer (SGD-momentum, Adam, AdamW, Adagrad, RMSprop, Adadelta, Adamax,
NAdam, RAdam, ASGD, Rprop) at 1e5, 1e6 and 1e7 parameters, held as one tensor and as 200
tensors, reports the median step time and the effective bandwidth (bytes read and written per
element: 28 for the ones with two state buffers, 20 for SGD-momentum, Adagrad, RMSprop, ASGD)
next to:

- the machine's bandwidth, measured in this run by a numba kernel that reads four and writes three
  float32 arrays (Adam's access pattern) of the same total size (for Adafactor: its three passes
  over two arrays, 24 bytes per element), timed in the same worker, interleaved with the row,
  with the same ``--settle`` and threads;
- PyTorch's fastest CPU mode (``fused=True`` where it has one, else ``foreach=True``) and its
  default mode, when PyTorch is installed.

Then Adafactor (fused: one kernel call per group; parameters as matrices of 1000 columns; its
real bytes are 24 per element: g read three times, p twice, p written once) and SparseAdam (an
embedding of n/64 rows of 64, 4096 rows looked up per step) against PyTorch.

``--muon-lbfgs`` times Muon (a 1000 x 1000 matrix) and LBFGS (1e6 parameters, a quadratic,
``max_iter=5``) per step against PyTorch.

``--extra`` times the optimizers PyTorch does not ship (issue 31) against their reference
packages' CPU implementations in the torch worker (schedulefree, lion-pytorch,
pytorch-optimizer, prodigyopt, bitsandbytes; C-AdamW against torch's AdamW), at 1e7 parameters
by default (SOAP: one 1000 x 1000 matrix), with the probe's bandwidth, the bytes each step moves
per element, and for the 8-bit optimizers the float32 AdamW step of tinyopt beside them.

Each library runs in its own worker process (tinyopt with the bandwidth probe, torch with its
two modes), as ``bench_train.py`` does: numba's and PyTorch's OpenMP pools in one process spoil
each other.  Timings are interleaved (A B C A B C ...) and compared by medians, so drifting
clocks and neighbours affect every contender alike.  The last table shows 4K aliasing: Adam's
kernel over buffers whose start addresses share one offset mod 4 KiB, against tinyopt's
staggered layout.

Run: ``python benchmarks/bench_optim.py [--quick] [--block N] [--only Adam,NAdam] [--sizes 1e7]
[--threads N] [--reps N] [--muon-lbfgs] [--extra]``  (with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset where the environment sets them; they do not affect these kernels but do
affect numpy's BLAS).  ``--block 5`` times blocks of back-to-back calls: the cache-resident regime.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np
from harness import libraries, pin_threads

from tinyopt import Parameter, optim
from tinyopt.kernels.jit import parallel_kernel, prange
from tinyopt.optim.flat import CHUNK, SCALAR_SLOTS, staggered_zeros

torch = None  # imported by the torch worker only

BYTES = {"SGD": 20, "Adam": 28, "AdamW": 28, "Adagrad": 20, "RMSprop": 20, "Adadelta": 28,
         "Adamax": 28, "NAdam": 28, "RAdam": 28, "ASGD": 20, "Rprop": 28}
KWARGS = {"SGD": dict(lr=1e-3, momentum=0.9), "Adam": dict(lr=1e-3), "AdamW": dict(lr=1e-3),
          "Adagrad": dict(lr=1e-3), "RMSprop": dict(lr=1e-3), "Adadelta": dict(lr=1.0),
          "Adamax": dict(lr=2e-3), "NAdam": dict(lr=2e-3), "RAdam": dict(lr=1e-3),
          "ASGD": dict(lr=1e-2), "Rprop": dict(lr=1e-2)}
TORCH_FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}  # CPU fused implementations in torch

# --extra: name -> (tinyopt class, its kwargs, reference (module, class, kwargs) or None,
# bytes read and written per element by tinyopt's step, state bytes per parameter)
EXTRA = {
    "SGDScheduleFree": ("SGDScheduleFree", dict(lr=1.0), ("schedulefree", "SGDScheduleFree", {}),
                        20, 4),
    "AdamWScheduleFree": ("AdamWScheduleFree", dict(lr=2.5e-3),
                          ("schedulefree", "AdamWScheduleFree", {}), 28, 8),
    "RAdamScheduleFree": ("RAdamScheduleFree", dict(lr=2.5e-3),
                          ("schedulefree", "RAdamScheduleFree", {}), 28, 8),
    "Lion": ("Lion", dict(lr=1e-4, weight_decay=0.1), ("lion_pytorch", "Lion", {}), 20, 4),
    "C-Lion": ("Lion", dict(lr=1e-4, weight_decay=0.1, cautious=True),
               ("pytorch_optimizer", "Lion", dict(cautious=True)), 28, 4),
    "C-AdamW": ("AdamW", dict(lr=1e-3, cautious=True), ("torch.optim", "AdamW", {}), 44, 8),
    "ADOPT": ("ADOPT", dict(lr=1e-3), ("pytorch_optimizer", "ADOPT", {}), 28, 8),
    "AdEMAMix": ("AdEMAMix", dict(lr=1e-3), ("pytorch_optimizer", "AdEMAMix", {}), 36, 12),
    "Lamb": ("Lamb", dict(lr=1e-3, weight_decay=0.01), ("pytorch_optimizer", "Lamb", {}), 40, 8),
    "LARS": ("LARS", dict(lr=0.1, momentum=0.9), ("pytorch_optimizer", "LARS", {}), 28, 4),
    "Prodigy": ("Prodigy", dict(lr=1.0), ("prodigyopt", "Prodigy", {}), 56, 16),
    "SOAP": ("SOAP", dict(lr=3e-3), ("pytorch_optimizer", "SOAP", {}), None, None),
    "Adam8bit": ("Adam8bit", dict(lr=1e-3), ("bitsandbytes.optim", "Adam8bit", {}), 16, 2.03),
    "AdamW8bit": ("AdamW8bit", dict(lr=1e-3), ("bitsandbytes.optim", "AdamW8bit", {}), 16, 2.03),
    "Lion8bit": ("Lion8bit", dict(lr=1e-4), ("bitsandbytes.optim", "Lion8bit", {}), 14, 1.02),
    "SGD8bit": ("SGD8bit", dict(lr=0.01, momentum=0.9), ("bitsandbytes.optim", "SGD8bit", {}),
                14, 1.02),
}


@parallel_kernel
def _stream_4r3w(a, b, c, d, k):
    """Bandwidth probe: reads a, b, c, d and writes a, b, c (Adam's 4-read/3-write pattern)."""
    for i in prange(a.shape[0]):
        x = d[i]
        a[i] = a[i] + k * x
        b[i] = b[i] * k + x
        c[i] = c[i] * k - x


_PROBE_CHUNK = 1 << 14


@parallel_kernel
def _stream_adafactor(p, g, part, k):
    """Bandwidth probe with Adafactor's passes over its two arrays (24 bytes per element):
    reads p and g; reads g; reads p and g and writes p.  The reads fold into 16 float32 lanes
    per chunk (so they vectorize, as Adafactor's sums do); ``part`` takes the chunks' sums."""
    n = p.shape[0]
    chunks = (n + _PROBE_CHUNK - 1) // _PROBE_CHUNK
    for c in prange(chunks):
        lo, hi = c * _PROBE_CHUNK, min(n, c * _PROBE_CHUNK + _PROBE_CHUNK)
        ps, gs = p[lo:hi], g[lo:hi]
        lanes = np.zeros(16, np.float32)
        for r in range((hi - lo) // 16):
            for k2 in range(16):
                lanes[k2] += ps[r * 16 + k2] + gs[r * 16 + k2]
        part[c] = lanes.sum()
    for c in prange(chunks):
        lo, hi = c * _PROBE_CHUNK, min(n, c * _PROBE_CHUNK + _PROBE_CHUNK)
        gs = g[lo:hi]
        lanes = np.zeros(16, np.float32)
        for r in range((hi - lo) // 16):
            for k2 in range(16):
                lanes[k2] += gs[r * 16 + k2]
        part[chunks + c] = lanes.sum()
    for i in prange(n):
        p[i] = p[i] + k * g[i]


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
    import torch
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


def _probe_adafactor(n: int):
    """The bandwidth probe of the Adafactor rows: its three passes over two arrays (24 bytes
    per element, :func:`_stream_adafactor`)."""
    p, g = (staggered_zeros(n, np.float32, k) for k in range(2))
    p.fill(1.0)
    g.fill(1e-3)
    part = np.zeros(2 * (-(-n // _PROBE_CHUNK)), np.float32)
    return lambda: _stream_adafactor(p, g, part, np.float32(-1e-9))


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

        pa, ga = (np.array([a.ctypes.data], np.int64) for a in (p, g))  # (the segment tables)

        def run():
            scalars[0, 0] = 0
            kernel(pa, ga, m, v, empty, seg, chunk_seg, CHUNK, flags, scalars, coef, hs)
        offsets = sorted({a.ctypes.data % 4096 for a in (p, g, m, v)})
        dt = _median_times({label: run}, reps)[label]
        out[f"{label} (offsets {offsets})"] = 28 * n / dt / 1e9
    return out


def _adafactor_steps(lib: str, sizes: list[int]) -> dict:
    """Adafactor over matrices of 1000 columns (the factored path), per library."""
    shapes = [(s // min(1000, s), min(1000, s)) for s in sizes]
    rng = np.random.default_rng(0)
    if lib == "tinyopt":
        ps = [Parameter(rng.standard_normal(sh).astype(np.float32)) for sh in shapes]
        for p in ps:
            p.grad = rng.standard_normal(p.shape).astype(np.float32) * 1e-3
        return {"tinyopt": optim.Adafactor(ps, lr=1e-2).step}
    import torch
    ps = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(sh).astype(np.float32)))
          for sh in shapes]
    for p in ps:
        p.grad = torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32) * 1e-3)
    return {"fused": torch.optim.Adafactor(ps, lr=1e-2, foreach=True).step,
            "default": torch.optim.Adafactor([q for q in ps], lr=1e-2).step}


def _sparse_adam_steps(lib: str, n: int) -> dict:
    """SparseAdam on an embedding of n/64 rows of 64, 4096 rows looked up (a fixed gradient)."""
    rows = max(4096, n // 64)
    idx = np.random.default_rng(0).integers(0, rows, 4096)
    if lib == "tinyopt":
        import tinyopt as to
        emb = to.nn.Embedding(rows, 64, sparse=True)
        emb(to.tensor(idx)).sum().backward()
        return {"tinyopt": optim.SparseAdam(emb.parameters(), lr=1e-3).step}
    import torch
    emb = torch.nn.Embedding(rows, 64, sparse=True)
    emb(torch.from_numpy(idx)).sum().backward()
    return {"default": torch.optim.SparseAdam(emb.parameters(), lr=1e-3).step}


def _muon_lbfgs_steps(lib: str, names: tuple = ("Muon", "LBFGS")) -> dict:
    """Muon (one 1000 x 1000 matrix) and LBFGS (1e6 parameters, the quadratic 0.5 sum(a x^2),
    max_iter=5, no line search)."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((1000, 1000)).astype(np.float32)
    g0 = rng.standard_normal((1000, 1000)).astype(np.float32)
    a = (1 + rng.random(10**6)).astype(np.float32)
    if lib == "tinyopt":
        w = Parameter(w0.copy())
        w.grad = g0.copy()
        x = Parameter(np.ones(10**6, np.float32))
        lbfgs = optim.LBFGS([x], max_iter=5, history_size=10)

        def closure():
            xs = x.data.numpy()
            x.grad = a * xs
            return float(0.5 * np.dot(a, xs * xs))
        fns = {"Muon": optim.Muon([w], lr=0.02).step, "LBFGS": lambda: lbfgs.step(closure)}
        return {k: fns[k] for k in names}
    import torch
    tw = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    tw.grad = torch.from_numpy(g0.copy())
    ta = torch.from_numpy(a)
    tx = torch.nn.Parameter(torch.ones(10**6))
    tlbfgs = torch.optim.LBFGS([tx], max_iter=5, history_size=10)

    def tclosure():
        with torch.no_grad():
            tx.grad = ta * tx
            return float(0.5 * torch.dot(ta, tx * tx))
    tfns = {"Muon": torch.optim.Muon([tw], lr=0.02).step, "LBFGS": lambda: tlbfgs.step(tclosure)}
    return {k: tfns[k] for k in names}


def _extra_steps(lib: str, name: str, n: int) -> dict:
    """One ``EXTRA`` row's contenders: tinyopt's step (and for an 8-bit optimizer tinyopt's
    float32 AdamW beside it), or the reference package's step (none if it is not installed)."""
    import importlib
    ours, kw, ref, *_ = EXTRA[name]
    shapes = [(1000, 1000)] if name == "SOAP" else [(n,)]
    rng = np.random.default_rng(0)
    x = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = [rng.standard_normal(s).astype(np.float32) * 1e-3 for s in shapes]
    if lib == "tinyopt":
        fns = {}
        for label, cls, ckw in (("tinyopt", ours, kw), ("fp32 AdamW", "AdamW", {})):
            if label == "fp32 AdamW" and not name.endswith("8bit"):
                continue
            ps = [Parameter(a.copy()) for a in x]
            for p, gi in zip(ps, g):
                p.grad = gi.copy()
            opt = getattr(optim, cls)(ps, **ckw)
            if hasattr(opt, "train"):
                opt.train()
            fns[label] = opt.step
        return fns
    import torch
    try:
        module = importlib.import_module(ref[0])
    except ImportError:
        return {}
    ps = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in x]
    for p, gi in zip(ps, g):
        p.grad = torch.from_numpy(gi.copy())
    topt = getattr(module, ref[1])(ps, **{**kw, **ref[2]} if ref[0] != "torch.optim"
                                   else {"lr": kw["lr"]})
    if hasattr(topt, "train"):
        topt.train()
    return {"reference": topt.step}


def _contenders(lib: str, kind: str, *args) -> dict:
    """The timed functions of one case in one library's worker (tinyopt's with the probe)."""
    if kind == "muon-lbfgs":
        return _muon_lbfgs_steps(lib, *args)
    if kind == "extra":
        name, n = args
        probe = {"bw": _probe(n)} if lib == "tinyopt" else {}
        return probe | _extra_steps(lib, name, n)
    n = args[-2] if kind != "SparseAdam" else args[-1]
    probe = {}
    if lib == "tinyopt":
        probe = {"bw": _probe_adafactor(n) if kind == "Adafactor" else _probe(n)}
    if kind == "Adafactor":
        return probe | _adafactor_steps(lib, _sizes(n, args[-1]))
    if kind == "SparseAdam":
        return probe | _sparse_adam_steps(lib, n)
    name, n, count = args
    sizes = _sizes(n, count)
    if lib == "tinyopt":
        return probe | {"tinyopt": _tinyopt_step(name, sizes)}
    return {"fused": _torch_step(name, sizes, fused=True),
            "default": _torch_step(name, sizes, fused=False)}


def worker(conn, lib: str) -> None:
    """Serve commands: ("case", kind, *args) builds a case's contenders (and warms them up),
    answering their names; ("run", name, block) times one sample of one contender."""
    fns: dict = {}
    while True:
        cmd = conn.recv()
        if cmd[0] == "case":
            fns = _contenders(lib, *cmd[1:])
            for fn in fns.values():  # warm up (compilation, first-touch, lazy state)
                for _ in range(3):
                    fn()
            conn.send(list(fns))
        elif cmd[0] == "run":
            fn, block = fns[cmd[1]], cmd[2]
            clock = time.process_time if cmd[3] else time.perf_counter
            if block > 1:
                fn()
            t0 = clock()
            for _ in range(block):
                fn()
            conn.send((clock() - t0) / block)
        elif cmd[0] == "info":
            if lib == "tinyopt":
                import numba
                conn.send(f"numba threads {numba.get_num_threads()}")
            else:
                import torch
                conn.send(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        else:
            return


def _timed(pipes: dict, case: tuple, reps: int, block: int, settle: float,
           cpu: bool = False) -> dict[str, float]:
    """Median time per call of every contender of ``case``, the libraries' workers interleaved
    (``cpu``: the worker process's CPU time, all its threads, instead of the wall time)."""
    names = {}
    for lib, c in pipes.items():
        c.send(("case",) + case)
    for lib, c in pipes.items():
        names[lib] = c.recv()
    order = [(lib, name) for lib in pipes for name in names[lib]]
    times: dict[str, list[float]] = {f"{lib} {name}": [] for lib, name in order}
    for _ in range(reps):
        for lib, name in order:
            if settle:
                time.sleep(settle)
            pipes[lib].send(("run", name, block, cpu))
            times[f"{lib} {name}"].append(pipes[lib].recv())
    return {k: statistics.median(v) for k, v in times.items()}


def _ratios(t: dict, ours: str) -> str:
    row = ""
    for key in ("torch fused", "torch default"):
        if key in t:
            row += f"{t[key] * 1e3:>16.3f} {t[key] / t[ours]:>5.2f}x | "
        else:
            row += f"{'-':>16} {'':>6} | "
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 1e5 and 1e6 only")
    ap.add_argument("--block", type=int, default=1,
                    help="time blocks of this many back-to-back calls, after one untimed call "
                         "(cache-resident regime for small sizes; with --settle, the first call "
                         "after the pause runs on cores that idled: on the 2-core VM of 2026-12-05 "
                         "a 1e7 Adafactor step took 2-3x as long, so --block 3 steadies the rows)")
    ap.add_argument("--only", help="comma-separated optimizer names (default: all, with "
                                   "Adafactor and SparseAdam)")
    ap.add_argument("--sizes", help="comma-separated parameter counts, e.g. 1e5,1e7")
    ap.add_argument("--muon-lbfgs", action="store_true", help="time Muon and LBFGS only")
    ap.add_argument("--extra", action="store_true",
                    help="time the optimizers PyTorch does not ship against their reference "
                         "packages (default size 1e7; --only picks rows)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="--extra: time each step by its worker's CPU time instead of the wall "
                         "clock: steadier where other processes share the cores, with --threads "
                         "1 (it counts all threads, an OpenMP pool's spinning too)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to pause before each timed sample (idle threads go to sleep)")
    ap.add_argument("--reps", type=int,
                    help="timed samples per contender (default: 7 for --muon-lbfgs, 3 with "
                         "--quick; the tables' own counts otherwise)")
    ap.add_argument("--threads", type=int,
                    help="threads for both libraries (torch, numba, BLAS); default: each "
                         "library's own")
    args = ap.parse_args()
    pin_threads(args.threads)
    libs = libraries()
    ctx = mp.get_context("spawn")
    pipes, procs = {}, []
    for lib in libs:
        a, b = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(b, lib), daemon=True)
        proc.start()
        pipes[lib] = a
        procs.append(proc)
    for c in pipes.values():
        c.send(("info",))
        print(c.recv())
    try:
        if args.muon_lbfgs:
            _run_muon_lbfgs(pipes, args)
        elif args.extra:
            _run_extra(pipes, args)
        else:
            _run_tables(pipes, args)
    finally:
        for c in pipes.values():
            c.send(("stop",))
        for proc in procs:
            proc.join()


def _run_tables(pipes: dict, args) -> None:
    ns = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]
    if args.sizes:
        ns = [int(float(x)) for x in args.sizes.split(",")]
    names = args.only.split(",") if args.only else list(BYTES) + ["Adafactor", "SparseAdam"]
    head = (f"{'optimizer':<10} {'tensors':>7} | {'bw GB/s':>7} | {'tinyopt ms':>10} {'GB/s':>6} "
            f"{'%bw':>5} | {'torch fastest ms':>16} {'x':>6} | {'torch default ms':>16} {'x':>6}")
    for n in ns:
        reps = args.reps or (7 if args.quick else (15 if n >= 10**7 else 41))
        print(f"\n== {n:.0e} parameters (bw: the 4-read/3-write probe in tinyopt's worker, "
              f"timed interleaved with each row)")
        print(head)
        for name in names:
            for count in ((1,) if name == "SparseAdam" else (1, 200)):
                if name == "SparseAdam":
                    case: tuple = ("SparseAdam", n)
                elif name == "Adafactor":
                    case = ("Adafactor", n, count)
                else:
                    case = ("elementwise", name, n, count)
                t = _timed(pipes, case, reps, args.block, args.settle)
                ours = t["tinyopt tinyopt"]
                bw = (24 if name == "Adafactor" else 28) * n / t["tinyopt bw"] / 1e9
                row = f"{name:<10} {count:>7} | {bw:>7.1f} | {ours * 1e3:>10.3f} "
                nbytes = {"Adafactor": 24, "SparseAdam": None}.get(name, BYTES.get(name))
                if nbytes:
                    gbs = nbytes * n / ours / 1e9
                    row += f"{gbs:>6.1f} {100 * gbs / bw:>4.0f}% | "
                else:
                    row += f"{'-':>6} {'-':>5} | "
                print((row + _ratios(t, "tinyopt tinyopt")).rstrip(" |"), flush=True)
    print("\n(x = torch time / tinyopt time: above 1 means tinyopt is faster; Adafactor's "
          "'fastest' is torch's foreach; SparseAdam has one mode, and no bytes per element)")
    if args.only or args.sizes:
        return
    n = 10**7 if not args.quick else 10**6
    print(f"\n== 4K aliasing: Adam kernel at {n:.0e} float32 parameters (in this process)")
    for label, gbs in _aliasing(n, 15 if not args.quick else 7).items():
        print(f"{label:<50} {gbs:6.1f} GB/s")


def _run_extra(pipes: dict, args) -> None:
    ns = [int(float(x)) for x in args.sizes.split(",")] if args.sizes else [10**7]
    names = args.only.split(",") if args.only else list(EXTRA)
    reps = args.reps or (3 if args.quick else 7)
    print(f"{'optimizer':<18} | {'bw GB/s':>7} | {'tinyopt ms':>10} {'GB/s':>6} {'%bw':>5} | "
          f"{'state B/p':>9} | {'reference ms':>12} {'x':>6} | {'fp32 AdamW ms':>13} {'x':>6}")
    for n in ns:
        print(f"== {n:.0e} parameters, one tensor (SOAP: one 1000 x 1000 matrix)")
        for name in names:
            t = _timed(pipes, ("extra", name, n), reps, args.block, args.settle, args.cpu_time)
            ours, nbytes, state = t["tinyopt tinyopt"], EXTRA[name][3], EXTRA[name][4]
            bw = 28 * n / t["tinyopt bw"] / 1e9
            row = f"{name:<18} | {bw:>7.1f} | {ours * 1e3:>10.3f} "
            if nbytes:
                gbs = nbytes * n / ours / 1e9
                row += f"{gbs:>6.1f} {100 * gbs / bw:>4.0f}% | {state:>9} | "
            else:
                row += f"{'-':>6} {'-':>5} | {'-':>9} | "
            ref = t.get("torch reference")
            row += (f"{ref * 1e3:>12.3f} {ref / ours:>5.2f}x | " if ref
                    else f"{'-':>12} {'':>6} | ")
            fp32 = t.get("tinyopt fp32 AdamW")
            row += f"{fp32 * 1e3:>13.3f} {fp32 / ours:>5.2f}x" if fp32 else f"{'-':>13}"
            print(row, flush=True)
    print("(x = reference time / tinyopt time: above 1 means tinyopt is faster; C-AdamW's "
          "reference is torch's AdamW, without the cautious mask; GB/s from the bytes tinyopt's "
          "step moves; the last x: tinyopt's float32 AdamW time / the 8-bit step's)")


def _run_muon_lbfgs(pipes: dict, args, reps: int = 7) -> None:
    names = tuple(args.only.split(",")) if args.only else ("Muon", "LBFGS")
    reps = args.reps or (reps if not args.quick else 3)
    t = _timed(pipes, ("muon-lbfgs", names), reps, args.block, args.settle)
    for name in names:
        ours = t[f"tinyopt {name}"]
        line = f"{name:<6} tinyopt {ours * 1e3:8.2f} ms"
        if f"torch {name}" in t:
            theirs = t[f"torch {name}"]
            line += f" | torch {theirs * 1e3:8.2f} ms | x {theirs / ours:5.2f}"
        print(line)
    print("(x = torch time / tinyopt time; Muon 1000x1000, LBFGS 1e6 parameters max_iter=5)")


if __name__ == "__main__":
    main()
