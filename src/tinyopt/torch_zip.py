"""Files in ``torch.save``'s zip format, read without PyTorch, and whole objects pickled into it.

    sd = tinyopt.load("lenet_mnist_model.pth")          # a file torch.save wrote: no torch needed
    model.load_state_dict(sd)
    tinyopt.save(model, "model.pt")                     # a whole Module: pickled, as torch does
    model = tinyopt.load("model.pt", weights_only=False)  # only when you trust the file

The format (PyTorch >= 1.6): a zip archive, every entry stored (not compressed) under one folder
``<name>/``: ``data.pkl`` is a pickle of the saved object in which each tensor is a call of
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`` (``_v3``
adds the dtype, for dtypes without a legacy storage class) and each storage a persistent id
``("storage", <storage type>, key, location, numel)`` whose bytes are the entry ``data/<key>``;
``byteorder`` says ``little`` or ``big``.  Tensors of one storage are views of one array here too,
so storage sharing and views survive as in ``torch.load``.

**Reading is safe by default** (``weights_only=True``, PyTorch's default since 2.6): the pickle is
run by a small interpreter of its own (:class:`_WeightsUnpickler`), not by ``pickle``, which can
only build containers (dict, list, tuple, set, OrderedDict), plain values (None, bools, ints,
floats, complex numbers, strings, bytes), tensors, ``torch.Size``, ``torch.device`` and dtypes:
any other global, and any opcode that could call something else, is refused with
``pickle.UnpicklingError`` and torch's words before anything is built.  The archive is checked
first, before any storage is read: stored entries only, no ``..``, absolute or duplicate names,
every entry inside the file, and a storage's declared size equal to its entry's size, so a
hostile or truncated file is refused before memory is allocated for it
(``tinyopt.checkpoint.CheckpointError``, a ValueError, for the archive; ``UnpicklingError`` for
the pickle).

What comes back: a tensor of a dtype tinyopt's ``Tensor`` has (float32/64, float16, bfloat16,
int8/16/32/64, uint8/16/32/64, bool) is a ``Tensor`` (a ``Parameter`` as a ``Parameter``); other
dtypes come back as numpy arrays of the same values -- complex64/128, and (with ml_dtypes) the
float8 formats as the matching numpy dtype; complex32 as float16 pairs in a last
dimension of 2, float4_e2m1fn_x2 and the bits types as their raw bytes (uint8/uint16).  Quantized
tensors are refused.  ``torch.Size`` is ``tinyopt.Size``, ``torch.device`` ``tinyopt.device``,
a dtype the numpy dtype tinyopt uses for it.

``weights_only=False`` runs Python's ``pickle`` on the file (it can run any code, exactly as
``torch.load(..., weights_only=False)`` can): for whole objects that ``save`` pickled, or torch
files holding classes of yours.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import zipfile
from collections import Counter, OrderedDict
from typing import Any, BinaryIO

import numpy as np

from tinyopt.checkpoint import CheckpointError
from tinyopt.engine.device import device
from tinyopt.engine.dtypes import SUPPORTED, float16
from tinyopt.engine.tensor import Parameter, Size, Tensor, as_tensor

__all__ = ["add_safe_globals", "clear_safe_globals", "get_safe_globals", "is_torch_zip", "load",
           "safe_globals", "save_pickled"]

_MAX_DIMS = 64

# ---- dtypes --------------------------------------------------------------------------------------
_LEGACY_STORAGES = {  # torch's legacy storage classes -> the dtype name of their elements
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
}
_QUANTIZED = ("QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage",
              "QUInt2x4Storage")
_NUMPY_NAMES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
                "bool", "complex64", "complex128", "uint16", "uint32", "uint64")
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
              "float8_e8m0fnu")
_RAW = {"float4_e2m1fn_x2": "uint8", "bits8": "uint8", "bits16": "uint16", "bits1x8": "uint8",
        "bits2x4": "uint8", "bits4x2": "uint8"}
_DTYPE_NAMES = set(_NUMPY_NAMES) | set(_ML_DTYPES) | set(_RAW) | {"complex32"} | {
    f"{s}int{b}" for s in ("", "u") for b in range(1, 8)} | {
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4"}


class _DType:
    """A torch dtype named in a file that numpy has no dtype for (its name, for errors)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _dtype(name: str) -> np.dtype | _DType:
    """The numpy dtype tinyopt uses for torch's dtype ``name`` (a ``_DType`` if it has none)."""
    if name in _NUMPY_NAMES:
        return np.dtype(name)
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            return _DType(name)
        return np.dtype(getattr(ml_dtypes, name))
    return _DType(name)


