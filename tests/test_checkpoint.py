from __future__ import annotations

import io
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinyopt
from tinyopt import checkpoint
from tinyopt.checkpoint import CheckpointError, archive, load, load_into, save
from tinyopt.data import DataLoader, TensorDataset
from tinyopt.engine import random as trandom
from tinyopt.engine.random import Generator


# ---- helpers --------------------------------------------------------------------------------

def assert_same(a, b, where="value"):
    """Exact equality: types, dtypes, shapes, bits, dict key order and key types (a Tensor of a
    state dict as its array)."""
    a, b = (np.asarray(v) if isinstance(v, tinyopt.Tensor) else v for v in (a, b))
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs " \
                                                          f"{b.dtype}{b.shape}"
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), where
    elif isinstance(a, dict):
        assert len(a) == len(b), where
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            assert_same(ka, kb, f"{where} key")
            assert_same(va, vb, f"{where}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                      math.copysign(1, b)), where
    else:
        assert a == b, where


class Box:
    """A stateful object like a module or optimizer: state_dict() returns live references (as
    PyTorch's does) and load_state_dict copies in place."""

    def __init__(self, n=3, fail_on=None):
        self.w = np.zeros(n, dtype=np.float32)
        self.state = {0: {"step": np.array(0.0, dtype=np.float32), "exp_avg": np.zeros(n)}}
        self.groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0], "foreach": None,
                        "name": "g"}]
        self.fail_on = fail_on  # rejects states with this learning rate

    def state_dict(self):
        return {"w": self.w, "state": self.state, "param_groups": self.groups}

    def load_state_dict(self, sd):
        self.w[...] = sd["w"]  # changes something before rejecting, to test the rollback
        if sd["param_groups"][0]["lr"] == self.fail_on:
            raise ValueError("Box rejects this state")
        for k, s in sd["state"].items():
            for name, v in s.items():
                self.state[k][name][...] = v
        self.groups = [dict(g) for g in sd["param_groups"]]

    def set(self, value):
        self.w[...] = value
        self.state[0]["step"][...] = value
        self.state[0]["exp_avg"][...] = value
        self.groups[0]["lr"] = float(value)


def rich_state():
    return {
        "state": {0: {"step": np.array(3.0, dtype=np.float32), "exp_avg": np.ones((2, 3))},
                  7: {"momentum_buffer": None}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 7], "nesterov": False,
                          "maximize": None, "eps": 1e-8, "name": "héllo ✓"}],
        "odd floats": [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.0],
        "big int": 2**100 + 1,
        "keys": {1: "int", True: "bool", None: "none", 2.5: "float", (1, "a"): "tuple", "$": "s"},
        "scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.float16(0.1),
                    np.complex64(1 + 2j), np.uint8(255)],
        "arrays": [np.arange(6, dtype=">f8").reshape(2, 3), np.asfortranarray(np.eye(3)),
                   np.arange(10)[::3], np.zeros((0, 4), np.int8), np.array([True, False]),
                   np.array(["ab", "c"]), np.array(7, dtype=np.int32)],
        "empty": [{}, [], ()],
    }


def write_zip(path, manifest, entries=None):
    with zipfile.ZipFile(path, "w") as zf:
        if manifest is not None:
            zf.writestr("manifest.json", manifest if isinstance(manifest, (bytes, str))
                        else json.dumps(manifest))
        for name, data in (entries or {}).items():
            zf.writestr(name, data)


def npy_bytes(arr, allow_pickle=False):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


class Evil:
    """Unpickling this creates a marker file: proof that something was unpickled."""
    marker = ""

    def __reduce__(self):
        return (open, (Evil.marker, "w"))


# ---- round trips ----------------------------------------------------------------------------

def test_round_trip_is_exact(tmp_path):
    path = tmp_path / "ckpt.tinyopt"
    box = Box()
    box.set(2.0)
    state = rich_state()
    save(path, model=box, values=state, epoch=3, note=None, arr=np.float32(2.5))
    out = load(path)
    assert list(out) == ["model", "values", "epoch", "note", "arr", "rng"]
    assert_same(out["values"], state)
    assert_same(out["model"], box.state_dict())
    assert out["epoch"] == 3 and out["note"] is None
    assert_same(out["arr"], np.float32(2.5))
    assert out["values"]["arrays"][1].flags.f_contiguous
    assert all(a.flags.writeable for a in out["values"]["arrays"])


