"""Shared memory: storage that forked and spawned processes see and write, as torch's.

``t.share_memory_()`` moves a tensor's storage into a shared mapping (an anonymous memory file,
``memfd_create`` on Linux, an unlinked temporary file elsewhere); ``Module.share_memory()`` does
it for every parameter and buffer.  A process forked afterwards writes into the very same pages
(the pytorch/examples ``mnist_hogwild`` pattern: workers train one model, each with its own
optimizer stepping the shared storage in place).  A spawned process gets a shared tensor through
``multiprocessing``'s pickler by handle, as torch's reductions do: the file descriptor travels
(``multiprocessing.reduction.DupFd``) and the child maps the same memory; nothing is copied.

``register_reductions()`` installs that handle-passing reduction in ``multiprocessing``'s
``ForkingPickler`` (``tinyopt.multiprocessing`` does at import, and ``share_memory_`` at its
first call, so plain ``multiprocessing`` queues and spawned ``Process`` arguments send shared
tensors by handle too).  Tensors whose storage is not shared are pickled by value, as by
``pickle``.
"""

from __future__ import annotations

import itertools
import mmap
import os
import weakref
from typing import Any

import numpy as np


class SharedMapping(mmap.mmap):
    """A shared mapping of an anonymous memory file, with the descriptor that names it (kept
    open while the mapping lives: what a spawned process receives)."""

    fd: int


_files = itertools.count()


def _memory_file(nbytes: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("tinyopt-shared", 0)
    else:  # an unlinked file of the temporary folder (macOS): the descriptor alone names it
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                            f"tinyopt-shared-{os.getpid()}-{next(_files)}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
    os.ftruncate(fd, max(nbytes, 1))
    return fd


def _mapping(fd: int, nbytes: int) -> SharedMapping:
    m = SharedMapping(fd, max(nbytes, 1))
    m.fd = fd
    weakref.finalize(m, os.close, fd)
    return m


def shared_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``arr`` in new shared memory."""
    m = _mapping(_memory_file(arr.nbytes), arr.nbytes)
    out = np.ndarray(arr.shape, dtype=arr.dtype, buffer=m)
    out[...] = arr
    return out


def mapping_of(arr: np.ndarray) -> SharedMapping | None:
    """The shared mapping ``arr``'s memory belongs to, or None."""
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # (np.frombuffer's)
        base = base.obj
    return base if isinstance(base, SharedMapping) else None


def is_shared(arr: np.ndarray) -> bool:
    return mapping_of(arr) is not None


# ---- pickling by handle -------------------------------------------------------------------------
def _rebuild_shared(dupfd: Any, nbytes: int, offset: int, dtype: str, shape: tuple,
                    strides: tuple, requires_grad: bool) -> Any:
    register_reductions()  # (a spawned process: unpickling this brings the tensor module in)
    m = _mapping(dupfd.detach(), nbytes)
    arr = np.ndarray(shape, dtype=np.dtype(dtype), buffer=m, offset=offset, strides=strides)
    t = _LOADED["leaf"](arr)
    if requires_grad:
        t.requires_grad_()
    return t


def reduce_tensor(t: Any) -> Any:
    """``ForkingPickler``'s reduction of a Tensor: by handle when its storage is shared."""
    arr = t.value if t.op == "input" else None
    m = mapping_of(arr) if isinstance(arr, np.ndarray) else None
    if m is None:
        return t.__reduce_ex__(4)
    start = np.ndarray((len(m),), dtype=np.uint8, buffer=m).ctypes.data
    return _rebuild_shared, (_LOADED["DupFd"](m.fd), len(m), arr.ctypes.data - start,
                             arr.dtype.str, arr.shape, arr.strides, bool(t.requires_grad))


_LOADED: dict[str, Any] = {}  # the tensor module's (set_tensor_types), and multiprocessing's


def set_tensor_types(leaf: Any, classes: tuple[type, ...]) -> None:
    """Called by the tensor module (which imports this one): how to make a tensor of an array,
    and the tensor classes to pickle by handle."""
    _LOADED.update(leaf=leaf, classes=classes)


def register_reductions() -> None:
    """Make ``multiprocessing`` send shared tensors by handle (see the module docstring)."""
    if "DupFd" in _LOADED:
        return
    from multiprocessing import reduction  # (here: it would add to ``import tinyopt``'s time)
    for cls in _LOADED["classes"]:
        reduction.ForkingPickler.register(cls, reduce_tensor)
    _LOADED["DupFd"] = reduction.DupFd
