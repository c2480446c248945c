"""Where a GPT's (or the CNN's) training step goes, op by op, tinyopt against PyTorch (issue 27.4).

tinyopt: every step of the compiled plan is wrapped in a timer, keyed by the node's op (and
``view`` for views), plus the optimizer step and what is left (graph building, binding, Python);
PyTorch: ``torch.profiler`` over the same steps, its ops' self CPU time.  The model and sizes are
``bench_gpt.py``'s; each library runs in its own spawned worker.  Times are wall clock per step,
so on a loaded machine they carry the load; ``--cpu`` times tinyopt's ops and both whole steps in
CPU time instead (readable under load at 1 thread; PyTorch's ops stay the profiler's wall time).
``--size cnn`` (``mlp``) profiles ``bench_train.py``'s CNN (MLP) at batch 256 with Adam instead
(``--sgd``: SGD with momentum).  ``--nodes`` keys tinyopt's times by node (op and shape, in plan
order) and adds the bytes each node's arrays hold (its output and operands: the least it can
move) and their rate, next to the rate of ``bench_optim.py``'s bandwidth probe in the same worker.
Without ``--nodes`` a last line weighs both libraries' weight GEMMs against the issue's budget,
0.8 of torch's unprofiled step.

    python benchmarks/profile_gpt.py [--size baby|small|gpt2|cnn|mlp] [--threads 1] [--steps 10]
                                     [--top 25] [--cpu] [--nodes] [--sgd]
"""

from __future__ import annotations

import argparse
import collections
import time

from harness import libraries, pin_threads, start_workers, stop_workers


def _stepper(lib_name: str, size: str, optimizer: str = "adam"):
    """One training step of the size's GPT (``bench_gpt.py``) or, for ``cnn`` and ``mlp``, of
    ``bench_train.py``'s CNN or MLP at batch 256 with ``optimizer`` ("adam" or "sgd")."""
    if size in ("cnn", "mlp"):
        import bench_train
        return bench_train._stepper(lib_name, size.upper(), 256, optimizer)
    import bench_gpt
    return bench_gpt._stepper(lib_name, size)


def _tinyopt_profile(size: str, steps: int, clock, nodes: bool, optimizer: str
                     ) -> dict[str, float]:
    from tinyopt.engine import plan as plan_mod
    totals: dict[str, float] = collections.defaultdict(float)
    made = plan_mod._step

    def timed_step(A, i, t, srcs, kind):
        fn = made(A, i, t, srcs, kind)
        key = "view" if kind == "view" else t.op
        if nodes:
            key = f"{i:3d} {key} {t.shape}"

        def run():
            t0 = clock()
            fn()
            totals[key] += clock() - t0
            if nodes:
                totals["(bytes) " + key] += sum(getattr(A[k], "nbytes", 0) for k in (i, *srcs))
        return run

    plan_mod._step = timed_step  # before the plan is built: its steps are wrapped
    step = _stepper("tinyopt", size, optimizer)
    step()
    step()
    opt_step = _optimizer_of(step)
    inner = opt_step.step

    def timed_opt(*a, **k):
        t0 = clock()
        out = inner(*a, **k)
        totals["(optimizer step)"] += clock() - t0
        return out
    opt_step.step = timed_opt
    totals.clear()
    t0 = clock()
    for _ in range(steps):
        step()
    whole = clock() - t0
    kernels = sum(v for k, v in totals.items() if not k.startswith("(bytes)"))
    totals["(rest: graph, binding, Python)"] = whole - kernels
    if nodes:
        totals["(probe GB/s)"] = _probe_rate(clock) * steps
    return {k: v / steps for k, v in totals.items()}


def _probe_rate(clock, n: int = 1 << 20) -> float:
    """Bytes per second of ``bench_optim.py``'s bandwidth probe (Adam's 4 reads and 3 writes
    over ``n`` float32 elements), best of 20."""
    from bench_optim import _probe
    run = _probe(n)
    run()
    best = float("inf")
    for _ in range(20):
        t0 = clock()
        run()
        best = min(best, clock() - t0)
    return 28 * n / best / 1e9


def _optimizer_of(step):
    """The optimizer a ``_stepper`` step's closure steps."""
    for cell in step.__closure__:
        v = cell.cell_contents
        if hasattr(v, "param_groups"):
            return v
    raise LookupError("no optimizer in the step's closure")


def _torch_profile(size: str, steps: int, clock, optimizer: str) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    step = _stepper("torch", size, optimizer)
    step()
    step()
    t0 = clock()
    for _ in range(steps):
        step()
    whole = (clock() - t0) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    out = {e.key: e.self_cpu_time_total * 1e-6 / steps for e in prof.key_averages()}
    out["(whole step, unprofiled)"] = whole
    del torch
    return out