def test_load_into_restores_objects_and_returns_the_rest(tmp_path):
    path = tmp_path / "ckpt"
    src = Box()
    src.set(4.0)
    save(path, model=src, epoch=5, info={"k": [1, 2]})
    dst = Box()
    rest = load_into(path, model=dst)
    assert rest == {"epoch": 5, "info": {"k": [1, 2]}}
    assert_same(dst.state_dict(), src.state_dict())


def test_same_array_saved_once_and_same_state_gives_same_bytes(tmp_path):
    a = np.arange(1000.0)
    save(tmp_path / "1", x=a, y=[a, a], rng=False)
    with zipfile.ZipFile(tmp_path / "1") as zf:
        assert [n for n in zf.namelist() if n.endswith(".npy")] == ["arrays/0.npy"]
    save(tmp_path / "2", x=a, y=[a, a], rng=False)
    assert (tmp_path / "1").read_bytes() == (tmp_path / "2").read_bytes()


def test_manifest_is_readable_json(tmp_path):
    save(tmp_path / "c", model=Box(), rng=False)
    with zipfile.ZipFile(tmp_path / "c") as zf:
        m = json.loads(zf.read("manifest.json"))
    assert m["format"] == "tinyopt-checkpoint" and m["version"] == 1
    assert m["objects"]["model"]["kind"] == "state"
    assert m["objects"]["model"]["type"].endswith("Box")
    assert m["arrays"]["arrays/0.npy"] == {"dtype": "<f4", "shape": [3]}


def test_keyword_named_path_and_pathlike(tmp_path):
    save(str(tmp_path / "c"), path="x", rng=False)
    assert load(Path(tmp_path / "c")) == {"path": "x"}


leaves = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() |
          st.text(max_size=4) |
          hnp.arrays(st.sampled_from(["<f4", "<f8", "<i8", "|i1", "|b1", ">f4", "<f2", "<c8"]),
                     hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)))
keys = (st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3) |
        st.floats(allow_nan=False) | st.tuples(st.integers(0, 3), st.text(max_size=2)))
values = st.recursive(leaves, lambda c: st.lists(c, max_size=3) | st.tuples(c, c) |
                      st.dictionaries(keys, c, max_size=3), max_leaves=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_round_trip_property(tmp_path, value):
    save(tmp_path / "h", v=value, rng=False)
    assert_same(load(tmp_path / "h")["v"], value)


# ---- what cannot be saved ---------------------------------------------------------------------

def test_unsupported_values_raise_before_the_file_changes(tmp_path):
    path = tmp_path / "c"
    save(path, epoch=1)
    before = path.read_bytes()
    bad = Box()
    bad.state[0]["fn"] = print
    with pytest.raises(TypeError, match=r"cannot save model\['state'\]\[0\]\['fn'\]: values of "
                                        r"type builtins.builtin_function_or_method"):
        save(path, model=bad)
    with pytest.raises(TypeError, match="hold Python objects"):
        save(path, x=np.array([None, 1], dtype=object))
    with pytest.raises(TypeError, match="dict key"):
        save(path, x={np.int64(1): 2})
    cyclic = [1]
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="circular"):
        save(path, x=cyclic)
    with pytest.raises(TypeError, match="rng must be True, False or a tinyopt Generator"):
        save(path, rng=5)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c"]


def test_failed_write_keeps_previous_file_and_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "c"
    save(path, x=np.zeros(3), rng=False)
    before = path.read_bytes()
    calls = []

    def failing(f, arr):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        np.lib.format.write_array(f, arr, allow_pickle=False)

    monkeypatch.setattr(archive, "_write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        save(path, a=np.ones(3), b=np.ones(4))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c"]


def test_file_mode(tmp_path):
    path = tmp_path / "c"
    save(path, x=1)
    umask = os.umask(0o022)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == 0o666 & ~umask
    path.chmod(0o600)
    save(path, x=2)
    assert (path.stat().st_mode & 0o777) == 0o600


# ---- atomicity under SIGKILL ------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from tinyopt import checkpoint
    from tinyopt.checkpoint import archive

    real = archive._write_array

    def slow(f, arr):
        real(f, arr)
        if not slow.started:
            slow.started = True
            print("writing", flush=True)
        time.sleep(0.05)

    slow.started = False
    archive._write_array = slow
    arrays = {f"a{i}": np.full(1 << 18, 2.0, dtype=np.float32) for i in range(40)}
    checkpoint.save(sys.argv[1], step=2, **arrays)
    print("done", flush=True)
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_during_save_leaves_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "run.tinyopt"
    old = {f"a{i}": np.full(1 << 18, 1.0, dtype=np.float32) for i in range(40)}
    save(path, step=1, **old)
    before = path.read_bytes()

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing", child.stderr.read()
        # the child is now inside save(), with ~2 s of writing left
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].name.startswith(".run.tinyopt.")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL

    assert path.read_bytes() == before
    out = load(path)
    assert out["step"] == 1
    for name, arr in old.items():
        assert_same(out[name], arr)
    # the half-written temp file is never read; the next save to that path removes it
    save(path, step=3)
    assert load(path)["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.tinyopt"]


