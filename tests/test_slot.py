"""Slots: an optimizer (or DDP) steps a parameter's storage where it is, never moving it.

Each case here gave a silent wrong result when optimizers packed parameters into their own flat
buffers (issue 25, point 3): an array taken from a parameter, or the user's array a parameter
was made from, stopped tracking the weights.
"""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.amp import GradScaler
from tinyopt.engine.slot import SlotTable
from tinyopt.optim.flat import FlatBuffer

FUSED = [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01)),
         ("AdamW", dict(lr=0.01, amsgrad=True)), ("Adagrad", dict(lr=0.1)),
         ("RMSprop", dict(lr=0.01, centered=True)), ("Adadelta", dict()), ("Adamax", dict()),
         ("NAdam", dict()), ("RAdam", dict()), ("ASGD", dict()), ("Rprop", dict()),
         ("Adafactor", dict(lr=0.01)), ("Muon", dict(lr=0.02))]


def _grad(shape, k=0):
    return np.random.default_rng(k).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name,kw", FUSED, ids=[n for n, _ in FUSED])
def test_an_array_taken_before_the_optimizer_tracks_the_weights(name, kw):
    model = nn.Linear(6, 4)
    w = model.weight.detach().numpy()  # taken before the optimizer is built
    d = model.weight.data.numpy()
    twin = copy.deepcopy(model)
    opt = getattr(optim, name)([model.weight], **kw)
    opt_twin = getattr(optim, name)([twin.weight], **kw)
    for k in range(3):
        model.weight.grad, twin.weight.grad = _grad((4, 6), k), _grad((4, 6), k)
        opt.step()
        opt_twin.step()
    assert not np.array_equal(w, twin.weight.detach().numpy() * 0)  # (it moved)
    np.testing.assert_array_equal(w, model.weight.detach().numpy())
    np.testing.assert_array_equal(d, w)
    np.testing.assert_array_equal(w, twin.weight.detach().numpy())  # the same steps


@pytest.mark.parametrize("name,kw", FUSED + [("LBFGS", dict(lr=0.5))],
                         ids=[n for n, _ in FUSED] + ["LBFGS"])
def test_a_parameter_made_from_a_users_array_is_stepped_in_place(name, kw):
    arr = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    start = arr.copy()
    p = nn.Parameter(to.from_numpy(arr))
    q = nn.Parameter(start.copy())  # the same, in storage of its own
    opt, ref = getattr(optim, name)([p], **kw), getattr(optim, name)([q], **kw)
    for k in range(2):
        def closure(x=p):
            x.grad = _grad((4, 6), k) + x.detach().numpy()
            return float((x.detach().numpy() ** 2).sum())
        opt.step(closure)
        ref.step(lambda: closure(q))
    assert p._data is arr or np.shares_memory(p._data, arr)
    assert not np.array_equal(arr, start)
    np.testing.assert_array_equal(arr, q.detach().numpy())


def test_torch_cpu_memory_through_numpy_stays_in_sync():
    torch = pytest.importorskip("torch")
    t = torch.ones(5)
    p = nn.Parameter(to.from_numpy(t.numpy()))
    opt = optim.Adam([p], lr=0.1)
    p.grad = np.ones(5, np.float32)
    opt.step()
    np.testing.assert_allclose(t.numpy(), 0.9, rtol=1e-6)
    # and the other way: torch's writes are what the next step reads
    t.mul_(2)
    p.grad = np.zeros(5, np.float32)
    opt.step()
    assert p.detach().numpy()[0] == pytest.approx(1.8, abs=0.2)
    np.testing.assert_array_equal(p.detach().numpy(), t.numpy())


def test_low_precision_storage_is_the_users_and_masters_stay_float32():
    arr = np.linspace(-1, 1, 12).astype(np.float16)
    p = nn.Parameter(to.from_numpy(arr))
    opt = optim.Adam([p], lr=0.01)
    p.grad = np.ones(12, np.float32)
    opt.step()
    master = opt.state[p]["master_param"].numpy()
    assert master.dtype == np.float32
    np.testing.assert_array_equal(arr, master.astype(np.float16))
    assert p._data is arr


def test_a_gradient_held_by_the_user_is_not_moved():
    p = nn.Parameter(to.ones(3))
    (p * p).sum().backward()
    g = p.grad  # held before the optimizer is built
    opt = optim.SGD([p], lr=0.5)
    assert p.grad is g
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), 0.0)
    t = to.full((3,), 2.0)
    p.grad = t  # a Tensor: it is the gradient, as in torch
    assert p.grad is t
    t.mul_(2)  # so a change to it is a change to the gradient
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), -2.0)
    opt.zero_grad()
    (p * p).sum().backward()  # a fresh gradient: into the optimizer's flat gradient buffer
    assert np.shares_memory(p.grad.numpy(), opt._flat[0][0].grad)


def test_grad_scaler_unscales_a_gradient_the_user_assigned():
    p = nn.Parameter(to.ones(4))
    opt = optim.SGD([p], lr=1.0)
    scaler = GradScaler("cpu", init_scale=8.0)
    g = to.full((4,), 8.0)
    p.grad = g
    scaler.scale(to.tensor(1.0))  # (the iteration's scale)
    scaler.unscale_(opt)
    np.testing.assert_array_equal(g.numpy(), 1.0)  # the user's gradient tensor, unscaled
    scaler.step(opt)
    np.testing.assert_array_equal(p.detach().numpy(), 0.0)


