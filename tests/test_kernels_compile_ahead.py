"""Kernels compiled ahead in a helper process (``kernels/compile_ahead.py``): the optimizer's walker
and the layers' declared kernels (``nn/kernels_ahead.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tinyopt.kernels.native import numba_cache

STEP = """if True:
    import hashlib, json
    import numpy as np
    from numba.core import base
    refreshes = []
    refresh = base.BaseContext.refresh
    base.BaseContext.refresh = lambda self: (refreshes.append(1), refresh(self))[1]
    import tinyopt as to
    from tinyopt import nn, optim
    from tinyopt.kernels import compile_ahead, optim as kernels
    to.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    opt = optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1)
    started = int(compile_ahead._session is not None)
    x = np.random.default_rng(0).random((4, 6), dtype=np.float32)
    y = np.array([0, 2, 1, 2])
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    serial = kernels.adam.serial_build((False, False, True, False, True))
    print(json.dumps({"started": started, "refreshes": len(refreshes),
                      "hits": sum(serial._cache_hits.values()),
                      "misses": sum(serial._cache_misses.values()),
                      "bits": loss.item().hex() + hashlib.sha1(b"".join(
                          p.data.numpy().tobytes() for p in m.parameters())).hexdigest()}))
"""


def _run(cache, ahead: str, code: str = STEP, share: str = "0") -> dict:
    """The JSON line ``code`` prints last, run in a fresh process over the numba cache folder
    ``cache`` with ``TINYOPT_COMPILE_AHEAD=ahead`` and ``TINYOPT_SHARE_BLAS_THREADS=share`` (0
    by default: then a helper is given the kernels a script declares and nothing else, not the
    shared threads' C functions, ``compile_ahead._first_kernels``)."""
    import json
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), NUMBA_CACHE_DIR=str(cache),
               TINYOPT_COMPILE_AHEAD=ahead, TINYOPT_SHARE_BLAS_THREADS=share)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_cold_optimizer_kernel_compiles_in_a_helper_and_loads_with_the_same_bits(tmp_path):
    """Cold: building the optimizer starts a helper, and the first step loads the walker the
    helper compiled (no compile of its own); the same bits as a process that compiled it itself.
    Warm: no helper, and no numba context refresh (its probe of the cache loads the walker as a
    first call would).  ``TINYOPT_COMPILE_AHEAD=0``: no helper, a compile of its own."""
    ahead = _run(tmp_path / "ahead", "1")
    assert ahead["started"] == 1 and (ahead["hits"], ahead["misses"]) == (1, 0)
    warm = _run(tmp_path / "ahead", "1")
    assert warm["started"] == 0 and (warm["hits"], warm["misses"]) == (1, 0)
    assert warm["refreshes"] == 0 or numba_cache.LOAD_WITHOUT_REFRESH is None
    itself = _run(tmp_path / "itself", "0")
    assert itself["started"] == 0 and (itself["hits"], itself["misses"]) == (0, 1)
    assert ahead["bits"] == warm["bits"] == itself["bits"]


# (in a script, after ``compile_ahead.finish()``) which process compiled a kernel this one ran:
# "helper" (loaded here, and the helper finished its cache entry) or "here" (compiled here, and
# the helper did not); anything else is a kernel compiled twice or loaded from nowhere
WHERE = """
    done = compile_ahead._session.done if compile_ahead._session is not None else set()
    def where(k):  # (a numba dispatcher, or a C function's numba CFunc)
        if hasattr(k, "overloads"):
            [sig] = k.overloads
            entry, hits = k._cache.entry_id(sig, k.targetctx), sum(k._cache_hits.values())
            misses = sum(k._cache_misses.values())
        else:
            entry = k._cache.entry_id(k._sig, k._targetdescr.target_context)
            hits, misses = k._cache_hits, 1 - k._cache_hits
        return {(1, 0, True): "helper", (0, 1, False): "here"}.get(
            (hits, misses, entry in done), f"{hits} hits, {misses} misses, {entry in done}")
"""

