"""Reading ``torch.save``'s zip files without torch (``tinyopt.torch_zip``): values equal
``torch.load(weights_only=True)``'s, storage sharing kept, hostile files refused before anything
is allocated or run; whole objects pickled and loaded only with ``weights_only=False``."""

from __future__ import annotations

import io
import pickle
import struct
import zipfile

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.checkpoint import CheckpointError


def _zip(entries: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _storage_pickle(numel: int, size: tuple, stride: tuple, offset: int = 0,
                    storage: str = "FloatStorage") -> bytes:
    """data.pkl of one tensor, as torch writes it (GLOBAL, BINPERSID, REDUCE)."""
    p = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storageq\x01ctorch\n"
    p += storage.encode() + b"\nq\x02X\x01\x00\x00\x000X\x03\x00\x00\x00cpuq\x03"
    p += b"J" + struct.pack("<i", numel) if numel < 2**31 else \
        b"\x8a\x08" + struct.pack("<q", numel)
    p += b"tQ" + b"J" + struct.pack("<i", offset)
    p += b"(" + b"".join(b"J" + struct.pack("<i", s) for s in size) + b"t"
    p += b"(" + b"".join(b"J" + struct.pack("<i", s) for s in stride) + b"t"
    p += b"\x89ccollections\nOrderedDict\n)RtR."
    return p


def test_a_hand_made_file_loads():
    data = _zip({"a/data.pkl": _storage_pickle(6, (2, 3), (3, 1)), "a/byteorder": b"little",
                 "a/data/0": np.arange(6, dtype=np.float32).tobytes()})
    t = to.load(io.BytesIO(data))
    assert isinstance(t, to.Tensor) and t.shape == (2, 3)
    np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_big_endian_files_are_swapped():
    data = _zip({"a/data.pkl": _storage_pickle(3, (3,), (1,)), "a/byteorder": b"big",
                 "a/data/0": np.arange(3, dtype=">f4").tobytes()})
    np.testing.assert_array_equal(to.load(io.BytesIO(data)).numpy(), [0, 1, 2])


@pytest.mark.parametrize("problem, entries, error, match", [
    ("a declared size larger than the data",
     {"a/data.pkl": _storage_pickle(10**12, (10**6,), (1,)), "a/data/0": b"\0" * 8},
     CheckpointError, "declares 1000000000000 elements"),
    ("a view reaching past its storage",
     {"a/data.pkl": _storage_pickle(2, (3,), (1,)), "a/data/0": b"\0" * 8},
     pickle.UnpicklingError, "beyond its storage"),
    ("a view with a huge stride",
     {"a/data.pkl": _storage_pickle(2, (2,), (2**30,)), "a/data/0": b"\0" * 8},
     pickle.UnpicklingError, "beyond its storage"),
    ("a missing storage entry",
     {"a/data.pkl": _storage_pickle(2, (2,), (1,))}, CheckpointError, "no entry data/0"),
    ("a traversal name",
     {"a/data.pkl": b"\x80\x02N.", "a/../../etc/evil": b"x"}, CheckpointError, "outside"),
    ("an absolute name", {"a/data.pkl": b"\x80\x02N.", "/etc/evil": b"x"}, CheckpointError,
     "outside"),
    ("a legacy quantized storage",
     {"a/data.pkl": _storage_pickle(2, (2,), (1,), storage="QInt8Storage"),
      "a/data/0": b"\0\0"}, pickle.UnpicklingError, "quantized"),
])
def test_hostile_archives_are_refused(problem, entries, error, match):
    with pytest.raises(error, match=match):
        to.load(io.BytesIO(_zip(entries)))


def test_compressed_entries_are_refused():
    data = _zip({"a/data.pkl": b"\x80\x02N." + b" " * 100}, zipfile.ZIP_DEFLATED)
    with pytest.raises(CheckpointError, match="compressed"):
        to.load(io.BytesIO(data))


def test_truncated_files_are_refused(tmp_path):
    data = _zip({"a/data.pkl": _storage_pickle(256, (256,), (1,)),
                 "a/data/0": np.ones(256, np.float32).tobytes()})
    for cut in (len(data) // 3, len(data) - 10):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError):
            to.load(path)


class _Payload:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))  # creates a file when unpickled


