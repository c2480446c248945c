"""The optimizer step inside the backward plan (``optimizer.fuse_with_backward``, ``fit``): the
same bits as ``loss.backward(); optimizer.step()``, and the unfused path where something needs
the gradients between the two."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.engine import update_in_plan
from tinyopt.optim.fused import FusedOptimizer
from tinyopt.optim import in_plan
from tinyopt.optim.in_plan import fusable

F = nn.functional

OPTIMIZERS = {
    "sgd_momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                            weight_decay=1e-2),
    "adam": lambda ps: optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "lion": lambda ps: optim.Lion(ps, lr=1e-2, weight_decay=0.1),  # (issue 31's elementwise)
}


@pytest.fixture(autouse=True)
def outer_kernels_at_any_size(monkeypatch):
    """The in-plan step at these sizes too (it is taken from ``OUTER_MIN`` elements on)."""
    monkeypatch.setattr(in_plan, "OUTER_MIN", 0)


@pytest.fixture
def unfused_steps(monkeypatch):
    """How many times the unfused kernel call (``FusedOptimizer._run``) ran."""
    count = [0]
    run = FusedOptimizer._run

    def counting(self, *args):
        count[0] += 1
        return run(self, *args)
    monkeypatch.setattr(FusedOptimizer, "_run", counting)
    return count


def _mlp(seed=0):
    to.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4))


def _data(steps, batch, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 20)).astype(np.float32), rng.integers(0, 4, batch))
            for _ in range(steps)]


def _train(make_opt, fused, data, model=None, extra=None, sched=None):
    model = model or _mlp()
    opt = make_opt(model.parameters())
    scheduler = sched(opt) if sched else None
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if extra is not None:
            loss = loss + extra(model)
        if fused:
            opt.fuse_with_backward(loss)
        else:
            loss.backward()
            opt.step()
        if scheduler is not None:
            scheduler.step()
    return model, opt


def _assert_same(a, b):
    (ma, oa), (mb, ob) = a, b
    for pa, pb in zip(ma.parameters(), mb.parameters()):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
        np.testing.assert_array_equal(pa.grad.numpy(), pb.grad.numpy())
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        assert sa["state"][k].keys() == sb["state"][k].keys()
        for name in sa["state"][k]:
            np.testing.assert_array_equal(np.asarray(sa["state"][k][name]),
                                          np.asarray(sb["state"][k][name]))


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("batch", [1, 3])
def test_fused_step_is_the_unfused_step_bit_for_bit(name, batch, unfused_steps, monkeypatch,
                                                     compile_at_once):
    # batch 1: the linear weights step in their outer-product kernel, the biases after the run;
    # batch 3: no outer product, so no step in the plan (the separate step is as fast)
    data = _data(4, batch)
    ref = _train(OPTIMIZERS[name], False, data)
    assert unfused_steps[0] == 4
    outers = []
    kernel_step = in_plan.PlanStep.outer
    monkeypatch.setattr(in_plan.PlanStep, "outer",
                        lambda self, p, *a: (outers.append(p.shape), kernel_step(self, p, *a)))
    got = _train(OPTIMIZERS[name], True, data)
    assert unfused_steps[0] == (4 if batch == 1 else 8)  # batch 1: all in the plan, the first too
    assert outers == ([(4, 16), (16, 20)] * 4 if batch == 1 else [])
    _assert_same(ref, got)


def test_scheduler_changing_lr_and_a_parameter_read_after_its_gradient(unfused_steps,
                                                                      compile_at_once):
    # the L2 term reads the first weight again after its gradient is known: its update waits
    data = _data(5, 1)

    def l2(model):
        return (model[1].weight * model[1].weight).sum() * 1e-3

    def sched(opt):
        return optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1 + e))
    ref = _train(OPTIMIZERS["adam"], False, data, extra=l2, sched=sched)
    got = _train(OPTIMIZERS["adam"], True, data, extra=l2, sched=sched)
    assert unfused_steps[0] == 5
    _assert_same(ref, got)
    assert got[1].param_groups[0]["lr"] == ref[1].param_groups[0]["lr"] != 1e-2


def test_state_dict_round_trip_then_fused_steps_continue_exactly(tmp_path):
    data = _data(6, 1)
    ref = _train(OPTIMIZERS["adam"], False, data)
    model, opt = _train(OPTIMIZERS["adam"], True, data[:3])
    to.save(tmp_path / "ckpt.tinyopt", model=model, optimizer=opt)
    model2 = _mlp(seed=5)
    opt2 = OPTIMIZERS["adam"](model2.parameters())
    to.load_into(tmp_path / "ckpt.tinyopt", model=model2, optimizer=opt2)
    assert opt2.state_dict()["state"][0]["step"] == 3
    for x, y in data[3:]:
        opt2.zero_grad()
        opt2.fuse_with_backward(F.cross_entropy(model2(x), y))
    _assert_same(ref, (model2, opt2))


def test_a_param_group_added_between_fused_steps(unfused_steps):
    data = _data(4, 1)

    def run(fused):
        model = _mlp()
        opt = optim.Adam(model[1].parameters(), lr=1e-2)
        for i, (x, y) in enumerate(data):
            if i == 2:
                opt.add_param_group({"params": list(model[3].parameters()), "lr": 1e-3})
            opt.zero_grad()
            model.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if fused:
                opt.fuse_with_backward(loss)
            else:
                loss.backward()
                opt.step()
        return model, opt
    ref = run(False)
    n = unfused_steps[0]  # (one kernel call per group)
    got = run(True)
    assert n == 6 and unfused_steps[0] == n
    _assert_same(ref, got)


def test_fallbacks_where_the_gradient_is_needed_before_the_step(unfused_steps):
    data = _data(2, 1)
    make = OPTIMIZERS["sgd_momentum"]
    ref = _train(make, False, data)
    n = unfused_steps[0]

    # a step pre-hook may read or change the gradients: unfused, and it sees them
    model = _mlp()
    opt = make(model.parameters())
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append(model[1].weight.grad is not None))
    assert fusable(opt) == "a step pre-hook is registered"
    for x, y in data:
        opt.zero_grad()
        opt.fuse_with_backward(F.cross_entropy(model(x), y))
    assert seen == [True, True] and unfused_steps[0] == n + 2
    _assert_same(ref, (model, opt))

    # a gradient hook on a parameter (here one that changes nothing): the plain backward, then
    # the step
    model = _mlp()
    opt = make(model.parameters())
    hooked = []
    model[3].weight.register_hook(lambda g: hooked.append(1))
    for x, y in data:
        opt.zero_grad()
        opt.fuse_with_backward(F.cross_entropy(model(x), y))
    assert hooked == [1, 1] and unfused_steps[0] == n + 4
    _assert_same(ref, (model, opt))


def test_a_row_sparse_gradient_means_unfused(unfused_steps):
    emb = nn.Embedding(10, 3, sparse=True)
    opt = optim.Adam(emb.parameters())
    loss = emb(to.tensor([[1, 4]])).sum()
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        opt.fuse_with_backward(loss)  # torch's error, from step after the backward
    assert fusable(opt) is not None


def test_a_backward_hook_that_acts_means_unfused(monkeypatch, unfused_steps):
    from tinyopt.engine import realize
    ran = []
    monkeypatch.setattr(realize, "BACKWARD_HOOKS", [lambda: ran.append(1)])
    model = _mlp()
    opt = OPTIMIZERS["adam"](model.parameters())
    x, y = _data(1, 1)[0]
    opt.fuse_with_backward(F.cross_entropy(model(x), y))
    assert ran == [1] and unfused_steps[0] == 1


def test_a_hook_on_a_parameter_changes_its_gradient_on_the_plain_path():
    # (it was ignored when the graph had no hooked non-leaf: backward skipped the hooked path)
    m = nn.Linear(3, 2)
    m.weight.register_hook(lambda g: g * 2)
    m(to.tensor(np.ones((1, 3), np.float32))).sum().backward()
    np.testing.assert_array_equal(m.weight.grad.numpy(), np.full((2, 3), 2, np.float32))


def test_accumulated_gradients_and_post_hooks(unfused_steps, compile_at_once):
    data = _data(4, 2)
    make = OPTIMIZERS["adam"]

    def accumulate(fused):
        model = _mlp()
        opt = make(model.parameters())
        posts = []
        opt.register_step_post_hook(lambda o, a, k: posts.append(model[1].weight.numpy().copy()))
        for (x0, y0), (x1, y1) in zip(data[::2], data[1::2]):
            opt.zero_grad()
            F.cross_entropy(model(x0), y0).backward()
            loss = F.cross_entropy(model(x1), y1)
            if fused:  # the gradient is not reset: it is added after the backward, then stepped
                opt.fuse_with_backward(loss)
            else:
                loss.backward()
                opt.step()
        return (model, opt), posts
    ref, ref_posts = accumulate(False)
    n = unfused_steps[0]
    got, posts = accumulate(True)
    assert unfused_steps[0] == 2 * n
    _assert_same(ref, got)
    assert len(posts) == 2 and all(np.array_equal(a, b) for a, b in zip(posts, ref_posts))

    # zero_grad(set_to_none=False) keeps zero gradients: unfused too
    model = _mlp()
    opt = make(model.parameters())
    opt.zero_grad(set_to_none=False) if model[1].weight.grad is not None else None
    F.cross_entropy(model(data[0][0]), data[0][1]).backward()
    opt.zero_grad(set_to_none=False)
    assert fusable(opt) == "a gradient was not reset"

    # post hooks run once after a fused step, with the parameters already stepped
    model = _mlp()
    opt = make(model.parameters())
    after = []
    opt.register_step_post_hook(lambda o, a, k: after.append(model[1].weight.numpy().copy()))
    before = model[1].weight.numpy().copy()
    n = unfused_steps[0]
    x, y = _data(1, 1)[0]
    opt.fuse_with_backward(F.cross_entropy(model(x), y))
    assert unfused_steps[0] == n and len(after) == 1
    assert not np.array_equal(after[0], before)
    np.testing.assert_array_equal(after[0], model[1].weight.numpy())


def test_fit_steps_inside_the_plan_with_the_same_result(unfused_steps):
    to.engine.cache_clear()  # (the count below assumes no structure of this test seen before)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 20)).astype(np.float32)
    y = rng.integers(0, 4, 24)

    def run(pre_hook):
        model = _mlp()
        opt = optim.AdamW(model.parameters(), lr=1e-2)
        if pre_hook:  # a hook that does nothing: forces the unfused path
            opt.register_step_pre_hook(lambda o, a, k: None)
        sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        hist = to.fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=2, batch_size=1,
                      scheduler=sched, seed=0, progress=False)
        return model, opt, hist
    m0, o0, h0 = run(True)
    assert unfused_steps[0] == 48
    m1, o1, h1 = run(False)
    # every step of the second fit ran in the plan but its first: fit realizes the loss with
    # its outputs, a structure the first fit never realized, which therefore ran eagerly
    # (engine/eager.py: the separate step after it, the same bits)
    assert unfused_steps[0] == 49
    _assert_same((m0, o0), (m1, o1))
    assert [r.train.loss for r in h0] == [r.train.loss for r in h1]


def test_schedule_updates_a_parameter_after_its_last_reader_or_after_the_outputs():
    w = nn.Parameter(np.ones((3, 2), np.float32))
    x = to.tensor(np.ones((1, 2), np.float32))
    out = F.linear(x, w)
    loss = (out * out).sum() + (w * w).sum()  # w read by its own gradient's rule
    plan = to.engine.realize.get_plan(loss=loss)
    ((at, outer),) = update_in_plan.schedule(plan)
    assert at != update_in_plan.END and outer is None
    # a plan output viewing the parameter: the update waits until the outputs are copied
    wt = w.t()
    plan = to.engine.realize.get_plan(wt, loss=F.linear(x, w).sum())
    ((at, outer),) = update_in_plan.schedule(plan)
    assert at == update_in_plan.END