# ---- bad files ----------------------------------------------------------------------------------

def _good(tmp_path):
    path = tmp_path / "good.tinyopt"
    box = Box()
    box.set(1.0)
    save(path, model=box, big=np.arange(2000, dtype=np.int64), epoch=1)
    return path


def _bad_files(tmp_path):
    good = _good(tmp_path).read_bytes()
    files = {}

    def add(name, data):
        p = tmp_path / name
        p.write_bytes(data)
        files[name] = p
        return p

    rng = np.random.default_rng(0)
    add("random.bin", rng.integers(0, 256, 5000, dtype=np.uint8).tobytes())
    add("empty.bin", b"")
    add("pickle.pkl", pickle.dumps({"a": 1}))
    add("array.npy", npy_bytes(np.zeros(3)))
    for cut in (10, 100, len(good) // 2, len(good) - 1):
        add(f"truncated{cut}", good[:cut])
    target = np.arange(2000, dtype=np.int64).tobytes()
    at = good.index(target) + 8000
    add("flipped-array-byte", good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:])
    at = good.index(b'"format"')
    add("flipped-manifest-byte", good[:at] + b"X" + good[at + 1:])

    def zipped(name, manifest, entries=None):
        p = tmp_path / name
        write_zip(p, manifest, entries)
        files[name] = p

    zipped("torch-like.pt", None, {"archive/data.pkl": pickle.dumps({"a": 1}),
                                   "archive/version": b"3"})
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    files["plain.npz"] = tmp_path / "plain.npz"
    zipped("empty.zip", None)
    base = {"format": "tinyopt-checkpoint", "version": 1,
            "objects": {"x": {"kind": "value", "value": {"$": "array", "entry": "arrays/0.npy"}}},
            "arrays": {"arrays/0.npy": {"dtype": "<f8", "shape": [3]}}}
    arr = npy_bytes(np.zeros(3))
    zipped("bad-json", b"{not json", {"arrays/0.npy": arr})
    zipped("foreign-format", {**base, "format": "other"}, {"arrays/0.npy": arr})
    zipped("newer-version", {**base, "version": 2}, {"arrays/0.npy": arr})
    zipped("missing-entry", base)
    zipped("extra-entry", base, {"arrays/0.npy": arr, "evil.pkl": b"x"})
    zipped("dtype-mismatch", {**base, "arrays": {"arrays/0.npy": {"dtype": "<f4", "shape": [3]}}},
           {"arrays/0.npy": arr})
    zipped("unknown-tag", {**base, "objects": {"x": {"kind": "value", "value": {"$": "code"}}}},
           {"arrays/0.npy": arr})
    zipped("dangling-ref", {**base, "objects": {"x": {"kind": "value",
                                                      "value": {"$": "array", "entry": "y"}}}},
           {"arrays/0.npy": arr})
    zipped("bad-rng", {**base, "objects": {"rng": {"kind": "generator", "value": {"a": 1}}}},
           {"arrays/0.npy": arr})
    zipped("nan-json", json.dumps({**base, "objects": {"x": {"kind": "value", "value": math.nan}}}),
           {"arrays/0.npy": arr})
    Evil.marker = str(tmp_path / "UNPICKLED")
    evil = np.empty(1, dtype=object)
    evil[0] = Evil()
    zipped("pickled-array", {**base, "arrays": {"arrays/0.npy": {"dtype": "|O", "shape": [1]}}},
           {"arrays/0.npy": npy_bytes(evil, allow_pickle=True)})
    return files