LSTM = """if True:
    import hashlib, json
    import numpy as np
    from numba.core import base
    refreshes = []
    refresh = base.BaseContext.refresh
    base.BaseContext.refresh = lambda self: (refreshes.append(1), refresh(self))[1]
    import tinyopt as to
    from tinyopt import nn, optim
    from tinyopt.kernels import compile_ahead, loss, norm, optim as walkers, rnn
    to.manual_seed(0)
    emb, lstm, head = nn.Embedding(50, 8), nn.LSTM(8, 16), nn.Linear(16, 50)
    params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
    opt = optim.Adam(params, lr=1e-2)
    started = int(compile_ahead._session is not None)
    idx = np.random.default_rng(0).integers(0, 50, (6, 8))  # (time, batch): LSTM chunks from 8
    for _ in range(2):
        opt.zero_grad()
        out, _ = lstm(emb(idx[:-1]))
        loss_ = nn.functional.cross_entropy(head(out).reshape(-1, 50), idx[1:].reshape(-1))
        loss_.backward()
        opt.step()
    compile_ahead.finish()
""" + WHERE + """
    declared = {"walker": where(walkers.adam.serial_build((False,) * 4 + (True,))),
                "scan_grad": where(rnn.lstm_scan_grad_chunks[True]._cfunc),
                "embedding_grad": where(norm.embedding_grad),
                "ce_rows": where(loss.ce_rows[False, True].serial_build)}
    print(json.dumps({"started": started, "refreshes": len(refreshes), "declared": declared,
                      "unresolved": [repr(r) for r in compile_ahead.UNRESOLVED],
                      "bits": loss_.item().hex() + hashlib.sha1(b"".join(
                          p.data.numpy().tobytes() for p in params)).hexdigest()}))
"""


def test_a_layers_declared_kernels_compile_in_the_helper_and_load_here_with_the_same_bits(
        tmp_path):
    """An LSTM language model's first steps: the helper, started when the embedding is built,
    compiles the walker, which this process loads (a cache hit, no compile of its own), and the
    declared loss and backward kernels, each compiled once, by the helper or by this process
    (which compiles the forward kernels, and the next one it needs where it would wait for the
    helper); the same bits as a process that compiled everything itself.  Warm: no helper, no
    context refresh, the same bits.
    (Each kernel's types as declared are the step's: else the step would compile it.)"""
    runs = {name: _run(tmp_path / cache, ahead, LSTM) for name, cache, ahead in
            (("ahead", "a", "1"), ("warm", "a", "1"), ("itself", "b", "0"))}
    ahead, warm, itself = runs["ahead"], runs["warm"], runs["itself"]
    assert ahead["unresolved"] == warm["unresolved"] == []
    assert ahead["started"] == 1 and warm["started"] == itself["started"] == 0
    declared = ahead["declared"]
    # the helper takes the walker first (the step reaches it last), then the loss's and the
    # backward kernels: each compiled once, by whichever process reaches it first
    assert declared.pop("walker") == "helper"
    for kernel, compiled in declared.items():
        assert compiled in ("helper", "here"), kernel
    assert warm["refreshes"] == 0 or numba_cache.LOAD_WITHOUT_REFRESH is None
    assert ahead["bits"] == warm["bits"] == itself["bits"]


