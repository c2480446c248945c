"""tinyopt.distributed on real MPI ranks (``mpiexec`` from this environment).

Process start-up and numba loading cost seconds on a shared 2-core machine, so launches are
few and each does much:

- ``mpi_checks.py``: every check that leaves the job alive, in ONE launch on 2 ranks (each test
  here reports one of them); the same launch again across two simulated hosts (network
  namespaces, MPICH over TCP);
- ``mpi_failures.py``: one launch per way a rank can fail; each must end the job in seconds;
- ``mpi_resume.py``: four launches on 2, 3, 2 and 1 ranks that save, reshard, resume, kill and
  restart runs.

Every launch has a timeout, so a hang is a failure.  Without the ``mpi`` extra (mpi4py + mpich)
these tests skip and say how to install it; the single-process parts (import hygiene, the
install message, DistributedSampler) always run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mpi_checks
from tinyopt.data import DistributedSampler

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
EXAMPLES = HERE.parent / "examples"
NO_MPI = "the mpi extra is not installed (pip install -e '.[mpi]' installs mpi4py and mpich)"


def _mpiexec() -> str | None:
    local = Path(sys.executable).with_name("mpiexec")
    return str(local) if local.exists() else shutil.which("mpiexec")


def _has_mpi() -> bool:
    try:
        import importlib.util
        return importlib.util.find_spec("mpi4py") is not None and _mpiexec() is not None
    except ImportError:
        return False


needs_mpi = pytest.mark.skipif(not _has_mpi(), reason=NO_MPI)


def rank_env(**extra: str) -> dict[str, str]:
    """The ranks' environment: this source tree, one kernel thread per rank (2 ranks on 2
    cores)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE), str(EXAMPLES)]),
                NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **extra)


def launch(*args: str, timeout: float = 300, ranks: int = 2) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python args...`` with this interpreter and this source tree."""
    return subprocess.run([_mpiexec(), "-n", str(ranks), sys.executable, *args],
                          capture_output=True, text=True, timeout=timeout, env=rank_env(),
                          cwd=HERE)


def checks_run(r: subprocess.CompletedProcess) -> dict:
    """mpi_checks.py's results: check name -> None or the failure."""
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert r.returncode == 0 and lines, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(lines[-1][len("RESULTS "):])


@pytest.fixture(scope="module")
def results() -> dict:
    return checks_run(launch(str(HERE / "mpi_checks.py")))


@needs_mpi
@pytest.mark.parametrize("name", [fn.__name__ for fn in mpi_checks.CHECKS])
def test_on_two_ranks(results, name):
    assert name in results, f"{name} did not run"
    assert results[name] is None, results[name]


@needs_mpi
def test_a_rank_that_raises_brings_the_job_down_with_its_error():
    code = ("import numpy as np, tinyopt.distributed as dist\n"
            "dist.init_process_group('mpi')\n"
            "if dist.get_rank() == 1:\n"
            "    raise ValueError('rank one failed on purpose')\n"
            "dist.all_reduce(np.ones(3))  # rank 0 waits here for a rank that is gone\n"
            "print('unreachable')\n")
    r = launch("-c", code, timeout=60)  # a hang fails by the timeout
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "[rank 1] ValueError: rank one failed on purpose" in out, out
    assert "unreachable" not in out


FAILURES = {  # mpi_failures.py's scenarios (all hung for ever before) and what stderr shows
    "sys_exit": [r"\[rank 1\] exited with status 1 while the process group was live"],
    "thread_raises": [r"\[rank 1\] Exception in thread loader:",
                      r"\[rank 1\] ValueError: the loader thread of rank 1 failed"],
    "hangs": [r"\[rank 0\] tinyopt.distributed.errors.DistBackendError: rank 0: "
              r"all_reduce\(float64 of shape \(3,\), op=SUM\) \(collective #1\) timed out "
              r"after 0:00:02: ranks \[1\] did not arrive"],
    "extra_step": [r"rank 0 runs all_reduce\(float32 of shape \(46,\), op=SUM\) for "
                   r"DistributedDataParallel's gradient reduction after backward 3; rank 1 runs "
                   r"destroy_process_group\(\)"],
    "extra_zero_step": [r"DistBackendError: rank 0 waits in all_reduce\(uint8 of shape \(4,\), "
                        r"op=MAX\) for ZeroRedundancyOptimizer.step\(\) #3, has-gradient flags "
                        r"\(collective #\d+\), but rank 1 left the job \(exited\)"],
    "no_sync_alone": [r"The ranks disagree on the step count \(rank 0: 2, rank 1: 1\): did "
                      r"some ranks run a backward under no_sync\(\) alone"],
}


