"""The optimizer's kernel compiled ahead in a helper process (``kernels/compile_ahead.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tinyopt.kernels.native import numba_cache

STEP = """if True:
    import hashlib, json
    import numpy as np
    from numba.core import base
    refreshes = []
    refresh = base.BaseContext.refresh
    base.BaseContext.refresh = lambda self: (refreshes.append(1), refresh(self))[1]
    import tinyopt as to
    from tinyopt import nn, optim
    from tinyopt.kernels import compile_ahead, optim as kernels
    to.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    opt = optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1)
    started = len(compile_ahead._RUNNING)
    x = np.random.default_rng(0).random((4, 6), dtype=np.float32)
    y = np.array([0, 2, 1, 2])
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    serial = kernels.adam.serial_build((False, False, True, False, True))
    print(json.dumps({"started": started, "refreshes": len(refreshes),
                      "hits": sum(serial._cache_hits.values()),
                      "misses": sum(serial._cache_misses.values()),
                      "bits": loss.item().hex() + hashlib.sha1(b"".join(
                          p.data.numpy().tobytes() for p in m.parameters())).hexdigest()}))
"""


def _run(cache, ahead: str) -> dict:
    import json
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), NUMBA_CACHE_DIR=str(cache),
               TINYOPT_COMPILE_AHEAD=ahead)
    r = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_cold_optimizer_kernel_compiles_in_a_helper_and_loads_with_the_same_bits(tmp_path):
    """Cold: building the optimizer starts a helper, and the first step loads the walker the
    helper compiled (no compile of its own); the same bits as a process that compiled it itself.
    Warm: no helper, and no numba context refresh (its probe of the cache loads the walker as a
    first call would).  ``TINYOPT_COMPILE_AHEAD=0``: no helper, a compile of its own."""
    ahead = _run(tmp_path / "ahead", "1")
    assert ahead["started"] == 1 and (ahead["hits"], ahead["misses"]) == (1, 0)
    warm = _run(tmp_path / "ahead", "1")
    assert warm["started"] == 0 and (warm["hits"], warm["misses"]) == (1, 0)
    assert warm["refreshes"] == 0 or numba_cache.LOAD_WITHOUT_REFRESH is None
    itself = _run(tmp_path / "itself", "0")
    assert itself["started"] == 0 and (itself["hits"], itself["misses"]) == (0, 1)
    assert ahead["bits"] == warm["bits"] == itself["bits"]


TWO = """if True:
    from tinyopt import nn, optim
    from tinyopt.kernels import compile_ahead
    m = nn.Linear(4, 3)
    optim.Adam(m.parameters())
    [first] = compile_ahead._RUNNING
    optim.SGD(m.parameters(), lr=0.1)  # (while the first runs: one helper at a time)
    assert compile_ahead._RUNNING == [first]
    first._process.wait()
    optim.SGD(m.parameters(), lr=0.1, momentum=0.9)  # its kernel never called, first is done
    [second] = compile_ahead._RUNNING
    assert second is not first
    print("OK")
"""


def test_a_helper_whose_kernel_is_not_called_yet_does_not_hold_up_the_next(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), NUMBA_CACHE_DIR=str(tmp_path),
               TINYOPT_COMPILE_AHEAD="1")
    r = subprocess.run([sys.executable, "-c", TWO], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]
