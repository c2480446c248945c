"""kernels/optim.py: the walker's kernels, compiled and cached per algorithm and switch set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SRC = str(Path(__file__).resolve().parents[1] / "src")

_STEP = """
import numpy as np
from tinyopt import Parameter, optim
out = {}
for name, kw in %r:
    p = Parameter(np.linspace(-1, 1, 6).astype(np.float32))
    opt = getattr(optim, name)([p], **kw)
    for t in range(3):
        p.grad = np.cos(np.arange(6) + t).astype(np.float32)
        opt.step()
    out[name] = (p._data.tolist(), float(opt._flat[0][0].steps[0]), sorted(opt.state[p]))
print(repr(out))
"""


def _run(cases, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=SRC)
    res = subprocess.run([sys.executable, "-c", _STEP % (cases,)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return eval(res.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of lists


def test_kernels_cached_by_separate_processes_load_together(tmp_path):
    """Each walker kernel's subroutine used to have one qualified name for every algorithm: two
    kernels compiled in different processes, then loaded from numba's disk cache into one,
    resolved each other's calls (Rprop ran SGD's per-parameter prologue: no step counted, no
    state).  Every algorithm and switch set now names its own machine code."""
    sgd, adam = ("SGD", dict(lr=0.1)), ("Adam", dict(lr=0.01))
    alone = {**_run([sgd], tmp_path / "a"), **_run([adam], tmp_path / "b")}
    _run([sgd], tmp_path / "c")
    _run([adam], tmp_path / "c")   # compiled in another process, same cache
    together = _run([sgd, adam], tmp_path / "c")  # both loaded from the cache
    assert together == alone
    assert together["Adam"][1] == 3
    assert together["Adam"][2] == ["exp_avg", "exp_avg_sq", "step"]
    np.testing.assert_array_equal(together["SGD"][0], alone["SGD"][0])