def _element(name: str) -> np.dtype:
    """How an element of torch dtype ``name`` is held: a numpy dtype (complex32: a pair of
    float16, a subarray dtype, so its arrays have a last dimension of 2)."""
    if name == "complex32":
        return np.dtype((float16, (2,)))
    if name in _RAW:
        return np.dtype(_RAW[name])
    d = _dtype(name)
    if isinstance(d, _DType):
        why = "quantized tensors are not supported" if name.startswith("q") else (
            "it needs the ml_dtypes package" if name in _ML_DTYPES else "numpy has no such type")
        raise pickle.UnpicklingError(f"cannot load a tensor of dtype torch.{name}: {why}")
    return d


# ---- the archive ---------------------------------------------------------------------------------
def is_torch_zip(f: str | os.PathLike | BinaryIO) -> bool:
    """Whether ``f`` (a path, or a seekable binary file at the start of the data) is a zip
    archive with a ``data.pkl``, as ``torch.save`` writes (the position of ``f`` is kept)."""
    try:
        with _Archive(f, check=False) as archive:
            return archive.prefix is not None
    except (OSError, CheckpointError, zipfile.BadZipFile, ValueError):
        return False


class _Archive:
    """The checked entries of a torch zip file (see the module docstring)."""

    def __init__(self, f: str | os.PathLike | BinaryIO, check: bool = True):
        self.name = getattr(f, "name", "<file>") if hasattr(f, "read") else os.fspath(f)
        self._own = not hasattr(f, "read")
        self._file: Any = open(f, "rb") if self._own else f
        self._start = self._file.tell()
        self.prefix: str | None = None
        try:
            self._file.seek(0, os.SEEK_END)
            self._size = self._file.tell()
            self._file.seek(self._start)
            self.zip = zipfile.ZipFile(self._file)
        except zipfile.BadZipFile as e:
            self.close()
            raise CheckpointError(self.name, f"not a readable zip archive ({e}); a truncated "
                                             f"or corrupted file?") from None
        except BaseException:
            self.close()
            raise
        self.entries = {i.filename: i for i in self.zip.infolist()}
        pkl = [n for n in self.entries if n.endswith("data.pkl") and n.count("/") == 1]
        if len(pkl) == 1:
            self.prefix = pkl[0][:-len("data.pkl")]
        if check:
            try:
                self._check(len(self.zip.infolist()))
            except BaseException:
                self.close()
                raise

    def _check(self, count: int) -> None:
        if self.prefix is None:
            self.fail("no <name>/data.pkl entry: not a file written by torch.save")
        if count != len(self.entries):
            self.fail("duplicate entry names")
        end = self._size
        for name, info in self.entries.items():
            if not name.startswith(self.prefix) or ".." in name.split("/") or \
                    name.startswith("/") or "\\" in name:
                self.fail(f"entry {name!r} lies outside the archive's folder {self.prefix!r}")
            if info.compress_type != zipfile.ZIP_STORED:
                self.fail(f"entry {name!r} is compressed; torch.save stores every entry")
            if info.header_offset + 30 + len(name) + info.file_size > end:
                self.fail(f"entry {name!r} claims {info.file_size} bytes beyond the end of the "
                          f"file (truncated?)")

    def fail(self, problem: str) -> None:
        raise CheckpointError(self.name, problem)

    def read(self, rel: str) -> bytes:
        info = self.entries.get(self.prefix + rel)
        if info is None:
            self.fail(f"missing entry {self.prefix + rel!r}")
        try:
            return self.zip.read(info)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise CheckpointError(self.name, f"entry {info.filename!r} is unreadable ({e}); a "
                                             f"truncated or corrupted file?") from None

    def size_of(self, rel: str) -> int | None:
        info = self.entries.get(self.prefix + rel)
        return None if info is None else info.file_size

    def close(self) -> None:
        if self._own:
            self._file.close()
        else:
            self._file.seek(self._start)

    def __enter__(self) -> _Archive:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- storages and tensors ------------------------------------------------------------------------
