"""DOT export (``engine/dot.py``): parameters are labelled by their module names."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.engine.dot import to_dot


def test_parameters_are_labelled_by_module_names():
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    loss = model(np.ones((4, 2), np.float32)).sum()
    text = to_dot(loss, names=model)
    for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert f'label="{name}\\nparam\\n' in text, name
    assert text.count("param\\n") == 4
    plain = to_dot(loss)
    assert "0.weight" not in plain
    by_mapping = to_dot(loss, names={"w_first": model[0].weight})
    assert "w_first" in by_mapping and "2.weight" not in by_mapping


def test_a_shared_parameter_keeps_its_first_name():
    lin = nn.Linear(2, 2)

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = lin, lin

        def forward(self, x):
            return self.b(self.a(x))

    m = Tied()
    text = to_dot(m(np.ones((1, 2), np.float32)).sum(), names=m)
    assert "a.weight" in text and "b.weight" not in text


def test_names_must_be_a_module_or_mapping():
    with pytest.raises(TypeError, match="names must be a Module or a mapping"):
        to_dot(to.Parameter(np.ones(2)).sum(), names=3)
