"""kernels/native/lean_compile.py: numba's inliner copies, its pass pipelines for declarations,
its variable lists and its ABI-size questions made cheaper for tinyopt's kernels, the same
machine code, numba's own path for anyone else's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# a kernel inlining a helper of several blocks (the inliner deep-copies the helper's IR) and a
# kernel that raises (its Python wrapper has an exception path), then a numba function of the
# user's own inlining the same helper: the kernels' machine code, and for each what numba did that
# lean_compile spares (variable copies, declarations given a pass pipeline, numba's recursive
# variable walks, llvmlite's module parses for ABI sizes)
SCRIPT = r"""
import hashlib, json, re
import llvmlite.ir
import numba
import numpy as np
from llvmlite.binding import newpassmanagers
from numba.core import ir
from tinyopt.kernels import jit
from tinyopt.kernels.native import lean_compile

counts = {"copies": 0, "declarations": 0, "walks": 0, "parses": 0}
def counted(cls, name, key, when=lambda *a: True):
    numbas = getattr(cls, name)
    def count(*args, **kwargs):
        counts[key] += bool(when(*args))
        return numbas(*args, **kwargs)
    setattr(cls, name, count)
counted(ir.Var, "__deepcopy__", "copies")
# (from the first disk-cache miss on, where lean_compile is installed: numba's runtime library is
# compiled before it, at the first cache lookup)
counted(newpassmanagers.FunctionPassManager, "run", "declarations",
        lambda self, fn, pb: fn.is_declaration and bool(lean_compile._INSTALLED))
counted(ir.Inst, "_rec_list_vars", "walks")
counted(llvmlite.ir.types.Type, "_get_ll_global_value_type", "parses")

def clipped_sum(a, lo, hi):
    s = 0.0
    for i in range(a.size):
        v = a[i]
        if v < lo:
            v = lo
        elif v > hi:
            v = hi
        s += v
    return s

clip = jit.inline(clipped_sum)

def total(a, out):
    out[0] = clip(a, -1.0, 1.0) + clip(a, 0.0, 0.5)

def checked_sum(x, out):
    if x.shape[0] == 0:
        raise ValueError("checked_sum: an empty sum")
    for i in range(x.shape[0]):
        out[0] += x[i]

kernel = jit.kernel(total)
a = np.linspace(-2.0, 2.0, 9)
out = np.zeros(1)
kernel(a, out)
assert out[0] == sum(min(max(v, -1.0), 1.0) + min(max(v, 0.0), 0.5) for v in a)
checked = jit.kernel(checked_sum)  # (a kernel that raises: its wrapper has an exception path)
x = np.arange(24, dtype=np.float32)
sums = np.zeros(1, np.float32)
checked(x, sums)
assert sums[0] == x.sum()
asm = "".join(kernel.inspect_asm().values()) + "".join(checked.inspect_asm().values())
ours = dict(counts)

counts.update(dict.fromkeys(counts, 0))
users_clip = numba.njit(inline="always")(clipped_sum)
@numba.njit
def users(a):
    return users_clip(a, -1.0, 1.0)
assert users(a) == sum(min(max(v, -1.0), 1.0) for v in a)
print(json.dumps({"asm": hashlib.sha1(re.sub(r"[0-9a-f]{9,}|[0-9]{9,}", "N",
                                             asm).encode()).hexdigest(),
                  "ours": ours, "users": counts}))
