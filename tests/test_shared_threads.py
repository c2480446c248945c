"""kernels/native/shared_threads.py: numpy's OpenBLAS runs its parallel jobs on GNU OpenMP's threads, with
the same bits as on its own threads, from several Python threads at once, on pthreads where
OpenMP cannot give a team, and after fork (a child goes back to OpenBLAS's own threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from tinyopt.kernels.native import shared_threads

SHAPES = [(1024, 128, 384), (700, 200, 800), (64, 2000, 96), (20, 200, 800)]


def _shared():
    if not shared_threads.share():
        pytest.skip("no OpenBLAS threads callback or no GNU OpenMP layer here")
    return shared_threads._STATE["setter"]


def _products(dtype):
    rng = np.random.default_rng(1)
    out = []
    for M, K, N in SHAPES:
        a = rng.standard_normal((M, K)).astype(dtype)
        b = rng.standard_normal((K, N)).astype(dtype)
        out += [(a @ b).tobytes(), (a.T.copy().T @ b).tobytes()]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemms_on_openmp_threads_give_openblass_own_bits(dtype):
    setter = _shared()
    shared = _products(dtype)
    setter(None)  # OpenBLAS's own threads for the reference
    try:
        own = _products(dtype)
    finally:
        setter(shared_threads.c_function("jobs").address)
    assert shared == own


def test_gemms_from_two_python_threads_at_once_give_the_same_bits():
    _shared()
    want = _products(np.float32)
    got = [None] * 3

    def work(k):
        for _ in range(3):
            got[k] = _products(np.float32)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [want] * 3


CHILD = """if True:
    import os, sys, multiprocessing as mp
    import numpy as np
    import tinyopt as to
    from tinyopt import nn
    from tinyopt.kernels.native import shared_threads

    def step(seed=0):
        to.manual_seed(seed)
        model = nn.Sequential(nn.Linear(300, 400), nn.ReLU(), nn.Linear(400, 500))
        opt = to.optim.Adam(model.parameters())
        x = np.random.default_rng(seed).standard_normal((700, 300)).astype(np.float32)
        for _ in range(2):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), np.arange(700) % 500)
            loss.backward()
            opt.step()
        a = np.ones((700, 900), np.float32)
        return loss.item().hex(), float((a @ a.T).sum())

    print("shared", shared_threads.share(), step(), flush=True)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:
            print("child", shared_threads._STATE["shared"], step(), flush=True)
            os._exit(0)
        print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        with mp.get_context("fork").Pool(2) as pool:
            print("pool", pool.map(step, [0, 0]), flush=True)
        print("parent", step(), flush=True)
"""


def _run(*args, **env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                           timeout=300, env=e)
    except subprocess.TimeoutExpired as x:
        pytest.fail(f"hung: {x.stdout!r}")
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_after_shared_gemms_trains_and_multiplies_and_never_hangs():
    _shared()
    out = _run("fork")
    first = out[0].split(" ", 2)
    assert first[:2] == ["shared", "True"]
    assert out[1] == f"child False {first[2]}"
    assert out[2:] == ["exit 0", f"pool [{first[2]}, {first[2]}]", f"parent {first[2]}"]


def test_jobs_run_on_pthreads_where_openmp_gives_no_team_and_bits_do_not_change():
    _shared()
    ref = _run("-", TINYOPT_SHARE_BLAS_THREADS="0")
    assert ref[0].startswith("shared False ")
    for env in ({}, {"OMP_THREAD_LIMIT": "1"}, {"OMP_DYNAMIC": "true"}):
        out = _run("-", **env)
        assert out == ["shared True " + ref[0].split(" ", 2)[2]], env


def test_runs_of_one_plan_with_chunk_kernels_in_several_threads_give_each_threads_bits():
    """Attention's pairs, cross-entropy's exponentials and layer norm's rows run as chunks on the
    shared threads, reading an argument block while they run: threads running one plan at once
    (models of one architecture, docs/threads.md) each get the bits of running alone."""
    import tinyopt as to
    import tinyopt.nn.functional as F
    from tinyopt.kernels import loss as kloss
    if not shared_threads.chunk_runner().parallel:
        pytest.skip("no shared OpenMP threads here")
    n, steps = 4, 6
    rng = np.random.default_rng(3)
    rows = kloss.PARALLEL_ROWS_MIN // 64  # logits (rows, 64): the exponentials node's size
    data = [(rng.standard_normal((2, 4, 16, 8)).astype(np.float32),
             rng.standard_normal((rows, 64)).astype(np.float32),
             rng.integers(0, 64, rows),
             rng.standard_normal((512, 64)).astype(np.float32)) for _ in range(n)]  # (2**15)

    def run(k, barrier=None):
        qkv, logits, y, z0 = data[k]
        out = []
        for step in range(steps):  # new values each step (stale ones would hide a mix-up)
            q = to.tensor(qkv + np.float32(step), requires_grad=True)
            x = to.tensor(logits * np.float32(step + 1), requires_grad=True)
            z = to.tensor(z0 * np.float32(step + 1), requires_grad=True)
            w = to.tensor(np.full(64, step + 0.5, np.float32), requires_grad=True)
            if barrier is not None:
                barrier.wait()
            a = F.scaled_dot_product_attention(q, q * 0.5, q * 2.0, is_causal=True)
            h = F.layer_norm(z, (64,), w)
            loss = a.square().sum() + F.cross_entropy(x, to.tensor(y)) + (h * z).sum()
            loss.backward()
            out += [a.numpy().tobytes(), q.grad.numpy().tobytes(), x.grad.numpy().tobytes(),
                    z.grad.numpy().tobytes(), w.grad.numpy().tobytes()]
        return out
    alone = [run(k) for k in range(n)]
    results: list = [None] * n
    errors: list = []
    barrier = threading.Barrier(n)

    def work(k):
        try:
            results[k] = run(k, barrier)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == alone


def test_the_kernels_results_do_not_depend_on_their_thread_count():
    """docs/threads.md: tinyopt's own kernels (reductions, elementwise, softmax, conv, the fused
    optimizer steps), large enough to run their parallel builds, give the same bits at 1 and 2
    kernel threads (BLAS held at 1 thread: its bits may depend on its count, issue 25.16)."""
    import pathlib
    script = pathlib.Path(__file__).parent.parent / "docs" / "thread_bits.py"
    runs = []
    for n in (1, 2):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS=str(n),
                   OMP_NUM_THREADS=str(n))
        out = subprocess.run([sys.executable, str(script), "--child"], env=env, check=True,
                             capture_output=True, text=True, timeout=600).stdout
        runs.append(dict(line.rsplit(" ", 1) for line in out.splitlines()))
    assert len(runs[0]) >= 10 and runs[0] == runs[1]