EXPECTED = {
    "random.bin": "does not start with a zip signature",
    "empty.bin": "the file is empty",
    "pickle.pkl": "looks like a pickle",
    "array.npy": "single .npy array",
    "truncated10": "truncated or corrupted",
    "truncated100": "truncated or corrupted",
    "flipped-array-byte": r"corrupted array entry arrays/\d+\.npy.*CRC",
    "flipped-manifest-byte": "corrupted manifest.json.*CRC",
    "torch-like.pt": "holds pickles \\(archive/data.pkl\\)",
    "plain.npz": "no manifest.json",
    "empty.zip": "empty zip",
    "bad-json": "corrupted manifest.json",
    "foreign-format": "manifest format is 'other'",
    "newer-version": "newer tinyopt",
    "missing-entry": "missing",
    "extra-entry": "not in the manifest",
    "dtype-mismatch": "manifest says dtype <f4",
    "unknown-tag": "unknown tagged value",
    "dangling-ref": "does not list",
    "bad-rng": "corrupted generator state in entry 'rng'",
    "nan-json": "non-standard JSON constant NaN",
    "pickled-array": "holds Python objects",
}


def test_bad_files_raise_a_clear_error_and_change_nothing(tmp_path):
    files = _bad_files(tmp_path)
    box = Box()
    box.set(7.0)
    before = Box()
    before.set(7.0)
    tinyopt.manual_seed(11)
    rng_before = tinyopt.get_rng_state()
    for name, path in files.items():
        pattern = EXPECTED.get(name, "truncated or corrupted")
        with pytest.raises(CheckpointError, match=pattern) as info:
            load(path)
        assert str(path) in str(info.value) and isinstance(info.value, ValueError)
        with pytest.raises(CheckpointError):
            load_into(path, model=box)
        assert_same(box.state_dict(), before.state_dict())
        assert tinyopt.get_rng_state() == rng_before
    assert not (tmp_path / "UNPICKLED").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10**6), flips=st.lists(st.tuples(st.integers(0, 10**6),
                                                        st.integers(1, 255)), max_size=3))
def test_damaged_files_fail_cleanly_or_load_the_same(tmp_path, cut, flips):
    """Any truncation or byte damage gives CheckpointError, or (damage in bytes no check covers,
    such as a zip timestamp) exactly the saved content; never another exception."""
    path = tmp_path / "f"
    save(path, a=np.arange(5, dtype=np.float32), s={0: np.array(1.0)}, m="x", rng=False)
    reference = load(path)
    data = bytearray(path.read_bytes())
    for at, mask in flips:
        data[at % len(data)] ^= mask
    data = data[:len(data) - cut % 40] if cut % 2 else data
    path.write_bytes(bytes(data))
    try:
        out = load(path)
    except CheckpointError:
        return
    assert_same(out, reference)


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope")


# ---- load_into: all or nothing -----------------------------------------------------------------

def test_load_into_is_all_or_nothing(tmp_path):
    path = tmp_path / "c"
    a, b = Box(), Box()
    a.set(1.0)
    b.set(2.0)
    tinyopt.manual_seed(0)
    save(path, a=a, b=b)
    a.set(5.0)
    b.set(6.0)
    expect_a, expect_b = Box(), Box()
    expect_a.set(5.0)
    expect_b.set(6.0)
    tinyopt.manual_seed(99)
    rng_before = tinyopt.get_rng_state()
    b.fail_on = 2.0
    with pytest.raises(ValueError, match="Box rejects this state"):
        load_into(path, a=a, b=b)
    assert_same(a.state_dict(), expect_a.state_dict())  # loaded, then rolled back
    assert_same(b.state_dict(), expect_b.state_dict())  # partly changed, then rolled back
    assert tinyopt.get_rng_state() == rng_before


def test_load_into_argument_errors(tmp_path):
    path = tmp_path / "c"
    save(path, model=Box(), epoch=1)
    with pytest.raises(CheckpointError, match=r"has no entry 'opt' \(it holds: model, epoch, rng\)"):
        load_into(path, opt=Box())
    with pytest.raises(CheckpointError, match="'epoch' is a value entry, not a state dict"):
        load_into(path, epoch=Box())
    with pytest.raises(CheckpointError, match="'model' is a state entry, not a generator"):
        load_into(path, model=Generator(0))
    with pytest.raises(TypeError, match="has no load_state_dict"):
        load_into(path, epoch=3)
    with pytest.raises(TypeError, match="rng must be"):
        load_into(path, rng="yes")
    save(path, model=Box(), rng=False)
    with pytest.raises(CheckpointError, match="has no entry 'rng'"):
        load_into(path, rng=True)
    assert load_into(path, model=Box()) == {}


# ---- RNG ----------------------------------------------------------------------------------------