def worker(conn, lib_name: str) -> None:
    size, steps, cpu, nodes, optimizer = conn.recv()
    clock = time.process_time if cpu else time.perf_counter
    conn.send(_tinyopt_profile(size, steps, clock, nodes, optimizer) if lib_name == "tinyopt"
              else _torch_profile(size, steps, clock, optimizer))
    conn.recv()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="baby")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    ap.add_argument("--nodes", action="store_true",
                    help="tinyopt's times per node, with bytes and rate (see above)")
    ap.add_argument("--sgd", action="store_true", help="cnn/mlp: SGD with momentum, not Adam")
    args = ap.parse_args()
    pin_threads(args.threads)
    libs = libraries()
    pipes, procs = start_workers(worker, libs)
    results = []
    for c in pipes:  # one at a time: the profiles do not share the cores
        c.send((args.size, args.steps, args.cpu, args.nodes, "sgd" if args.sgd else "adam"))
        results.append(c.recv())
    stop_workers(pipes, procs)
    for lib, res in zip(libs, results):
        if args.nodes and lib == "tinyopt":
            _print_nodes(res)
            continue
        total = sum(v for k, v in res.items() if not k.startswith("(whole"))
        print(f"\n{lib}, {args.size}, {args.threads} thread(s): {total * 1e3:.1f} ms per step"
              + (f" (unprofiled {res['(whole step, unprofiled)'] * 1e3:.1f} ms)"
                 if "(whole step, unprofiled)" in res else ""))
        for k, v in sorted(res.items(), key=lambda kv: -kv[1])[:args.top]:
            if not k.startswith("(whole"):
                print(f"  {v * 1e3:9.3f} ms  {100 * v / total:5.1f}%  {k}")
    if len(results) == 2 and not args.nodes:
        _print_gemm_budget(*results)


# The ops that are a model's weight GEMMs in each library (attention's own products aside)
GEMM_OPS = {"tinyopt": ("linear", "linear_relu", "matmul", "linear_grad_weight"),
            "torch": ("aten::mm", "aten::addmm", "aten::bmm")}


def _print_gemm_budget(mine: dict[str, float], theirs: dict[str, float]) -> None:
    """Point 4's arithmetic: tinyopt's GEMMs alone against 0.8 of torch's step.  Where they
    exceed it, no saving outside the GEMMs reaches the goal."""
    gemm = [sum(r.get(k, 0.0) for k in GEMM_OPS[lib]) for lib, r in
            (("tinyopt", mine), ("torch", theirs))]
    step = [sum(v for k, v in r.items() if not k.startswith("(whole")) for r in (mine, theirs)]
    budget = 0.8 * theirs.get("(whole step, unprofiled)", step[1])
    print(f"\nGEMMs: tinyopt {gemm[0] * 1e3:.1f} ms ({100 * gemm[0] / step[0]:.0f}% of its "
          f"step), torch {gemm[1] * 1e3:.1f} ms ({100 * gemm[1] / step[1]:.0f}%); the rest: "
          f"tinyopt {(step[0] - gemm[0]) * 1e3:.1f} ms, torch {(step[1] - gemm[1]) * 1e3:.1f} ms; "
          f"0.8 of torch's unprofiled step: {budget * 1e3:.1f} ms, tinyopt's GEMMs alone "
          f"{gemm[0] / budget:.2f} of it")


def _print_nodes(res: dict[str, float]) -> None:
    """tinyopt's ``--nodes`` table: each node in plan order, then the rest."""
    probe = res.pop("(probe GB/s)")
    moved = {k[len("(bytes) "):]: v for k, v in res.items() if k.startswith("(bytes) ")}
    times = {k: v for k, v in res.items() if not k.startswith("(bytes) ")}
    total = sum(times.values())
    print(f"\ntinyopt: {total * 1e3:.3f} ms per step; the bandwidth probe: {probe:.1f} GB/s")
    print(f"  {'ms':>9}  {'%':>5}  {'KiB':>8}  {'GB/s':>6}  node")
    for k in sorted(times, key=lambda k: (k.startswith("("), k)):
        v, b = times[k], moved.get(k, 0.0)
        rate = f"{b / v / 1e9:6.1f}" if b and v else " " * 6
        print(f"  {v * 1e3:9.3f}  {100 * v / total:5.1f}  {b / 1024:8.0f}  {rate}  {k}")


if __name__ == "__main__":
    main()
