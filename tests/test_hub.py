"""``torch.hub.load_state_dict_from_url`` (``tinyopt.hub``): a download into the cache, once, with
the hash check, loading what ``torch.save`` wrote."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn


def test_downloads_once_checks_the_hash_and_loads_a_torch_file(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    src = tmp_path / "lenet.pth"
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2)
    torch.save(tm.state_dict(), src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    named = tmp_path / f"lenet-{digest[:8]}.pth"
    named.write_bytes(src.read_bytes())
    cache = tmp_path / "cache"
    sd = to.hub.load_state_dict_from_url(named.as_uri(), model_dir=str(cache), check_hash=True)
    m = nn.Linear(3, 2)
    m.load_state_dict(sd)
    np.testing.assert_array_equal(m.weight.numpy(), tm.weight.detach().numpy())
    assert "Downloading" in capsys.readouterr().out
    named.unlink()  # the second call reads the cache
    to.hub.load_state_dict_from_url(named.as_uri(), model_dir=str(cache))
    assert "Downloading" not in capsys.readouterr().out
    bad = tmp_path / "lenet-deadbeef.pth"
    bad.write_bytes(src.read_bytes())
    with pytest.raises(RuntimeError, match="invalid hash value"):
        to.hub.load_state_dict_from_url(bad.as_uri(), model_dir=str(cache), check_hash=True)
    assert not (cache / bad.name).exists()


def test_hub_dir_follows_torch_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert to.hub.get_dir() == str(tmp_path / "hub")