def test_global_rng_saved_and_restored_by_default(tmp_path):
    path = tmp_path / "c"
    tinyopt.manual_seed(123)
    save(path, epoch=0)
    expected = trandom.default_generator.numpy.random(5)
    tinyopt.manual_seed(0)
    load_into(path)
    np.testing.assert_array_equal(trandom.default_generator.numpy.random(5), expected)
    assert load(path)["rng"]["bit_generator"] == "PCG64"

    tinyopt.manual_seed(0)
    state = tinyopt.get_rng_state()
    assert load_into(path, rng=False)["epoch"] == 0
    assert tinyopt.get_rng_state() == state

    g = Generator(0)
    load_into(path, rng=g)
    np.testing.assert_array_equal(g.numpy.random(5), expected)
    assert tinyopt.get_rng_state() == state


def test_other_generators_and_rng_false(tmp_path):
    path = tmp_path / "c"
    g = Generator(42)
    save(path, gen=g, rng=False)
    assert list(load(path)) == ["gen"]
    expected = g.numpy.random(3)
    h = Generator(0)
    load_into(path, gen=h)
    np.testing.assert_array_equal(h.numpy.random(3), expected)


# ---- integration: a data loader resumes exactly through a checkpoint ----------------------------

def test_data_loader_resumes_through_a_checkpoint(tmp_path):
    x = np.arange(60, dtype=np.float32).reshape(30, 2)
    ds = TensorDataset(x, np.arange(30))
    tinyopt.manual_seed(5)
    ref_loader = DataLoader(ds, batch_size=4, shuffle=True)
    reference = [b[1].tolist() for _ in range(3) for b in ref_loader]

    tinyopt.manual_seed(5)
    loader = DataLoader(ds, batch_size=4, shuffle=True)
    seen = []
    for b in loader:
        seen.append(b[1].tolist())
        if len(seen) == 3:
            save(tmp_path / "c", loader=loader, step=len(seen))
            break

    tinyopt.manual_seed(1000)
    fresh = DataLoader(ds, batch_size=4, shuffle=True)
    assert load_into(tmp_path / "c", loader=fresh) == {"step": 3}
    while len(seen) < len(reference):
        seen.extend(b[1].tolist() for b in fresh)
    assert seen == reference


def test_optimizer_state_dict_round_trip(tmp_path):
    optim = pytest.importorskip("tinyopt.optim")
    if not hasattr(optim, "Adam"):
        pytest.skip("tinyopt.optim.Adam not available yet")
    p = tinyopt.Parameter(np.arange(6, dtype=np.float32).reshape(2, 3))
    q = tinyopt.Parameter(np.ones(4, dtype=np.float32))
    opt = optim.Adam([p, q], lr=1e-2, amsgrad=True)
    for _ in range(3):
        p.grad = np.full((2, 3), 0.5, dtype=np.float32)
        q.grad = None  # q gets no state, as in PyTorch
        opt.step()
    save(tmp_path / "opt", optimizer=opt)
    sd = load(tmp_path / "opt")["optimizer"]
    assert_same(sd, opt.state_dict())
    p2 = tinyopt.Parameter(p.data.numpy().copy())
    q2 = tinyopt.Parameter(q.data.numpy().copy())
    opt2 = optim.Adam([p2, q2], lr=0.5, amsgrad=True)
    load_into(tmp_path / "opt", optimizer=opt2)
    assert_same(opt2.state_dict(), opt.state_dict())
    p.grad = np.full((2, 3), 0.25, dtype=np.float32)
    p2.grad = np.full((2, 3), 0.25, dtype=np.float32)
    opt.step()
    opt2.step()
    assert p.data.numpy().tobytes() == p2.data.numpy().tobytes()


# ---- exact resume: model, optimizer, scheduler, loader and RNG ---------------------------------
# The gradients are computed in numpy (a linear model with an input-dropout mask drawn from the
# global generator), so this needs only nn.Module, optim, data and checkpoint.  The code is a
# string so that a fresh Python process can run the very same steps.