RACE = """if True:
    import json, os, signal, threading, time
    import numpy as np
    from tinyopt.kernels import compile_ahead, norm, reduce
    x, x3 = np.ones((3, 4)), np.ones((1, 2, 3))
    slow = ("tinyopt.kernels.norm", "layer_norm_apply", "serial_build")
    compile_ahead.declare(compile_ahead.STEP, slow, (x, x, x[0], x[0], x))
    fast = ("tinyopt.kernels.norm", "layer_norm_grad_wb")
    compile_ahead.declare(compile_ahead.FORWARD, fast, (x, x, x, x))  # (taken after slow)
    late = ("tinyopt.kernels.reduce", "sum_axis")
    compile_ahead.declare(compile_ahead.BACKWARD, late, (x3, x))  # (taken after slow)
    helper = compile_ahead._session
    # the helper holds slow (its claim is there): stopped in it, until this process, reaching
    # slow, has compiled late meanwhile (or 10 s have passed)
    while not [f for f in os.listdir(helper.claims) if f != "idle"] and helper.running():
        time.sleep(0.001)
    os.kill(helper.process.pid, signal.SIGSTOP)
    def go_on(t0=time.monotonic()):
        while not reduce.sum_axis.overloads and time.monotonic() < t0 + 10:
            time.sleep(0.005)
        os.kill(helper.process.pid, signal.SIGCONT)
    norm.layer_norm_grad_wb(x, x, x, x)  # here first: claimed and compiled here
    threading.Thread(target=go_on, daemon=True).start()
    norm.layer_norm_apply.serial(x, x, x[0], x[0], x)  # the helper's: late compiled meanwhile
    worker = os.fork()  # (say a data loader's: it keeps no end of the helper's pipes)
    if worker == 0:
        time.sleep(60)
        os._exit(0)
    t0 = time.monotonic()
    compile_ahead.finish()  # (the helper ends once its input is closed: here, not in the worker)
    finished = time.monotonic() - t0
    os.kill(worker, signal.SIGKILL)
    os.waitpid(worker, 0)
    def entry(d):
        [sig] = d.overloads
        return d._cache.entry_id(sig, d.targetctx)
    compile_ahead.declare(compile_ahead.BACKWARD, ("tinyopt.kernels.rnn", "sum_grad_h"),
                          (x3, 0, x, x, x))  # (the helper has ended: another one)
    print(json.dumps({"helper": sorted(helper.done), "exit": helper.process.returncode,
                      "next": compile_ahead._session not in (None, helper),  # (a new one)
                      "slow": entry(norm.layer_norm_apply.serial_build),
                      "slow_hits": sum(norm.layer_norm_apply.serial_build._cache_hits.values()),
                      "fast": entry(norm.layer_norm_grad_wb),
                      "fast_misses": sum(norm.layer_norm_grad_wb._cache_misses.values()),
                      "late_misses": sum(reduce.sum_axis._cache_misses.values()),
                      "forked": type(helper.process).__name__ == "_Forked",
                      "finished": finished}))
"""


def test_a_kernel_this_process_reaches_first_is_not_compiled_by_the_helper(tmp_path):
    """Three kernels declared: this process calls the second at once and compiles it; then it
    reaches the first while the helper, which takes the first first, is compiling it: instead
    of waiting it compiles the third (declared, not yet claimed), and loads the first from the
    cache; the helper then finds the other two claimed and skips them (it reports only the
    first), and ends, though a forked child of this process lives on; a later declaration
    starts another."""
    out = _run(tmp_path, "1", RACE)
    assert out["helper"] == [out["slow"]] and out["slow_hits"] == 1
    assert out["exit"] == 0 and out["next"]  # (a helper with nothing left ends cleanly)
    assert out["fast_misses"] == 1 and out["late_misses"] == 1
    # forked from this process (numba already imported), and a later fork of this process does
    # not keep it running
    assert out["forked"] == (sys.platform.startswith("linux")) and out["finished"] < 30


IDLE = """if True:
    import json, time
    import numba
    import numpy as np
    from tinyopt.kernels import compile_ahead, norm
    x, x3 = np.ones((3, 4)), np.ones((1, 2, 3))
    compile_ahead.declare(compile_ahead.BACKWARD, ("tinyopt.kernels.norm", "layer_norm_grad_wb"),
                          (x, x, x, x))
    helper = compile_ahead._session
    helper.stdout.readline()  # (it has compiled the kernel: nothing left)
    time.sleep(0.3)
    late = ("tinyopt.kernels.reduce", "sum_axis")
    compile_ahead.declare(compile_ahead.BACKWARD, late, (x3, x))
    same = compile_ahead._session is helper
    helper.stdout.readline()
    time.sleep(0.3)
    norm.layer_norm_grad_wb(x, x, x, x)  # (a load here while the helper is idle: it ends)
    print(json.dumps({"same": same, "exit": helper.process.wait(timeout=120),
                      "cached": compile_ahead._cached(late, (numba.typeof(x3), numba.typeof(x)))}))
"""


def test_a_helper_with_nothing_left_waits_for_a_later_declaration(tmp_path):
    """A helper that has compiled all it was given does not end on its own: a declaration
    arriving then goes to it and is compiled (one that ended could miss a declaration on its
    way, leaving a kernel the step never runs uncached, and every later process started a
    helper for it); this process's next kernel load while it is idle ends it."""
    assert _run(tmp_path, "1", IDLE) == {"same": True, "exit": 0, "cached": True}


