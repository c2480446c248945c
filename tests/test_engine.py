"""The engine as a whole: laziness, realization, gradients into Parameters, the plan cache."""

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import cache_clear, cache_info
from tinyopt.engine.graph import signature, toposort, use_counts
from tinyopt.engine.ops import cross_entropy, linear, relu
from tinyopt.engine.slot import SlotTable


def test_ggml_example_and_replay_without_new_plan():
    # f = a*x^2 + b with x=2, a=3, b=4: f = 16, df/dx = 2*a*x = 12.
    cache_clear()
    x, a = to.Parameter([2.0]), to.Parameter([3.0])
    b = to.tensor([4.0])
    f = (a * x * x + b).sum()
    f.backward()
    assert f.item() == 16.0 and x.grad[0] == 12.0 and a.grad[0] == 4.0
    assert cache_info().misses == 0 and cache_info().eager == 1  # seen once: run eagerly
    # New values, same structure: compiled the second time, replayed from then on.
    for v, want in ((3.0, (31.0, 18.0)), (4.0, (52.0, 24.0))):
        x.data[:] = v
        x.grad = None
        f = (a * x * x + b).sum()
        f.backward()
        assert (f.item(), x.grad[0]) == want
    assert cache_info().misses == 1 and cache_info().hits == 1 and cache_info().eager == 1


def test_ops_over_parameters_are_lazy_until_realized():
    cache_clear()
    x = to.Parameter(np.arange(6.0).reshape(2, 3), requires_grad=False)
    y = (x * 2).exp().sum(1)
    assert y.shape == (2,) and y.op == "reshape"
    assert cache_info().misses == 0  # nothing compiled or computed yet
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(6.0).reshape(2, 3) * 2).sum(1),
                               rtol=1e-6)


def test_ops_over_concrete_tensors_run_at_once():
    cache_clear()
    x = to.tensor(np.arange(6.0).reshape(2, 3))
    y = (x * 2).exp().sum(1)
    assert y.op == "input" and cache_info().misses == 0  # computed without a plan
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(6.0).reshape(2, 3) * 2).sum(1),
                               rtol=1e-6)


def test_grads_accumulate_until_reset():
    p = to.Parameter(np.ones(3))
    for _ in range(2):
        (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad, 4 * np.ones(3))
    p.grad = None
    (p * 3.0).sum().backward()
    np.testing.assert_array_equal(p.grad, 3 * np.ones(3))


