"""``to.finfo`` / ``to.iinfo`` against torch 2.13: every attribute, the default dtype, errors."""

from __future__ import annotations

import pytest

import tinyopt as to

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


@pytest.mark.parametrize("name", ["float32", "float64", None])
def test_finfo_matches_torch(name):
    if torch is None:
        pytest.skip("torch is not installed")
    ours = to.finfo(getattr(to, name)) if name else to.finfo()
    theirs = torch.finfo(getattr(torch, name)) if name else torch.finfo()
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", ["int64", "int32", "int16", "int8", "uint8"])
def test_iinfo_matches_torch(name):
    if torch is None:
        pytest.skip("torch is not installed")
    ours, theirs = to.iinfo(getattr(to, name)), torch.iinfo(getattr(torch, name))
    assert (ours.bits, ours.max, ours.min, ours.dtype) == \
        (theirs.bits, theirs.max, theirs.min, theirs.dtype)
    assert repr(ours) == repr(theirs)


def test_wrong_kinds_raise_torchs_errors():
    with pytest.raises(TypeError, match="requires a floating point input type"):
        to.finfo(to.int64)
    with pytest.raises(TypeError, match="requires an integer input type"):
        to.iinfo(to.float32)
    with pytest.raises(TypeError, match="torch.bool is not supported"):
        to.iinfo(to.bool)