TRAINING = textwrap.dedent("""
    import numpy as np
    import tinyopt
    from tinyopt import nn, optim
    from tinyopt.data import DataLoader, TensorDataset
    from tinyopt.engine import random as trandom

    OPTIMIZERS = {
        "SGD": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        "Adam": lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
        "AdamW": lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
        "Adagrad": lambda ps: optim.Adagrad(ps, lr=0.05, lr_decay=0.01),
        "RMSprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    }

    class Linear(nn.Module):
        def __init__(self):
            super().__init__()
            g = trandom.default_generator.numpy
            self.w = nn.Parameter((g.standard_normal((4, 3)) * 0.3).astype(np.float32))
            self.b = nn.Parameter(np.zeros(3, dtype=np.float32))

    def build(name):
        tinyopt.manual_seed(0)
        g = trandom.default_generator.numpy
        x = g.standard_normal((37, 4)).astype(np.float32)
        y = g.standard_normal((37, 3)).astype(np.float32)
        model = Linear()
        opt = OPTIMIZERS[name](model.parameters())
        sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=7)
        loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
        return {"model": model, "optimizer": opt, "scheduler": sched, "loader": loader}

    def train(objs, steps, it=None):
        model, opt = objs["model"], objs["optimizer"]
        done = 0
        while done < steps:
            if it is None:
                it = iter(objs["loader"])
            try:
                xb, yb = next(it)
            except StopIteration:
                it = None
                continue
            keep = trandom.default_generator.numpy.random(xb.shape) > 0.2   # "dropout"
            h = xb * keep.astype(np.float32) / np.float32(0.8)
            err = 2 * (h @ model.w.data + model.b.data - yb) / np.float32(len(xb))
            opt.zero_grad()
            model.w.grad = h.T @ err
            model.b.grad = err.sum(0)
            opt.step()
            objs["scheduler"].step()
            done += 1
        return it
""")


def _training():
    namespace = {}
    exec(TRAINING, namespace)  # noqa: S102 - our own test code, shared with the child process
    return namespace


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop"])
def test_exact_resume_in_fresh_objects(tmp_path, name):
    pytest.importorskip("tinyopt.optim.lr_scheduler")
    t = _training()
    ref = t["build"](name)
    t["train"](ref, 6 + 9)

    run = t["build"](name)
    t["train"](run, 6)  # stops mid-epoch (5 batches per epoch)
    save(tmp_path / "c", **run, step=6)

    fresh = t["build"](name)
    tinyopt.manual_seed(12345)  # the global generator of a different run
    assert load_into(tmp_path / "c", **fresh) == {"step": 6}
    t["train"](fresh, 9)
    for key in ("w", "b"):
        assert getattr(fresh["model"], key).data.numpy().tobytes() == \
            getattr(ref["model"], key).data.numpy().tobytes()
    assert_same(fresh["optimizer"].state_dict(), ref["optimizer"].state_dict())


RESUME_CHILD = textwrap.dedent("""
    import sys
    from tinyopt import checkpoint
    objs = build("Adam")
    checkpoint.load_into(sys.argv[1], **objs)
    train(objs, 9)
    checkpoint.save(sys.argv[2], model=objs["model"], optimizer=objs["optimizer"])
""")


def test_exact_resume_in_a_fresh_process(tmp_path):
    pytest.importorskip("tinyopt.optim.lr_scheduler")
    t = _training()
    ref = t["build"]("Adam")
    t["train"](ref, 6 + 9)
    run = t["build"]("Adam")
    t["train"](run, 6)
    save(tmp_path / "at6", **run)
    code = TRAINING + RESUME_CHILD
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "at6"), str(tmp_path / "at15")],
                   check=True, timeout=300)
    out = load(tmp_path / "at15")
    assert_same(out["model"], ref["model"].state_dict())
    assert_same(out["optimizer"], ref["optimizer"].state_dict())


# ---- issue 9: hostile files, special targets, complete rollback -------------------------------

def _zip_bytes(entries, compression=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _manifest(objects, arrays=None):
    return json.dumps({"format": "tinyopt-checkpoint", "version": 1, "objects": objects,
                       "arrays": arrays or {}})


def test_compressed_entries_are_refused_before_they_are_inflated(tmp_path):
    # a manifest that inflates 300x (a decompression bomb in miniature) and a deflated array
    bomb = _manifest({"x": {"kind": "value", "value": "a" * (30 << 20)}})
    path = tmp_path / "bomb"
    path.write_bytes(_zip_bytes({"manifest.json": bomb}, zipfile.ZIP_DEFLATED))
    assert path.stat().st_size < (200 << 10)
    import time
    import tracemalloc
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"entry manifest.json is compressed \(method 8\)"):
        load(path)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < (4 << 20) and elapsed < 1.0  # bounded by the file, not by what it inflates to
    arrays = {"arrays/0.npy": {"dtype": "<f8", "shape": [1 << 17]}}
    man = _manifest({"x": {"kind": "value", "value": {"$": "array", "entry": "arrays/0.npy"}}},
                    arrays)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", man)
        zf.writestr("arrays/0.npy", npy_bytes(np.zeros(1 << 17)), zipfile.ZIP_DEFLATED)
    path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="arrays/0.npy is compressed"):
        load(path)


