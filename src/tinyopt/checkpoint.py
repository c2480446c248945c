"""Checkpoints: ``save``, ``load`` and ``load_into`` — safe, atomic, exact.

    tinyopt.save("run.tinyopt", model=model, optimizer=opt, scheduler=sched, loader=loader,
                  epoch=3, note="lr sweep")
    ...                                              # later, in a fresh process:
    meta = tinyopt.load_into("run.tinyopt", model=model, optimizer=opt, scheduler=sched,
                             loader=loader)          # all-or-nothing; restores the global RNG too
    meta["epoch"], meta["note"]                      # -> 3, "lr sweep"
    everything = tinyopt.load("run.tinyopt")         # {"model": {...state dict...}, ..., "rng": {...}}

What a checkpoint holds (each keyword of ``save`` is one named entry):

- objects with ``state_dict()`` (modules, optimizers, schedulers, data loaders, ...): their state dict;
  ``load_into`` gives it back through ``load_state_dict``;
- ``tinyopt.Generator`` objects: their state (``load_into`` calls ``set_state``);
- any other value: numpy arrays, numpy scalars, ``None``, bools, ints, floats (also nan/inf),
  strings, and lists, tuples and dicts of these (dict keys may be str, int, float, bool, None or
  tuples) — returned as they were saved, with dtypes, 0-d arrays, tuples and key types intact.

RNG: the entry named ``rng`` is reserved for a random generator.  By default ``save`` stores the
global generator's state (``tinyopt.manual_seed``'s, used by initialisation, dropout and data
shuffling) under it, and ``load_into`` restores it, which exact resume needs.  Pass ``rng=False``
to ``save`` to store none, or to ``load_into`` to leave the global generator alone; pass
``rng=<Generator>`` to either to save from / restore into another generator.

File format ("tinyopt-checkpoint", version 1): a zip archive (stored, not compressed) holding
``manifest.json`` and one ``arrays/<n>.npy`` per numpy array.  The manifest records the format name
and version, each entry's kind, class name and value as JSON, where non-JSON values are tagged
objects ``{"$": "array"|"scalar"|"tuple"|"dict"|"float", ...}`` (an array refers to its .npy entry,
whose dtype and shape the manifest also records).  Loading reads only these entries, with
``allow_pickle=False``: no pickle, no code runs.  It accepts only the layout the writer makes --
every entry stored, back to back from the first byte to the end record at the last, JSON numbers
within float range -- so loading any file takes memory and time bounded by its size (no
decompression bombs, no overlapping entries), and a file appended to another is refused rather
than read as the last one.  A truncated, corrupted or foreign file raises ``CheckpointError`` (a
``ValueError``) naming the file and the problem, before anything changes.

Saving is atomic: the archive is written to a temporary file in the target's folder, flushed and
fsynced, renamed over the target (``os.replace``) and the folder is fsynced, so a crash or kill
during ``save`` leaves the previous checkpoint intact.  A killed save leaves a hidden
``.<name>.*.tmp`` file, never read, which the next save to that path removes.  The target is what
``open(path, "wb")`` would write: a symlink is written through (the new file replaces the link's
target; the link stays); a directory, a file this process may not write, and a FIFO, device or
socket (which the rename would replace by a regular file) are refused with an ``OSError``.  The
new file keeps the old one's permissions (and owner, where the process may set it).
"""

from __future__ import annotations

import collections.abc
import errno
import json
import math
import os
import re
import stat
import struct
import tempfile
import zipfile
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from tinyopt.engine import random
from tinyopt.engine.dtypes import bfloat16, is_low
from tinyopt.engine.tensor import Parameter, Size, Tensor, as_tensor

FORMAT = "tinyopt-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
_ENTRY = re.compile(r"arrays/(0|[1-9][0-9]*)\.npy")
_MAX_MANIFEST_BYTES = 256 << 20
_KINDS = ("state", "generator", "value")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: equal states give equal files

__all__ = ["CheckpointError", "load", "load_into", "save"]