"""


def compiled(tmp_path, lean: bool) -> dict:
    script = tmp_path / "lean.py"  # (a file: numba caches no kernel of ``-c`` code)
    script.write_text(SCRIPT)
    cache = tmp_path / ("lean" if lean else "plain")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONHASHSEED": "0",
           "TINYOPT_NUMBA_LEAN_COMPILE": "1" if lean else "0", "TINYOPT_COMPILE_AHEAD": "0"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lean")
    return compiled(tmp, False), compiled(tmp, True)


def test_a_kernel_compiles_to_the_same_machine_code(both):
    plain, lean = both
    assert lean["asm"] == plain["asm"]


def test_the_inliner_copies_each_variable_of_a_callee_once_per_copy(both):
    # (numba's copies a callee's whole scope with each of its blocks: several times as many)
    plain, lean = both
    assert 0 < 2 * lean["ours"]["copies"] < plain["ours"]["copies"]


def test_no_pass_pipeline_runs_over_a_declaration(both):
    plain, lean = both
    assert lean["ours"]["declarations"] == 0 < plain["ours"]["declarations"]


def test_variables_are_listed_without_numbas_recursion(both):
    plain, lean = both
    assert lean["ours"]["walks"] == 0 < plain["ours"]["walks"]


def test_an_abi_size_is_asked_of_llvm_once_per_type(both):
    # (the two kernels ask about the same array and scalar types)
    plain, lean = both
    assert 0 < lean["ours"]["parses"] < plain["ours"]["parses"]


def test_a_numba_function_of_the_users_compiles_on_numbas_own_path(both):
    plain, lean = both
    assert lean["users"] == plain["users"]
    assert all(lean["users"][key] > 0 for key in ("copies", "walks", "declarations"))


# in this process: numba's answers and ours side by side (``gc_paused`` marks the thread as
# compiling a tinyopt kernel, where ours apply)

@pytest.fixture(scope="module")
def lean_installed():
    from tinyopt.kernels.native import lean_compile
    if not lean_compile.install():
        pytest.skip("lean_compile is off here (TINYOPT_NUMBA_LEAN_COMPILE=0 or another numba)")


class _Claims:
    """A value whose ``__class__`` claims another class (as a proxy's does): ``isinstance``
    believes it, so numba lists it if it claims to be a variable."""

    def __init__(self, cls):
        self._cls = cls

    @property
    def __class__(self):
        return self._cls


def test_a_statements_variables_are_numbas_list(lean_installed):
    from numba.core import ir
    from numba.core.compiler import run_frontend

    from tinyopt.kernels.native.quiet_compile import gc_paused

    def f(a, n):
        s = 0.0
        for i in range(n):
            s += a[i] * (i + 1) if i % 2 else a[i:n].sum()
        return (s, a.shape, {"k": n})

    statements = [st for block in run_frontend(f).blocks.values() for st in block.body]
    loc = statements[0].loc
    scope = ir.Scope(None, loc)
    x, y = ir.Var(scope, "x", loc), ir.Var(scope, "y", loc)
    odd = ir.Assign(ir.Expr.build_tuple([x, (y, [x]), {"k": y, "j": (x,)}, 3, None], loc),
                    ir.Var(scope, "t", loc), loc)
    odd.extra = [_Claims(ir.Var), _Claims(int), y]  # (a statement's every attribute is walked)
    for stmt in statements + [odd]:
        numbas = stmt.list_vars()
        with gc_paused():
            ours = stmt.list_vars()
        assert len(ours) == len(numbas) and all(o is n for o, n in zip(ours, numbas)), stmt
    assert len(odd.list_vars()) == 1 + 5 + 2  # (t; x, y, x, y, x; the claimed Var, y)


def test_an_abi_size_is_llvms(lean_installed):
    from llvmlite import ir as llvm_ir
    from numba.core.registry import cpu_target

    from tinyopt.kernels.native.quiet_compile import gc_paused

    context = cpu_target.target_context
    named = llvm_ir.global_context.get_identified_type("tinyopt.test.lean_named")
    if named.is_opaque:
        named.set_body(llvm_ir.IntType(8), llvm_ir.DoubleType())
    types = [llvm_ir.IntType(1), llvm_ir.IntType(64), llvm_ir.FloatType(),
             llvm_ir.ArrayType(llvm_ir.IntType(16), 7), llvm_ir.IntType(8).as_pointer(),
             llvm_ir.LiteralStructType([llvm_ir.IntType(8), llvm_ir.DoubleType(),
                                        llvm_ir.VectorType(llvm_ir.FloatType(), 8)]), named]
    numbas = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
    with gc_paused():
        ours = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
        again = [(context.get_abi_sizeof(t), context.get_abi_alignment(t)) for t in types]
    assert ours == again == numbas
    assert numbas[-2] == (64, 32) and numbas[-1] == (16, 8)
