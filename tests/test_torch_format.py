"""``tinyopt.torch_format.save``: state dicts in PyTorch's file format, read by
``torch.load(f, weights_only=True)`` (PyTorch 2.13) without tinyopt, and accepted by torch's
``load_state_dict``; the writer never imports torch."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt import torch_format

SRC = Path(to.__file__).resolve().parents[1]


def _model():
    to.manual_seed(0)
    # (BatchNorm first: a bias right before it has a gradient of rounding noise, which Adam
    # turns into steps of full size, different in every library)
    return nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 2, 3), nn.Flatten(),
                         nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3))


def _torch_model(torch):
    tn = torch.nn
    return tn.Sequential(tn.BatchNorm2d(1), tn.Conv2d(1, 2, 3), tn.Flatten(), tn.Linear(8, 4),
                         tn.ReLU(), tn.Linear(4, 3))


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def _trained():
    model = _model()
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    x = np.random.default_rng(0).standard_normal((5, 1, 4, 4)).astype(np.float32)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), np.array([0, 1, 2, 0, 1])).backward()
        opt.step()
    return model, opt


def test_torch_loads_a_model_and_optimizer_and_accepts_them(tmp_path):
    torch = pytest.importorskip("torch")
    model, opt = _trained()
    path = tmp_path / "ckpt.pt"
    torch_format.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 2}, path)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["epoch"] == 2 and isinstance(ckpt["model"], OrderedDict)
    ours = model.state_dict()
    assert list(ckpt["model"]) == list(ours)
    for k, v in ours.items():
        got = ckpt["model"][k]
        assert got.dtype == getattr(torch, v.dtype.name) and tuple(got.shape) == v.shape, k
        assert np.array_equal(got.numpy(), v.numpy()), k
    theirs = _torch_model(torch)
    assert not theirs.load_state_dict(ckpt["model"]).missing_keys
    topt = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    topt.load_state_dict(ckpt["optim"])
    mine = opt.state_dict()
    assert topt.state_dict()["param_groups"] == mine["param_groups"]
    for i, state in mine["state"].items():
        for name, value in state.items():
            assert np.array_equal(topt.state_dict()["state"][i][name].numpy(), value.numpy())
    # torch continues from the loaded state: one step of each gives the same weights
    x = np.random.default_rng(1).standard_normal((5, 1, 4, 4)).astype(np.float32)
    y = np.array([2, 1, 0, 0, 1])
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    topt.zero_grad()
    torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    topt.step()
    for (k, v), tv in zip(model.state_dict().items(), theirs.state_dict().values()):
        np.testing.assert_allclose(tv.numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_every_dtype_shape_and_python_value(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    values = {
        "f32": to.randn(2, 3), "f64": to.randn(3, dtype=to.float64),
        "f16": to.randn(4).half(), "bf16": to.randn(2, 2).to(to.bfloat16),
        "i64": to.arange(5), "i32": to.arange(3, dtype=to.int32),
        "i16": to.tensor([-3, 7], dtype=to.int16), "i8": to.tensor([-128, 127], dtype=to.int8),
        "u8": to.tensor([0, 255], dtype=to.uint8), "b": to.tensor([True, False]),
        "u16": to.from_numpy(np.array([0, 2**16 - 1], np.uint16)),
        "u32": to.from_numpy(np.array([[0], [2**32 - 1]], np.uint32)),
        "u64": to.from_numpy(np.array([0, 2**63, 2**64 - 1], np.uint64)),
        "scalar": to.tensor(3.5), "empty": to.zeros(0, 4), "view": to.arange(6).reshape(2, 3).t(),
        "array": np.arange(4, dtype=np.float32),
        "python": [1, -2**40, 2**70, 0.25, float("inf"), True, None, "é", (1, (2,)), {3: "x"}],
    }
    path = tmp_path / "values.pt"
    torch_format.save(values, path)
    back = torch.load(path, weights_only=True, mmap=True)  # mmap: the records are aligned
    for k, v in values.items():
        if k == "python":
            continue
        ours = np.asarray(v.numpy() if isinstance(v, to.Tensor) else v)
        assert str(back[k].dtype) == f"torch.{ours.dtype.name}", k
        assert back[k].is_contiguous() and tuple(back[k].shape) == ours.shape, k
        theirs = back[k].view(torch.uint16) if ours.dtype.name == "bfloat16" else back[k]
        assert np.array_equal(theirs.numpy(), _bits(ours)), k
    assert back["python"] == values["python"]
    with zipfile.ZipFile(path) as zf:
        with open(path, "rb") as f:
            for info in zf.infolist():
                if "/data/" in info.filename:
                    f.seek(info.header_offset + 26)
                    n, m = np.frombuffer(f.read(4), "<u2")
                    assert (info.header_offset + 30 + n + m) % 64 == 0, info.filename


def test_tied_weights_stay_tied_and_parameters_stay_parameters():
    torch = pytest.importorskip("torch")
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    buf = io.BytesIO()
    p = nn.Parameter(to.ones(2))
    torch_format.save({"sd": model.state_dict(), "p": p}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert back["sd"]["0.weight"].data_ptr() == back["sd"]["2.weight"].data_ptr()
    assert isinstance(back["p"], torch.nn.Parameter) and back["p"].requires_grad


def test_unsupported_values_raise_before_the_file_is_touched(tmp_path):
    path = tmp_path / "old.pt"
    path.write_bytes(b"old")
    for bad, what in [({"m": nn.Linear(2, 2)}, "obj\\['m'\\] is a Linear"),
                      ({"s": {1, 2}}, "is a set"), ({(1, 2): 3}, "key of type tuple"),
                      ({"c": np.zeros(2, np.complex64)}, "dtype complex64")]:
        with pytest.raises(TypeError, match=what):
            torch_format.save(bad, path)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["old.pt"]


def test_unseekable_streams_and_no_torch_on_the_writing_side(tmp_path):
    """The writer runs where torch cannot even be imported; torch then reads what it wrote."""
    torch = pytest.importorskip("torch")
    out = tmp_path / "from_pipe.pt"
    code = ("import sys; sys.modules['torch'] = None\n"  # import torch now raises ImportError
            "import tinyopt as to, tinyopt.torch_format as tf\n"
            "tf.save({'w': to.arange(3)}, sys.stdout.buffer)\n"
            "assert sys.modules['torch'] is None\n")
    with open(out, "wb") as f:
        done = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert torch.load(out, weights_only=True)["w"].tolist() == [0, 1, 2]