@needs_mpi
@pytest.mark.parametrize("scenario", FAILURES)
def test_a_failing_rank_ends_the_whole_job_in_seconds(scenario):
    """The job ends non-zero with the reason on stderr, a few seconds after the failure (the
    group's timeout is 2 s here; "hangs" waits for it)."""
    r = launch(str(HERE / "mpi_failures.py"), scenario, "2", timeout=90)  # a hang fails here
    ended = time.time()
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    for pattern in FAILURES[scenario]:
        assert re.search(pattern, out), (pattern, out)
    failed_at = float(re.search(r"FAILING AT ([0-9.]+)", out).group(1))
    assert ended - failed_at < (2 if scenario == "hangs" else 0) + 10, ended - failed_at
    assert "rank 0 finished" not in out


# ---- resharded resume and elastic restart (mpi_resume.py) ---------------------------------------
# Resumed on as many ranks as saved, a ZeRO run repeats the uninterrupted one bit for bit (the
# same sums in the same order).  On another number of ranks each global batch is cut into other
# shares, so the gradient averages are sums of the same 12 per-sample terms in another order:
# they differ in their last float32 bits (about 1e-7 relative).  Adam moves a parameter by at
# most about lr per step whatever the gradient's scale, and by lr * (that relative difference)
# less or more, so after k steps the runs differ by at most about k * lr * 1e-6; the bound below
# is 10 times that (measured: at most 6e-8, two float32 ulps of the largest parameter, 0.27).
# One step's update is ~lr = 1e-2, so the bound catches a lost or repeated step, state or batch.
LR, RESUMED_STEPS, ELASTIC_STEPS = 1e-2, 4, 12


def bound(steps: int) -> float:
    return 10 * steps * LR * 1e-6


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    """Save ZeRO runs on 2 and 3 ranks; resume them on 1, 2 and 3 ranks and on a plain Adam;
    run fit on 3 ranks until rank 1 is SIGKILLed; restart that job on 2 ranks."""
    folder = tmp_path_factory.mktemp("resume")
    runs = {}
    for name, ranks, phases in (
            ("save on 2", 2, ["save", "grow-save"]),
            ("3 ranks", 3, ["save", "resume:3", "resume:2", "elastic-reference", "grow-resume",
                            "elastic-killed"]),
            ("2 ranks", 2, ["resume:2", "resume:3", "elastic-restart"]),
            ("1 rank", 1, ["resume:2", "resume:3", "plain:2", "plain:3"])):
        r = launch(str(HERE / "mpi_resume.py"), str(folder), *phases, ranks=ranks, timeout=240)
        runs[name] = (r, time.time())
        assert r.returncode == 0 or name == "3 ranks", f"{name}: {r.stdout}\n{r.stderr}"
    return folder, runs


def saved_params(path: Path) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def largest_difference(a: Path, b: Path) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(saved_params(a),
                                                            saved_params(b)))


@needs_mpi
@pytest.mark.parametrize("saved,resumed", [(2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3)])
def test_zero_checkpoint_resumes_on_any_number_of_ranks(resume_runs, saved, resumed):
    folder, _ = resume_runs
    final, got = folder / f"final-{saved}.npz", folder / f"resumed-{saved}-on-{resumed}.npz"
    if saved == resumed:
        assert all(np.array_equal(a, b) for a, b in zip(saved_params(final),
                                                        saved_params(got)))
    else:
        assert largest_difference(final, got) <= bound(RESUMED_STEPS)


@needs_mpi
@pytest.mark.parametrize("saved", [2, 3])
def test_zero_checkpoint_resumes_on_a_plain_optimizer(resume_runs, saved):
    folder, _ = resume_runs
    assert largest_difference(folder / f"final-{saved}.npz", folder / f"plain-{saved}.npz") \
        <= bound(RESUMED_STEPS)


@needs_mpi
def test_elastic_restart_after_a_rank_is_killed(resume_runs):
    """fit on 3 ranks, rank 1 SIGKILLed in the third epoch: the job ends at once; restarted
    from the last checkpoint on 2 ranks (same global batch), fit ends where an uninterrupted
    run ends, and says that the world size changed."""
    folder, runs = resume_runs
    killed, ended = runs["3 ranks"]
    out = killed.stdout + killed.stderr
    assert killed.returncode != 0 and "KILLING AT" in out, out
    assert "PHASE elastic-killed done" not in out
    assert ended - float(re.search(r"KILLING AT ([0-9.]+)", out).group(1)) < 10
    restart = runs["2 ranks"][0].stdout
    assert "WARNING on rank 0: fit: resuming " in restart and \
        "written by 3 ranks, on 2 ranks: the global batch stays 12" in restart, restart
    assert "WARNING on rank 1" not in restart  # said once
    assert largest_difference(folder / "elastic-reference.npz",
                              folder / "elastic-restarted.npz") <= bound(ELASTIC_STEPS)