class _StorageType:
    """``torch.FloatStorage`` (a legacy class: its dtype) or ``torch.UntypedStorage`` (bytes)."""

    def __init__(self, name: str, dtype: str | None):
        self.name, self.dtype = name, dtype


class _Storage:
    """One ``data/<key>`` entry: its bytes, and the dtype its first tensor gave them."""

    def __init__(self, raw: np.ndarray, dtype: str | None):
        self.raw, self.dtype = raw, dtype
        self.swapped = False  # (a big-endian file's bytes, put in this machine's order once)


class _Loader:
    """Builds storages and tensors for one file (shared by the safe and the full unpickler)."""

    def __init__(self, archive: _Archive, map_location: Any):
        self.archive = archive
        self.map_location = map_location
        self.storages: dict[str, _Storage] = {}
        order = archive.read("byteorder").decode() if archive.size_of("byteorder") is not None \
            else "little"
        if order not in ("little", "big"):
            archive.fail(f"unknown byteorder {order!r}")
        self.swap = order != sys.byteorder

    def storage(self, pid: Any) -> _Storage:
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
            raise pickle.UnpicklingError(f"unsupported persistent id encountered: {pid!r:.80}")
        _, stype, key, location, numel = pid
        if not isinstance(stype, _StorageType) or not isinstance(key, str) or \
                not isinstance(location, str) or type(numel) is not int or numel < 0:
            raise pickle.UnpicklingError(f"malformed storage record {pid!r:.80}")
        if not key.isalnum():
            raise pickle.UnpicklingError(f"storage key {key!r:.40} is not a plain name")
        if key in self.storages:
            return self.storages[key]
        self._check_location(location)
        if stype.name in _QUANTIZED:
            raise pickle.UnpicklingError("cannot load quantized tensors: tinyopt has none")
        itemsize = 1 if stype.dtype is None else _element(stype.dtype).itemsize
        have = self.archive.size_of(f"data/{key}")
        if have is None:
            self.archive.fail(f"storage {key!r} has no entry data/{key}")
        if have != numel * itemsize:
            self.archive.fail(f"storage {key!r} declares {numel} elements of {itemsize} bytes, "
                              f"but its entry holds {have} bytes")
        raw = np.frombuffer(bytearray(self.archive.read(f"data/{key}")), np.uint8)
        s = _Storage(raw, stype.dtype)
        self.storages[key] = s
        return s

    def _check_location(self, location: str) -> None:
        if location.split(":")[0] == "cpu" or self.map_location is not None:
            return  # (map_location was checked to name the CPU)
        raise RuntimeError(f"Attempting to deserialize object on a {location.split(':')[0].upper()}"
                           f" device but tinyopt runs on the CPU only. Please use load with "
                           f"map_location=torch.device('cpu') to map your storages to the CPU.")

    def tensor(self, storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
               dtype: str | None = None) -> Tensor | np.ndarray:
        if not isinstance(storage, _Storage):
            raise pickle.UnpicklingError("a tensor's storage is not a storage record")
        name = dtype or storage.dtype
        if name is None:
            raise pickle.UnpicklingError("an untyped storage's tensor has no dtype")
        elem = _element(name)
        if storage.dtype is None:
            storage.dtype = name
        for what, v in (("size", size), ("stride", stride)):
            if not isinstance(v, tuple) or len(v) > _MAX_DIMS or \
                    any(type(x) is not int or x < 0 for x in v):
                raise pickle.UnpicklingError(f"malformed tensor {what} {v!r:.80}")
        if len(size) != len(stride) or type(offset) is not int or offset < 0:
            raise pickle.UnpicklingError("malformed tensor record (size, stride or offset)")
        step = elem.itemsize
        numel = storage.raw.size // step
        if all(size) and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= numel:
            raise pickle.UnpicklingError(f"tensor of size {size} and stride {stride} at offset "
                                         f"{offset} reaches beyond its storage of {numel} "
                                         f"elements")
        whole = storage.raw[:numel * step].view(np.dtype((np.void, step)))
        if self.swap and elem.base.itemsize > 1 and not storage.swapped:
            whole.view(elem.base).byteswap(inplace=True)
            storage.swapped = True
        # strided over opaque elements (as_strided cannot name ml_dtypes' types), then typed
        arr = np.lib.stride_tricks.as_strided(
            whole[offset:] if all(size) else whole[:0], size,
            tuple(s * step for s in stride), writeable=True).view(elem)
        if elem.shape or name in _RAW or arr.dtype not in SUPPORTED and arr.dtype != float16 \
                and arr.dtype.name != "bfloat16":
            return arr
        t = as_tensor(arr)
        if requires_grad is True and t.dtype.kind == "f":
            t.requires_grad_()
        return t