@pytest.mark.parametrize("payload", ["reduce", "stack_global", "build", "newobj", "persid"])
def test_pickle_payloads_never_run(tmp_path, payload):
    marker = tmp_path / "ran"
    if payload == "reduce":
        pkl = pickle.dumps(_Payload(marker), protocol=2)
    elif payload == "stack_global":
        pkl = pickle.dumps(_Payload(marker), protocol=4)
    elif payload == "build":  # BUILD on an OrderedDict with more than its _metadata
        pkl = b"\x80\x02ccollections\nOrderedDict\n)R}X\x05\x00\x00\x00clearN\x73b."
    elif payload == "newobj":
        pkl = b"\x80\x02cbuiltins\nopen\n)\x81."
    else:
        pkl = b"\x80\x02X\x03\x00\x00\x00abcQ."
    path = tmp_path / "evil.pt"
    path.write_bytes(_zip({"archive/data.pkl": pkl}))
    with pytest.raises(pickle.UnpicklingError):
        to.load(path)
    assert not marker.exists()


def test_whole_modules_pickle_and_need_weights_only_false(tmp_path):
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = to.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(to.ones(2, 3)).sum().backward()
    opt.step()
    path = tmp_path / "model.pt"
    to.save({"model": model, "opt": opt}, path)
    with pytest.raises(pickle.UnpicklingError, match="(?s)Weights only load failed.*Sequential"):
        to.load(path)
    back = to.load(path, weights_only=False)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(back["model"](x).numpy(), model(x).numpy())
    assert isinstance(back["model"][0].weight, nn.Parameter)
    assert back["opt"].state_dict()["state"][0]["momentum_buffer"].shape == (4, 3)


# ---- against torch ------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def _dtypes(torch):
    return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
            torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
            torch.complex128, torch.complex32, torch.uint16, torch.uint32, torch.uint64,
            torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
            torch.float8_e8m0fnu, torch.float4_e2m1fn_x2, torch.bits8, torch.bits16]


def test_every_dtype_equals_torch_load(tmp_path):
    torch = _torch()
    import warnings
    rng = np.random.default_rng(0)
    saved = {}
    for d in _dtypes(torch):
        raw = torch.from_numpy(rng.integers(0, 256, size=64, dtype=np.uint8))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = (raw % 2 == 1) if d == torch.bool else raw.view(d)
        t = t.reshape(2, -1)[:, 1:]  # a strided view, as the torch file stores it
        saved[str(d)] = t
    path = tmp_path / "dtypes.pt"
    torch.save(saved, path)
    theirs = torch.load(path, weights_only=True)
    ours = to.load(path)
    assert list(ours) == list(theirs)
    for name, t in theirs.items():
        got = ours[name]
        arr = got.numpy() if isinstance(got, to.Tensor) else got
        want_bytes = t.contiguous().view(torch.uint8).numpy().tobytes()
        assert np.ascontiguousarray(arr).tobytes() == want_bytes, name
        assert arr.shape[:t.dim()] == tuple(t.shape), name
        if name in ("torch.float32", "torch.int64", "torch.bool", "torch.float16",
                    "torch.bfloat16", "torch.uint8", "torch.int8"):
            assert isinstance(got, to.Tensor) and "torch." + str(got.dtype) == name, name
        elif name == "torch.complex64":
            assert arr.dtype == np.complex64
        elif name == "torch.uint16":
            assert arr.dtype == np.uint16