def test_in_backward_update_steps_a_users_array():
    n = 1024
    w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32) * 0.01
    start = w.copy()
    lin = nn.Linear(n, 1, bias=False)
    lin.weight = nn.Parameter(to.from_numpy(w[:1].copy()))  # (shape (1, n): not an outer one)
    big = nn.Parameter(to.from_numpy(w))
    x = to.tensor(np.ones((1, n), np.float32))
    ref = nn.Parameter(start.copy())
    opts = [optim.SGD([big], lr=0.1), optim.SGD([ref], lr=0.1)]
    for k, (p, opt) in enumerate(zip((big, ref), opts)):
        loss = (x @ p).sum()  # d/dp = outer(x, 1): stepped in its gradient's kernel
        opt.fuse_with_backward(loss)
    assert not np.array_equal(w, start)
    np.testing.assert_array_equal(w, ref.detach().numpy())


def test_checkpoints_load_into_the_users_arrays(tmp_path):
    arr = np.zeros((2, 3), np.float32)
    model = nn.Linear(3, 2)
    model.weight = nn.Parameter(to.from_numpy(arr))
    opt = optim.Adam(model.parameters(), lr=0.1)
    src = nn.Linear(3, 2)
    to.save(str(tmp_path / "m.tinyopt"), model=src)
    to.load_into(str(tmp_path / "m.tinyopt"), model=model)
    np.testing.assert_array_equal(arr, src.weight.detach().numpy())
    model.weight.grad = np.ones((2, 3), np.float32)
    model.bias.grad = np.ones(2, np.float32)
    opt.step()
    # (atol: a weight near 0.1 leaves a difference of a few float32 ulps of 0.1)
    np.testing.assert_allclose(arr, src.weight.detach().numpy() - 0.1, rtol=1e-5, atol=1e-7)


def test_two_optimizers_over_one_parameter_both_step_its_storage():
    p = nn.Parameter(to.zeros(3))
    a, b = optim.SGD([p], lr=1.0), optim.SGD([p], lr=10.0)
    p.grad = np.ones(3, np.float32)
    a.step()
    b.step()
    a.step()
    np.testing.assert_array_equal(p.detach().numpy(), -12.0)
    assert p.slot.owner is b._flat[0][0]


def test_table_addresses_follow_storage_changes_and_keep_arrays_alive():
    p = nn.Parameter(to.zeros(4))
    fb = FlatBuffer([p], np.dtype(np.float32))
    table = fb.slots
    assert table.data_addr[0] == p._data.ctypes.data
    old = p._data
    p.share_memory_()  # the storage moves: every table follows
    assert p._data is not old and table.data_addr[0] == p._data.ctypes.data
    assert table.data_ref[0] is p._data
    g = np.ones(4, np.float32)
    p.grad = to.from_numpy(g)
    assert table.flags[0] == 1 and table.foreign[0] == 1
    assert table.grad_addr[0] == g.ctypes.data and table.grad_ref[0] is g
    p.grad = None
    assert table.flags[0] == 0
    # arrays a table cannot hold are refused before anything changes
    with pytest.raises(RuntimeError, match="C-contiguous float32 array of 4 elements"):
        p._data = np.zeros(8, np.float32)[::2]
    assert table.data_ref[0] is p._data
    with pytest.raises(RuntimeError, match="read-only"):
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        SlotTable(fb, [nn.Parameter(to.from_numpy(ro))], np.array([0, 4]),
                  np.zeros(4, np.float32))


def test_a_dead_optimizers_slot_is_not_the_parameters():
    p = nn.Parameter(to.zeros(3))
    opt = optim.Adam([p])
    assert p.slot is not None and p.slot.owner is opt._flat[0][0]
    del opt
    gc.collect()
    assert p.slot is None
    (p * p).sum().backward()  # a fresh gradient of its own
    assert p.grad is not None


def test_a_parameter_of_an_array_is_a_copy_end_to_end_with_the_previous_one():
    arr = np.ones(3, np.float32)
    for _ in range(2):  # (the arena's chunk may end between the first two: then a new one)
        p, q = nn.Parameter(arr), nn.Parameter(np.zeros(2, np.float32))
        if q._data.ctypes.data == p._data.ctypes.data + p._data.nbytes:
            break
    else:
        raise AssertionError("two parameters made one after the other are not end to end")
    assert not np.shares_memory(p._data, arr)  # as to.tensor(arr); to.from_numpy(arr) shares


def test_layers_allocate_parameters_end_to_end():
    for _ in range(2):  # (the arena's chunk may end inside the first model: then a new one)
        model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
        if FlatBuffer(list(model.parameters()), np.dtype(np.float32)).adopted is not None:
            break
    opt = optim.LBFGS(model.parameters())
    (fb,) = opt._flats
    flat = fb.adopted  # the parameters' storage itself: LBFGS's vector is no copy
    assert flat is not None and flat.size == sum(p.numel() for p in model.parameters())
    assert all(np.shares_memory(p._data, flat) for p in model.parameters())
    assert fb.data is flat


def test_set_makes_a_tensors_storage_the_parameters_and_the_slots_follow():
    p = nn.Parameter(to.zeros(3))
    opt = optim.SGD([p], lr=1.0)
    arr = np.full(3, 5.0, np.float32)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.set_(to.from_numpy(arr))
    with to.no_grad():
        assert p.set_(to.from_numpy(arr)) is p
    assert p._data is arr and opt._flat[0][0].slots.data_addr[0] == arr.ctypes.data
    p.grad = np.ones(3, np.float32)
    opt.step()
    np.testing.assert_array_equal(arr, 4.0)
    with to.no_grad(), pytest.raises(ValueError, match="whose storage an optimizer manages"):
        p.set_(to.zeros(4))
