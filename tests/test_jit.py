"""The kernel decorators: parallel kernels give the same bits on one thread and on several."""

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.kernels import jit
from tinyopt.kernels.native import numba_cache


def _train(threshold, monkeypatch):
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", threshold)
    to.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    x = rng.random((8, 1, 16, 16), dtype=np.float32)
    y = rng.integers(0, 3, 8)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.data.numpy().copy() for p in model.parameters()]


def test_parallel_and_serial_runs_agree_bit_for_bit(monkeypatch):
    serial = _train(1 << 62, monkeypatch)
    parallel = _train(0, monkeypatch)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)


def test_parallel_kernel_keeps_the_callers_thread_count(monkeypatch):
    numba = pytest.importorskip("numba")
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", 1 << 62)
    before = numba.get_num_threads()
    _train(1 << 62, monkeypatch)
    assert numba.get_num_threads() == before


def test_specialized_makes_one_kernel_per_option_combination():
    @jit.specialized
    def scale(negate: bool):
        """y <- -x or x, decided when the kernel is compiled."""
        @jit.kernel
        def k(x, y):
            for i in range(x.shape[0]):
                y[i] = -x[i] if negate else x[i]
        return k

    x = np.arange(3.0)
    y = np.empty(3)
    scale[True](x, y)
    np.testing.assert_array_equal(y, -x)
    scale[False](x, y)
    np.testing.assert_array_equal(y, x)
    assert scale[True] is scale[True] and scale[True] is not scale[False]
    assert scale.__doc__.startswith("y <- -x")


def test_a_serial_build_without_reference_counting():
    """``serial_nrt=False``: the serial build counts no array references (none of numba's
    NRT_incref/decref in its code) and computes the kernel's result; one that allocates is
    refused when it compiles, not run without its memory managed."""
    def add_one(x, y):
        for i in jit.prange(x.shape[0]):
            y[i] = x[i] + 1.0

    def add_one_serial(x, y):
        for i in range(x.shape[0]):
            y[i] = x[i] + 1.0

    k = jit.parallel_kernel(add_one, serial=add_one_serial, serial_nrt=False)
    x, y = np.arange(5.0), np.zeros(5)
    k(x, y)
    np.testing.assert_array_equal(y, x + 1.0)
    assert "NRT_incref" not in next(iter(k.serial_build.inspect_llvm().values()))

    def scratch(x, y):
        t = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            y[i] = t[i] + x[i]

    def scratch_serial(x, y):
        t = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            y[i] = t[i] + x[i]

    from numba.core.errors import TypingError
    with pytest.raises(TypingError):
        jit.parallel_kernel(scratch, serial=scratch_serial, serial_nrt=False).serial(x, y)


def test_kernels_and_c_functions_without_reference_counting(monkeypatch):
    """``kernel(nrt=False)`` and ``c_callback(nrt=False)`` compile without numba's reference
    counting (no call into numba's NRT in their code) to the same results, and an allocation
    is refused when the kernel compiles.  The first training steps' kernels that allocate
    nothing are declared so, and the elementwise loops are built so."""
    from numba.core.errors import TypingError

    from tinyopt.kernels import elementwise, linalg, loss, norm, reduce, rnn
    from tinyopt.kernels.native import address

    # (made before caching is turned off below: ce_rows's kernels are made once a process)
    first_steps = [reduce.sum_axis, reduce.sum_rows, linalg.bias_add, norm.embedding_rows,
                   norm.layer_norm_grad_wb, norm.layer_norm_apply.serial_build, rnn.sum_grad_h,
                   norm.embedding_grad,
                   loss.ce_rows[True, True], loss.ce_rows[False, True].serial_build,
                   jit._flat_loop(elementwise.add._fn, 2),
                   jit._broadcast_loop(elementwise.add._fn, (1, 2)),
                   jit._in_place_loop(elementwise.add._fn, 2, (0,))]
    assert [k.targetoptions.get("_nrt") for k in first_steps] == [False] * len(first_steps)

    monkeypatch.setitem(jit._OPTIONS, "cache", False)  # (compiled here: their IR is readable)

    def add_rows(x, out):
        for i in range(out.shape[0]):
            row = out[i]
            for j in range(out.shape[1]):
                row[j] += x[i, j]

    x = np.arange(6.0).reshape(2, 3)
    counted, uncounted = np.ones((2, 3)), np.ones((2, 3))
    with_nrt, without = jit.kernel(add_rows), jit.kernel(add_rows, nrt=False)
    with_nrt(x, counted)
    without(x, uncounted)
    np.testing.assert_array_equal(uncounted, counted)
    # (LLVM drops the kernel's own increments and decrements where they pair up; the Python
    # wrapper's adoption and release of each argument stay: the probe sees them)
    assert "NRT_" in next(iter(with_nrt.inspect_llvm().values()))
    assert "NRT_" not in next(iter(without.inspect_llvm().values()))

    def first_row(c, argp):
        a = address.carray(argp, (3,))
        a[0] = a[1] + a[2]

    cf = jit.c_callback(first_row, "void(int64, CPointer(int64))", nrt=False)
    assert "NRT_" not in cf._cfunc.inspect_llvm()

    def scratch(x, out):
        t = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            out[i] = t[i] + x[i]

    with pytest.raises(TypingError):
        jit.kernel(scratch, nrt=False)(x[0], counted[0])


