"""``nn.utils.parameters_to_vector`` / ``vector_to_parameters`` (``nn/utils/convert_parameters.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn


def model():
    to.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_round_trip_and_order():
    m = model()
    v = nn.utils.parameters_to_vector(m.parameters())
    want = np.concatenate([p.data.reshape(-1) for p in m.parameters()])
    np.testing.assert_array_equal(v.numpy(), want)
    nn.utils.vector_to_parameters(v * 2.0, m.parameters())
    np.testing.assert_array_equal(np.concatenate([p.data.reshape(-1) for p in m.parameters()]),
                                  want * 2)
    nn.utils.vector_to_parameters(np.zeros(v.shape[0], np.float32), m.parameters())
    assert all((p.data == 0).all() for p in m.parameters())


def test_vector_is_differentiable_and_storage_is_kept():
    m = model()
    opt = to.optim.SGD(m.parameters(), lr=0.1)
    m(np.ones((1, 3), np.float32)).sum().backward()
    opt.step()  # parameters now live in the optimizer's flat buffer
    storage = [p._data for p in m.parameters()]
    v = nn.utils.parameters_to_vector(m.parameters())
    (v * v).sum().backward()
    for p in m.parameters():
        assert p.grad is not None
    nn.utils.vector_to_parameters(np.arange(v.shape[0], dtype=np.float32), m.parameters())
    assert all(a is p._data for a, p in zip(storage, m.parameters()))  # written in place


def test_errors():
    m = model()
    with pytest.raises(TypeError, match="expected torch.Tensor"):
        nn.utils.vector_to_parameters([1.0, 2.0], m.parameters())
    with pytest.raises(RuntimeError, match="has 3 elements but the parameters have 26"):
        nn.utils.vector_to_parameters(np.zeros(3, np.float32), m.parameters())


def test_against_torch():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    m = model()
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    np.testing.assert_array_equal(
        nn.utils.parameters_to_vector(m.parameters()).numpy(),
        torch.nn.utils.parameters_to_vector(tm.parameters()).detach().numpy())