def test_state_dicts_views_and_sharing_equal_torch_load(tmp_path):
    torch = _torch()
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-2)
    for _ in range(2):
        topt.zero_grad()
        tm(torch.randn(5, 4)).pow(2).sum().backward()
        topt.step()
    base = torch.arange(12.0).reshape(3, 4)
    obj = {"model": tm.state_dict(), "optim": topt.state_dict(), "epoch": 2,
           "views": [base, base[1], base.t(), base[:, 1::2]], "size": base.shape,
           "nested": {"a": [torch.ones(2), (torch.zeros(1, dtype=torch.int64), 3.5)]},
           "param": torch.nn.Parameter(torch.ones(3)), "empty": torch.empty(0, 3),
           "scalar": torch.tensor(2.5), "dtype": torch.float16, "device": torch.device("cpu")}
    path = tmp_path / "ckpt.pt"
    torch.save(obj, path)
    theirs = torch.load(path, weights_only=True)
    with open(path, "rb") as f:
        ours = to.load(f, map_location="cpu")

    def same(a, b, where):
        if isinstance(b, torch.Tensor):
            assert isinstance(a, to.Tensor), where
            np.testing.assert_array_equal(a.numpy(), b.detach().numpy(), err_msg=where)
            assert a.requires_grad == b.requires_grad, where
        elif isinstance(b, dict):
            assert list(a) == list(b) and type(a) is type(b), where
            for k in b:
                same(a[k], b[k], f"{where}[{k!r}]")
        elif isinstance(b, (list, tuple)) and not isinstance(b, torch.Size):
            assert type(a) is type(b) and len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"{where}[{i}]")
        elif isinstance(a, np.dtype):  # tinyopt's dtypes are numpy's
            assert "torch." + str(a) == str(b), where
        else:
            assert str(a).replace("tinyopt", "torch") == str(b), where
    same(ours, theirs, "obj")
    assert isinstance(ours["param"], nn.Parameter)
    assert ours["model"]._metadata == theirs["model"]._metadata
    # views share their storage, as in torch
    ours["views"][0][1, 1] = 100.0
    theirs["views"][0][1, 1] = 100.0
    for a, b in zip(ours["views"], theirs["views"]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # the model and the optimizer continue exactly as torch's
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model.load_state_dict(ours["model"])
    opt = to.optim.AdamW(model.parameters(), lr=1e-2)
    opt.load_state_dict(ours["optim"])
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
        topt.zero_grad()
        tm(torch.from_numpy(x)).pow(2).sum().backward()
        topt.step()
    np.testing.assert_allclose(model(x).numpy(), tm(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_cuda_storages_need_a_map_location(tmp_path):
    torch = _torch()
    path = tmp_path / "t.pt"
    torch.save(torch.ones(2), path)
    data = path.read_bytes().replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    # (the pickle's length prefixes stay valid: the zip's CRC and sizes are rewritten)
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as zf:
        entries = {i.filename: zf.read(i) for i in zf.infolist()}
    name = next(n for n in entries if n.endswith("data.pkl"))
    entries[name] = entries[name].replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    data = _zip(entries)
    with pytest.raises(RuntimeError, match="map_location"):
        to.load(io.BytesIO(data))
    np.testing.assert_array_equal(to.load(io.BytesIO(data), map_location="cpu").numpy(), [1, 1])


def test_torch_loads_what_the_legacy_format_refusal_names(tmp_path):
    torch = _torch()
    path = tmp_path / "old.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="legacy format"):
        to.load(path)


class Config:
    """A user class saved inside a checkpoint (weights_only needs add_safe_globals for it)."""

    def __init__(self, depth=0):
        self.depth = depth


def test_add_safe_globals_allows_a_trusted_class(tmp_path):
    torch = _torch()
    path = tmp_path / "cfg.pt"
    torch.save({"cfg": Config(3), "w": torch.ones(2)}, path)
    with pytest.raises(pickle.UnpicklingError, match="(?s)Unsupported global.*Config.*"
                                                     "add_safe_globals"):
        to.load(path)
    with to.serialization.safe_globals([Config]):
        got = to.load(path)
    assert isinstance(got["cfg"], Config) and got["cfg"].depth == 3
    assert Config not in to.serialization.get_safe_globals()  # (only inside the block)
    with pytest.raises(pickle.UnpicklingError):
        to.load(path)


def test_whole_model_loads_weights_only_with_its_classes_allowed(tmp_path):
    """word_language_model's pattern: torch.save(model), then load under safe_globals."""
    to.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 4), nn.Dropout(0.1), nn.Linear(4, 3))
    path = tmp_path / "model.pt"
    to.save(model, path)
    allowed = [to.nn.modules.container.Sequential, to.nn.modules.sparse.Embedding,
               to.nn.modules.dropout.Dropout, to.nn.modules.linear.Linear]
    with to.serialization.safe_globals(allowed):
        back = to.load(path)
    back.eval()
    model.eval()
    x = to.tensor([[1, 2], [3, 4]])
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
    torch = pytest.importorskip("torch")
    with zipfile.ZipFile(path) as zf:  # the file is torch's format: torch reads its tensors
        names = zf.namelist()
    assert "archive/data.pkl" in names and "archive/data/0" in names
    sd = torch.load(path, weights_only=False)
    assert isinstance(sd, nn.Sequential)
