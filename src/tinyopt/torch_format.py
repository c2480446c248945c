"""Write state dicts in PyTorch's own file format, for PyTorch to read without tinyopt::

    import tinyopt.torch_format
    tinyopt.torch_format.save(model.state_dict(), "model.pt")
    tinyopt.torch_format.save({"model": model.state_dict(), "optim": opt.state_dict()}, "ckpt.pt")

    # elsewhere, with PyTorch and no tinyopt:
    state = torch.load("model.pt", weights_only=True)
    torch_model.load_state_dict(state)

``obj`` is what a state dict is made of: dicts (``OrderedDict`` stays one), lists and tuples of
Tensors, numpy arrays (written as tensors), ints, floats, bools, strings and None.  Tensors of
every tinyopt dtype are written (float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool), each one
whole and contiguous (offset 0, row-major strides); a tensor that appears twice (tied weights)
is written once and comes back as one tensor.  Anything else raises ``TypeError`` before the
file is touched.  Writing to a path is atomic, as for every tinyopt checkpoint; a writable
binary file object works too.

The format is ``torch.save``'s (PyTorch >= 1.6, read by every later version): an uncompressed
zip whose records sit under one folder (``archive/``): ``data.pkl``, a pickle (protocol 2) of
``obj`` in which each tensor is a call of ``torch._utils._rebuild_tensor_v2`` (storage, offset,
size, stride, requires_grad, hooks) and each storage a persistent id ``("storage",
torch.<Type>Storage, key, "cpu", numel)``; ``data/<key>``, each storage's raw little-endian bytes,
aligned to 64 bytes in the file (so ``torch.load(..., mmap=True)`` maps them); and the records
``byteorder``, ``version``, ``.format_version``, ``.storage_alignment`` and
``.data/serialization_id``.  The pickle uses only what ``torch.load(weights_only=True)`` allows,
and is written here opcode by opcode: tinyopt never imports torch and never pickles its own
objects.  (Reading PyTorch files into tinyopt is ``tinyopt.load``'s job.)
"""

from __future__ import annotations

import collections
import io
import os
import secrets
import struct
import zipfile
from typing import Any, BinaryIO

import numpy as np

from tinyopt.checkpoint.archive import write_atomically
from tinyopt.checkpoint.format import tensor_array
from tinyopt.engine.tensor import Parameter, Tensor

__all__ = ["save"]

ALIGNMENT = 64
ARCHIVE = "archive"
# numpy dtype name -> the torch storage class a tensor of that dtype is pickled with
STORAGE = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
           "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
           "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
           "bool": "BoolStorage"}
# dtypes that have no typed storage class in torch: their tensors are pickled as torch >= 2.3
# writes them, ``_rebuild_tensor_v3`` over an ``UntypedStorage`` (numel in bytes) and the dtype
UNTYPED = ("uint16", "uint32", "uint64")
_EPOCH = (1980, 1, 1, 0, 0, 0)