ENDED = """if True:
    import json, select
    import numpy as np
    from tinyopt.kernels import compile_ahead, norm
    x = np.ones((3, 4))
    compile_ahead.declare(compile_ahead.BACKWARD, ("tinyopt.kernels.norm", "layer_norm_grad_wb"),
                          (x, x, x, x))
    helper = compile_ahead._session
    select.select([helper.stdout], [], [], 300)  # (it has written the entry, unread here)
    helper.close()
    helper.process.wait(timeout=120)
    running = helper.running()
    norm.layer_norm_grad_wb(x, x, x, x)
    [sig] = norm.layer_norm_grad_wb.overloads
    entry = norm.layer_norm_grad_wb._cache.entry_id(sig, norm.layer_norm_grad_wb.targetctx)
    print(json.dumps({"running": running, "done": sorted(helper.done), "entry": entry,
                      "hits": sum(norm.layer_norm_grad_wb._cache_hits.values())}))
"""


def test_a_helper_that_ended_keeps_the_entries_it_reported(tmp_path):
    """A helper closed while it compiles ends once done; the entries it wrote before it ended
    count as its work though this process had not read them (a test's account of which process
    compiled a kernel read none of them: the helper's kernels counted as loaded from nowhere)."""
    out = _run(tmp_path, "1", ENDED)
    assert out["running"] is False and out["done"] == [out["entry"]] and out["hits"] == 1

ORDER = """if True:
    import base64, json, pickle
    import numba
    import numpy as np
    from tinyopt import nn
    from tinyopt.kernels import compile_ahead as ca, norm, reduce
    x, x3 = np.ones((3, 4)), np.ones((1, 2, 3))
    first = ("tinyopt.kernels.norm", "layer_norm_grad_wb"), tuple(map(numba.typeof, (x,) * 4))
    second = ("tinyopt.kernels.reduce", "sum_axis"), (numba.typeof(x3), numba.typeof(x))
    # the helper's side: given the first, the second, then the first again (its layer's first
    # call came last), all in one write: it compiles the second first, and the first once
    helper = ca._start_helper()
    items = [(0, ca.BACKWARD, *first), (1, ca.BACKWARD, *second), (2, ca.BACKWARD, *first)]
    helper.stdin.write(b"".join(base64.b64encode(pickle.dumps(i)) + b"\\n" for i in items))
    helper.close()
    done = helper.stdout.read().decode().split()
    helper.process.wait()
    def entry(d, *args):
        d(*args)
        [sig] = d.overloads
        return d._cache.entry_id(sig, d.targetctx)
    compiled = [entry(reduce.sum_axis, x3, np.empty((1, 3))),
                entry(norm.layer_norm_grad_wb, x, x, x, x)]
    # this process's side: layers built in one order and called in another re-declare their
    # backward kernels given to the helper, in the order of their first calls
    sent = []
    send = ca._Helper.send
    ca._Helper.send = lambda self, item: (sent.append(item[2][1]), send(self, item))[1]
    norm_layer, linear = nn.LayerNorm(5), nn.Linear(5, 5)
    built = list(sent)
    del sent[:]
    h = norm_layer(linear(np.ones((2, 5), np.float32)))
    called = list(sent)
    h = norm_layer(linear(np.ones((2, 5), np.float32)))  # (later calls: nothing more)
    print(json.dumps({"done": done, "compiled": compiled, "built": built, "called": called,
                      "again": sent[len(called):]}))
"""


def test_the_helper_takes_the_backward_kernels_in_the_order_of_their_layers_first_calls(
        tmp_path):
    """The step runs the backward kernels of the layers called last first, and the helper
    compiles from the end of the step: a layer's first call re-declares its backward kernels
    given to the helper, which moves a kernel it has not compiled yet to its new place (and
    compiles it once)."""
    out = _run(tmp_path, "1", ORDER)
    assert out["done"] == out["compiled"]
    # built: the layer norm's kernels (chunks, apply, grad chunks, weight and bias grads), then
    # the linear layer's bias sum; called: the linear layer first, then the layer norm's
    # backward kernels (its forward kernels keep their place)
    assert out["built"][-1] == "sum_axis" and "layer_norm_grad_wb" in out["built"]
    assert out["called"] == ["sum_axis", "layer_norm_chunks", "layer_norm_grad_wb"]
    assert out["again"] == []


