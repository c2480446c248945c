"""share_memory_: storage in shared memory, seen by forked processes, sent by handle."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.engine import shared_memory

fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                          reason="no fork start method")


def _step_in_child(model):
    opt = optim.SGD(model.parameters(), lr=1.0)
    for p in model.parameters():
        p.grad = np.ones(p.shape, np.float32)
    opt.step()
    model.running.add_(1)


@fork
def test_a_forked_process_writes_the_parents_shared_model():
    model = nn.Linear(3, 2)
    model.register_buffer("running", to.zeros(2))
    assert not any(p.is_shared() for p in model.parameters())
    before = [p.detach().numpy().copy() for p in model.parameters()]
    view = model.weight.detach().numpy()  # (an array taken before: it stays the old memory)
    opt = optim.SGD(model.parameters(), lr=0.0)  # an optimizer built before: it follows
    assert model.share_memory() is model
    assert all(p.is_shared() for p in model.parameters()) and model.running.is_shared()
    proc = multiprocessing.get_context("fork").Process(target=_step_in_child, args=(model,))
    proc.start()
    proc.join()
    assert proc.exitcode == 0
    for p, b in zip(model.parameters(), before):  # the child's update is the parent's
        np.testing.assert_array_equal(p.detach().numpy(), b - 1)
    np.testing.assert_array_equal(model.running.numpy(), 1.0)
    np.testing.assert_array_equal(view, before[0])
    assert opt._flat[0][0].slots.data_ref[0] is model.weight._data


def test_share_memory_keeps_values_aliases_and_refuses_views():
    t = to.arange(6.0)
    d = t.data
    assert t.share_memory_() is t and t.is_shared() and d.is_shared()
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0))
    assert t.share_memory_() is t  # already shared: nothing to do
    p = nn.Parameter(to.ones(2))
    alias = p.data
    alias.share_memory_()  # p.data's storage is p's
    assert p.is_shared() and alias.is_shared()
    base = to.zeros(4)
    view = base[1:3]
    with pytest.raises(RuntimeError, match="views another tensor's storage"):
        view.share_memory_()
    with pytest.raises(RuntimeError, match="views of this tensor .* are alive"):
        base.share_memory_()  # (its view would keep the old memory)
    del view
    base.share_memory_()
    with pytest.raises(RuntimeError, match="node of a graph"):
        (p * 2).share_memory_()


def test_pickling_parameters_and_tensors():
    p = nn.Parameter(to.tensor([1.0, 2.0]))
    p.name = "w"
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, nn.Parameter) and q.requires_grad and q.name == "w"
    np.testing.assert_array_equal(q.detach().numpy(), [1, 2])
    frozen = pickle.loads(pickle.dumps(nn.Parameter(to.ones(1), requires_grad=False)))
    assert not frozen.requires_grad
    p.share_memory_()  # plain pickle: by value (a copy), as torch
    q = pickle.loads(pickle.dumps(p))
    assert not np.shares_memory(q._data, p._data)


def test_the_forking_pickler_sends_shared_storage_by_handle():
    from multiprocessing.reduction import ForkingPickler
    t = to.zeros(3).share_memory_()
    rebuilt = pickle.loads(ForkingPickler.dumps(t))  # (in this process: a second mapping)
    rebuilt.add_(1)
    np.testing.assert_array_equal(t.numpy(), 1.0)
    assert rebuilt.is_shared() and shared_memory.is_shared(rebuilt.numpy())
    plain = to.zeros(2)
    again = pickle.loads(ForkingPickler.dumps(plain))  # not shared: by value
    again.add_(1)
    np.testing.assert_array_equal(plain.numpy(), 0.0)