def _parameter(data: Any, requires_grad: Any = True, hooks: Any = None, state: Any = None
               ) -> Parameter:
    if not isinstance(data, Tensor):
        raise pickle.UnpicklingError("a Parameter's data is not a tensor tinyopt can hold")
    return Parameter(data.numpy(), requires_grad=bool(requires_grad))


# ---- the globals a user allows (``torch.serialization.add_safe_globals``) ------------------------
_USER_GLOBALS: dict[str, Any] = {}


def add_safe_globals(safe_globals: list[Any]) -> None:
    """Let the weights-only loader build these classes and call these functions too (each an
    object, or ``(object, "module.name")``), as ``torch.serialization.add_safe_globals``: only
    for code you trust, since their ``__reduce__``/``__setstate__`` run."""
    for g in safe_globals:
        obj, name = g if isinstance(g, tuple) else (g, f"{g.__module__}.{g.__qualname__}")
        _USER_GLOBALS[name] = obj


def get_safe_globals() -> list[Any]:
    """The objects ``add_safe_globals`` allowed."""
    return list(_USER_GLOBALS.values())


def clear_safe_globals() -> None:
    """Forget every object ``add_safe_globals`` allowed."""
    _USER_GLOBALS.clear()


class safe_globals:  # noqa: N801 - torch's name
    """``with safe_globals([...]):`` the globals are allowed inside the block only."""

    def __init__(self, safe_globals: list[Any]):
        self._globals = safe_globals

    def __enter__(self) -> None:
        self._saved = dict(_USER_GLOBALS)
        add_safe_globals(self._globals)

    def __exit__(self, *exc: Any) -> None:
        _USER_GLOBALS.clear()
        _USER_GLOBALS.update(self._saved)


def _user_allowed(obj: Any) -> bool:
    return any(obj is g for g in _USER_GLOBALS.values())


# ---- the weights-only interpreter ----------------------------------------------------------------
_ERROR_HEAD = ("Weights only load failed. This file can still be loaded, to do so you have two "
               "options, do those steps only if you trust the source of the checkpoint.\n\t(1) "
               "Re-running `load` with `weights_only` set to `False` will likely succeed, but it "
               "can result in arbitrary code execution. Do it only if you got the file from a "
               "trusted source.\n\t(2) tinyopt's weights-only loader builds only tensors, "
               "containers and plain values.\n\tWeightsUnpickler error: ")


