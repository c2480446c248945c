"""kernels/native/address.py: arrays at addresses (``carray``, ``at``), and what a cold compile of
the kernels built on them costs: no numba overload compiled as a function of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numba
import numpy as np

from tinyopt.kernels.native import blas
from tinyopt.kernels.native.address import at, carray


@numba.njit(cache=False)
def _views(address, n, rows, cols, like):
    ptr = blas.pointer(address, like)
    return carray(ptr, n), carray(ptr, (rows, cols)), at(address, n, np.float32)


def test_carray_is_numbas_c_array_over_the_memory():
    a = np.arange(12, dtype=np.float32)
    flat, grid, seg = _views(a.ctypes.data, 12, 3, 4, np.float32(0.0))
    for got, want in ((flat, a), (grid, a.reshape(3, 4)), (seg, a)):
        assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    grid[1, 2] = -1.0  # the same memory, not a copy
    assert a[6] == -1.0


# A fresh process and cache, logging every function numba compiles, by name
LOGGED = textwrap.dedent("""
    import os, sys, tempfile
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
    from numba.core import compiler
    compiled = []
    compile_extra = compiler.compile_extra
    def logged(typingctx, targetctx, func, *args, **kwargs):
        compiled.append(getattr(func, "__qualname__", "?"))
        return compile_extra(typingctx, targetctx, func, *args, **kwargs)
    compiler.compile_extra = logged
""")

COLD = LOGGED + textwrap.dedent("""
    import json
    from numba.core import codegen
    ir_lines = {}  # (LLVM IR handed to LLVM, before optimisation, by function compiled)
    add_ir_module = codegen.CPUCodeLibrary.add_ir_module
    def counted(library, module):
        name = library.name.split(".")[-1]
        ir_lines[name] = ir_lines.get(name, 0) + str(module).count("\\n")
        return add_ir_module(library, module)
    codegen.CPUCodeLibrary.add_ir_module = counted
    from tinyopt.kernels import attention, norm, rnn
    attention.attention_chunks[True, False, True, False]
    norm.layer_norm_chunks[True, norm.LN_GRAD_X, True]
    rnn.lstm_scan_grad_chunks[True]
    norm.layer_norm_chunks[True, norm.LN_STATS, False]
    print(json.dumps(ir_lines))
    print(compiled)
""")


def test_chunk_kernels_compile_no_overload_of_their_own():
    """numba compiles each overload a kernel calls (``numba.carray``, ``np.empty``, ``max``,
    ``min``, a scalar's ``.view``) as a function of its own, once per process and signature
    (~0.02-0.03 s each, ~0.13 s for the first ``np.empty``), in each process of a compile-ahead
    pair: the chunk kernels use ``address.carray`` (an intrinsic), take their scratch from the
    host, write their minima out, and ``exp_f32`` bitcasts with ``float_of_bits``.

    And the attention forward chunk, the small GPT's costliest C function to compile, and the
    LSTM's chunks read their arguments and rows through pointers (numba lowers an array access
    to ~15 times the IR of a pointer's; ``kernels/attention.py``, ``kernels/rnn.py``): their
    LLVM IR before optimisation, 5200 lines with arrays for the attention's, stays under 3500
    (~2700); 7800 for the LSTM's backward chunk (here: it compiles in less CPU than the forward
    one and reaches its rows the same way), under 2500 (~1700); layer norm's statistics chunk
    reads its rows through pointers too (``kernels/norm.py``): its IR and the gradient chunk's,
    6200 lines with arrays, stay under 5000 (~4500)."""
    r = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    ir_lines, compiled = r.stdout.strip().splitlines()[-2:]
    assert json.loads(ir_lines)["attention_chunk"] < 3500, ir_lines
    assert json.loads(ir_lines)["lstm_scan_grad_chunk"] < 2500, ir_lines
    assert json.loads(ir_lines)["layer_norm_chunk"] < 5000, ir_lines
    for chunk in ("attention_chunk", "layer_norm_chunk", "lstm_scan_grad_chunk"):
        assert chunk in compiled, compiled
    for overload in ("impl_carray", "ol_np_empty", "_ol_array_allocate", "ol_max", "ol_min",
                     "scalar_view"):
        assert overload not in compiled, compiled


COPY = LOGGED + textwrap.dedent("""
    import numpy as np
    from tinyopt.kernels.native.address import copy_segments
    parts = [np.arange(3, dtype=np.float32), np.arange(10, 14, dtype=np.float32)]
    addr = np.array([a.ctypes.data for a in parts], np.int64)
    seg, flags = np.array([0, 3, 7], np.int64), np.array([1, 1], np.uint8)
    flat = np.zeros(7, np.float32)
    copy_segments(flat, addr, seg, flags, True)
    assert flat.tolist() == [0, 1, 2, 10, 11, 12, 13], flat
    flat[:] = -flat
    copy_segments(flat, addr, seg, np.array([0, 1], np.uint8), False)  # the second one only
    assert parts[0].tolist() == [0, 1, 2] and parts[1].tolist() == [-10, -11, -12, -13]
    try:
        copy_segments(flat[:6], addr, seg, flags, True)
    except ValueError as e:
        assert "outside the flat buffer" in str(e), e
    else:
        raise AssertionError("no error")
    print(compiled)
""")


def test_copy_segments_copies_both_ways_checks_bounds_and_compiles_no_message_formatting():
    """``copy_segments`` gathers into and scatters from the flat buffer, refuses a segment
    outside it, and compiles alone: a slice assignment's shape check would compile numba's
    formatted error message (int to str, concatenation: ~2 s of CPU of a cold first
    Adafactor step whose gradients the user assigned)."""
    compiles_no_message_formatting(COPY, "copy_segments")


def compiles_no_message_formatting(script: str, kernel: str) -> None:
    """``script`` (:data:`LOGGED` first, printing ``compiled`` last) runs in a fresh process,
    compiles ``kernel``, and none of the overloads of a formatted error message."""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    compiled = r.stdout.strip().splitlines()[-1]
    assert kernel in compiled, compiled
    for overload in ("raise_with_shape_context", "str", "concat"):
        assert overload not in compiled, compiled