class CheckpointError(ValueError):
    """A checkpoint file is truncated, corrupted, foreign or does not hold what was asked for."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


# ---- encoding: Python values <-> JSON + arrays ------------------------------------------------

def _tensor_array(t: Tensor) -> np.ndarray:
    return t._data if isinstance(t, Parameter) else t.numpy()


class _Encoder:
    """Turns a nested value into JSON, collecting its arrays (each object once) for .npy entries.

    With ``tensors=True`` a Tensor is tagged ``"tensor"`` (and comes back as a Tensor), else it is
    saved as its array."""

    def __init__(self, tensors: bool = False) -> None:
        self.tensors = tensors
        self.arrays: list[tuple[str, np.ndarray]] = []
        self.bfloat16: set[str] = set()  # entries holding bfloat16 bit patterns (as uint16)
        self._entries: dict[int, str] = {}
        self._keep: list[Any] = []  # keeps deduplicated objects alive so ids stay unique
        self._path: set[int] = set()

    def _entry(self, obj: Any, arr: np.ndarray, where: str) -> str:
        key = id(obj)
        if key in self._entries:
            return self._entries[key]
        if arr.dtype.hasobject:
            raise TypeError(f"cannot save {where}: arrays of dtype {arr.dtype} hold Python objects "
                            f"(only plain numeric, bool and string arrays can be saved)")
        name = f"arrays/{len(self.arrays)}.npy"
        if arr.dtype.name == "bfloat16":  # .npy has no bfloat16: its bits, tagged in the manifest
            arr = arr.view(np.uint16)
            self.bfloat16.add(name)
        self.arrays.append((name, arr))
        self._entries[key] = name
        self._keep.append(obj)
        return name

    def encode(self, v: Any, where: str) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is str:
            return v
        if kind is np.ndarray or isinstance(v, np.memmap):
            return {"$": "array", "entry": self._entry(v, np.asarray(v), where)}
        if isinstance(v, np.generic):
            return {"$": "scalar", "entry": self._entry(v, np.asarray(v), where)}
        if isinstance(v, Tensor):
            entry = self._entry(v, np.asarray(_tensor_array(v)), where)
            if self.tensors:
                return {"$": "tensor", "entry": entry, "requires_grad": bool(v.requires_grad),
                        "parameter": isinstance(v, Parameter)}
            return {"$": "array", "entry": entry}
        if kind is int:
            return v
        if kind is Size:
            return {"$": "size", "items": [self.encode(int(n), where) for n in v]}
        if kind is float:
            if math.isfinite(v):
                return v
            return {"$": "float", "value": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        if kind in (list, tuple, dict, collections.OrderedDict):
            if id(v) in self._path:
                raise ValueError(f"cannot save {where}: it contains itself (circular reference)")
            self._path.add(id(v))
            try:
                if kind is list:
                    return [self.encode(x, f"{where}[{i}]") for i, x in enumerate(v)]
                if kind is tuple:
                    return {"$": "tuple",
                            "items": [self.encode(x, f"{where}[{i}]") for i, x in enumerate(v)]}
                return self._encode_dict(v, where)
            finally:
                self._path.discard(id(v))
        for base in (str, int, float, list, tuple, dict, collections.abc.Mapping, np.ndarray):
            if isinstance(v, base):  # a subclass would come back as its base: refuse it
                hint = ("x._asdict() or tuple(x)" if hasattr(v, "_fields") else
                        "dict(x)" if base is collections.abc.Mapping else
                        "np.asarray(x)" if base is np.ndarray else f"{base.__name__}(x)")
                raise TypeError(f"cannot save {where}: a {kind.__module__}.{kind.__qualname__} "
                                f"would load as a plain {base.__name__} (loading never imports "
                                f"a class, so that it cannot run code); save {hint} instead")
        raise TypeError(f"cannot save {where}: values of type {type(v).__module__}."
                        f"{type(v).__qualname__} are not supported (a checkpoint holds numpy "
                        f"arrays and scalars, None, bool, int, float, str, and lists, tuples and "
                        f"dicts of these)")

    def _encode_dict(self, d: dict, where: str) -> Any:
        keys = list(d.keys())
        ordered = type(d) is collections.OrderedDict
        if not ordered and all(type(k) is str for k in keys) and "$" not in d:
            return {k: self.encode(d[k], f"{where}[{k!r}]") for k in keys}
        items = []
        for k in keys:
            if not (k is None or type(k) in (bool, int, float, str, tuple)):
                raise TypeError(f"cannot save {where}: dict key {k!r} of type "
                                f"{type(k).__name__} (keys may be str, int, float, bool, None "
                                f"or tuples of these)")
            items.append([self.encode(k, f"{where} key {k!r}"), self.encode(d[k], f"{where}[{k!r}]")])
        return {"$": "odict" if ordered else "dict", "items": items}


class _Decoder:
    """Rebuilds values from manifest JSON and the loaded arrays, checking every tag."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        self.path = path
        self.arrays = arrays

    def fail(self, where: str, problem: str) -> CheckpointError:
        return CheckpointError(self.path, f"corrupted manifest at {where}: {problem}")

    def decode(self, v: Any, where: str) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.decode(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if not isinstance(v, dict):
            raise self.fail(where, f"unexpected JSON value of type {type(v).__name__}")
        if "$" not in v:
            return {k: self.decode(x, f"{where}[{k!r}]") for k, x in v.items()}
        tag = v["$"]
        fields = {"array": {"entry"}, "scalar": {"entry"}, "tuple": {"items"},
                  "dict": {"items"}, "odict": {"items"}, "size": {"items"}, "float": {"value"},
                  "tensor": {"entry", "requires_grad"}}.get(tag)
        # (files written before tensors recorded "parameter" hold Parameters where requires_grad)
        optional = {"parameter"} if tag == "tensor" else set()
        if fields is None or not fields | {"$"} <= set(v) <= fields | optional | {"$"}:
            raise self.fail(where, f"unknown tagged value {json.dumps(v)[:200]}")
        if tag == "tensor":
            grad, param = v["requires_grad"], v.get("parameter", v["requires_grad"])
            if not (isinstance(grad, bool) and isinstance(param, bool)):
                raise self.fail(where, "'requires_grad' and 'parameter' of a tensor must be true "
                                       "or false")
            arr = self.decode({"$": "array", "entry": v["entry"]}, where)
            if grad and arr.dtype.kind != "f" and not is_low(arr.dtype):
                raise self.fail(where, f"a tensor of dtype {arr.dtype} cannot require grad")
            if param:
                return Parameter(arr, requires_grad=grad)
            t = as_tensor(arr)
            return t.requires_grad_() if grad else t
        if tag in ("array", "scalar"):
            entry = v["entry"]
            if not isinstance(entry, str) or entry not in self.arrays:
                raise self.fail(where, f"refers to array entry {entry!r}, which the manifest does "
                                       f"not list")
            arr = self.arrays[entry]
            if tag == "scalar":
                if arr.ndim != 0:
                    raise self.fail(where, f"scalar entry {entry} has shape {arr.shape}")
                return arr[()]
            return arr
        if tag == "float":
            values = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
            if v["value"] not in values:
                raise self.fail(where, f"bad float {v['value']!r}")
            return values[v["value"]]
        items = v["items"]
        if not isinstance(items, list):
            raise self.fail(where, f"'items' of a {tag} must be a list")
        if tag == "tuple":
            return tuple(self.decode(x, f"{where}[{i}]") for i, x in enumerate(items))
        if tag == "size":
            if not all(type(n) is int and n >= 0 for n in items):
                raise self.fail(where, "a Size holds non-negative ints")
            return Size(items)
        out = collections.OrderedDict() if tag == "odict" else {}
        for i, item in enumerate(items):
            if not (isinstance(item, list) and len(item) == 2):
                raise self.fail(where, f"dict item {i} is not a [key, value] pair")
            key = self.decode(item[0], f"{where} key {i}")
            try:
                out[key] = self.decode(item[1], f"{where}[{key!r}]")
            except TypeError as e:  # an unhashable key
                raise self.fail(where, f"dict key {key!r} is not hashable") from e
        return out


# ---- save ---------------------------------------------------------------------------------

def _entry_for(name: str, obj: Any, encoder: _Encoder) -> dict[str, Any]:
    if isinstance(obj, random.Generator):
        return {"kind": "generator", "value": encoder.encode(obj.get_state(), name)}
    state_dict = getattr(obj, "state_dict", None)
    if callable(state_dict) and not isinstance(obj, type):
        return {"kind": "state", "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "value": encoder.encode(state_dict(), name)}
    return {"kind": "value", "value": encoder.encode(obj, name)}


def _write_array(fileobj: Any, arr: np.ndarray) -> None:
    """Write one array as .npy (never pickles)."""
    np.lib.format.write_array(fileobj, arr, allow_pickle=False)


def _new_file_mode(path: str) -> int:
    """Permissions for the new checkpoint: the old file's, else what ``open()`` would give."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        pass
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _fsync_dir(folder: str) -> None:
    """Make the rename durable.  Some platforms and file systems cannot fsync a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save(path: str | os.PathLike, /, **objects: Any) -> None:
    """Write ``objects`` (by keyword) to one checkpoint file at ``path``, atomically.

    Each keyword becomes an entry: an object with ``state_dict()`` saves its state dict, a
    ``tinyopt.Generator`` its state, anything else is saved as a value (see the module docstring).
    The global generator's state is saved as ``rng`` unless ``rng=False`` (or ``rng=<Generator>``
    saves that one).  Everything is encoded before the file is touched, so an unsupported value
    raises ``TypeError`` and leaves any existing file as it was.
    """
    path = os.fspath(path)
    rng = objects.pop("rng", True)
    if rng is True:
        objects["rng"] = random.default_generator
    elif isinstance(rng, random.Generator):
        objects["rng"] = rng
    elif rng is not False:
        raise TypeError(f"save: rng must be True, False or a tinyopt Generator, got {rng!r} "
                        f"(the name 'rng' is reserved for a random generator)")
    encoder = _Encoder()
    entries = {name: _entry_for(name, obj, encoder) for name, obj in objects.items()}
    _write(path, entries, encoder)


def _write(target: str | Any, entries: dict[str, Any], encoder: _Encoder) -> None:
    """Write the archive of ``entries`` (and ``encoder``'s arrays): atomically at a path (see the
    module docstring), or into a writable binary file object as it is."""
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "objects": entries,
        "arrays": {name: {"dtype": arr.dtype.str, "shape": list(arr.shape),
                          **({"as": "bfloat16"} if name in encoder.bfloat16 else {})}
                   for name, arr in encoder.arrays},
    }
    manifest_bytes = json.dumps(manifest, allow_nan=False).encode("utf-8")
    if not isinstance(target, str):
        _write_zip(target, encoder.arrays, manifest_bytes)
        return
    write_atomically(target, lambda f: _write_zip(f, encoder.arrays, manifest_bytes))


def write_atomically(target: str, write: collections.abc.Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a new temporary file beside ``target`` (a path), then rename it over
    ``target``: readers see the old file or the whole new one, never a part (see the module
    docstring; also used by the other formats tinyopt writes)."""
    path = _save_target(target)
    folder, base = os.path.split(path)
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    mode = _new_file_mode(path)
    _remove_stale_temps(folder, base)
    fd, tmp = _locked_temp(folder, base)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            write(f)
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)
            if old is not None and hasattr(os, "fchown"):
                try:  # keep the owner, as writing into the old file would
                    os.fchown(fd, old.st_uid, old.st_gid)
                except OSError:
                    pass
            os.fsync(fd)
        os.replace(tmp, path)  # still locked: no other save takes it for a leftover meanwhile
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)
    _fsync_dir(folder)


def _save_target(path: str) -> str:
    """The file ``save`` replaces for ``path``, as ``open(path, "wb")`` would write it: the target
    of a symlink (the link stays), after the same refusals as ``open`` -- a directory
    (IsADirectoryError), a file this process may not write (PermissionError) -- and one more: a
    FIFO, device or socket (OSError), which the atomic rename would replace by a regular file."""
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "not a regular file")
        raise OSError(errno.EINVAL, f"save: this is {kind}; a checkpoint is written as a new file "
                                    f"renamed over the path, which would replace it. Save to a "
                                    f"regular file, or pass an open file object", path)
    effective = os.access in os.supports_effective_ids
    if not os.access(target, os.W_OK, effective_ids=effective):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    return target


# Temp files.  A save writes ``.<name>.<8 random chars>.tmp`` beside its target and holds an
# advisory lock (flock) on it until the rename, so the next save to that target can tell the
# leftover of a killed save (unlocked: the kernel drops a dead process's locks) from a save in
# progress (locked), and remove only the former.  Without fcntl (Windows) leftovers stay.
def _temp_pattern(base: str) -> re.Pattern:
    return re.compile(re.escape(f".{base}.") + r"[a-z0-9_]{8}\.tmp")


def _locked_temp(folder: str, base: str) -> tuple[int, str]:
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder)
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)  # another save removed it before we locked it: take a new one


def _remove_stale_temps(folder: str, base: str) -> None:
    if fcntl is None:
        return
    pattern = _temp_pattern(base)
    try:
        names = [n for n in os.listdir(folder) if pattern.fullmatch(n)]
    except OSError:
        return
    for name in names:
        p = os.path.join(folder, name)
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a save in progress
            if os.stat(p, follow_symlinks=False).st_ino == st.st_ino:
                os.unlink(p)
        except OSError:
            pass
        finally:
            os.close(fd)


def _write_zip(f: Any, arrays: list[tuple[str, np.ndarray]], manifest_bytes: bytes) -> None:
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays:
            with zf.open(zipfile.ZipInfo(name, _EPOCH), "w",
                         force_zip64=arr.nbytes > (1 << 30)) as ef:
                _write_array(ef, arr)
        zf.writestr(zipfile.ZipInfo(MANIFEST, _EPOCH), manifest_bytes)


# ---- load -----------------------------------------------------------------------------------

def _describe_foreign(head: bytes) -> str:
    if not head:
        return "the file is empty"
    if head[:1] == b"\x80":
        return ("it looks like a pickle (as pickle.dump or an old torch.save writes); tinyopt "
                "checkpoints never contain pickles and are never unpickled")
    if head.startswith(b"\x93NUMPY"):
        return "it is a single .npy array (use numpy.load), not a tinyopt checkpoint"
    return f"it does not start with a zip signature (first bytes {head[:8]!r})"


def _check_manifest(path: str, manifest: Any) -> None:
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(path, f"corrupted manifest: {problem}")

    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        raise CheckpointError(path, f"not a tinyopt checkpoint: manifest format is {fmt!r}, "
                                    f"expected {FORMAT!r}")
    version = manifest.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(f"bad format version {version!r}")
    if version > VERSION:
        raise CheckpointError(path, f"written in checkpoint format version {version} by a newer "
                                    f"tinyopt; this tinyopt reads version {VERSION}")
    objects, arrays = manifest.get("objects"), manifest.get("arrays")
    if not isinstance(objects, dict) or not isinstance(arrays, dict):
        raise bad("'objects' and 'arrays' must be JSON objects")
    for name, info in arrays.items():
        if not _ENTRY.fullmatch(name):
            raise bad(f"bad array entry name {name!r}")
        if not (isinstance(info, dict) and isinstance(info.get("dtype"), str)
                and isinstance(info.get("shape"), list)
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                        for s in info["shape"])):
            raise bad(f"bad record for {name}: {json.dumps(info)[:200]}")
    for name, entry in objects.items():
        if not (isinstance(entry, dict) and entry.get("kind") in _KINDS and "value" in entry):
            raise bad(f"bad record for entry {name!r}")


def _read_array(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo, record: dict) -> np.ndarray:
    """One .npy entry, its header checked against the manifest and its size before reading (the
    entry is stored and fits in the file: see :func:`_check_layout`)."""
    name = info.filename

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(path, f"corrupted array entry {name}: {problem}")

    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise bad(f"unsupported .npy version {version}")
        header_len = f.tell()
    if dtype.hasobject:
        raise bad(f"it holds Python objects (dtype {dtype}); they would need unpickling")
    if dtype.str != record["dtype"] or list(shape) != record["shape"]:
        raise bad(f"it holds dtype {dtype.str} shape {tuple(shape)}, but the manifest says dtype "
                  f"{record['dtype']} shape {tuple(record['shape'])}")
    if header_len + math.prod(shape) * dtype.itemsize != info.file_size:
        raise bad(f"its size {info.file_size} does not match its header")
    with zf.open(info) as f:
        arr = np.lib.format.read_array(f, allow_pickle=False)
        if f.read(1):  # also reaches EOF, where zipfile checks the CRC
            raise bad("trailing bytes after the array data")
    if "as" in record:
        if record["as"] != "bfloat16" or arr.dtype != np.uint16:
            raise bad(f"it cannot be read as {record['as']!r}")
        arr = arr.view(bfloat16())
    return arr


def _read(path: str | os.PathLike | Any) -> tuple[dict[str, dict], dict[str, Any]]:
    """Read and check a whole checkpoint: ``(records, values)`` per entry name.  ``path`` may also
    be a readable, seekable binary file object (read from its current position)."""
    if hasattr(path, "read"):
        return _read_file(path, str(getattr(path, "name", "<file object>")))
    path = os.fspath(path)
    with open(path, "rb") as f:
        return _read_file(f, path)


def _read_file(f: Any, path: str) -> tuple[dict[str, dict], dict[str, Any]]:
    start = f.tell()
    head = f.read(8)
    if not head.startswith(b"PK\x03\x04"):
        if head.startswith(b"PK\x05\x06"):
            raise CheckpointError(path, "not a tinyopt checkpoint: an empty zip archive")
        raise CheckpointError(path, f"not a tinyopt checkpoint: {_describe_foreign(head)}")
    archive_size = f.seek(0, os.SEEK_END) - start
    f.seek(start)
    try:
        zf = zipfile.ZipFile(f)
    except Exception as e:  # noqa: BLE001 - any failure parsing untrusted bytes
        raise CheckpointError(path, f"truncated or corrupted: the zip directory is unreadable "
                                    f"({type(e).__name__}: {e})") from e
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise CheckpointError(path, "corrupted: duplicate zip entries")
        if MANIFEST not in names:
            pickles = [n for n in names if n.endswith((".pkl", ".pickle"))]
            what = (f"it holds pickles ({', '.join(pickles[:3])}), as torch.save writes; "
                    f"tinyopt never unpickles" if pickles else
                    f"no {MANIFEST} among its entries ({', '.join(names[:5])})")
            raise CheckpointError(path, f"not a tinyopt checkpoint: {what}")
        _check_layout(path, f, zf, start, start + archive_size)
        minfo = zf.getinfo(MANIFEST)
        if minfo.file_size > _MAX_MANIFEST_BYTES:
            raise CheckpointError(path, f"corrupted: {MANIFEST} is implausibly large")
        try:
            manifest = json.loads(zf.read(MANIFEST).decode("utf-8"),
                                  parse_constant=_reject_constant, parse_float=_finite_float)
        except Exception as e:  # noqa: BLE001 - any failure parsing untrusted bytes
            raise CheckpointError(path, f"corrupted {MANIFEST}: {type(e).__name__}: "
                                        f"{e}") from e
        _check_manifest(path, manifest)
        expected = set(manifest["arrays"]) | {MANIFEST}
        if set(names) != expected:
            extra, missing = sorted(set(names) - expected), sorted(expected - set(names))
            raise CheckpointError(path, f"corrupted: entries {extra} are not in the manifest, "
                                        f"entries {missing} are missing")
        arrays = {}
        for info in infos:
            if info.filename == MANIFEST:
                continue
            try:
                arrays[info.filename] = _read_array(path, zf, info,
                                                    manifest["arrays"][info.filename])
            except CheckpointError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure parsing untrusted bytes
                raise CheckpointError(path, f"corrupted array entry {info.filename}: "
                                            f"{type(e).__name__}: {e}") from e
    decoder = _Decoder(path, arrays)
    records = manifest["objects"]
    try:
        values = {name: decoder.decode(rec["value"], name) for name, rec in records.items()}
    except RecursionError as e:
        raise CheckpointError(path, "corrupted manifest: nested too deeply") from e
    for name, rec in records.items():
        if rec["kind"] == "generator":
            try:
                random.Generator().set_state(values[name])
            except Exception as e:  # noqa: BLE001
                raise CheckpointError(path, f"corrupted generator state in entry {name!r}: "
                                            f"{e}") from e
    return records, values


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one too large for a float (``1e999``, which Python would read as
    inf) is refused: the writer tags non-finite floats, so a bare one is never written."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:40]} is out of the range of a float")
    return v


_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")   # a zip local file header (zipfile's layout)
_EOCD_SIZE = 22                                  # end of central directory record, no comment
_ZIP64_EOCD_TAIL = 20                            # the zip64 end-of-central-directory locator


def _check_layout(path: str, f: Any, zf: zipfile.ZipFile, start: int, end: int) -> None:
    """Accept only the archive layout ``save`` writes, so that reading takes memory and time
    bounded by the file's size: every entry *stored* (no compression, so no decompression bomb),
    the entries back to back from the first byte (no data before them: a file appended to another
    is refused, not read as the last one), each entry's data inside the file and overlapping no
    other, then the central directory and its end record ending exactly at the end of the file."""
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(path, f"not a checkpoint as tinyopt writes it: {problem}")

    pos = start
    infos = zf.infolist()
    for k, info in enumerate(infos):
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise bad(f"entry {info.filename} is compressed (method {info.compress_type}); "
                      f"tinyopt writes every entry stored")
        if info.header_offset != pos:
            raise bad(f"entry {info.filename} starts at byte {info.header_offset - start}, "
                      f"expected {pos - start} (data before it, or entries overlapping: another "
                      f"file concatenated to this one?)")
        f.seek(pos)
        head = f.read(_LOCAL_HEADER.size)
        if len(head) != _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
            raise bad(f"entry {info.filename} has no local header")
        fields = _LOCAL_HEADER.unpack(head)
        if fields[4] != zipfile.ZIP_STORED:
            raise bad(f"entry {info.filename} is compressed")
        pos += _LOCAL_HEADER.size + fields[10] + fields[11] + info.compress_size
        if info.flag_bits & 0x08:  # a data descriptor follows (written to an unseekable file)
            nxt = infos[k + 1].header_offset if k + 1 < len(infos) else zf.start_dir
            if nxt - pos not in (16, 24):
                raise bad(f"entry {info.filename} has a malformed data descriptor")
            pos = nxt
        if pos > end:
            raise bad(f"entry {info.filename} runs past the end of the file (truncated?)")
    if zf.start_dir != pos:
        raise bad("the central directory does not follow the last entry")
    pos += sum(46 + len(i.orig_filename.encode("utf-8" if i.flag_bits & 0x800 else "cp437"))
               + len(i.extra) + len(i.comment) for i in infos)
    f.seek(pos)
    if f.read(4) == b"PK\x06\x06":  # zip64 end record, then its locator
        size = struct.unpack("<Q", f.read(8))[0]
        pos += 12 + size + _ZIP64_EOCD_TAIL
    if zf.comment or pos + _EOCD_SIZE != end:
        raise bad(f"{end - pos - _EOCD_SIZE} bytes after the archive's end record (another file "
                  f"appended to this one?)")


def load(path: str | os.PathLike, /) -> dict[str, Any]:
    """Read a checkpoint: ``{name: value}`` with each object's state dict, each generator's state
    and each saved value (``rng`` holds the generator state saved by default).

    Raises ``CheckpointError`` for a truncated, corrupted or foreign file; never unpickles.
    """
    return _read(path)[1]


def _snapshot(v: Any) -> Any:
    """A copy of a state dict that later in-place updates of the object cannot change."""
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, Tensor):
        return np.array(_tensor_array(v), copy=True)
    if isinstance(v, collections.abc.Mapping):
        items = [(k, _snapshot(x)) for k, x in v.items()]
        try:
            return type(v)(items)
        except TypeError:
            return dict(items)
    if isinstance(v, list):
        return [_snapshot(x) for x in v]
    if isinstance(v, tuple):
        copied = [_snapshot(x) for x in v]
        return type(v)(*copied) if hasattr(v, "_fields") else tuple(copied)
    return v


def _restore_point(obj: Any) -> collections.abc.Callable[[], None]:
    """A function that puts ``obj`` back as it is now, for a rolled-back ``load_into``.

    Most objects go back through ``load_state_dict`` of a copy of their state dict.  Objects whose
    state *is* their attributes get those back exactly instead: a data loader (its attributes as
    they were, so the epoch iterator in use stays attached to it, and its generators' states) and
    a scheduler (its attributes with their lists and dicts copied, so that a rejected state that
    added a key, say ``step``, or changed a list in place leaves nothing behind; nested schedulers
    and generators are put back in place too).
    """
    if isinstance(obj, random.Generator):
        state = obj.get_state()
        return lambda: obj.set_state(state)
    from tinyopt.data import DataLoader
    from tinyopt.optim.lr_scheduler import LRScheduler

    if not isinstance(obj, (DataLoader, LRScheduler)):
        own = getattr(obj, "_rollback_state", None)  # sharded state: ZeroRedundancyOptimizer
        snapshot = own() if callable(own) else _snapshot(obj.state_dict())
        return lambda: obj.load_state_dict(snapshot)
    copy = isinstance(obj, LRScheduler)
    attrs = {k: (_copy_container(v) if copy else v) for k, v in vars(obj).items()}
    inner = []
    for v in vars(obj).values():
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(x, random.Generator) or isinstance(x, LRScheduler) and x is not obj:
                inner.append(_restore_point(x))

    def restore() -> None:
        for r in inner:
            r()
        d = vars(obj)
        d.clear()
        d.update(attrs)
    return restore


def _copy_container(v: Any) -> Any:
    """A copy of a list, dict or array attribute (its items kept as they are)."""
    if isinstance(v, list):
        return list(v)
    if isinstance(v, dict):
        return dict(v)
    if isinstance(v, np.ndarray):
        return v.copy()
    return v


def load_into(path: str | os.PathLike, /, **objects: Any) -> dict[str, Any]:
    """Restore objects from a checkpoint, all or nothing; returns the entries not loaded.

    Each keyword names an entry: objects with ``load_state_dict`` get its state dict, Generators
    its state.  The global generator is restored from ``rng`` when the checkpoint has one (pass
    ``rng=False`` to skip it, or ``rng=<Generator>`` to restore into another generator).

    The whole file is read and checked first (``CheckpointError`` for a bad file or a missing
    entry).  Then each object's current state is copied and ``load_state_dict`` is called on each
    in keyword order; if one raises, the objects already loaded get their previous state back and
    the error propagates, so either every object is restored or none changes -- a data loader
    stays attached to the epoch iterator it had, a scheduler keeps no key the rejected file
    added.
    """
    path = os.fspath(path)
    records, values = _read(path)
    rng = objects.pop("rng", None)
    if rng is None:
        if "rng" in records and records["rng"]["kind"] == "generator":
            objects["rng"] = random.default_generator
    elif rng is True:
        objects["rng"] = random.default_generator
    elif isinstance(rng, random.Generator):
        objects["rng"] = rng
    elif rng is not False:
        raise TypeError(f"load_into: rng must be True, False or a tinyopt Generator, got {rng!r}")

    for name, obj in objects.items():
        if name not in records:
            held = ", ".join(records) or "nothing"
            raise CheckpointError(path, f"has no entry {name!r} (it holds: {held})")
        kind = records[name]["kind"]
        if isinstance(obj, random.Generator):
            if kind != "generator":
                raise CheckpointError(path, f"entry {name!r} is a {kind} entry, not a generator "
                                            f"state, so it cannot be loaded into a Generator")
        elif callable(getattr(obj, "load_state_dict", None)):
            if kind != "state":
                raise CheckpointError(path, f"entry {name!r} is a {kind} entry, not a state dict, "
                                            f"so it cannot be loaded into a "
                                            f"{type(obj).__name__}")
        else:
            raise TypeError(f"load_into: {name}={type(obj).__name__} has no load_state_dict(); "
                            f"use tinyopt.load(path)[{name!r}] to read plain values")

    restores = [_restore_point(obj) for obj in objects.values()]
    for i, (name, obj) in enumerate(objects.items()):
        try:
            if isinstance(obj, random.Generator):
                obj.set_state(values[name])
            else:
                obj.load_state_dict(values[name])
        except BaseException as error:
            try:  # in case it changed something before rejecting the state
                restores[i]()
            except Exception:  # noqa: BLE001 - it may reject its own old state too
                pass
            for restore in reversed(restores[:i]):
                try:
                    restore()
                except Exception as e:  # noqa: BLE001
                    raise RuntimeError(f"load_into: loading {name!r} from {path} failed "
                                       f"({error!r}), and restoring the previous state of the "
                                       f"objects already loaded failed too ({e!r}); they may be "
                                       f"inconsistent") from error
            raise
    return {name: value for name, value in values.items() if name not in objects}