GPT = """if True:
    import json
    import numpy as np
    import tinyopt as to
    from tinyopt import nn, optim
    from tinyopt.kernels import attention, compile_ahead, elementwise, loss, norm
    from tinyopt.kernels import optim as walkers
    from tinyopt.kernels.native import shared_threads
    to.manual_seed(0)
    V, T, d = 64, 64, 128
    tok, pos = nn.Embedding(V, d), nn.Embedding(T, d)
    block = nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.0, batch_first=True,
                                       norm_first=True)
    ln, head = nn.LayerNorm(d), nn.Linear(d, V)
    params = [p for m in (tok, pos, block, ln, head) for p in m.parameters()]
    opt = optim.Adam(params, lr=1e-3)
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    idx = np.random.default_rng(0).integers(0, V, (4, T + 1))
    opt.zero_grad()
    h = block(tok(idx[:, :-1]) + pos(np.arange(T)), src_mask=mask, is_causal=True)
    nn.functional.cross_entropy(head(ln(h)).reshape(-1, V), idx[:, 1:].reshape(-1)).backward()
    opt.step()
    compile_ahead.finish()
""" + WHERE + """
    def c_function(made, key):  # (None: the step did not take that path)
        return where(made.made[key]._cfunc) if key in made.made else None
    print(json.dumps({
        "shared_threads": [where(shared_threads.c_function(kind)._cfunc)
                           for kind in ("jobs", "chunks")] if shared_threads.share() else None,
        "unresolved": [repr(r) for r in compile_ahead.UNRESOLVED],
        "walker": where(walkers.adam.serial_build((False,) * 4 + (True,))),
        "embedding_grad": where(norm.embedding_grad),
        "layer_norm_grad_wb": where(norm.layer_norm_grad_wb),
        "layer_norm_grad_x": c_function(norm.layer_norm_chunks, (True, norm.LN_GRAD_X, True)),
        "attention_grad": c_function(attention.attention_grad_chunks, (True, True)),
        "relu_grad": where(elementwise.relu_grad.flat_kernel),
        "forward": {"ce_rows": where(loss.ce_rows[False, True].serial_build),
                    "layer_norm_apply": where(norm.layer_norm_apply.serial_build),
                    "embedding_rows": where(norm.embedding_rows)}}))
"""


def test_the_kernels_a_transformer_declares_are_the_ones_its_step_runs(tmp_path):
    """A small GPT's first step with a helper: the kernels its layers declare (layer norm,
    attention, the embedding, the cross-entropy) have the types the step calls them with, so
    each is compiled once, by whichever process reaches it first: the walker by the helper
    (loaded here), the others by either.  So are the C functions of numpy's BLAS on numba's
    threads, which the helper is given first (where they share threads)."""
    out = _run(tmp_path, "1", GPT, share="1")
    assert out.pop("unresolved") == []  # (a stale declaration would be skipped silently)
    for compiled in out.pop("shared_threads") or ():
        assert compiled in ("helper", "here")
    assert out.pop("walker") == "helper"
    for kernel, compiled in [*out.pop("forward").items(), *out.items()]:
        assert compiled in ("helper", "here", None), kernel


def test_relu_layers_declare_the_gradient_loop_their_backward_runs(monkeypatch):
    """``nn.ReLU`` and a Transformer layer with ReLU declare ReLU's gradient, a backward kernel
    (the last compile of the small GPT's and the MLP's cold first steps where nothing declared
    it); a GELU layer does not.  The declared types are those of the loop the backward runs."""
    import numba
    import numpy as np

    import tinyopt as to
    from tinyopt import nn
    from tinyopt.kernels import compile_ahead, elementwise

    declared = []
    monkeypatch.setattr(compile_ahead, "declare",
                        lambda phase, recipe, args=None: declared.append((phase, recipe, args)))
    relu = ("tinyopt.kernels.elementwise", "relu_grad", "flat_kernel")

    def relu_grads(make):
        del declared[:]
        make()
        return [(phase, tuple(map(numba.typeof, args))) for phase, recipe, args in declared
                if recipe == relu]

    f32 = numba.typeof(np.empty(1, np.float32))
    assert relu_grads(nn.ReLU) == [(compile_ahead.BACKWARD, (f32,) * 3)]
    f64 = numba.typeof(np.empty(1))
    assert relu_grads(lambda: nn.TransformerEncoderLayer(8, 2, 16, dtype=np.float64)) == \
        [(compile_ahead.BACKWARD, (f64,) * 3)]
    assert relu_grads(lambda: nn.TransformerDecoderLayer(8, 2, 16)) == \
        [(compile_ahead.BACKWARD, (f32,) * 3)]
    assert relu_grads(lambda: nn.TransformerEncoderLayer(8, 2, 16, activation="gelu")) == []
    assert compile_ahead.resolve(relu) is elementwise.relu_grad.flat_kernel
    x = to.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    (nn.ReLU()(x) * 2).sum().backward()
    assert (f32,) * 3 in elementwise.relu_grad.flat_kernel.overloads


