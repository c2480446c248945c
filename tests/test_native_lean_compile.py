"""kernels/native/lean_compile.py: numba's inliner copies and a kernel's wrapper passes made
cheaper for tinyopt's kernels, the same machine code, numba's own path for anyone else's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# a kernel inlining a helper of several blocks (the inliner deep-copies the helper's IR), then a
# numba function of the user's own inlining the same helper: machine code and the count of
# variable copies the inliner made for each
SCRIPT = r"""
import hashlib, json, re
import numba
import numpy as np
from numba.core import ir
from tinyopt.kernels import jit

copies = [0]
var_copy = ir.Var.__deepcopy__
def counted(self, memo):
    copies[0] += 1
    return var_copy(self, memo)
ir.Var.__deepcopy__ = counted

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

kernel = jit.kernel(total)
a = np.linspace(-2.0, 2.0, 9)
out = np.zeros(1)
kernel(a, out)
assert out[0] == sum(min(max(v, -1.0), 1.0) + min(max(v, 0.0), 0.5) for v in a)
asm = "".join(kernel.inspect_asm().values())
ours = copies[0]

copies[0] = 0
users_clip = numba.njit(inline="always")(clipped_sum)
@numba.njit
def users(a):
    return users_clip(a, -1.0, 1.0)
assert users(a) == sum(min(max(v, -1.0), 1.0) for v in a)
print(json.dumps({"asm": hashlib.sha1(re.sub(r"[0-9a-f]{9,}|[0-9]{9,}", "N",
                                             asm).encode()).hexdigest(),
                  "ours": ours, "users": copies[0]}))
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
    assert 0 < 2 * lean["ours"] < plain["ours"]


def test_a_numba_function_of_the_users_compiles_on_numbas_own_path(both):
    plain, lean = both
    assert lean["users"] == plain["users"] > 0