class _WeightsUnpickler:
    """A pickle interpreter for protocol 2 (what torch.save writes) that can build nothing but
    the allowed values (see the module docstring); it never imports or calls anything else."""

    def __init__(self, data: bytes, loader: _Loader):
        self.data, self.pos, self.loader = data, 0, loader
        self.globals = {
            ("collections", "OrderedDict"): OrderedDict, ("collections", "Counter"): Counter,
            ("builtins", "set"): set, ("__builtin__", "set"): set,
            ("builtins", "frozenset"): frozenset, ("__builtin__", "frozenset"): frozenset,
            ("builtins", "bytearray"): bytearray, ("__builtin__", "bytearray"): bytearray,
            ("builtins", "complex"): complex, ("__builtin__", "complex"): complex,
            ("_codecs", "encode"): _encode, ("torch", "Size"): _size,
            ("torch", "device"): _device,
            ("torch._utils", "_rebuild_tensor_v2"): self._v2,
            ("torch._utils", "_rebuild_tensor_v3"): self._v3,
            ("torch._utils", "_rebuild_parameter"): _parameter,
            ("torch._utils", "_rebuild_parameter_with_state"): _parameter,
            ("torch.nn.parameter", "Parameter"): _parameter,
            ("torch._tensor", "_rebuild_from_type_v2"): _from_type,
            ("torch", "Tensor"): _TENSOR_TYPE,
        }

    def _v2(self, storage, offset, size, stride, requires_grad, hooks=None, metadata=None):
        return self.loader.tensor(storage, offset, size, stride, requires_grad)

    def _v3(self, storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
        if not isinstance(dtype, (np.dtype, _DType)):
            raise pickle.UnpicklingError("malformed tensor record (dtype)")
        return self.loader.tensor(storage, offset, size, stride, requires_grad, _torch_dtype_name(
            dtype))

    def fail(self, why: str) -> None:
        raise pickle.UnpicklingError(_ERROR_HEAD + why)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise pickle.UnpicklingError("pickle data was truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def line(self) -> str:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise pickle.UnpicklingError("pickle data was truncated")
        s = self.data[self.pos:end].decode("utf-8", "strict")
        self.pos = end + 1
        return s

    def find_global(self, module: str, name: str) -> Any:
        if module == "torch" and name in _DTYPE_NAMES:
            return _dtype(name)
        if module in ("torch", "torch.storage", "torch.cuda") and name.endswith("Storage"):
            if name in _LEGACY_STORAGES:
                return _StorageType(name, _LEGACY_STORAGES[name])
            if name in ("UntypedStorage", "TypedStorage") or name in _QUANTIZED:
                return _StorageType(name, None)
        fn = self.globals.get((module, name), _USER_GLOBALS.get(f"{module}.{name}"))
        if fn is None:
            self.fail(f"Unsupported global: GLOBAL {module}.{name} was not an allowed global by "
                      f"default. Please use `tinyopt.serialization.add_safe_globals([{name}])` or "
                      f"`with tinyopt.serialization.safe_globals([{name}]):` to allowlist this "
                      f"global if you trust it.")
        return fn

    def load(self) -> Any:  # noqa: C901 - one branch per opcode, as pickle's own loop
        stack: list[Any] = []
        marks: list[int] = []
        memo: dict[int, Any] = {}

        def pop_mark() -> list[Any]:
            if not marks:
                raise pickle.UnpicklingError("could not find MARK")
            k = marks.pop()
            items = stack[k:]
            del stack[k:]
            return items

        def top(what: str) -> Any:
            if not stack:
                raise pickle.UnpicklingError(f"{what}: the stack is empty")
            return stack[-1]

        def pop() -> Any:
            top("pop")
            return stack.pop()

        while True:
            op = self.take(1)
            if op == b"\x80":  # PROTO
                if self.take(1)[0] > 5:
                    raise pickle.UnpicklingError("unsupported pickle protocol")
            elif op == b"\x95":  # FRAME
                self.take(8)
            elif op == b".":  # STOP
                return pop()
            elif op == b"(":  # MARK
                marks.append(len(stack))
            elif op == b"}":
                stack.append({})
            elif op == b"]":
                stack.append([])
            elif op == b")":
                stack.append(())
            elif op == b"\x8f":  # EMPTY_SET
                stack.append(set())
            elif op == b"N":
                stack.append(None)
            elif op == b"\x88":
                stack.append(True)
            elif op == b"\x89":
                stack.append(False)
            elif op == b"J":  # BININT
                stack.append(struct.unpack("<i", self.take(4))[0])
            elif op == b"K":  # BININT1
                stack.append(self.take(1)[0])
            elif op == b"M":  # BININT2
                stack.append(struct.unpack("<H", self.take(2))[0])
            elif op in (b"\x8a", b"\x8b"):  # LONG1, LONG4
                n = self.take(1)[0] if op == b"\x8a" else struct.unpack("<i", self.take(4))[0]
                if n > 1 << 16:
                    raise pickle.UnpicklingError("integer too long")
                stack.append(int.from_bytes(self.take(n), "little", signed=True))
            elif op == b"G":  # BINFLOAT
                stack.append(struct.unpack(">d", self.take(8))[0])
            elif op in _LENGTHS:  # (SHORT_)BINUNICODE(8), (SHORT_)BINBYTES(8)
                size, fmt = _LENGTHS[op]
                data = self.take(struct.unpack(fmt, self.take(size))[0])
                if op in b"X\x8c\x8d":
                    try:
                        stack.append(data.decode("utf-8", "surrogatepass"))
                    except UnicodeDecodeError as e:
                        raise pickle.UnpicklingError(f"bad string: {e}") from None
                else:
                    stack.append(data)
            elif op == b"U":  # SHORT_BINSTRING (protocol-2 str of a Python 2 pickle)
                stack.append(self.take(self.take(1)[0]).decode("latin1"))
            elif op == b"t":
                stack.append(tuple(pop_mark()))
            elif op == b"\x85":
                stack.append((pop(),))
            elif op == b"\x86":
                b = pop()
                stack.append((pop(), b))
            elif op == b"\x87":
                c, b = pop(), pop()
                stack.append((pop(), b, c))
            elif op == b"a":  # APPEND
                v = pop()
                lst = top("APPEND")
                if not isinstance(lst, list):
                    self.fail(f"APPEND to a {type(lst).__name__}")
                lst.append(v)
            elif op == b"e":  # APPENDS
                items = pop_mark()
                lst = top("APPENDS")
                if not isinstance(lst, list):
                    self.fail(f"APPENDS to a {type(lst).__name__}")
                lst.extend(items)
            elif op == b"\x90":  # ADDITEMS
                items = pop_mark()
                s = top("ADDITEMS")
                if not isinstance(s, set):
                    self.fail(f"ADDITEMS to a {type(s).__name__}")
                s.update(items)
            elif op in (b"s", b"u"):  # SETITEM, SETITEMS
                items = [pop(), pop()][::-1] if op == b"s" else pop_mark()
                d = top("SETITEMS")
                if not isinstance(d, dict) or len(items) % 2:
                    self.fail(f"SETITEMS on a {type(d).__name__}")
                for i in range(0, len(items), 2):
                    d[items[i]] = items[i + 1]
            elif op in (b"q", b"r", b"\x94"):  # BINPUT, LONG_BINPUT, MEMOIZE
                i = len(memo) if op == b"\x94" else (
                    self.take(1)[0] if op == b"q" else struct.unpack("<I", self.take(4))[0])
                memo[i] = top("PUT")
            elif op in (b"h", b"j"):  # BINGET, LONG_BINGET
                i = self.take(1)[0] if op == b"h" else struct.unpack("<I", self.take(4))[0]
                if i not in memo:
                    raise pickle.UnpicklingError(f"memo key {i} missing")
                stack.append(memo[i])
            elif op == b"c":  # GLOBAL
                module, name = self.line(), self.line()
                stack.append(self.find_global(module, name))
            elif op == b"\x93":  # STACK_GLOBAL
                name, module = pop(), pop()
                if not isinstance(module, str) or not isinstance(name, str):
                    self.fail("STACK_GLOBAL with a non-string name")
                stack.append(self.find_global(module, name))
            elif op == b"Q":  # BINPERSID
                stack.append(self.loader.storage(pop()))
            elif op == b"R":  # REDUCE: only the allowed callables were ever pushed as globals
                args, fn = pop(), pop()
                if not isinstance(args, tuple) or not _callable_global(fn):
                    self.fail(f"REDUCE of {type(fn).__name__} with {type(args).__name__}")
                try:
                    stack.append(fn(*args))
                except (TypeError, ValueError) as e:
                    raise pickle.UnpicklingError(f"malformed record: {e}") from None
            elif op == b"\x81":  # NEWOBJ: only the allowed container classes
                args, cls = pop(), pop()
                if not isinstance(args, tuple) or not (
                        any(cls is c for c in (OrderedDict, Counter, set, frozenset)) or
                        isinstance(cls, type) and _user_allowed(cls)):
                    self.fail(f"NEWOBJ of {cls!r:.60}")
                stack.append(cls.__new__(cls, *args) if _user_allowed(cls) else cls(*args))
            elif op == b"b":  # BUILD: only a state dict's ``_metadata`` on an OrderedDict
                state = pop()
                inst = top("BUILD")
                if isinstance(inst, Parameter) and state in (None, {}):
                    continue
                if _user_allowed(type(inst)):
                    if hasattr(inst, "__setstate__"):
                        inst.__setstate__(state)
                    elif isinstance(state, dict):
                        inst.__dict__.update(state)
                    else:
                        self.fail(f"BUILD of a {type(inst).__name__} with "
                                  f"{type(state).__name__}")
                    continue
                if type(inst) is not OrderedDict or not isinstance(state, dict) or \
                        set(state) - {"_metadata"}:
                    self.fail(f"BUILD of a {type(inst).__name__} with {type(state).__name__}")
                inst.__dict__.update(state)
            else:
                self.fail(f"Unsupported operand {op[0]}")


_LENGTHS = {b"X": (4, "<I"), b"\x8c": (1, "<B"), b"\x8d": (8, "<Q"),  # strings
            b"B": (4, "<I"), b"C": (1, "<B"), b"\x8e": (8, "<Q")}  # bytes
"""The opcodes of a string or bytes value: (bytes of its length, the length's struct format)."""

_TENSOR_TYPE = object()  # ``torch.Tensor`` as the type argument of ``_rebuild_from_type_v2``


def _from_type(func: Any, new_type: Any, args: tuple, state: Any) -> Any:
    if new_type is not _TENSOR_TYPE or not _callable_global(func) or not isinstance(args, tuple):
        raise pickle.UnpicklingError(_ERROR_HEAD + "a tensor subclass other than torch.Tensor")
    return func(*args)


def _callable_global(fn: Any) -> bool:
    """Whether ``fn`` is one of the callables the interpreter hands out (never user data)."""
    return any(fn is g for g in (OrderedDict, Counter, set, frozenset, bytearray, complex,
                                 _encode, _size, _device, _parameter, _from_type)) or \
        _user_allowed(fn) or \
        type(getattr(fn, "__self__", None)) is _WeightsUnpickler  # its _v2 and _v3


def _encode(text: Any, encoding: str = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8"):
        raise pickle.UnpicklingError("_codecs.encode of something other than a string")
    return text.encode(encoding)


def _size(dims: Any = ()) -> Size:
    if not isinstance(dims, (tuple, list)) or any(type(d) is not int for d in dims):
        raise pickle.UnpicklingError("torch.Size of something other than integers")
    return Size(dims)


def _device(*args: Any) -> device:
    if not all(isinstance(a, (str, int)) for a in args):
        raise pickle.UnpicklingError("torch.device of something other than a name")
    return device(*args)


def _torch_dtype_name(d: np.dtype | _DType) -> str:
    return d.name  # numpy's and ml_dtypes' names are torch's


# ---- the full unpickler (weights_only=False) -----------------------------------------------------
class _FullUnpickler(pickle.Unpickler):
    """Python's unpickler, with torch's tensor records built as tinyopt's (it runs whatever the
    file asks: only for trusted files)."""

    def __init__(self, data: bytes, loader: _Loader):
        super().__init__(io.BytesIO(data))
        self._safe = _WeightsUnpickler(data, loader)
        self._loader = loader

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("torch"):
            try:
                return self._safe.find_global(module, name)
            except pickle.UnpicklingError:
                pass
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        return self._loader.storage(pid)


# ---- loading -------------------------------------------------------------------------------------
def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, *,
         weights_only: bool = True) -> Any:
    """The object in the torch zip file ``f`` (see the module docstring); ``map_location`` has
    been checked to name the CPU (or is None)."""
    with _Archive(f) as archive:
        loader = _Loader(archive, map_location)
        data = archive.read("data.pkl")
        if weights_only:
            return _WeightsUnpickler(data, loader).load()
        return _FullUnpickler(data, loader).load()


# ---- pickling whole objects ----------------------------------------------------------------------
class _Global:
    """A global name written into the pickle as it is (``torch._utils._rebuild_tensor_v2``),
    whether or not it can be imported here."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # (the pickler wants a callable; never called here)
        raise TypeError(f"{self.module}.{self.name} is only written into pickles")


_REBUILD_TENSOR = _Global("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _Global("torch._utils", "_rebuild_parameter")
_ORDERED_DICT = _Global("collections", "OrderedDict")


class _StorageRef:
    """A tensor's values, written as a storage entry (``data/<key>``)."""

    def __init__(self, arr: np.ndarray):
        self.arr = np.ascontiguousarray(arr)


class _TorchPickler(pickle._Pickler):  # type: ignore[name-defined]
    """Pickles ``obj`` as ``torch.save`` does: tensors as ``_rebuild_tensor_v2`` of a storage
    (``("storage", torch.<Type>Storage, key, "cpu", numel)``), Parameters as
    ``_rebuild_parameter``, everything else by its own reduction.  (Python's pure pickler, whose
    dispatch table can write the ``torch.*`` globals without importing torch.)"""

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def _save_global(self, obj: _Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))

    dispatch[_Global] = _save_global

    def __init__(self, file: BinaryIO, storages: list[np.ndarray]):
        super().__init__(file, protocol=2)
        self._storages = storages

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Parameter):
            return _REBUILD_PARAMETER, (_tensor_record(obj.value, False), obj.requires_grad,
                                        _ordered())
        if isinstance(obj, Tensor):
            return _tensor_record(obj.numpy(), obj.requires_grad).__reduce__()
        return NotImplemented

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, _StorageRef):
            return None
        from tinyopt.torch_format import STORAGE
        arr = obj.arr
        name = STORAGE.get(arr.dtype.name)
        if name is None:
            raise pickle.PicklingError(f"cannot save a tensor of dtype {arr.dtype}")
        self._storages.append(arr)
        return ("storage", _Global("torch", name), str(len(self._storages) - 1), "cpu",
                int(arr.size))


