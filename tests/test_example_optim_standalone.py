"""examples/optim_standalone.py: optimizers over a project's own arrays, gradients by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import optim_standalone  # noqa: E402


def test_the_example_trains_and_resumes_exactly(capsys):
    optim_standalone.main()  # (asserts: the resumed weights are the uninterrupted ones, bit for
    out = capsys.readouterr().out  # bit, and the loss went below 0.01)
    assert "weights identical: True" in out and "step   0" in out


def test_the_optimizer_steps_the_users_arrays_in_place():
    ex = optim_standalone
    x, y = ex.make_data()
    w = ex.make_weights()
    p, opt, _ = ex.make_optimizer(w, 10)
    assert all(p[k]._data is w[k] for k in w)  # the Parameters are the arrays' memory
    ex.closure_for(w, p, x, y)()
    before = {k: a.copy() for k, a in w.items()}
    opt.step()
    assert all(not np.array_equal(w[k], before[k]) for k in w)
