"""tinyopt/warmup.py and ``python -m tinyopt warmup``: the kernels of common models compiled
ahead of time, so a later process's first step compiles nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

FIRST_STEP = r"""
from numba.core import dispatcher
compiled = []
compile = dispatcher.Dispatcher.compile


def counted(self, sig):
    if self.overloads.get(tuple(sig)) is not None:
        return compile(self, sig)
    hits = sum(self._cache_hits.values())
    entry = compile(self, sig)
    if sum(self._cache_hits.values()) == hits:
        compiled.append(self.py_func.__qualname__)
    return entry


dispatcher.Dispatcher.compile = counted
import numpy as np
import tinyopt as to
from tinyopt import nn, optim
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
opt = optim.AdamW(model.parameters(), lr=1e-3)
rng = np.random.default_rng(1)
for _ in range(2):  # the README's loop: its first step (eager) and its second (the plan)
    x, y = rng.random((256, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 256)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(loss.item() > 0, sorted(set(compiled)))
"""


def _run(code: str, cache: str, *args: str) -> str:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, *args] if not code else [sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_after_warmup_the_readme_loop_compiles_no_kernel(tmp_path):
    cache = str(tmp_path / "cache")
    _run("from tinyopt.warmup import warmup; warmup(['mlp'])", cache)
    assert _run(FIRST_STEP, cache).split("\n")[0] == "True []"


def test_warmup_command_and_errors():
    out = _run("", "", "-m", "tinyopt", "--help")  # (an empty NUMBA_CACHE_DIR: numba's default)
    assert "warmup" in out
    from tinyopt.warmup import WORKLOADS, warmup
    assert set(WORKLOADS) == {"mlp", "cnn", "lstm", "gpt"}
    with pytest.raises(ValueError, match="unknown workload 'vgg'"):
        warmup(["mlp", "vgg"])
    seen = []
    assert set(warmup(["gpt"], report=lambda name, s: seen.append(name))) == {"gpt"}
    assert seen == ["gpt"]
