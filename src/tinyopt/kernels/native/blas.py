"""The number of threads numpy's BLAS uses, while a recurrence runs.

A recurrence runs many small dependent GEMMs (an LSTM step of batch 20 and hidden 200 is
20x200 @ 200x800).  OpenBLAS splits each between its threads, and when the cores are busy (other
processes, or numba's and PyTorch's thread pools still spinning) every split waits for a thread
to be scheduled: on a loaded 2-core machine one such GEMM took 20 ms with 2 threads and 0.5 ms
with 1, and a 2-layer LSTM layer's forward pass over 35 steps 700 ms against 60 ms.  So the
recurrent ops run their per-step GEMMs under :func:`single_threaded`.

OpenBLAS >= 0.3.27 has ``openblas_set_num_threads_local``; in numpy's OpenBLAS it calls
``openblas_set_num_threads``, so it sets the count of the whole process, not of the calling
thread.  :func:`single_threaded` therefore counts the threads inside it: the first to enter sets
one thread, the last to leave restores the count the first found (two threads that each saved
and restored it in turn left the process at one thread for good).  While any thread is inside,
every BLAS call of the process runs on one thread.  Without the function (another BLAS, an older
OpenBLAS) :func:`single_threaded` changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
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
_INSIDE = {"threads": 0, "saved": 1}  # threads inside single_threaded, the count they replaced
_INSIDE_LOCK = threading.Lock()


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Within the block, BLAS calls run on one thread -- those of every thread of the process
    (see the module docstring)."""
    global _SET_LOCAL, _LOOKED
    if not _LOOKED:
        _SET_LOCAL, _LOOKED = _find(), True
    if _SET_LOCAL is None:
        yield
        return
    with _INSIDE_LOCK:
        if _INSIDE["threads"] == 0:
            _INSIDE["saved"] = _SET_LOCAL(1)
        _INSIDE["threads"] += 1
    try:
        yield
    finally:
        with _INSIDE_LOCK:
            _INSIDE["threads"] -= 1
            if _INSIDE["threads"] == 0:
                _SET_LOCAL(_INSIDE["saved"])


# ---- numpy's own GEMM, called from kernels ------------------------------------------------------
#
# A kernel that runs many small matrix products at once (attention's per-(batch, head) products,
# one chunk per pair, on several threads) calls numpy's OpenBLAS ``cblas_?gemm`` itself, with the
# very arguments ``np.matmul`` passes (``matmul_args``): the same function on the same data, so
# the same bits.  Only numpy's 64-bit-integer OpenBLAS (its wheels' scipy-openblas64) is used.

_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS = 101, 111, 112
NO_TRANS = _CBLAS_NO_TRANS
"""``matmul_args``' trans flag of an operand read as it is stored."""


def gemm_address(dtype) -> int | None:
    """The address of numpy's ``cblas_sgemm`` (float32) or ``cblas_dgemm`` (float64) of its
    64-bit-integer OpenBLAS, or None."""
    import numpy as np
    name = {np.dtype(np.float32): "sgemm", np.dtype(np.float64): "dgemm"}.get(np.dtype(dtype))
    if name is None:
        return None
    key = ("gemm", name)
    if key not in _ADDRESSES:
        fn = _openblas_function(f"scipy_cblas_{name}64_")
        _ADDRESSES[key] = None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value
    return _ADDRESSES[key]


_ADDRESSES: dict = {}


def _blasable(s1: int, s2: int, d1: int, d2: int, size: int) -> bool:
    """numpy's ``is_blasable2d`` (umath/matmul.c.src): rows ``s1`` bytes apart, contiguous
    within a row, not overlapping."""
    return s2 == size and s1 % size == 0 and d2 <= s1 // size


def matmul_args(x, y, out) -> tuple[int, ...] | None:
    """The ``cblas_?gemm`` call ``np.matmul(x, y, out=out)`` makes for each matrix of a stack
    (x (..., m, n), y (..., n, p), out (..., m, p), one dtype, all of one stack shape), as
    (trans1, trans2, M, N, K, lda, ldb, ldc, first operand, second operand), the operands being
    0 for ``x`` and 1 for ``y``; None where numpy takes another path (a dimension of 1 or 0, an
    operand it copies first, ``syrk`` for a matrix times its own transpose, the output's columns
    strided: numpy's transposed call)."""
    size = out.itemsize
    m, n = x.shape[-2:]
    p = y.shape[-1]
    if min(m, n, p) <= 1 or x.dtype != out.dtype or y.dtype != out.dtype:
        return None
    (is1_m, is1_n), (is2_n, is2_p), (os_m, os_p) = x.strides[-2:], y.strides[-2:], \
        out.strides[-2:]
    blas1 = _blasable(is1_m, is1_n, m, n, size) or _blasable(is1_n, is1_m, n, m, size)
    blas2 = _blasable(is2_n, is2_p, n, p, size) or _blasable(is2_p, is2_n, p, n, size)
    if not (blas1 and blas2 and _blasable(os_m, os_p, m, p, size)) or abs(os_m) < abs(os_p):
        return None
    if _blasable(is1_m, is1_n, m, n, size):
        t1, lda = _CBLAS_NO_TRANS, is1_m // size
    else:
        t1, lda = _CBLAS_TRANS, is1_n // size
    if _blasable(is2_n, is2_p, n, p, size):
        t2, ldb = _CBLAS_NO_TRANS, is2_n // size
    else:
        t2, ldb = _CBLAS_TRANS, is2_p // size
    if m == p and is1_m == is2_p and is1_n == is2_n and t1 != t2 and (
            x.strides[:-2] != y.strides[:-2] or x.ctypes.data == y.ctypes.data):
        return None  # numpy's syrk, for the matrices of the stack where x's and y's start agree
    return (t1, t2, m, p, n, lda, ldb, os_m // size, 0, 1)


def _gemm_typer():
    from numba import types
    from tinyopt.kernels.native.numba_cache import cached_intrinsic

    @cached_intrinsic
    def gemm(typingctx, fn, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """``cblas_?gemm(RowMajor, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`` at
        address ``fn`` (64-bit integers; ``a``, ``b``, ``c`` addresses; alpha's type picks s/d)."""
        i64 = types.int64
        sig = types.void(i64, i64, i64, i64, i64, i64, alpha, i64, i64, i64, i64, alpha, i64,
                         i64)

        def codegen(context, builder, signature, args):
            from llvmlite import ir
            ft = context.get_value_type(signature.args[6])
            fp = ft.as_pointer()
            I32, I64 = ir.IntType(32), ir.IntType(64)
            fnty = ir.FunctionType(ir.VoidType(), [I32, I32, I32, I64, I64, I64, ft, fp, I64, fp,
                                                   I64, ft, fp, I64])
            (f, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) = args
            call = [I32(_CBLAS_ROW_MAJOR), builder.trunc(t1, I32), builder.trunc(t2, I32), m, n,
                    k, alpha, builder.inttoptr(a, fp), lda, builder.inttoptr(b, fp), ldb, beta,
                    builder.inttoptr(c, fp), ldc]
            builder.call(builder.inttoptr(f, fnty.as_pointer()), call)
            return context.get_dummy_value()
        return sig, codegen
    return gemm


def _pointer_typer():
    from numba import types
    from tinyopt.kernels.native.numba_cache import cached_intrinsic

    @cached_intrinsic
    def pointer(typingctx, address, like):
        """The address (an int64) as a pointer to ``like``'s type (a float scalar)."""
        sig = types.CPointer(like)(types.int64, like)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return sig, codegen
    return pointer


gemm = _gemm_typer()
pointer = _pointer_typer()
