"""Where a GPT's (or the CNN's) training step goes, op by op, tinyopt against PyTorch (issue 27.4).

tinyopt: every step of the compiled plan is wrapped in a timer, keyed by the node's op (and
``view`` for views), plus the optimizer step and what is left (graph building, binding, Python);
PyTorch: ``torch.profiler`` over the same steps, its ops' self CPU time.  The model and sizes are
``bench_gpt.py``'s; each library runs in its own spawned worker.  Times are wall clock per step,
so on a loaded machine they carry the load; ``--cpu`` times tinyopt's ops and both whole steps in
CPU time instead (readable under load at 1 thread; PyTorch's ops stay the profiler's wall time).
``--size cnn`` (``mlp``) profiles ``bench_train.py``'s CNN (MLP) at batch 256 with Adam instead.

    python benchmarks/profile_gpt.py [--size baby|small|gpt2|cnn|mlp] [--threads 1] [--steps 10]
                                     [--top 25] [--cpu]
"""

from __future__ import annotations

import argparse
import collections
import time

from harness import libraries, pin_threads, start_workers, stop_workers


def _stepper(lib_name: str, size: str):
    """One training step of the size's GPT (``bench_gpt.py``) or, for ``cnn`` and ``mlp``, of
    ``bench_train.py``'s CNN or MLP at batch 256 with Adam."""
    if size in ("cnn", "mlp"):
        import bench_train
        return bench_train._stepper(lib_name, size.upper(), 256, "adam")
    import bench_gpt
    return bench_gpt._stepper(lib_name, size)


def _tinyopt_profile(size: str, steps: int, clock) -> dict[str, float]:
    from tinyopt.engine import plan as plan_mod
    totals: dict[str, float] = collections.defaultdict(float)
    made = plan_mod._step

    def timed_step(A, i, t, srcs, kind):
        fn = made(A, i, t, srcs, kind)
        key = "view" if kind == "view" else t.op

        def run():
            t0 = clock()
            fn()
            totals[key] += clock() - t0
        return run

    plan_mod._step = timed_step  # before the plan is built: its steps are wrapped
    step = _stepper("tinyopt", size)
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
    kernels = sum(totals.values())
    totals["(rest: graph, binding, Python)"] = whole - kernels
    return {k: v / steps for k, v in totals.items()}


def _optimizer_of(step):
    """The optimizer a ``_stepper`` step's closure steps."""
    for cell in step.__closure__:
        v = cell.cell_contents
        if hasattr(v, "param_groups"):
            return v
    raise LookupError("no optimizer in the step's closure")


def _torch_profile(size: str, steps: int, clock) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    step = _stepper("torch", size)
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
    size, steps, cpu = conn.recv()
    clock = time.process_time if cpu else time.perf_counter
    conn.send(_tinyopt_profile(size, steps, clock) if lib_name == "tinyopt"
              else _torch_profile(size, steps, clock))
    conn.recv()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="baby")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    args = ap.parse_args()
    pin_threads(args.threads)
    libs = libraries()
    pipes, procs = start_workers(worker, libs)
    results = []
    for c in pipes:  # one at a time: the profiles do not share the cores
        c.send((args.size, args.steps, args.cpu))
        results.append(c.recv())
    stop_workers(pipes, procs)
    for lib, res in zip(libs, results):
        total = sum(v for k, v in res.items() if not k.startswith("(whole"))
        print(f"\n{lib}, {args.size}, {args.threads} thread(s): {total * 1e3:.1f} ms per step"
              + (f" (unprofiled {res['(whole step, unprofiled)'] * 1e3:.1f} ms)"
                 if "(whole step, unprofiled)" in res else ""))
        for k, v in sorted(res.items(), key=lambda kv: -kv[1])[:args.top]:
            if not k.startswith("(whole"):
                print(f"  {v * 1e3:9.3f} ms  {100 * v / total:5.1f}%  {k}")


if __name__ == "__main__":
    main()