class _Pickle:
    """A protocol-2 pickle of a state dict, written opcode by opcode (``pickletools`` names)."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.storages: list[np.ndarray] = []
        self._keys: dict[int, int] = {}  # id(array) -> storage key (tied tensors share one)

    def global_(self, module: str, name: str) -> None:
        self.out += f"c{module}\n{name}\n".encode()  # GLOBAL

    def value(self, v: Any, where: str) -> None:
        out = self.out
        if v is None:
            out += b"N"
        elif isinstance(v, (bool, np.bool_)):
            out += b"\x88" if v else b"\x89"  # NEWTRUE / NEWFALSE
        elif isinstance(v, (Tensor, np.ndarray)):
            self.tensor(v, where)
        elif isinstance(v, (int, np.integer)):
            v = int(v)
            if -2**31 <= v < 2**31:
                out += b"J" + struct.pack("<i", v)  # BININT
            else:
                data = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                out += b"\x8a" + bytes([len(data)]) + data  # LONG1
        elif isinstance(v, (float, np.floating)):
            out += b"G" + struct.pack(">d", float(v))  # BINFLOAT
        elif isinstance(v, str):
            data = v.encode("utf-8", "surrogatepass")
            out += b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE
        elif isinstance(v, tuple):
            out += b"("  # MARK
            for i, item in enumerate(v):
                self.value(item, f"{where}[{i}]")
            out += b"t"  # TUPLE
        elif isinstance(v, list):
            out += b"]("  # EMPTY_LIST, MARK
            for i, item in enumerate(v):
                self.value(item, f"{where}[{i}]")
            out += b"e"  # APPENDS
        elif isinstance(v, dict):
            if isinstance(v, collections.OrderedDict):
                self.global_("collections", "OrderedDict")
                out += b")R"  # EMPTY_TUPLE, REDUCE: OrderedDict()
            else:
                out += b"}"  # EMPTY_DICT
            out += b"("
            for k, item in v.items():
                if not isinstance(k, (str, int, float, bool, type(None), np.integer)):
                    raise TypeError(f"torch_format.save: {where} has a key of type "
                                    f"{type(k).__name__}: {k!r}")
                self.value(k, where)
                self.value(item, f"{where}[{k!r}]")
            out += b"u"  # SETITEMS
        else:
            raise TypeError(f"torch_format.save: {where} is a {type(v).__name__}; a state dict "
                            f"holds Tensors, numbers, strings, None and dicts, lists and tuples "
                            f"of them")

    def tensor(self, t: Tensor | np.ndarray, where: str) -> None:
        arr = tensor_array(t) if isinstance(t, Tensor) else t
        untyped = arr.dtype.name in UNTYPED
        if arr.dtype.name not in STORAGE and not untyped:
            raise TypeError(f"torch_format.save: {where} has dtype {arr.dtype}, which has no "
                            f"torch storage type here")
        key = self._keys.get(id(arr))
        if key is None:
            key = self._keys[id(arr)] = len(self.storages)
            self.storages.append(arr)
        parameter = isinstance(t, Parameter)
        if parameter:
            self.global_("torch._utils", "_rebuild_parameter")
            self.out += b"("
        self.global_("torch._utils", "_rebuild_tensor_v3" if untyped else "_rebuild_tensor_v2")
        self.out += b"(("
        self.value("storage", where)
        if untyped:
            self.global_("torch.storage", "UntypedStorage")
        else:
            self.global_("torch", STORAGE[arr.dtype.name])
        self.value(str(key), where)
        self.value("cpu", where)
        self.value(int(arr.nbytes if untyped else arr.size), where)
        self.out += b"tQ"  # TUPLE, BINPERSID
        strides = [1] * arr.ndim
        for i in range(arr.ndim - 2, -1, -1):
            strides[i] = strides[i + 1] * arr.shape[i + 1]
        self.value(0, where)
        self.value(tuple(int(n) for n in arr.shape), where)
        self.value(tuple(strides), where)
        self.value(False, where)
        self.global_("collections", "OrderedDict")
        self.out += b")R"  # OrderedDict() (the backward hooks)
        if untyped:
            self.global_("torch", arr.dtype.name)
        self.out += b"tR"  # TUPLE; REDUCE: _rebuild_tensor_v2(...) or _v3(..., dtype)
        if parameter:
            self.value(bool(t.requires_grad), where)
            self.global_("collections", "OrderedDict")
            self.out += b")RtR"  # the hooks; TUPLE; REDUCE: _rebuild_parameter(...)


def _aligned(zf: zipfile.ZipFile, name: str, zip64: bool) -> zipfile.ZipInfo:
    """A stored record whose data starts at a multiple of ALIGNMENT in the file,
    padded with an extra field as PyTorch's writer pads (id ``FB``)."""
    info = zipfile.ZipInfo(name, _EPOCH)
    header = 30 + len(name.encode()) + 4 + (20 if zip64 else 0)  # + the padding field's head
    pad = -(zf.fp.tell() + header) % ALIGNMENT  # type: ignore[union-attr]
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    return info


def _write(f: BinaryIO, pickle: _Pickle) -> None:
    records = [("data.pkl", bytes(pickle.out + b".")),  # STOP
               (".format_version", b"1"), (".storage_alignment", str(ALIGNMENT).encode()),
               ("byteorder", b"little")]
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in records:
            zf.writestr(zipfile.ZipInfo(f"{ARCHIVE}/{name}", _EPOCH), data)
        for key, arr in enumerate(pickle.storages):
            little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
            big = little.nbytes > (1 << 30)
            with zf.open(_aligned(zf, f"{ARCHIVE}/data/{key}", big), "w", force_zip64=big) as ef:
                ef.write(little.reshape(-1).view(np.uint8).data)
        zf.writestr(zipfile.ZipInfo(f"{ARCHIVE}/version", _EPOCH), b"3\n")
        zf.writestr(zipfile.ZipInfo(f"{ARCHIVE}/.data/serialization_id", _EPOCH),
                    str(secrets.randbits(128)).zfill(40).encode())


def save(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Write ``obj`` (a state dict, or dicts, lists and tuples of them) to ``f`` in PyTorch's
    file format, for ``torch.load(f, weights_only=True)`` (see the module docstring).  ``f`` is
    a path (written atomically) or a writable binary file object."""
    pickle = _Pickle()
    pickle.value(obj, "obj")  # every value checked before the file is touched
    if hasattr(f, "write"):
        if f.seekable():
            _write(f, pickle)
        else:  # the zip is written where its offsets can be known, then streamed
            buf = io.BytesIO()
            _write(buf, pickle)
            f.write(buf.getvalue())
        return
    write_atomically(os.fspath(f), lambda out: _write(out, pickle))
