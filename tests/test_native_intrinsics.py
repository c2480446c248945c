"""kernels/native/instructions.py and quant8_lanes.py: the hand-written intrinsics' results, and
the same bits when compiled for a baseline x86-64 CPU (SSE2: no FMA, no AVX2 gathers), where LLVM
lowers ``llvm.fma`` to libm's ``fma`` and ``llvm.masked.gather`` to scalar loads (the native
sub-layer's docstring: these need no fallback)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from tinyopt.kernels.native import instructions

SRC = Path(__file__).parents[1] / "src"

# One kernel that calls every intrinsic of the two modules; it prints its results' bytes and
# whether its machine code gathers.
SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numba, numpy as np
    from tinyopt.kernels import quant8
    from tinyopt.kernels.native.instructions import (abs_bits, float_of_bits, fma, prefetch_l1,
                                                     prefetch_l2)
    from tinyopt.kernels.native.quant8_lanes import (
        adam_lane, adam_lanes, dequantize_lane, dequantize_lanes, quantize_div_lane,
        quantize_div_lanes, quantize_lane, quantize_lanes)

    @numba.njit
    def run(p, g, m, v, r1, r2, code1, code2, table, out, q, f, u):
        s, k7 = (np.float32(0.3), np.float32(0.02)), (
            np.float32(0.9), np.float32(0.1), np.float32(0.999), np.float32(0.001),
            np.float32(0.99), np.float32(-1e-3), np.float32(1e-8))
        for k in range(0, 32, 16):
            prefetch_l1(p, k + 16)
            prefetch_l2(g, k + 16)
            adam_lanes(p, g, k, m, v, r1, r2, code1, code2, s, k7)
            dequantize_lanes(out, r1, k, code1, np.float32(0.5))
            quantize_lanes(q, g, k, np.float32(3.0), table)
            quantize_div_lanes(q, g, k + 33, np.float32(1e-39), table)
        for k in range(32, 33):
            adam_lane(p, g, k, m, v, r1, r2, code1, code2, s, k7)
            dequantize_lane(out, r1, k, code1, np.float32(0.5))
            quantize_lane(q, g, k, np.float32(3.0), table)
            quantize_div_lane(q, g, k + 33, np.float32(1e-39), table)
        for i in range(len(f)):
            f[i] = fma(g[i], p[i], m[i])
            u[i] = abs_bits(g[i])
            g[i] = float_of_bits(u[i])

    rng = np.random.default_rng(0)
    n = 66
    p, g, m, v = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
    g[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-42, -3e38]
    r1, r2 = (rng.integers(0, 256, n, dtype=np.uint8) for _ in range(2))
    code1, code2 = quant8.dynamic_map(True), quant8.dynamic_map(False)
    table = quant8.tables(code1)
    out, f = np.zeros(n, np.float32), np.zeros(n, np.float32)
    q, u = np.zeros(n, np.uint8), np.zeros(n, np.uint32)
    run(p, g, m, v, r1, r2, code1, code2, table, out, q, f, u)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in (p, g, m, v, out, q, f, u)))
    asm = run.inspect_asm(run.signatures[0])
    print(digest.hexdigest(), "gather" in asm, "vfmadd" in asm)
""")


def _run(tmp_path: Path, cpu: str | None) -> list[str]:
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    if cpu:
        env["NUMBA_CPU_NAME"] = cpu
    else:
        env.pop("NUMBA_CPU_NAME", None)
        env.pop("NUMBA_CPU_FEATURES", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86-64 CPU name")
def test_the_intrinsics_give_the_same_bits_on_a_cpu_without_fma_or_gathers(tmp_path):
    host = _run(tmp_path, None)
    baseline = _run(tmp_path, "generic")  # numba: no features, i.e. x86-64's SSE2
    assert baseline[1:] == ["False", "False"]  # lowered without gathers or FMA instructions
    assert baseline[0] == host[0]


def test_fma_rounds_once():
    @numba.njit
    def both(x, y, z, out):
        out[0] = instructions.fma(x[0], y[0], z[0])
        out[1] = x[0] * y[0] + z[0]

    for dtype, e in ((np.float32, 13), (np.float64, 30)):
        x, y, z = (np.array([v], dtype) for v in (1 + 2.0 ** -e, 1 - 2.0 ** -e, -1.0))
        out = np.zeros(2, dtype)
        both(x, y, z, out)
        assert out[0] == -(2.0 ** (-2 * e)) and out[1] == 0  # the product's 2^-2e kept


def test_bit_patterns_are_numpys():
    @numba.njit
    def patterns(x, u, back):
        for i in range(len(x)):
            u[i] = instructions.abs_bits(x[i])
            back[i] = instructions.float_of_bits(u[i])

    x = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -3.4e38],
                 np.float32)
    u, back = np.zeros(len(x), np.uint32), np.zeros(len(x), np.float32)
    patterns(x, u, back)
    np.testing.assert_array_equal(u, x.view(np.uint32) & 0x7FFFFFFF)
    np.testing.assert_array_equal(back.view(np.uint32), u)


def test_select_is_the_conditional_expression():
    """``select(c, a, b)`` gives ``a if c else b``, converted as the conditional expression
    converts (an int and a float give a float, float32 and float64 a float64), NaN kept."""
    @numba.njit
    def both(c, x, y, i, out):
        out[0] = instructions.select(c, x, y)
        out[1] = x if c else y
        out[2] = instructions.select(c, i, x)
        out[3] = i if c else x
        out[4] = instructions.select((x > y) | (x != x), x, y)
        out[5] = x if x > y or x != x else y
        return instructions.select(c, i, 7) + 0 * (i if c else 7)

    f32 = np.float32
    for c, x, y in ((True, f32(np.nan), 1.5), (False, f32(2.0), np.nan), (True, f32(-0.0), 0.0),
                    (False, f32(np.inf), -np.inf)):
        out = np.zeros(6)
        assert both(c, x, y, 3, out) == (3 if c else 7)
        np.testing.assert_array_equal(out[0::2].view(np.uint64), out[1::2].view(np.uint64))
