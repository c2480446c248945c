"""examples/optim_standalone.py: optimizers over a project's own arrays, gradients by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "optim_standalone.py"


def _example():
    spec = importlib.util.spec_from_file_location("optim_standalone", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_trains_the_users_arrays_and_resumes_exactly(capsys):
    ex = _example()
    final, final2, same = ex.run(steps=60)
    assert same and final == final2  # the resumed run is the uninterrupted one, bit for bit
    x, y = ex.make_data()
    assert final < 0.5 * float(np.mean(y * y))  # it learned (the loss of predicting 0)
    w = ex.make_weights()
    p, opt, _ = ex.make_optimizer(w, 10)
    ex.closure_for(w, p, x, y)()
    before = {k: a.copy() for k, a in w.items()}
    opt.step()
    assert all(not np.array_equal(w[k], before[k]) for k in w)  # stepped in place
    assert "step   0" in capsys.readouterr().out
