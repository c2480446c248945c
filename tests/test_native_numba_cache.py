"""The disk cache's keys (kernels/native/numba_cache.py): the same kernel, the same key, in every
process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from tinyopt.kernels.native import numba_cache

_KEY_OF_A_CLOSURE_KERNEL = r"""
import sys
import numba  # (numba's own modules from their .pyc, tinyopt's as the prefix below has them)
sys.pycache_prefix, sys.dont_write_bytecode = sys.argv[1], False
from tinyopt.kernels import adafactor
from tinyopt.kernels.native import numba_cache
kernel = numba_cache.loads_without_refresh(adafactor.adafactor[(False, True, 0, False)]._serial)
if numba_cache.LOAD_WITHOUT_REFRESH is None:
    print("numba's own cache class")
else:
    print(kernel._cache._index_key((numba.float32[:],), kernel.targetctx.codegen())[2])
"""


def test_a_kernel_closing_over_functions_has_one_key_from_source_or_from_pyc(tmp_path):
    """A kernel whose closure holds functions (pickled by value, with their code) is keyed alike
    by a process that compiled tinyopt from source (the first after an editable install; a test
    run's main process) and by one that loaded the ``.pyc`` files: numba's own closure hash
    differed, so every later process compiled such kernels again."""
    run = [sys.executable, "-c", _KEY_OF_A_CLOSURE_KERNEL, str(tmp_path)]
    from_source = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert any(tmp_path.rglob("adafactor*.pyc"))  # (the second process loads them)
    from_pyc = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert from_source == from_pyc


def test_the_closure_digest_sees_values_not_their_sharing():
    name = "".join(["max", "imize"])  # (a str equal to, but not, an interned one)
    shared = pickle.dumps(([name, name], (1.5, name)), protocol=4)
    separate = pickle.dumps(([name, "maximize"], (1.5, "".join(["maxi", "mize"]))), protocol=4)
    assert shared != separate  # (the memo: one object written once, then referred to)
    assert numba_cache.closure_digest(shared) == numba_cache.closure_digest(separate)
    for other in (([name, name], (2.5, name)), ([name, name], [1.5, name]),
                  ([name], (1.5, name)), ([name, "minimize"], (1.5, name))):
        assert numba_cache.closure_digest(pickle.dumps(other, protocol=4)) != \
            numba_cache.closure_digest(shared)


@pytest.mark.parametrize("flag", [False, True])
def test_the_closure_digest_sees_what_a_discarded_call_set(flag):
    """cloudpickle fills a function's closure cells through calls whose results it pops: the
    values set there are part of the key (two closures differing only in a captured flag)."""
    from numba.core.serialize import dumps

    def make(value):
        def inner():
            return value
        return inner

    one, other = dumps((make(flag),)), dumps((make(not flag),))
    assert numba_cache.closure_digest(one) != numba_cache.closure_digest(other)
    assert numba_cache.closure_digest(one) == numba_cache.closure_digest(dumps((make(flag),)))


FIRST_COMPILE = r"""
import sys
import numpy as np
from numba.core.registry import cpu_target
from tinyopt.kernels import jit
from tinyopt.kernels.native import numba_cache
if sys.argv[1] == "1":
    numba_cache.refresh_contexts()
def lowerings():  # (numba's implementations installed in its target context)
    return sum(len(d.versions) for d in cpu_target.target_context._defns.values())
before = lowerings()
def double(a, out):
    for i in range(a.size):
        out[i] = 2 * a[i]
a = np.arange(3.0)
out = np.empty(3)
jit.kernel(double)(a, out)
assert out.tolist() == [0.0, 2.0, 4.0]
print(lowerings() - before)
"""


@pytest.mark.parametrize("refreshed", [False, True])
def test_a_process_that_refreshed_its_contexts_compiles_without_installing_templates(
        tmp_path, refreshed):
    # (what a helper forked after ``refresh_contexts`` saves: numba's ~1000 implementations
    # installed once, in the parent, not again at the child's first compile)
    script = tmp_path / "first_compile.py"  # (a file: numba caches no kernel of ``-c`` code)
    script.write_text(FIRST_COMPILE)
    run = [sys.executable, str(script), "1" if refreshed else "0"]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    installed = int(subprocess.run(run, capture_output=True, text=True, check=True,
                                   env=env).stdout)
    assert installed < 10 if refreshed else installed > 500
