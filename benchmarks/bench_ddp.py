"""Data-parallel training of the MLP 784-500-10 (Adam): step time per rank on 2 MPI ranks against
one process at the same per-rank batch, the share of the step spent in communication, whether
the gradient Allreduce can overlap the backward, and the optimizer state each rank holds with
and without ZeRO-1.

Each configuration runs in its own processes (``python bench_ddp.py --worker single`` and
``mpiexec -n 2 python bench_ddp.py --worker ddp|zero``), launched in turn (single, ddp, zero,
single, ...) and compared by medians, so a neighbour's load on a shared machine hits all of them
alike.  Every process runs its kernels on one thread (``NUMBA_NUM_THREADS=1``): 2 ranks on 2
cores, and the single process at the same per-rank batch on one core, so the ratio shows what
the data parallelism itself costs.

    python benchmarks/bench_ddp.py [--batches 64 256] [--steps 60] [--rounds 3]

Columns: ``step ms`` (median per rank), ``ratio`` (step time / single-process step time at the
same per-rank batch; 1.0 is perfect scaling: twice the samples per second on 2 ranks),
``comm %`` (share of the step inside MPI collectives, after a barrier), ``wait %`` (share spent
in that barrier, waiting for the slower rank: load imbalance, not communication), ``state KiB``
(optimizer state per rank: Adam's exp_avg and exp_avg_sq).  The overlap probe times, on 2 ranks, the backward alone, the
Allreduce of the gradient buffer alone, and a non-blocking Allreduce started before the backward
and waited for after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"


def _model_and_data(batch: int, rank: int):
    import tinyopt as to
    from tinyopt import nn
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
    rng = np.random.default_rng(rank)
    return model, rng.random((batch, 784), dtype=np.float32), rng.integers(0, 10, batch)


def _state_bytes(opt) -> int:
    """Bytes of the optimizer state held in this process (the flat state buffers)."""
    inner = getattr(opt, "optim", opt)
    return sum(int(np.asarray(v).nbytes) for st in inner.state.values() for k, v in st.items()
               if k != "step")


def _time_steps(step, steps: int) -> list[float]:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def worker(kind: str, batch: int, steps: int) -> dict:
    from tinyopt import nn, optim
    rank, out = 0, {}
    if kind == "single":
        model, x, y = _model_and_data(batch, 0)
        opt = optim.Adam(model.parameters(), lr=1e-3)
        comm = [0.0, 0.0]
    else:
        import tinyopt.distributed as dist
        from tinyopt.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("mpi")
        pg, rank = dist.group.WORLD, dist.get_rank()
        net, x, y = _model_and_data(batch, rank)
        model = DDP(net)
        if kind == "zero":
            from tinyopt.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=1e-3)
        else:
            opt = optim.Adam(model.parameters(), lr=1e-3)
        comm = [0.0, 0.0]
        for name in ("allreduce_", "reduce_scatter_", "allgather_"):
            original = getattr(pg, name)

            def timed(*args, _f=original, **kw):
                t0 = time.perf_counter()
                pg.comm.Barrier()  # waiting for the slower rank, told apart from the transfer
                t1 = time.perf_counter()
                _f(*args, **kw)
                comm[0] += time.perf_counter() - t1
                comm[1] += t1 - t0
            setattr(pg, name, timed)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    comm[:] = [0.0, 0.0]
    times = _time_steps(step, steps)
    total = (steps + 3) * statistics.mean(times)
    out = {"step": statistics.median(times), "comm": comm[0] / total, "wait": comm[1] / total,
           "state": _state_bytes(opt)}
    if kind == "ddp":
        out.update(_overlap_probe(model, x, y, pg))
        out.update(_fingerprint_probe(model, pg))
    if kind != "single":
        import tinyopt.distributed as dist
        every = [None, None]
        dist.all_gather_object(every, out)
        dist.destroy_process_group()
        if rank != 0:
            return {}
        out = {k: max(o[k] for o in every) for k in out}  # the slower rank sets the pace
    return out


def _overlap_probe(model, x, y, pg) -> dict:
    """Backward alone, Allreduce of the gradient buffer alone, and both with a non-blocking
    Allreduce in flight during the backward (medians of 15, seconds)."""
    from tinyopt import nn
    MPI = pg.MPI
    grad = np.ones(sum(p.numel() for p in model.parameters()), np.float32)

    def backward() -> None:
        with model.no_sync():
            nn.functional.cross_entropy(model(x), y).backward()

    def allreduce() -> None:
        pg.comm.Allreduce(MPI.IN_PLACE, grad)

    def both() -> None:
        req = pg.comm.Iallreduce(MPI.IN_PLACE, grad)
        backward()
        req.Wait()

    out = {}
    for name, fn in (("t_backward", backward), ("t_allreduce", allreduce), ("t_both", both)):
        pg.comm.Barrier()
        out[name] = statistics.median(_time_steps(fn, 15))
    return out


def _fingerprint_probe(model, pg) -> dict:
    """What checking every collective across the ranks costs: tinyopt's all_reduce (fingerprint
    exchange, then a polled non-blocking Iallreduce) against a bare blocking MPI Allreduce, for
    100 floats and for the model's gradient buffer (medians, seconds)."""
    MPI = pg.MPI
    out = {}
    for label, n, reps in (("small", 100, 400),
                           ("grad", sum(p.numel() for p in model.parameters()), 30)):
        buf = np.ones(n, np.float32)
        for name, fn in ((f"t_bare_{label}", lambda: pg.comm.Allreduce(MPI.IN_PLACE, buf)),
                         (f"t_checked_{label}", lambda: pg.allreduce_(buf))):
            pg.comm.Barrier()
            out[name] = statistics.median(_time_steps(fn, reps))
    return out


