"""The number of threads numpy's BLAS uses, for the calling thread only.

A recurrence runs many small dependent GEMMs (an LSTM step of batch 20 and hidden 200 is
20x200 @ 200x800).  OpenBLAS splits each between its threads, and when the cores are busy (other
processes, or numba's and PyTorch's thread pools still spinning) every split waits for a thread
to be scheduled: on a loaded 2-core machine one such GEMM took 20 ms with 2 threads and 0.5 ms
with 1, and a 2-layer LSTM layer's forward pass over 35 steps 700 ms against 60 ms.  So the
recurrent ops run their per-step GEMMs under :func:`single_threaded`.

OpenBLAS >= 0.3.27 has ``openblas_set_num_threads_local``, which changes the calling thread's
setting only (other threads' BLAS calls are unaffected).  Without it (another BLAS, an older
OpenBLAS) :func:`single_threaded` changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator


def _openblas_paths() -> list[str]:
    """The OpenBLAS libraries numpy may have loaded: numpy's own bundled library first, then any
    OpenBLAS this process has loaded (Linux)."""
    import numpy
    base = os.path.dirname(os.path.dirname(numpy.__file__))
    paths: list[str] = []
    for folder in (os.path.join(base, "numpy.libs"), os.path.join(base, "numpy", ".dylibs")):
        if os.path.isdir(folder):
            paths += [os.path.join(folder, n) for n in sorted(os.listdir(folder))
                      if "openblas" in n.lower()]
    return paths + _loaded("openblas")


def _loaded(name: str) -> list[str]:
    """Paths of the loaded shared libraries whose name contains ``name`` (Linux; else [])."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f
                           if name in line.lower() and "/" in line})
    except OSError:
        return []


def _openblas_function(*names: str):
    """The first of ``names`` exported by numpy's OpenBLAS (see ``_openblas_paths``), or None."""
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                return fn
    return None


def _find() -> ctypes._CFuncPtr | None:
    """``openblas_set_num_threads_local`` of the OpenBLAS that numpy loaded, or None."""
    fn = _openblas_function("openblas_set_num_threads_local")
    if fn is not None:
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
    return fn


_SET_LOCAL = None
_LOOKED = False


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Within the block, this thread's BLAS calls run on one thread (see the module docstring)."""
    global _SET_LOCAL, _LOOKED
    if not _LOOKED:
        _SET_LOCAL, _LOOKED = _find(), True
    if _SET_LOCAL is None:
        yield
        return
    previous = _SET_LOCAL(1)
    try:
        yield
    finally:
        _SET_LOCAL(previous)