@needs_mpi
def test_fit_resumes_on_more_ranks_than_wrote_the_checkpoint(resume_runs):
    """Two epochs on 2 ranks, then the last two on 3 (the same global batch): the end of a run
    on 3 ranks that never stopped; the new rank gets a random stream of its own."""
    folder, runs = resume_runs
    out = runs["3 ranks"][0].stdout
    assert "written by 2 ranks, on 3 ranks: the global batch stays 12" in out and \
        "; rank 2 starts a new random stream" in out, out
    assert largest_difference(folder / "elastic-reference.npz", folder / "grown.npz") <= \
        bound(ELASTIC_STEPS)


# ---- two hosts: two network namespaces joined by a veth pair, MPICH over TCP ---------------------
def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=True).stdout


@pytest.fixture
def two_hosts():
    """Two "machines": network namespaces whose only link is a veth pair, named ``tinyveth``
    in both, with addresses 10.213.0.1 and 10.213.0.2 and no route anywhere else.  Removed
    after the test, whatever happens (removing a namespace removes its end of the pair)."""
    if shutil.which("ip") is None:
        pytest.skip("no ip command (iproute2) to make network namespaces")
    tag = f"tinyopt-{os.getpid()}"
    spaces, made = [f"{tag}-a", f"{tag}-b"], []
    try:
        for ns in spaces:
            ip("netns", "add", ns)
            made.append(ns)
        ends = [f"to{os.getpid()}a", f"to{os.getpid()}b"]
        ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for i, (ns, end) in enumerate(zip(spaces, ends), 1):
            ip("link", "set", end, "netns", ns)
            ip("-n", ns, "link", "set", end, "name", "tinyveth")
            ip("-n", ns, "addr", "add", f"10.213.0.{i}/24", "dev", "tinyveth")
            ip("-n", ns, "link", "set", "tinyveth", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as e:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", f"to{os.getpid()}a"], capture_output=True,
                       timeout=30)
        pytest.skip(f"cannot make network namespaces here: {getattr(e, 'stderr', '') or e}")
    try:
        yield {f"10.213.0.{i}": ns for i, ns in enumerate(spaces, 1)}
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def veth_bytes(ns: str) -> int:
    """Bytes sent through ``ns``'s end of the veth pair."""
    return json.loads(ip("-n", ns, "-s", "-j", "link", "show", "tinyveth"))[0]["stats64"][
        "tx"]["bytes"]