def _ordered() -> Any:
    """An empty ``collections.OrderedDict()``, as torch writes a tensor's hooks."""
    return _Reduced(_ORDERED_DICT, ())


class _Reduced:
    """``func(*args)`` for the pickler (``__reduce__`` of an object that is only written)."""

    def __init__(self, func: _Global, args: tuple):
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def _tensor_record(arr: np.ndarray, requires_grad: bool) -> _Reduced:
    arr = np.asarray(arr)
    strides = tuple(int(s) for s in np.cumprod((1,) + arr.shape[:0:-1])[::-1]) if arr.ndim \
        else ()
    return _Reduced(_REBUILD_TENSOR, (_StorageRef(arr), 0, tuple(arr.shape), strides,
                                      bool(requires_grad), _ordered()))


def save_pickled(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Pickle ``obj`` (a whole Module, optimizer or any picklable object) in ``torch.save``'s
    format, in ``tinyopt.torch_format``'s archive (``archive/data.pkl`` plus one aligned
    ``archive/data/<k>`` per tensor; a path is written atomically).  Loading it takes
    ``load(f, weights_only=False)``, or the weights-only loader with its classes allowed
    (``safe_globals``), as in PyTorch."""
    from tinyopt import checkpoint, torch_format
    buf = io.BytesIO()
    storages: list[np.ndarray] = []
    _TorchPickler(buf, storages).dump(obj)
    record = _Pickled(buf.getvalue()[:-1], storages)  # (torch_format's writer adds the STOP)
    if hasattr(f, "write"):
        torch_format._write(f, record)
    else:
        checkpoint.write_atomically(os.fspath(f), lambda out: torch_format._write(out, record))


class _Pickled:
    """A finished pickle (without its STOP) and its storages, as ``torch_format._write`` takes
    them."""

    def __init__(self, out: bytes, storages: list[np.ndarray]):
        self.out, self.storages = out, storages