def test_neither_process_claims_or_waits_for_a_callee(monkeypatch, tmp_path):
    """A function kernels call (``jit.callee``: attention's pair GEMM) is loaded if the other
    process has compiled it, else compiled, in the helper as here: neither claims it (a claim
    the helper lost would end the compile of the kernel calling it, and one this process lost
    would make it wait for the helper's whole kernel)."""
    import pytest

    from tinyopt.kernels import attention, compile_ahead, norm

    if numba_cache.LOAD_WITHOUT_REFRESH is None:
        pytest.skip("kernels are waited for only where numba's cache class was checked")

    def around(dispatcher, role):
        monkeypatch.setitem(compile_ahead._ROLE, "helper", role)
        cache = numba_cache.disk_cache_of(dispatcher)
        return compile_ahead._around_load(cache, None, None, lambda: "loaded")

    monkeypatch.setattr(compile_ahead, "_claim", lambda claims, entry: False)  # (all taken)
    monkeypatch.setattr(type(numba_cache.disk_cache_of(norm.embedding_rows)), "entry_id",
                        lambda self, sig, context: "entry")
    assert around(attention._pair_gemm, str(tmp_path)) == "loaded"  # (in the helper)
    with pytest.raises(compile_ahead._Taken):
        around(norm.embedding_rows, str(tmp_path))
    monkeypatch.setattr(compile_ahead, "_session", None)  # (here, no helper running)
    assert around(attention._pair_gemm, None) == "loaded"


def test_a_helper_starts_where_a_core_is_free_now_though_the_last_minute_was_busy(monkeypatch):
    from tinyopt.kernels import compile_ahead

    def machine(cpus, average, now):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
        monkeypatch.setattr(os, "getloadavg", lambda: (average, average, average))
        monkeypatch.setattr(compile_ahead, "_running_now", lambda: now)
        return compile_ahead._idle_cpu()

    assert machine(2, 1.6, 1)  # (a minute of work just ended: only this process runs now)
    assert not machine(2, 1.6, 2) and not machine(2, 1.6, None)  # (None: no count to read)
    assert machine(2, 0.4, None) and not machine(1, 0.0, 1)
    assert machine(4, 2.9, 3) and not machine(4, 3.5, 4)
    assert compile_ahead._running_now() is None or compile_ahead._running_now() >= 1


BUSY = """if True:
    import json
    import numpy as np
    from tinyopt.kernels import compile_ahead, norm, reduce
    x, x3 = np.ones((3, 4)), np.ones((1, 2, 3))
    compile_ahead._idle_cpu = lambda: True  # (a core free: the first declaration starts one)
    compile_ahead.declare(compile_ahead.BACKWARD, ("tinyopt.kernels.norm", "layer_norm_grad_wb"),
                          (x, x, x, x))
    helper = compile_ahead._session
    compile_ahead._idle_cpu = lambda: False  # (the helper's own work fills the core it took)
    compile_ahead.declare(compile_ahead.BACKWARD, ("tinyopt.kernels.reduce", "sum_axis"), (x3, x))
    compile_ahead.finish()
    def entry(d):
        [sig] = d.overloads
        return d._cache.entry_id(sig, d.targetctx)
    norm.layer_norm_grad_wb(x, x, x, x)
    reduce.sum_axis(x3, x[:1, :3])
    print(json.dumps({"same": compile_ahead._session in (None, helper),
                      "compiled": sorted(helper.done) == sorted(
                          [entry(norm.layer_norm_grad_wb), entry(reduce.sum_axis)])}))
"""


def test_a_running_helper_is_given_later_declarations_though_the_machine_looks_busy(tmp_path):
    """Whether a core is free is asked where no helper runs: once one does, its own work counts
    as load (the tasks running now), and every later declaration would be refused, the step
    compiling them itself (the small GPT's cold step, 3.4-3.6 s against 2.3)."""
    assert _run(tmp_path, "", BUSY) == {"same": True, "compiled": True}
