"""``torch.utils.tensorboard.SummaryWriter`` (``tinyopt.utils.tensorboard``): scalars written as
TensorBoard event records, read back here with their CRCs checked."""

from __future__ import annotations

import struct

import pytest

import tinyopt as to
from tinyopt.utils.tensorboard import SummaryWriter, _crc32c, _masked


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def _fields(buf: bytes) -> list[tuple[int, object]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 1:
            v, i = struct.unpack("<d", buf[i:i + 8])[0], i + 8
        elif wire == 5:
            v, i = struct.unpack("<f", buf[i:i + 4])[0], i + 4
        else:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        out.append((number, v))
    return out


def _events(path) -> list[dict]:
    data = path.read_bytes()
    events, i = [], 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == _masked(_crc32c(head))
        body = data[i + 12:i + 12 + n]
        assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == _masked(_crc32c(body))
        events.append(dict(_fields(body)))
        i += 16 + n
    return events


def test_crc32c_known_value():
    assert _crc32c(b"123456789") == 0xE3069283


def test_scalars_are_tensorboard_event_records(tmp_path):
    with SummaryWriter(log_dir=str(tmp_path / "run")) as w:
        for step in range(3):
            w.add_scalar("Loss/train", to.tensor(0.5 / (step + 1)), step)
        w.add_scalars("acc", {"train": 0.9, "val": 0.8}, 3)
        with pytest.raises(NotImplementedError, match="scalars only"):
            w.add_histogram("w", to.ones(3), 0)
    (path,) = (tmp_path / "run").iterdir()
    assert path.name.startswith("events.out.tfevents.")
    events = _events(path)
    assert events[0][3] == b"brain.Event:2"
    scalars = []
    for e in events[1:]:
        (value,) = [dict(_fields(v)) for k, v in _fields(e[5]) if k == 1]
        scalars.append((value[1].decode(), e[2], round(value[2], 6)))
    assert scalars == [("Loss/train", 0, 0.5), ("Loss/train", 1, 0.25),
                       ("Loss/train", 2, 0.166667), ("acc/train", 3, 0.9), ("acc/val", 3, 0.8)]
