"""view_scatter (ops/view_scatter.py): a write through a view as a graph op, checked against
finite differences (the base's gradient is zeroed on the view, the written value's is the view of
the gradient)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from gradcheck import gradcheck


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _through(write):
    """y = 2 p; ``write(y, q)`` in place; y."""
    def f(p, q):
        y = p * 2.0
        write(y, q)
        return y
    return f


@pytest.mark.parametrize("name, write, qshape", [
    ("slice mul_", lambda y, q: y[1:3].mul_(q), (2, 4)),
    ("select copy_", lambda y, q: y.t()[1].copy_(q), (3,)),
    ("diagonal add_", lambda y, q: y.diagonal().add_(q), (3,)),
    ("view of views", lambda y, q: y.t()[1:].unsqueeze(0).mul_(q), (1, 3, 3)),
    ("unfold div_", lambda y, q: y.unfold(1, 2, 2).div_(q), (3, 2, 2)),
    ("as_strided sub_", lambda y, q: y.as_strided((2, 2), (4, 1), 5).sub_(q), (2, 2)),
    ("advanced setitem on a view", lambda y, q: y[1].__setitem__([0, 2], q), (2,)),
    ("reshape setitem", lambda y, q: y.view(-1).__setitem__(slice(2, 6), q), (4,)),
    ("two writes", lambda y, q: (y[0].mul_(q[0]), y[:, 1].add_(q[:, 0])), (3, 4)),
])
def test_writes_through_views_have_finite_difference_gradients(name, write, qshape):
    q = rand(qshape, 1) + (3.0 if "div" in name else 0.0)  # (away from a zero divisor)
    gradcheck(_through(write), rand((3, 4)), q)


def test_an_expanded_write_of_one_value_cannot_be_differentiated():
    y = to.tensor(rand((1, 3)), requires_grad=True) * 1.0
    y.expand(2, 3).fill_(2.0)  # torch writes it...
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        y.sum().backward()     # ...but not its gradient
