"""``to.save(obj, f)`` / ``to.load(f)`` as torch users write them (``tinyopt.serialization``)."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.checkpoint import CheckpointError

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def model():
    to.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.BatchNorm1d(3), nn.Linear(3, 2))


def values(x):
    return np.asarray(x.data if isinstance(x, to.Parameter) else x.numpy()) \
        if isinstance(x, to.Tensor) else x


def test_state_dict_round_trip(tmp_path):
    m = model()
    path = tmp_path / "model.pt"
    to.save(m.state_dict(), path)
    sd = to.load(path)
    assert list(sd) == list(m.state_dict())
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(values(sd[k]), values(v))
        assert values(sd[k]).dtype == values(v).dtype
    other = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.BatchNorm1d(3), nn.Linear(3, 2))
    other.load_state_dict(to.load(str(path)))
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    m.eval(), other.eval()
    np.testing.assert_array_equal(m(x).numpy(), other(x).numpy())


def test_nested_values_come_back_as_saved(tmp_path):
    p = to.Parameter(np.arange(3, dtype=np.float32))
    t = to.tensor([[1, 2], [3, 4]])
    arr = np.linspace(0, 1, 4)
    obj = {"model": {"w": arr, "t": t}, "param": p, "epoch": 7, "loss": float("nan"),
           "best": 0.25, "hist": [1.0, 2.0], "shape": (2, 3), "name": "run", "none": None,
           "flag": True, 3: "int key", "same": arr}
    path = tmp_path / "ckpt.pt"
    to.save(obj, path)
    got = to.load(path)
    assert set(got) == set(obj)
    assert isinstance(got["model"]["w"], np.ndarray) and got["model"]["w"].dtype == np.float64
    np.testing.assert_array_equal(got["model"]["w"], arr)
    assert isinstance(got["model"]["t"], to.Tensor) and not isinstance(got["model"]["t"],
                                                                        to.Parameter)
    assert got["model"]["t"].dtype == np.int64 and got["model"]["t"].tolist() == [[1, 2], [3, 4]]
    assert isinstance(got["param"], to.Parameter) and got["param"].requires_grad
    np.testing.assert_array_equal(got["param"].data, p.data)
    assert got["epoch"] == 7 and np.isnan(got["loss"]) and got["best"] == 0.25
    assert got["hist"] == [1.0, 2.0] and got["shape"] == (2, 3) and got["name"] == "run"
    assert got["none"] is None and got["flag"] is True and got[3] == "int key"
    assert got["same"] is got["model"]["w"]  # one array saved once, shared as saved


def test_file_objects(tmp_path):
    sd = model().state_dict()
    buf = io.BytesIO()
    to.save(sd, buf)
    buf.seek(0)
    back = to.load(buf)
    assert list(back) == list(sd)
    with open(tmp_path / "m.bin", "wb") as f:
        to.save({"a": np.ones(2)}, f)
    with open(tmp_path / "m.bin", "rb") as f:
        assert to.load(f)["a"].tolist() == [1.0, 1.0]


def test_the_file_holds_no_pickle(tmp_path):
    path = tmp_path / "m.pt"
    to.save({"w": np.ones((2, 2), np.float32), "t": to.tensor([1.0])}, path)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert all(n == "manifest.json" or n.endswith(".npy") for n in names)
        for n in names:
            if n.endswith(".npy"):
                np.load(io.BytesIO(zf.read(n)), allow_pickle=False)


def test_keyword_checkpoints_keep_working(tmp_path):
    m = model()
    opt = to.optim.SGD(m.parameters(), lr=0.1)
    path = tmp_path / "run.tinyopt"
    to.save(path, model=m, optimizer=opt, epoch=3)
    everything = to.load(path)
    assert set(everything) == {"model", "optimizer", "epoch", "rng"} and everything["epoch"] == 3
    assert to.load_into(path, model=model(), optimizer=opt) == {"epoch": 3}


def test_options_and_map_location(tmp_path):
    path = tmp_path / "m.pt"
    to.save({"a": 1}, path, pickle_protocol=4)
    for loc in (None, "cpu", "cpu:0", {"cuda:0": "cpu"}, lambda storage, loc: storage):
        assert to.load(path, map_location=loc) == {"a": 1}
    assert to.load(path, weights_only=False) == {"a": 1}
    assert to.load(path, weights_only=True, mmap=False) == {"a": 1}
    with pytest.raises(ValueError, match="CPU only.*cuda"):
        to.load(path, map_location="cuda")
    with pytest.raises(ValueError, match="CPU only"):
        to.load(path, map_location={"cpu": "cuda:1"})
    with pytest.raises(TypeError, match="never unpickles"):
        to.load(path, pickle_module=object())
    with pytest.raises(TypeError, match="never pickles"):
        to.save({"a": 1}, path, pickle_module=object())
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        to.save({"a": 1}, path, model=3)


def test_objects_are_refused_with_a_hint_and_the_file_is_untouched(tmp_path):
    path = tmp_path / "m.pt"
    to.save({"ok": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"obj\['model'\] is a Sequential object.*state_dict\(\)"):
        to.save({"model": model()}, path)
    with pytest.raises(TypeError, match="obj is a SGD object"):
        to.save(to.optim.SGD(model().parameters(), lr=0.1), path)
    with pytest.raises(TypeError, match="not supported"):
        to.save({"x": object()}, path)
    assert path.read_bytes() == before


def test_foreign_files(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"hello")
    with pytest.raises(CheckpointError, match="zip signature"):
        to.load(bad)


@needs_torch
def test_torch_files_are_refused_with_the_conversion(tmp_path):
    for legacy in (False, True):
        path = tmp_path / f"torch{legacy}.pt"
        torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=not legacy)
        with pytest.raises(CheckpointError, match="written by torch.save.*convert_torch_file"):
            to.load(path)
        with open(path, "rb") as f, pytest.raises(CheckpointError, match="convert_torch_file"):
            to.load(f)


@needs_torch
def test_convert_torch_file(tmp_path):
    from tinyopt.serialization import convert_torch_file
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    tm(torch.randn(5, 4)).sum().backward()
    topt.step()
    src, dst = tmp_path / "t.pt", tmp_path / "t.tinyopt"
    torch.save({"model": tm.state_dict(), "optim": topt.state_dict(), "epoch": 2,
                "size": torch.Size([2, 3]), "bf": torch.ones(2, dtype=torch.bfloat16)}, src)
    convert_torch_file(src, dst)
    got = to.load(dst)
    assert got["epoch"] == 2 and got["size"] == (2, 3)
    assert got["bf"].dtype == np.float32
    ours = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    ours.load_state_dict(got["model"])
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(ours(x).numpy(), tm(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-6, atol=1e-6)
    opt = to.optim.Adam(ours.parameters(), lr=1e-3)
    opt.load_state_dict(got["optim"])
    assert opt.state_dict()["state"][0]["exp_avg"].shape == (3, 4)


def test_types_come_back_exactly_or_are_refused_at_save_time(tmp_path):
    """Issue 25.15: an OrderedDict came back a dict, a requires-grad plain Tensor a Parameter, a
    namedtuple a tuple and an int subclass an int, silently."""
    import collections
    import enum

    t = to.tensor([1.0, 2.0]).requires_grad_()
    frozen = to.Parameter(np.ones(2, np.float32), requires_grad=False)
    obj = {"od": collections.OrderedDict([("b", 1), ("a", to.zeros(2))]), "t": t,
           "frozen": frozen, "p": to.Parameter(np.ones(2, np.float32)),
           "size": to.zeros(2, 3).size(), "sd": model().state_dict()}
    buf = io.BytesIO()
    to.save(obj, buf)
    buf.seek(0)
    got = to.load(buf)
    assert type(got["od"]) is collections.OrderedDict and list(got["od"]) == ["b", "a"]
    assert type(got["sd"]) is collections.OrderedDict and list(got["sd"]) == list(obj["sd"])
    assert type(got["t"]) is to.Tensor and got["t"].requires_grad and got["t"].is_leaf
    assert type(got["frozen"]) is to.Parameter and not got["frozen"].requires_grad
    assert type(got["p"]) is to.Parameter and got["p"].requires_grad
    assert type(got["size"]) is to.Size and got["size"] == (2, 3)

    Point = collections.namedtuple("Point", "x y")

    class Level(enum.IntEnum):
        LOW = 1

    class Tags(dict):
        pass

    path = tmp_path / "refused.pt"
    cases = [(Point(1, 2), "Point would load as a plain tuple.*x._asdict"),
             (Level.LOW, "Level would load as a plain int"),
             ({"k": [Tags(a=1)]}, r"obj\['k'\]\[0\]: .*Tags would load as a plain dict"),
             (collections.defaultdict(list), "defaultdict would load as a plain dict"),
             ({Level.LOW: 1}, "dict key"), (np.ma.masked_array([1, 2]), "plain ndarray")]
    for bad, msg in cases:
        with pytest.raises(TypeError, match=msg):
            to.save(bad, path)
        assert not path.exists()  # refused before the file is touched


def test_files_written_before_tensors_recorded_parameter_still_load(tmp_path):
    """A file of the earlier format (no "parameter" field): requires_grad meant a Parameter."""
    import json
    path = tmp_path / "old.pt"
    to.save({"p": to.Parameter(np.ones(2, np.float32)), "t": to.ones(2)}, path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    names = [n for n in entries if n.endswith(".json")]
    text = entries[names[0]].decode()
    assert '"parameter": true' in text and '"parameter": false' in text
    old = text.replace(', "parameter": true', "").replace(', "parameter": false', "")
    manifest = json.loads(old)
    assert "parameter" not in old and manifest
    entries[names[0]] = old.encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in entries.items():
            zf.writestr(n, data)
    got = to.load(path)
    assert type(got["p"]) is to.Parameter and type(got["t"]) is to.Tensor


@needs_torch
def test_convert_torch_file_keeps_unsigned_values_and_torch_types(tmp_path):
    """Issue 25.7: a torch uint64 tensor's 2**64 - 1 came back -1; issue 25.15: the file's
    OrderedDict, Size and requires-grad plain tensors keep their types."""
    import collections
    from tinyopt.serialization import convert_torch_file
    src, dst = tmp_path / "u.pt", tmp_path / "u.tinyopt"
    torch.save({"u64": torch.tensor([2**64 - 1, 3], dtype=torch.uint64),
                "u16": torch.tensor([65535], dtype=torch.uint16),
                "sd": torch.nn.Linear(2, 1).state_dict(), "size": torch.Size([4, 2]),
                "t": torch.ones(2, requires_grad=True)}, src)
    convert_torch_file(src, dst)
    got = to.load(dst)
    assert got["u64"].dtype == to.uint64 and got["u64"].tolist() == [2**64 - 1, 3]
    assert got["u16"].dtype == to.uint16 and got["u16"].tolist() == [65535]
    assert type(got["sd"]) is collections.OrderedDict and list(got["sd"]) == ["weight", "bias"]
    assert type(got["size"]) is to.Size and got["size"] == (4, 2)
    assert type(got["t"]) is to.Tensor and got["t"].requires_grad