def test_kernels_and_subroutines_compile_no_c_wrapper():
    """numba's cfunc wrapper (a C-callable copy of a function, for first-class function values)
    is compiled for no kernel nor subroutine: it was ~8% of a cold first training step."""
    @jit.subroutine
    def twice(v):
        return 2.0 * v

    @jit.kernel
    def k(x, y):
        for i in range(x.shape[0]):
            y[i] = twice(x[i])

    x = np.arange(3.0)
    y = np.empty(3)
    k(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    (cres,) = k.overloads.values()
    lib = cres.library
    assert lib.get_pointer_to_function(cres.fndesc.llvm_cpython_wrapper_name)  # (the probe works)
    assert not lib.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name)


# ---- a read-only install, fork (issue 9.6, 9.7): each in a child process -----------------
NO_LOCATOR = """if True:
    import os, sys, tempfile, warnings
    import numpy as np
    import numba.core.caching as caching

    def read_only(self):  # what numba meets in a read-only install with an unwritable $HOME
        raise PermissionError(13, "Read-only file system", self.get_cache_path())

    caching.InTreeCacheLocator.ensure_cache_path = read_only
    caching.UserWideCacheLocator.ensure_cache_path = read_only
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if sys.argv[1] == "memory":  # and no temporary folder either
            blocked = os.path.join(os.environ["TMPDIR"], "a-file")
            open(blocked, "w").close()
            tempfile.gettempdir = lambda: os.path.join(blocked, "tmp")

            def no_mkdtemp(*args, **kwargs):
                raise PermissionError(13, "Permission denied")
            tempfile.mkdtemp = no_mkdtemp
        import tinyopt as to
        from tinyopt import nn
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        opt = to.optim.SGD(model.parameters(), lr=0.1)
        x = np.ones((4, 6), np.float32)
        for _ in range(2):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), [0, 1, 2, 0])
            loss.backward()
            opt.step()
    print(sum("numba cannot cache" in str(w.message) for w in caught), loss.item() > 0)
    print(os.environ.get("NUMBA_CACHE_DIR", ""))
"""


@pytest.mark.parametrize("fallback", ["folder", "memory"])
def test_import_and_training_work_where_numba_cannot_cache(tmp_path, fallback):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", NO_LOCATOR, fallback], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "1 True"  # trained, with exactly one warning
    if fallback == "folder":
        folder = lines[1]
        assert folder.startswith(str(tmp_path)) and (os.stat(folder).st_mode & 0o777) == 0o700
        assert any(name.endswith(".nbi") for _, _, files in os.walk(folder) for name in files)
    else:
        assert lines[1:] == [""]  # no folder: compiled in memory


