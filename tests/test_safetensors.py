"""``tinyopt.safetensors``: state dicts to and from safetensors files, both ways with the
``safetensors`` package (its numpy and torch faces), bfloat16 included."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn

st = pytest.importorskip("safetensors")
pytest.importorskip("ml_dtypes")
from tinyopt.safetensors import (load, load_file, load_model, save, save_file,  # noqa: E402
                                 save_model)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def _values() -> dict:
    to.manual_seed(0)
    return {"f32": to.randn(2, 3), "f64": to.randn(3, dtype=to.float64),
            "f16": to.randn(4).half(), "bf16": to.randn(3, 2).to(to.bfloat16),
            "i64": to.arange(5), "i32": to.arange(3, dtype=to.int32),
            "i16": to.tensor([-3, 7], dtype=to.int16), "i8": to.tensor([-128, 127], dtype=to.int8),
            "u8": to.tensor([0, 255], dtype=to.uint8), "b": to.tensor([True, False]),
            "scalar": to.tensor(2.5), "view": to.arange(6).reshape(2, 3).t(),
            "array": np.arange(4, dtype=np.float32)}


def test_round_trip_with_the_safetensors_numpy_api(tmp_path):
    import safetensors.numpy
    values = _values()
    path = tmp_path / "v.safetensors"
    save_file(values, path, metadata={"format": "pt", "step": "7"})
    theirs = safetensors.numpy.load_file(str(path))
    back = load_file(path)
    with st.safe_open(str(path), framework="np") as f:
        assert f.metadata() == {"format": "pt", "step": "7"}
    for k, v in values.items():
        ours = np.asarray(v.numpy() if isinstance(v, to.Tensor) else v)
        assert isinstance(back[k], to.Tensor) and back[k].dtype == ours.dtype, k
        assert np.array_equal(_bits(back[k].numpy()), _bits(ours)), k
        assert np.array_equal(_bits(theirs[k]), _bits(ours)), k
    assert load(save(values))["bf16"].dtype == to.bfloat16


def test_both_ways_with_torch_and_a_model(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file as torch_load, save_file as torch_save
    to.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    path = tmp_path / "model.safetensors"
    save_model(model, path)
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                 torch.nn.Linear(3, 2))
    tmodel.load_state_dict(torch_load(str(path)))
    for (k, v), tv in zip(model.state_dict().items(), tmodel.state_dict().values()):
        assert np.array_equal(tv.numpy(), v.numpy()), k
    # and back: torch writes (bfloat16 too), tinyopt reads
    with torch.no_grad():
        for p in tmodel.parameters():
            p.mul_(2)
    torch_save(tmodel.state_dict(), str(path))
    assert load_model(model, path) == ([], [])
    for (k, v), tv in zip(model.state_dict().items(), tmodel.state_dict().values()):
        assert np.array_equal(tv.numpy(), v.numpy()), k
    torch_save({"h": torch.linspace(-3, 3, 7, dtype=torch.bfloat16)}, str(path))
    h = load_file(path)["h"]
    assert h.dtype == to.bfloat16
    assert h.numpy().view(np.uint16).tolist() == \
        torch.linspace(-3, 3, 7, dtype=torch.bfloat16).view(torch.uint16).tolist()


def test_a_mismatched_model_is_left_as_it_was(tmp_path):
    model = nn.Linear(3, 2)
    save_file({"weight": to.zeros(2, 3)}, tmp_path / "part.safetensors")
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="bias"):
        load_model(model, tmp_path / "part.safetensors")
    assert all(np.array_equal(v.numpy(), before[k]) for k, v in model.state_dict().items())
    assert load_model(model, tmp_path / "part.safetensors", strict=False) == (["bias"], [])


def test_refusals(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"old")
    for bad, what in [({"m": 3}, "'m' is a int, not a Tensor"), ({1: to.ones(1)}, "names must"),
                      ({"c": np.zeros(2, np.complex64)}, "dtype complex64")]:
        with pytest.raises(TypeError, match=what):
            save_file(bad, path)
    with pytest.raises(TypeError, match="metadata must be a dict of str"):
        save_file({"a": to.ones(1)}, path, metadata={"step": 7})
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["x.safetensors"]
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        load_file(path)
    import safetensors.numpy
    path.write_bytes(safetensors.numpy.save({"ok": np.ones(2, np.float32),
                                             "u": np.ones(2, np.uint16)}))
    with pytest.raises(TypeError, match="tensor 'u' has dtype U16"):
        load_file(path)
    with pytest.raises(ValueError, match="CPU only"):
        load_file(path, device="cuda")


def test_without_the_package_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(ImportError, match=r"pip install 'tinyopt\[safetensors\]'"):
        save_file({"a": to.ones(1)}, tmp_path / "a.safetensors")
    assert not (tmp_path / "a.safetensors").exists()
