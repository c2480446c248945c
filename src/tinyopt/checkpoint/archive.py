"""The checkpoint file: a zip archive of ``manifest.json`` and ``arrays/<n>.npy``, written
atomically and read whole, checked before anything is returned.

The archive is stored, not compressed, with fixed timestamps (equal states give equal files).
Loading reads only its entries, with ``allow_pickle=False``: no pickle, no code runs.  It accepts
only the layout the writer makes -- every entry stored, back to back from the first byte to the
end record at the last, JSON numbers within float range -- so loading any file takes memory and
time bounded by its size (no decompression bombs, no overlapping entries), and a file appended to
another is refused rather than read as the last one.  A truncated, corrupted or foreign file
raises ``CheckpointError`` (a ``ValueError``) naming the file and the problem.

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

from tinyopt.checkpoint.format import (CheckpointError, Encoder, check_manifest, decode_entries,
                                       make_manifest)
from tinyopt.engine.dtypes import bfloat16

MANIFEST = "manifest.json"
_MAX_MANIFEST_BYTES = 256 << 20
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: equal states give equal files

__all__ = ["MANIFEST", "read", "write", "write_atomically"]


# ---- write ------------------------------------------------------------------------------------

def write(target: str | Any, entries: dict[str, Any], encoder: Encoder) -> None:
    """Write the archive of ``entries`` (and ``encoder``'s arrays): atomically at a path (see the
    module docstring), or into a writable binary file object as it is."""
    manifest_bytes = json.dumps(make_manifest(entries, encoder), allow_nan=False).encode("utf-8")
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


def _write_zip(f: Any, arrays: list[tuple[str, np.ndarray]], manifest_bytes: bytes) -> None:
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays:
            with zf.open(zipfile.ZipInfo(name, _EPOCH), "w",
                         force_zip64=arr.nbytes > (1 << 30)) as ef:
                _write_array(ef, arr)
        zf.writestr(zipfile.ZipInfo(MANIFEST, _EPOCH), manifest_bytes)


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


# ---- read -------------------------------------------------------------------------------------

def read(path: str | os.PathLike | Any) -> tuple[dict[str, dict], dict[str, Any]]:
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
        check_manifest(path, manifest)
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
    return decode_entries(path, manifest, arrays)


def _describe_foreign(head: bytes) -> str:
    if not head:
        return "the file is empty"
    if head[:1] == b"\x80":
        return ("it looks like a pickle (as pickle.dump or an old torch.save writes); tinyopt "
                "checkpoints never contain pickles and are never unpickled")
    if head.startswith(b"\x93NUMPY"):
        return "it is a single .npy array (use numpy.load), not a tinyopt checkpoint"
    return f"it does not start with a zip signature (first bytes {head[:8]!r})"


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