FORK = """if True:
    import os, multiprocessing as mp
    import numpy as np
    import tinyopt as to

    p = to.Parameter(np.ones(1 << 14, np.float32))
    opt = to.optim.SGD([p], lr=0.1, momentum=0.9)

    def step(_=None):
        p.grad = np.ones_like(p.data)
        opt.step()
        return float(p.data[0])

    step()  # 16k elements >= TINYOPT_PARALLEL_MIN: the parallel build, OpenMP's pool starts
    pid = os.fork()
    if pid == 0:
        step()
        os._exit(0)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    with mp.get_context("fork").Pool(2) as pool:
        print("pool", len(pool.map(step, range(4))), flush=True)
    print("parent", step())
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_fork_after_a_large_parallel_step_works_and_never_hangs():
    import os
    import subprocess
    import sys
    env = dict(os.environ, TINYOPT_PARALLEL_MIN="4096", PYTHONPATH=os.pathsep.join(sys.path))
    try:
        r = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True,
                           timeout=240, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"fork after a parallel step hung: {e.stdout!r}")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    assert out[:2] == ["child 0", "pool 4"] and out[2].startswith("parent "), out
    assert "GNU OpenMP" not in r.stderr


THREADS = """if True:
    import threading
    import numba, numpy as np
    import tinyopt as to

    def work(results, k):
        p = to.Parameter(np.ones(1 << 14, np.float32))
        opt = to.optim.SGD([p], lr=0.1, momentum=0.9)
        for _ in range(100):
            p.grad = np.ones(1 << 14, np.float32)
            opt.step()
        results[k] = p.data.numpy().copy()

    results = [None, None]
    threads = [threading.Thread(target=work, args=(results, k)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (results[0] == results[1]).all()
    print(numba.threading_layer())
"""


def test_parallel_kernels_from_two_threads_under_the_workqueue_layer():
    # numba's workqueue layer (where neither OpenMP nor TBB is found) terminates the process when
    # two threads enter parallel regions at once: tinyopt enters them one at a time
    import os
    import subprocess
    import sys
    env = dict(os.environ, TINYOPT_PARALLEL_MIN="4096", NUMBA_THREADING_LAYER="workqueue",
               PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "workqueue", r.stderr[-2000:]


CACHED_STEP = """if True:
    import importlib, pkgutil
    import numba, numpy as np
    import tinyopt as to
    import tinyopt.kernels as K
    from tinyopt import nn
    F = nn.functional
    to.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32, 5))
    emb = nn.Embedding(7, 4)
    opt = to.optim.Adam(list(m.parameters()) + list(emb.parameters()), lr=1e-3)
    x = np.random.default_rng(0).random((3, 1, 4, 4), dtype=np.float32)
    y = np.array([0, 4, 2])
    for _ in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y, label_smoothing=0.1) + emb(np.array([1, 6])).sum() \\
            + F.nll_loss(F.log_softmax(m(x), 1), to.tensor(y) + 0) \\
            + F.one_hot(to.tensor(y) + 0, 5).float().sum()
        loss.backward()
        opt.step()
    used, misses = 0, []
    for info in pkgutil.iter_modules(K.__path__):
        module = importlib.import_module("tinyopt.kernels." + info.name)
        for name, obj in vars(module).items():
            made = list(getattr(obj, "made", {}).values())  # kernels a @specialized made
            builds = [o for o in [obj] + made
                      if isinstance(o, numba.core.registry.CPUDispatcher)] + [
                v for o in [obj] + made for v in getattr(o, "__dict__", {}).values()
                if isinstance(v, numba.core.registry.CPUDispatcher)]
            for d in builds:
                used += bool(d.signatures)
                if d.stats.cache_misses:
                    misses.append(info.name + "." + name)
    print(used, sorted(set(misses)))