def test_concatenated_and_padded_files_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    save(a, step=1, rng=False)
    save(b, step=2, rng=False)
    cat = tmp_path / "cat"
    for data, pattern in [(a.read_bytes() + b.read_bytes(), "another file concatenated"),
                          (b"junk" * 10 + b.read_bytes(), "not a tinyopt checkpoint"),
                          (a.read_bytes() + b"trailing", "bytes after the archive's end"),
                          (b.read_bytes() + a.read_bytes(), "another file")]:
        cat.write_bytes(data)
        with pytest.raises(CheckpointError, match=pattern):
            load(cat)
    assert load(a) == {"step": 1} and load(b) == {"step": 2}  # each alone is fine
    # two central-directory records for one stored entry (an overlap bomb): refused
    data = bytearray((tmp_path / "a").read_bytes())
    save(a, x=np.zeros(3), y=np.zeros(3), rng=False)
    data = bytearray(a.read_bytes())
    cd = [i for i in range(len(data)) if data[i:i + 4] == b"PK\x01\x02"]
    first = data[cd[0] + 42:cd[0] + 46]
    data[cd[1] + 42:cd[1] + 46] = first
    cat.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="entries overlapping"):
        load(cat)


def test_non_finite_numbers_in_a_manifest_are_refused(tmp_path):
    path = tmp_path / "c"
    for number in ("1e999", "-1e400"):
        text = _manifest({"opt": {"kind": "state", "type": "x", "value": {"lr": 0.0}}})
        path.write_bytes(_zip_bytes({"manifest.json": text.replace("0.0", number)}))
        with pytest.raises(CheckpointError, match=f"number {number} is out of the range"):
            load(path)
        box = Box()
        with pytest.raises(CheckpointError):
            load_into(path, opt=box)
    save(path, x=[math.inf, -math.inf, math.nan, 1e308], rng=False)  # tagged: these stay fine
    out = load(path)["x"]
    assert out[:2] == [math.inf, -math.inf] and math.isnan(out[2]) and out[3] == 1e308