def launch_on_two_hosts(two_hosts: dict[str, str], folder: Path, *args: str,
                        timeout: float) -> subprocess.CompletedProcess:
    """``mpiexec`` in the first namespace, one rank per "host": it starts the second host's
    proxy through netns_launcher.sh where it would use ssh; MPICH's UCX netmod carries the data
    over TCP on the veth pair (MPIR_CVAR_NOLOCAL: no shared memory between the "hosts", which
    share this machine's memory)."""
    hosts = folder / "hosts"
    hosts.write_text("".join(f"{h}:1\n" for h in two_hosts))
    env = rank_env(TINYOPT_NETNS_HOSTS=" ".join(f"{h}={ns}" for h, ns in two_hosts.items()),
                   TINYOPT_EXPECT_NETNS="2", MPIR_CVAR_NOLOCAL="1", UCX_TLS="tcp,self",
                   UCX_NET_DEVICES="tinyveth")
    return subprocess.run(["ip", "netns", "exec", next(iter(two_hosts.values())), _mpiexec(),
                           "-f", str(hosts), "-n", "2", "-launcher", "ssh", "-launcher-exec",
                           str(HERE / "netns_launcher.sh"), "-iface", "tinyveth",
                           sys.executable, *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE)


@needs_mpi
def test_a_job_across_two_hosts_over_tcp(two_hosts, tmp_path):
    """Every check of mpi_checks.py with rank 0 on one "host" and rank 1 on the other; then a
    job whose rank 1 hangs: rank 0's timeout must end the ranks of both hosts."""
    first, second = two_hosts.values()
    before = veth_bytes(first) + veth_bytes(second)
    r = launch_on_two_hosts(two_hosts, tmp_path, str(HERE / "mpi_checks.py"), timeout=300)
    failed = {name: error for name, error in checks_run(r).items() if error is not None}
    assert not failed, failed
    assert veth_bytes(first) + veth_bytes(second) - before > 10**6  # the data went over TCP
    for ns in two_hosts.values():  # ... and could go nowhere else
        assert ip("-n", ns, "route", "show", "default") == ""
        assert [link["ifname"] for link in json.loads(ip("-n", ns, "-j", "link"))] == \
            ["lo", "tinyveth"]
    hung = launch_on_two_hosts(two_hosts, tmp_path, str(HERE / "mpi_failures.py"), "hangs",
                               "2", timeout=60)  # the other host's rank sleeps for an hour
    assert hung.returncode != 0 and re.search(FAILURES["hangs"][0], hung.stderr), hung.stderr


def test_import_tinyopt_never_imports_mpi4py():
    code = ("import sys, tinyopt, tinyopt.distributed, tinyopt.nn.parallel, tinyopt.data\n"
            "tinyopt.nn.parallel.DistributedDataParallel, tinyopt.data.DistributedSampler\n"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert r.returncode == 0, r.stderr


def test_missing_mpi_says_what_to_install(monkeypatch):
    import tinyopt.distributed as dist
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    with pytest.raises(RuntimeError, match=r"pip install 'tinyopt\[mpi\]'"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="only backend='mpi'"):
        dist.init_process_group("gloo")
    with pytest.raises(TypeError, match="Expected timeout argument to be of type "
                                         "datetime.timedelta, got 30"):
        dist.init_process_group("mpi", timeout=30)
    with pytest.raises(ValueError, match="init_method is not supported"):
        dist.init_process_group("mpi", init_method="tcp://10.0.0.1:23456")


# ---- DistributedSampler (explicit ranks: no process group needed) ------------------------------
@pytest.mark.parametrize("n,drop_last", [(10, False), (11, False), (11, True), (3, False)])
def test_sampler_shares_are_disjoint_and_cover_the_data(n, drop_last):
    shares = [list(DistributedSampler(range(n), num_replicas=4, rank=r, seed=7,
                                      drop_last=drop_last)) for r in range(4)]
    per_rank = n // 4 if drop_last else -(-n // 4)
    assert all(len(s) == per_rank for s in shares)
    flat = sum(shares, [])
    if drop_last:
        assert len(set(flat)) == len(flat)  # distinct, tail dropped
    else:
        assert set(flat) == set(range(n))  # covered; the padding repeats the first samples
        assert len(flat) - n == 4 * per_rank - n


def test_sampler_epochs_seed_and_order():
    ds = range(20)
    a = DistributedSampler(ds, num_replicas=2, rank=0, seed=1)
    b = DistributedSampler(ds, num_replicas=2, rank=0, seed=1)
    assert list(a) == list(b) and list(a) == list(a)  # same seed and epoch: same order
    first = list(a)
    a.set_epoch(1)
    other = DistributedSampler(ds, num_replicas=2, rank=1, seed=1)
    other.set_epoch(1)
    assert list(a) != first and sorted(list(a) + list(other)) == list(range(20))
    plain = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)
    assert list(plain) == list(range(1, 20, 2))
    assert a._indices().dtype == np.int64


def test_sampler_errors():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    # the defaults come from the default process group: not initialized, or (without the mpi
    # extra) not available at all, as torch says when built without distributed support
    import tinyopt.distributed as dist
    if dist.is_available():
        with pytest.raises(ValueError, match="has not been initialized"):
            DistributedSampler(range(4))
    else:
        with pytest.raises(RuntimeError, match=r"Requires distributed package to be available "
                                               r"\(.*pip install 'tinyopt\[mpi\]'"):
            DistributedSampler(range(4))


def test_ranks_a_resumed_run_did_not_have_get_new_streams():
    from tinyopt.distributed.fitting import _stream
    from tinyopt.engine import random
    states = [random.Generator(s).get_state() for s in (1, 2)]
    assert _stream(states, 1) is states[1]
    extra = [_stream(states, r) for r in (2, 3, 4)]  # ranks 2..4 of a run saved on 2 ranks
    draws = []
    for st in states + extra:
        g = random.Generator(0)
        g.set_state(st)
        draws.append(tuple(g.numpy.integers(2**62, size=4)))
    assert len(set(draws)) == 5  # five different streams
    assert _stream(states, 3) == extra[1]  # deterministic: every restart gives the same


def test_a_child_a_rank_forks_is_not_guarded(monkeypatch, capsys):
    """A process the rank forks (a data-loading worker) has no MPI: an exception there is
    printed as usual, not turned into an abort of the job from the child."""
    from tinyopt.distributed import watchdog
    monkeypatch.setattr(watchdog._hooks, "pg", object())  # a live group...
    monkeypatch.setattr(watchdog._hooks, "pid", os.getpid() + 1)  # ...of the parent process
    try:
        raise ValueError("in the child")
    except ValueError as e:
        watchdog._on_exception(type(e), e, e.__traceback__)
    assert "ValueError: in the child" in capsys.readouterr().err