"""


def test_kernels_of_a_training_step_load_from_numbas_cache_in_the_next_process():
    # A kernel numba cannot cache (a closure over another kernel, a non-cacheable constant) is
    # compiled again in every process: the index checks once cost 0.9 s of each first step so.
    # The first child fills the cache where needed; the second must load every kernel from it.
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CACHED_STEP], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(r.stdout.split(maxsplit=1))
    used, misses = out[1]
    assert int(used) >= 10 and misses.strip() == "[]", out[1]


def _ufuncs():
    import importlib
    import pkgutil

    import tinyopt.kernels
    found = []
    for info in pkgutil.iter_modules(tinyopt.kernels.__path__):
        mod = importlib.import_module(f"tinyopt.kernels.{info.name}")
        found += [(info.name, k, v) for k, v in vars(mod).items() if isinstance(v, jit._LazyUfunc)]
    return found


def test_elementwise_kernels_give_the_same_bits_on_flat_arrays_as_their_ufuncs():
    """Contiguous operands of out's shape run a cached flat loop instead of the numba ufunc: the
    same scalar function on the same types, so the same bits (inf, NaN and -0 included)."""
    rng = np.random.default_rng(0)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3.0, -2.5])
    ufuncs = _ufuncs()
    assert len(ufuncs) > 20
    by_arity: dict[int, list] = {}  # three of each arity (every one compiles twice: a few s each)
    for entry in ufuncs:
        by_arity.setdefault(entry[2]._signatures[0].count(",") + 1, []).append(entry)
    for module, name, k in [e for group in by_arity.values() for e in group[:3]]:
        for sig in k._signatures:
            def dtype(name):
                return np.dtype(bool if name.strip() == "boolean" else name.strip())
            types = [dtype(t) for t in sig[sig.index("(") + 1:-1].split(",")]
            ret = dtype(sig[:sig.index("(")])
            args = []
            for dt in types:
                if dt.kind == "f":
                    a = np.concatenate([special, rng.standard_normal(56) * 3]).astype(dt)
                elif dt.kind == "b":
                    a = rng.random(64) < 0.5
                else:
                    a = rng.integers(-5, 6, 64).astype(dt)
                args.append(rng.permutation(a))
            flat = np.empty(64, ret)
            k(*args, out=flat)
            broadcast = np.empty((1, 64), ret)  # a (1, 64) out over (64,) inputs: the ufunc
            try:
                with np.errstate(all="ignore"):
                    k(*args, out=broadcast)
            except TypeError:  # numpy resolves this signature's types to another loop
                continue
            np.testing.assert_array_equal(flat.view(np.uint8), broadcast[0].view(np.uint8),
                                          err_msg=f"{module}.{name} {sig}")
            if ret.name in k._flat_types and all(dt == ret for dt in types):
                # a broadcast call of one dtype ran the ufunc of that signature alone: the same
                # bits as the ufunc of all of them (which numpy's type resolution would use)
                full = np.empty((1, 64), ret)
                with np.errstate(all="ignore"):
                    k._build(k._signatures)(*args, out=full)
                np.testing.assert_array_equal(full.view(np.uint8), broadcast.view(np.uint8),
                                              err_msg=f"{module}.{name} {sig} (all signatures)")


def test_elementwise_kernels_over_broadcast_operands_give_the_ufuncs_bits():
    """A call whose operands are laid out as out, are one value broadcast (a 0-d or size-1
    array, a zero-strided view) or are out's trailing dimensions repeated (a bias row) runs a
    cached loop reading each where broadcasting puts it: the same bits as numba's ufunc (so a
    warm process builds no ufunc for ``x ** 2``, its gradient or a bias add)."""
    rng = np.random.default_rng(1)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3.0, -2.5], np.float32)
    by_arity: dict[int, list] = {}
    for entry in _ufuncs():
        k = entry[2]
        sig = next((s for s in k._signatures if s.startswith("float32(")), None)
        if sig is not None and all(t.strip() == "float32" for t in sig[8:-1].split(",")):
            by_arity.setdefault(sig.count(",") + 1, []).append(entry)
    assert {1, 2, 3} <= set(by_arity)  # (up to 3 operands take the loop)
    for module, name, k in [e for n in (1, 2, 3) for e in by_arity[n][:2]]:
        n = k._signatures[0].count(",") + 1
        ufunc = k._build(["float32(" + ", ".join(["float32"] * n) + ")"])
        for one in range(n):
            for value in (special[rng.integers(8)], rng.standard_normal() * 3):
                args = [rng.permutation(np.concatenate([special, rng.standard_normal(40) * 3])
                                        .astype(np.float32)).reshape(6, 8) for _ in range(n)]
                row = rng.permutation(np.concatenate([special, rng.standard_normal(4)])
                                      ).astype(np.float32)[:8]
                for form in (np.array(value, np.float32), np.full((1, 1), value, np.float32),
                             np.broadcast_to(np.float32(value), (6, 8)), row, row[None],
                             np.broadcast_to(row, (6, 8)), row[:6, None]):
                    args[one] = form
                    got, want = np.empty((6, 8), np.float32), np.empty((6, 8), np.float32)
                    with np.errstate(all="ignore"):
                        k(*args, out=got)
                        ufunc(*args, out=want)
                    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32),
                                                  err_msg=f"{module}.{name} {form.shape}")
    assert k._broadcast  # (the loops ran: what this test is about)
    # a repeated operand in out's own memory: read as numpy reads it (from a copy)
    [(_, _, two)] = by_arity[2][:1]
    x = (rng.standard_normal((6, 8)) * 3).astype(np.float32)
    want = np.empty_like(x)
    two._build(["float32(float32, float32)"])(x.copy(), x[:1, :1].copy(), out=want)
    two(x, x[:1, :1], out=x)
    np.testing.assert_array_equal(x.view(np.uint32), want.view(np.uint32))
    # two repeated operands of different lengths (a (3, 4) and a (4,) over (2, 3, 4)): the ufunc
    x, a, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (3, 4), (4,)))
    [(_, _, fma3)] = [e for e in by_arity[3][:1]]
    got, want = np.empty((2, 3, 4), np.float32), np.empty((2, 3, 4), np.float32)
    with np.errstate(all="ignore"):
        fma3(x, a, b, out=got)
        fma3._build(["float32(float32, float32, float32)"])(x, a, b, out=want)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


WARM_START = """if True:
    import hashlib, os, sys, threading
    import numpy as np
    from numba.core import base
    refreshes = []
    refresh = base.BaseContext.refresh
    base.BaseContext.refresh = lambda self: (refreshes.append(1), refresh(self))[1]
    import tinyopt as to
    from tinyopt import nn, optim
    F = nn.functional
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 6), dtype=np.float32), np.array([0, 2, 1, 2])
    def model():
        return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    def train(m, opt):
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
        return loss.item().hex() + hashlib.sha1(b"".join(
            p.data.numpy().tobytes() for p in m.parameters())).hexdigest()
    to.manual_seed(0)
    m1, m2 = model(), model()
    out = {"adam": train(m1, optim.Adam(m1.parameters(), lr=1e-2))}
    loading = len(refreshes)
    # at once: one thread loads kernels from the cache (SGD's parallel build, which restarts
    # numba's thread pool as it loads), the other compiles one not there in the warm process (abs)
    from tinyopt.kernels import jit
    jit.PARALLEL_MIN_ELEMENTS = 0
    z = np.array([-1.5, 0.0, 2.0, 3.25, -np.inf], np.float32)
    barrier = threading.Barrier(2)
    def sgd():
        barrier.wait()
        out["sgd"] = train(m2, optim.SGD(m2.parameters(), lr=0.1, momentum=0.9))
    def compile_new():
        barrier.wait()
        t = to.tensor(z)
        out["new"] = (to.abs(t) if sys.argv[1] == "warm" else t * 1.0).numpy().tobytes().hex()
    threads = [threading.Thread(target=f) for f in (sgd, compile_new)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(out["adam"], out["sgd"], loading, out["new"])
"""


def test_a_warm_process_loads_kernels_without_numbas_refresh_and_computes_the_same_bits(tmp_path):
    """numba's ``refresh`` (0.2-0.3 s: most of a warm first step) is skipped when kernels are
    loaded from the disk cache; the loaded kernels give the cold process's bits, and a real
    compile afterwards (beside a thread loading other kernels) still works."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), NUMBA_CACHE_DIR=str(tmp_path))

    def child(mode, **extra):
        r = subprocess.run([sys.executable, "-c", WARM_START, mode], capture_output=True,
                           text=True, timeout=600, env={**env, **extra})
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.split()

    cold = child("cold")
    warm = child("warm")
    numbas_own = child("warm", TINYOPT_NUMBA_LAZY_LOAD="0")
    assert warm[:2] == cold[:2] == numbas_own[:2]  # losses and parameters, bit for bit
    assert int(cold[2]) > 0 and int(numbas_own[2]) > 0
    # (on a numba version the lazy load was not checked on, numba's own path runs)
    assert (int(warm[2]) == 0) == (numba_cache.LOAD_WITHOUT_REFRESH is not None)
    z = np.array([-1.5, 0.0, 2.0, 3.25, -np.inf], np.float32)
    assert bytes.fromhex(warm[3]) == np.abs(z).tobytes() == bytes.fromhex(numbas_own[3])


# ---- the disk cache is keyed by source content and CPU, not file times (issue 27) ------------
# numba 0.68 stamps a cache index with a hash of the source file's bytes and keys its entries by
# bytecode, closure values and CPU (tinyopt adds its kernels' sources); pip leaves the cache files in __pycache__ when it replaces
# the sources.  This guards the property for tinyopt's kernels (and a numba that changed it).
REINSTALLED = """if True:
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import kmod
    a = np.ones(3)
    out = np.empty(3)
    kmod.twice(a, out)
    kmod.plus1(a[::2], out=out[::2])  # (a strided call: the ufunc of numba's builder)
    print(sum(kmod.twice.stats.cache_hits.values()), sum(kmod.twice.stats.cache_misses.values()),
          out[0])
"""
KMOD = '''
from tinyopt.kernels.jit import kernel, ufunc


@kernel
def twice(a, out):
    for i in range(a.shape[0]):
        out[i] = 2 * a[i]


@ufunc("float64(float64)")
def plus1(x):
    return x + 1.0
'''


def _child_with_cache(script: str, src, cache) -> list[str]:
    """What ``script`` prints, run in a fresh interpreter with argument ``src`` and numba's
    cache in ``cache``."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), NUMBA_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", script, str(src)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


def test_the_kernel_cache_survives_a_reinstall_and_follows_a_changed_source(tmp_path):
    """A reinstall of the same version writes the same bytes with new file times: the kernels
    load from the cache.  Changed source compiles again."""
    import os
    src = tmp_path / "mod"
    src.mkdir()
    (src / "kmod.py").write_text(KMOD)

    def run() -> list[str]:
        return _child_with_cache(REINSTALLED, src, tmp_path / "cache")
    assert run() == ["0", "1", "2.0"]  # compiled
    assert run() == ["1", "0", "2.0"]  # loaded
    (src / "kmod.py").write_text(KMOD)  # reinstalled: the same bytes, a new time
    os.utime(src / "kmod.py", (2_000_000_000, 2_000_000_000))
    assert run() == ["1", "0", "2.0"]  # still loaded
    (src / "kmod.py").write_text(KMOD + "\n# a new version\n")
    assert run() == ["0", "1", "2.0"]  # compiled again


CALLER = """if True:
    import sys
    import numpy as np
    from tinyopt.kernels.native import numba_cache
    numba_cache.SOURCE_ROOTS[:] = [sys.argv[1]]   # (tinyopt's kernels package, in the library)
    sys.path.insert(0, sys.argv[1])
    import kcaller
    out = np.empty(1)
    kcaller.apply(np.ones(1), out)
    print(sum(kcaller.apply.stats.cache_hits.values()), out[0])
"""
KCALLER = '''
from tinyopt.kernels.jit import kernel
from kcallee import scale


@kernel
def apply(a, out):
    for i in range(a.shape[0]):
        out[i] = scale(a[i])
'''


def test_a_cached_kernel_follows_a_changed_file_it_calls_into(tmp_path):
    """numba keys a kernel by its own file and bytecode: a kernel that inlines a function of
    another file loaded stale machine code once that file changed (an upgrade that changes
    ``vecmath`` and leaves ``__pycache__`` behind).  The kernels' sources key every entry."""
    src = tmp_path / "mod"
    src.mkdir()
    (src / "kcaller.py").write_text(KCALLER)
    callee = "from tinyopt.kernels.jit import kernel\n\n\n@kernel\ndef scale(x):\n    return {} * x\n"
    (src / "kcallee.py").write_text(callee.format(2.0))

    def run() -> list[str]:
        return _child_with_cache(CALLER, src, tmp_path / "cache")
    assert run() == ["0", "2.0"]  # compiled
    if numba_cache.LOAD_WITHOUT_REFRESH is None:
        pytest.skip("the sources key the cache only where numba's cache class was checked")
    assert run() == ["1", "2.0"]  # loaded
    (src / "kcallee.py").write_text(callee.format(3.0))
    assert run() == ["0", "3.0"]  # the callee changed: compiled again, with it


KCALLS = '''
from tinyopt.kernels.jit import callee, kernel


@callee
def put(x, i, v):
    x[i] = 2.0 * v


@kernel
def first(x):
    put(x, 0, 1.0)
    put(x, 1, 2.0)


@kernel
def second(x):
    put(x, 2, 3.0)
'''
CALLS = """if True:
    import sys
    import numpy as np
    from tinyopt.kernels.native import numba_cache
    numba_cache.SOURCE_ROOTS[:] = [sys.argv[1]]
    sys.path.insert(0, sys.argv[1])
    import kcalls
    x = np.zeros(3)
    kcalls.{}(x)
    print(len(kcalls.put.overloads), sum(kcalls.put.stats.cache_hits.values()), *x)
"""


def test_a_callee_compiles_once_for_its_calls_and_loads_in_the_next_process(tmp_path):
    """``jit.callee``: a function kernels call, compiled once whatever constants the calls pass
    (not once per constant), and cached on disk: a process compiling another caller loads it
    (attention's GEMM of a pair, which the forward and backward chunks call, compiled in a
    compile-ahead helper and in the training process before)."""
    src = tmp_path / "mod"
    src.mkdir()
    (src / "kcalls.py").write_text(KCALLS)
    assert _child_with_cache(CALLS.format("first"), src, tmp_path / "cache") == \
        ["1", "0", "2.0", "4.0", "0.0"]
    if numba_cache.LOAD_WITHOUT_REFRESH is None:
        pytest.skip("the callee's cache entry is keyed by the sources where numba's cache class "
                    "was checked")
    assert _child_with_cache(CALLS.format("second"), src, tmp_path / "cache") == \
        ["1", "1", "0.0", "0.0", "6.0"]


def test_module_level_intrinsics_keep_one_identity_across_processes():
    """A kernel whose closure reaches an intrinsic is keyed by that intrinsic's pickled identity;
    numba draws it afresh per process, so the kernel missed the disk cache in every new process
    (the Adam walker after ``decayed_grad`` called ``fma``).  Every module-level
    intrinsic of tinyopt takes its name as its identity (``numba_cache.cached_intrinsic``)."""
    import importlib
    import pkgutil

    from numba.core.extending import _Intrinsic

    import tinyopt.kernels
    found = {}
    for info in pkgutil.walk_packages(tinyopt.kernels.__path__, "tinyopt.kernels."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, _Intrinsic) and value.__module__ == module.__name__:
                found[name] = value._uuid
                assert value._uuid.startswith(f"tinyopt:{module.__name__}.{value.__qualname__}"), name
    # the ones a factory makes (one per width, locality, ...) too, each with an identity of its own
    made = {"fma", "prefetch_l1", "prefetch_l2", "abs_bits", "float_of_bits"} | {
        f"{op}_{n}" for op in ("dequantize", "quantize", "quantize_div", "adam")
        for n in ("lane", "lanes")}
    assert made <= set(found) and len(found) >= 10
    assert len(set(found.values())) == len(found), "two intrinsics share an identity"


def test_a_bound_elementwise_call_into_its_own_input_reads_it_through_out():
    """A plan writes an elementwise op into a dying input; the loop then reads that input through
    ``out`` (a loop over two pointers to one buffer ran LLVM's scalar version, 2.5x slower in
    cache) and gives the ufunc's bits, for either input or both."""
    @jit.ufunc("float32(float32, float32)", "float64(float64, float64)")
    def mix(a, b):
        return a * 0.75 - b / 3.0

    @jit.ufunc("float32(float32)", "float64(float64)")
    def cube(a):
        return a * a * a

    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        x0, y0 = rng.standard_normal((2, 37, 11)).astype(dtype)
        for which in ("first", "second", "both"):
            x, y = x0.copy(), y0.copy()
            out = x if which != "second" else y
            ins = (x, x) if which == "both" else (x, y)
            want = mix(*[a.copy() for a in ins])
            call = mix.bound(out, *ins)
            assert call.func.py_func.__name__ == {"first": "first2", "second": "second2",
                                                  "both": "both2"}[which]
            call()
            np.testing.assert_array_equal(out, want)
        x = x0.copy()
        want = cube(x0)
        cube.bound(x, x)()
        np.testing.assert_array_equal(x, want)
        # a partial overlap keeps the general loop (its overlap check stays right)
        z = rng.standard_normal(50).astype(dtype)
        want = mix(z[1:].copy(), z[1:].copy())
        mix.bound(z[:-1], z[1:], z[1:].copy())()
        np.testing.assert_array_equal(z[:-1], want)
