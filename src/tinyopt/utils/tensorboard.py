"""``torch.utils.tensorboard.SummaryWriter`` for scalars: TensorBoard event files written without
the tensorboard package.

    writer = SummaryWriter(log_dir="runs/exp1")
    writer.add_scalar("Loss/train", loss.item(), step)
    writer.close()                                  # tensorboard --logdir runs  shows it

The file is TensorBoard's ``events.out.tfevents.<time>.<host>`` record stream: each record is
``length (uint64) | masked CRC-32C of length | Event protobuf | masked CRC-32C of the event``,
the first event holding ``file_version: "brain.Event:2"``, each scalar an Event with
``wall_time``, ``step`` and a Summary of one ``simple_value``.  ``add_scalars`` writes each
scalar under ``main_tag/key`` into this file (PyTorch writes one file per key).  Images,
histograms, graphs, text and embeddings are not supported (``NotImplementedError``).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from datetime import datetime
from typing import Any

__all__ = ["SummaryWriter"]


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord framing uses."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint((number << 3) | wire) + payload


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2, _varint(len(data)) + data)


def _event(wall_time: float, step: int | None = None, *, file_version: str | None = None,
           summary: bytes | None = None) -> bytes:
    """An Event protobuf: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary =
    5."""
    out = _field(1, 1, struct.pack("<d", wall_time))
    if step is not None:
        out += _field(2, 0, _varint(int(step)))
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if summary is not None:
        out += _bytes_field(5, summary)
    return out


def _scalar_summary(tag: str, value: float) -> bytes:
    """Summary { value { tag = 1, simple_value = 2 (float) } }."""
    return _bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5, struct.pack("<f", value)))


class SummaryWriter:
    """Writes scalars to a TensorBoard event file in ``log_dir`` (default
    ``runs/<date>_<host><comment>``), as PyTorch's SummaryWriter does."""

    def __init__(self, log_dir: str | None = None, comment: str = "",
                 purge_step: int | None = None, max_queue: int = 10, flush_secs: int = 120,
                 filename_suffix: str = "") -> None:
        host = socket.gethostname()
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{host}{comment}")
        self.log_dir = os.fspath(log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{host}.{os.getpid()}.0" \
            f"{filename_suffix}"
        self._path = os.path.join(self.log_dir, name)
        self._file: Any = open(self._path, "ab")
        self._pending = 0
        self._max_queue = max_queue
        self._write(_event(time.time(), file_version="brain.Event:2"))
        self.flush()

    def get_logdir(self) -> str:
        """The folder the event file is in."""
        return self.log_dir

    def _write(self, event: bytes) -> None:
        if self._file is None:
            raise RuntimeError("SummaryWriter: the writer is closed")
        head = struct.pack("<Q", len(event))
        self._file.write(head + struct.pack("<I", _masked(_crc32c(head))) + event +
                         struct.pack("<I", _masked(_crc32c(event))))
        self._pending += 1
        if self._pending >= self._max_queue:
            self.flush()

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None,
                   walltime: float | None = None, new_style: bool = False,
                   double_precision: bool = False) -> None:
        """Record ``scalar_value`` (a number, or a one-element tensor or array) under ``tag``."""
        value = float(scalar_value.item() if hasattr(scalar_value, "item") else scalar_value)
        self._write(_event(time.time() if walltime is None else walltime, global_step,
                           summary=_scalar_summary(tag, value)))

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict[str, Any],
                    global_step: int | None = None, walltime: float | None = None) -> None:
        """Record each value under ``main_tag/key`` (one file, see the module docstring)."""
        for key, value in tag_scalar_dict.items():
            self.add_scalar(f"{main_tag}/{key}", value, global_step, walltime)

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        """Refused: only scalars are recorded (``add_scalar``, ``add_scalars``)."""
        raise NotImplementedError("tinyopt's SummaryWriter records scalars only (add_scalar, "
                                  "add_scalars)")

    add_image = add_images = add_histogram = add_graph = add_text = add_embedding = \
        add_figure = add_hparams = add_pr_curve = add_audio = add_video = _unsupported

    def flush(self) -> None:
        """Write what is buffered to the event file."""
        if self._file is not None:
            self._file.flush()
            self._pending = 0

    def close(self) -> None:
        """Flush and close the event file."""
        if self._file is not None:
            self._file.flush()
            self._file.close()
            self._file = None

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