def test_backward_errors():
    p = to.Parameter(np.ones((2, 2)))
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (p * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        to.tensor([1.0]).sum().backward()
    with to.no_grad():
        y = (p * 2).sum()
    assert not y.requires_grad


def test_backward_with_explicit_gradient():
    p = to.Parameter(np.array([1.0, 2.0]))
    (p * p).backward(np.array([1.0, 10.0]))
    np.testing.assert_array_equal(p.grad, [2.0, 40.0])


def test_new_batch_is_cache_hit_new_shape_is_new_entry():
    rng = np.random.default_rng(0)
    w = to.Parameter(rng.standard_normal((4, 3)).astype(np.float32))
    cache_clear()
    for _ in range(4):
        x = rng.standard_normal((5, 3)).astype(np.float32)
        y = rng.integers(0, 4, 5)
        cross_entropy(linear(x, w), y).backward()
    assert cache_info().misses == 1 and cache_info().hits == 2  # (the first step: eager)
    for _ in range(2):
        x = rng.standard_normal((2, 3)).astype(np.float32)  # the short last batch, twice
        cross_entropy(linear(x, w), rng.integers(0, 4, 2)).backward()
    info = cache_info()
    assert info.misses == 2 and info.currsize == 2 and info.eager == 2


def test_cache_is_bounded_lru(compile_at_once):
    from tinyopt.engine.plan_cache import CACHE
    cache_clear()
    old = CACHE.maxsize
    CACHE.maxsize = 3
    try:
        for n in range(1, 6):
            to.Parameter(np.ones(n), requires_grad=False).exp().numpy()
        assert cache_info()[:4] == (0, 5, 3, 3)
        to.Parameter(np.ones(5), requires_grad=False).exp().numpy()  # most recent: still cached
        to.Parameter(np.ones(1), requires_grad=False).exp().numpy()  # evicted long ago: a miss
        assert cache_info().hits == 1 and cache_info().misses == 6
    finally:
        CACHE.maxsize = old
        cache_clear()


def test_plans_follow_moved_parameter_storage():
    # share_memory_ moves the storage: the cached plan must read the new array, and the table
    # of the slots holding the parameter follows; a fresh gradient goes into its flat slot
    p = to.Parameter(np.array([1.0, 2.0]))
    (p * 2).sum().backward()

    class Owner:
        pass

    owner, flat_grad = Owner(), np.zeros(4)
    table = SlotTable(owner, [p], np.array([0, 2]), flat_grad[1:3])
    assert p.slot is table.slots[0] and table.flags[0] == 1  # the gradient it had: kept
    p.grad = None
    assert table.flags[0] == 0
    p.share_memory_()
    p.data = np.array([5.0, 7.0])
    assert table.data_addr[0] == p._data.ctypes.data
    y = (p * p).sum()
    y.backward()
    assert y.item() == 74.0
    np.testing.assert_array_equal(flat_grad, [0, 10, 14, 0])
    assert table.flags[0] == 1 and p.grad.value is p.slot.grad_view


def test_signature_ignores_values_but_not_structure():
    const = lambda a: to.Parameter(a, requires_grad=False)  # noqa: E731  (a lazy leaf)
    a = const(np.ones(3)) + 1.0
    b = const(np.zeros(3)) + 5.0
    c = const(np.ones(4)) + 1.0
    d = const(np.ones(3)) * 1.0
    sig = lambda t: signature(toposort([t]))  # noqa: E731
    assert sig(a) == sig(b)
    assert sig(a) != sig(c) and sig(a) != sig(d)
    p = to.Parameter(np.ones(3))
    assert sig(p + 1.0) != sig(a)  # which leaves require grad is part of the structure


def test_toposort_and_use_counts():
    x = to.Parameter(np.ones(2))
    h = x * 2
    y = h + h * 3
    order = toposort([y])
    pos = {id(t): i for i, t in enumerate(order)}
    for t in order:
        assert all(pos[id(s)] < pos[id(t)] for s in t.srcs)
    assert len(order) == len({id(t) for t in order})
    assert use_counts(order)[id(h)] == 2


def test_numpy_shares_the_tensors_storage():
    # As in PyTorch: the array is the tensor's value, not a copy.
    p = to.Parameter(np.arange(4.0))
    y = p * 2
    v = y.numpy()
    v[:] = -1
    np.testing.assert_array_equal(y.numpy(), [-1, -1, -1, -1])
    assert np.shares_memory(p.numpy(), p._data) and np.shares_memory(np.asarray(p.data), p._data)


def test_second_order_gradient_through_graph_grads():
    # Gradients are graphs: d/dx (d/dx x^3) = 6x.
    from tinyopt.engine.graph import backward_graph
    x = to.Parameter(np.array([2.0]))
    y = (x * x * x).sum()
    with to.enable_grad():
        g = backward_graph(y, toposort([y]), [x])[id(x)]
    x.grad = None
    np.testing.assert_allclose(g.numpy(), [12.0])


def test_to_dot_labels_forward_and_backward(tmp_path):
    from tinyopt.engine.dot import to_dot
    w = to.Parameter(np.ones((3, 2), np.float32))
    w.name = "fc.weight"
    loss = relu(linear(np.ones((4, 2), np.float32), w)).sum()
    path = tmp_path / "g.dot"
    text = to_dot(loss, path)
    assert path.read_text() == text
    assert text.startswith("digraph") and "fc.weight" in text and "linear" in text
    assert "[4, 3]" in text and "relu_grad" in text and 'label="grad"' in text