def test_save_writes_through_symlinks_at_their_target(tmp_path):
    target = tmp_path / "real.tinyopt"
    link = tmp_path / "link.tinyopt"
    save(target, step=1, rng=False)
    link.symlink_to(target.name)
    save(link, step=2, rng=False)
    assert link.is_symlink() and os.readlink(link) == target.name
    assert load(target) == {"step": 2}
    dangling = tmp_path / "dangling"
    dangling.symlink_to("made-by-save")
    save(dangling, step=3, rng=False)
    assert dangling.is_symlink() and load(tmp_path / "made-by-save") == {"step": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "link.tinyopt",
                                                          "made-by-save", "real.tinyopt"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_save_refuses_special_files_and_directories(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="this is a FIFO"):
        save(fifo, step=1)
    assert stat_kind(fifo) == "fifo"
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)
    with pytest.raises(OSError, match="FIFO"):
        save(link, step=1)
    with pytest.raises(IsADirectoryError):
        save(tmp_path, step=1)
    if os.path.exists("/dev/null") and not os.access("/dev", os.W_OK):
        with pytest.raises(OSError, match="device"):
            save("/dev/null", step=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to-fifo"]


def stat_kind(path):
    import stat as st
    mode = os.lstat(path).st_mode
    return "fifo" if st.S_ISFIFO(mode) else "file" if st.S_ISREG(mode) else "other"


READ_ONLY = textwrap.dedent("""
    import os, sys
    from tinyopt.checkpoint import save
    if os.getuid() == 0:
        os.setgid(65534); os.setuid(65534)   # as open() would for a user, not for root
    try:
        save(sys.argv[1], step=2, rng=False)
    except PermissionError as e:
        print("PermissionError", e.filename)
""")


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_save_respects_read_only_files(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)  # the folder is writable: only the file's own mode protects it
    path = folder / "ro.tinyopt"
    save(path, step=1, rng=False)
    path.chmod(0o444)
    before = path.read_bytes()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", READ_ONLY, str(path)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["PermissionError", str(path)]
    assert path.read_bytes() == before and (path.stat().st_mode & 0o777) == 0o444
    assert os.listdir(folder) == ["ro.tinyopt"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs flock")
def test_a_save_in_progress_keeps_its_temp_file(tmp_path):
    import fcntl
    path = tmp_path / "c"
    stale = tmp_path / ".c.abcd1234.tmp"
    busy = tmp_path / ".c.busy5678.tmp"
    other = tmp_path / ".d.abcd1234.tmp"
    for p in (stale, busy, other):
        p.write_bytes(b"half")
    fd = os.open(busy, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a save running in another process holds it
    try:
        save(path, step=1, rng=False)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.busy5678.tmp", ".d.abcd1234.tmp",
                                                          "c"]


class FailingBox(Box):
    def load_state_dict(self, sd):
        raise ValueError("FailingBox rejects every state")


def test_load_into_rollback_keeps_a_data_loader_on_its_live_iterator(tmp_path):
    ds = TensorDataset(np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20))
    tinyopt.manual_seed(3)
    reference = [b[1].tolist() for b in DataLoader(ds, batch_size=2, shuffle=True)]
    tinyopt.manual_seed(3)
    loader = DataLoader(ds, batch_size=2, shuffle=True)
    it = iter(loader)
    seen = [next(it)[1].tolist() for _ in range(2)]
    save(tmp_path / "c", loader=loader, box=Box())
    seen.append(next(it)[1].tolist())
    before = loader.state_dict()
    with pytest.raises(ValueError, match="FailingBox"):
        load_into(tmp_path / "c", loader=loader, box=FailingBox())
    assert_same(loader.state_dict(), before)
    seen.extend(b[1].tolist() for b in it)  # the epoch goes on, and moves the loader
    assert seen == reference
    assert loader.state_dict()["index"] == 20


def test_load_into_rollback_restores_a_scheduler_exactly(tmp_path):
    optim = pytest.importorskip("tinyopt.optim")
    p = tinyopt.Parameter(np.ones(2, np.float32))
    opt = optim.SGD([p], lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2)
    for _ in range(3):
        opt.step()
        sched.step()

    class Doctored:  # a scheduler state carrying a key that shadows the step() method
        def state_dict(self):
            return {**sched.state_dict(), "last_epoch": 9, "step": 5}

    save(tmp_path / "c", sched=Doctored(), box=Box())
    before = dict(vars(sched))
    with pytest.raises((ValueError, KeyError, TypeError)):
        load_into(tmp_path / "c", sched=sched, box=FailingBox())
    assert vars(sched) == before and "step" not in vars(sched)
    sched.step()
    assert sched.last_epoch == 4


def test_load_into_rolls_back_through_each_objects_restore_point(tmp_path):
    # the rollback protocol: an object's own restore_point() (no type check on it), else a copy
    # of its state dict given back to load_state_dict
    calls = []

    class Own(Box):
        def restore_point(self):
            calls.append("taken")
            w = self.w.copy()
            return lambda: (calls.append("restored"), self.w.__setitem__(..., w))

    saved = Box()
    saved.w[:] = 7
    save(tmp_path / "c", own=saved, plain=saved, box=Box())
    own, plain = Own(), Box()
    own.w[:], plain.w[:] = 1, 2
    with pytest.raises(ValueError, match="FailingBox"):
        load_into(tmp_path / "c", own=own, plain=plain, box=FailingBox())
    assert calls == ["taken", "restored"]
    assert own.w.tolist() == [1, 1, 1] and plain.w.tolist() == [2, 2, 2]


def test_load_into_rollback_keeps_nested_schedulers_and_their_counters(tmp_path):
    # a composite scheduler puts its members back too, and a MultiStepLR's milestones stay a
    # Counter (a copy as a plain dict lost its missing-key rule and elements())
    optim = pytest.importorskip("tinyopt.optim")
    lr_scheduler = optim.lr_scheduler

    def build():
        opt = optim.SGD([tinyopt.Parameter(np.ones(2, np.float32))], lr=1.0)
        return opt, lr_scheduler.SequentialLR(
            opt, [lr_scheduler.LinearLR(opt, 0.5, total_iters=2),
                  lr_scheduler.MultiStepLR(opt, milestones=[4, 6], gamma=0.5)], milestones=[2])

    ref_opt, ref = build()
    opt, sched = build()
    for s, o in ((ref, ref_opt), (sched, opt)):
        for _ in range(3):
            o.step()
            s.step()
    save(tmp_path / "c", sched=sched, box=Box())
    assert type(load(tmp_path / "c")["sched"]["_schedulers"][1]["milestones"]) is Counter
    for _ in range(2):
        opt.step()
        sched.step()
    with pytest.raises(ValueError, match="FailingBox"):
        load_into(tmp_path / "c", sched=sched, box=FailingBox())
    for _ in range(2):
        ref_opt.step()
        ref.step()
    for _ in range(4):
        for s, o in ((ref, ref_opt), (sched, opt)):
            o.step()
            s.step()
        assert sched.get_last_lr() == ref.get_last_lr()
    assert type(sched._schedulers[1].milestones) is type(ref._schedulers[1].milestones)