def launch(kind: str, batch: int, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC), NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", kind, "--batch", str(batch), "--steps",
           str(steps)]
    if kind != "single":
        cmd = [str(Path(sys.executable).with_name("mpiexec")), "-n", "2"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} worker failed:\n{r.stdout}\n{r.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 256],
                    help="per-rank batch sizes")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=["single", "ddp", "zero"])
    ap.add_argument("--worker", choices=["single", "ddp", "zero"])
    ap.add_argument("--batch", type=int)
    args = ap.parse_args()
    if args.worker:
        out = worker(args.worker, args.batch, args.steps)
        if out:
            print("RESULT " + json.dumps(out), flush=True)
        return
    print(f"MLP 784-500-10, Adam, {args.steps} steps x {args.rounds} rounds per configuration, "
          f"one kernel thread per process")
    print(f"{'per-rank batch':>14} {'config':>8} {'step ms':>8} {'ratio':>6} {'comm %':>7} "
          f"{'wait %':>7} {'state KiB':>10}")
    probes = {}
    for batch in args.batches:
        runs: dict[str, list[dict]] = {k: [] for k in args.kinds}
        for _ in range(args.rounds):
            for kind in args.kinds:
                runs[kind].append(launch(kind, batch, args.steps))
        med = {k: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
               for k, rs in runs.items()}
        base = med.get("single", {}).get("step")
        for kind, m in med.items():
            ratio = f"{m['step'] / base:6.2f}" if base else "     -"
            print(f"{batch:>14} {kind:>8} {1e3 * m['step']:8.2f} {ratio} "
                  f"{100 * m['comm']:6.1f}% {100 * m['wait']:6.1f}% {m['state'] / 1024:10.0f}")
        if "ddp" in med:
            probes[batch] = med["ddp"]
    for batch, m in probes.items():
        saved = m["t_backward"] + m["t_allreduce"] - m["t_both"]
        print(f"overlap probe, batch {batch}: backward {1e3 * m['t_backward']:.2f} ms, Allreduce "
              f"of the gradients {1e3 * m['t_allreduce']:.2f} ms, Iallreduce during the backward "
              f"{1e3 * m['t_both']:.2f} ms in all (saved {1e3 * saved:.2f} ms)")
    for batch, m in list(probes.items())[:1]:
        print(f"checked collectives: all_reduce of 100 floats {1e6 * m['t_checked_small']:.1f} us "
              f"(bare MPI Allreduce {1e6 * m['t_bare_small']:.1f} us), of the "
              f"gradients {1e3 * m['t_checked_grad']:.3f} ms (bare "
              f"{1e3 * m['t_bare_grad']:.3f} ms)")


if __name__ == "__main__":
    main()
