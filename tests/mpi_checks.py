"""The checks ``tests/test_distributed.py`` runs on 2 ranks: ``mpiexec -n 2 python mpi_checks.py``.

Every check runs on every rank (collectives must be called in one order); a failing check is
recorded and the next one runs.  Rank 0 prints one JSON line ``RESULTS {name: null | error}``
holding both ranks' failures.  One launch holds every check, so process start-up and numba
loading are paid once.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import traceback
from datetime import timedelta

import numpy as np

import tinyopt as to
import tinyopt.distributed as dist
from tinyopt import nn, optim
from tinyopt.data import DistributedSampler
from tinyopt.nn.parallel import DistributedDataParallel as DDP

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def rank() -> int:
    return dist.get_rank()


def world() -> int:
    return dist.get_world_size()


def gather(value):
    out = [None] * world()
    dist.all_gather_object(out, value)
    return out


def mlp(seed: int, sizes=(20, 16, 5)) -> nn.Module:
    to.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def batches(steps: int, n: int = 16, d: int = 20, classes: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, d)).astype(np.float32),
             rng.integers(0, classes, n)) for _ in range(steps)]


def half(x: np.ndarray) -> np.ndarray:
    """This rank's contiguous share of a batch."""
    k = len(x) // world()
    return x[rank() * k:(rank() + 1) * k]


def shared_path(name: str) -> str:
    """A checkpoint path every rank reads and rank 0 writes: rank 0's choice (the ranks'
    parent processes differ when they run on several hosts)."""
    path = [os.path.join(tempfile.gettempdir(), f"tinyopt-{name}-{os.getpid()}.tinyopt")]
    dist.broadcast_object_list(path, src=0)
    return path[0]


def params(model: nn.Module) -> list[np.ndarray]:
    return [p._data.copy() for p in model.parameters()]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def train_step(model, opt, x, y) -> None:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def assert_ranks_identical(model: nn.Module) -> None:
    mine = params(model)
    for r, theirs in enumerate(gather(mine)):
        assert all(np.array_equal(x, y) for x, y in zip(mine, theirs)), f"rank {r} differs"


# ---- process group ------------------------------------------------------------------------------
@check
def process_group_api():
    assert dist.is_initialized() and dist.get_world_size() == 2 and dist.get_backend() == "mpi"
    r = rank()
    a = np.array([1.0, 2.0, 3.0], np.float32) * (r + 1)
    dist.all_reduce(a)
    assert a.tolist() == [3.0, 6.0, 9.0], a
    b = np.array([r + 1, 10 * (r + 1)], np.int64)
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [2, 20], b
    c = np.full(4, r + 2.0)
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    assert np.all(c == 2.5), c
    d = np.full(2, r + 2, np.int32)
    dist.all_reduce(d, op=dist.ReduceOp.PRODUCT)
    assert d.tolist() == [6, 6]
    e = np.array([r == 0, True, False])
    dist.all_reduce(e, op=dist.ReduceOp.MIN)  # logical and
    assert e.tolist() == [False, True, False], e
    m = np.arange(12, dtype=np.float64).reshape(3, 4) * (r + 1)
    dist.all_reduce(m[:, ::2])  # not contiguous: reduced in place all the same
    assert m[:, ::2].tolist() == (np.arange(12).reshape(3, 4)[:, ::2] * 3).tolist()
    assert m[:, 1::2].tolist() == (np.arange(12).reshape(3, 4)[:, 1::2] * (r + 1)).tolist()
    p = nn.Parameter(np.full(3, float(r)))
    work = dist.all_reduce(p, async_op=True)
    assert work.wait(timeout=timedelta(seconds=60)) and work.is_completed()
    assert p._data.tolist() == [1.0, 1.0, 1.0]
    t = to.tensor([1.0, 2.0])
    dist.all_reduce(t)  # a leaf Tensor, in place
    assert t.numpy().tolist() == [2.0, 4.0]
    q = nn.Parameter(np.zeros(2, np.float32))
    (q * (r + 1.0)).sum().backward()
    dist.all_reduce(q.grad, op=dist.ReduceOp.AVG)  # p.grad shares the gradient's storage
    assert q._grad.tolist() == [1.5, 1.5], q._grad
    f = np.full(5, float(r))
    dist.broadcast(f, src=1)
    assert f.tolist() == [1.0] * 5
    objs = [None, None]
    dist.all_gather_object(objs, {"rank": r, "t": (r, "x")})
    assert objs == [{"rank": 0, "t": (0, "x")}, {"rank": 1, "t": (1, "x")}], objs
    lst = [r, "mine"] if r == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, "mine"], lst
    dist.barrier()
    for call, error, text in (
            (lambda: dist.init_process_group("mpi"), ValueError, "twice"),
            (lambda: dist.broadcast(f, src=2), ValueError, "src must be a rank"),
            (lambda: dist.all_reduce(np.ones(2, np.int64), op=dist.ReduceOp.AVG), TypeError,
             "AVG"),
            (lambda: dist.all_reduce(nn.Parameter(np.ones(2)) * 2), TypeError, "graph node"),
            (lambda: dist.all_gather_object([None], 1), IndexError, "world_size")):
        try:
            call()
        except error as ex:
            assert text in str(ex), ex
        else:
            raise AssertionError(f"no {error.__name__} ({text})")


@check
def ranks_run_where_they_were_launched():
    """Each rank's network namespace: one for a job on one machine; under
    test_a_job_across_two_hosts_over_tcp (TINYOPT_EXPECT_NETNS=2) one per simulated host."""
    here = "/proc/self/ns/net"  # (Linux)
    spaces = gather(os.stat(here).st_ino if os.path.exists(here) else None)
    if None not in spaces:
        assert len(set(spaces)) == int(os.environ.get("TINYOPT_EXPECT_NETNS", "1")), spaces


@check
def sampler_defaults_from_group():
    ds = list(range(11))
    s = DistributedSampler(ds, shuffle=True, seed=3)
    assert (s.num_replicas, s.rank, len(s)) == (2, rank(), 6)
    shares = gather(list(s))
    assert len(shares[0] + shares[1]) == 12 and set(shares[0] + shares[1]) == set(ds)  # 1 pad


def raises_on_every_rank(call, error, *texts) -> str:
    """``call()`` must raise ``error`` containing every one of ``texts`` on this rank."""
    try:
        call()
    except error as e:
        for text in texts:
            assert text in str(e), (text, str(e))
        return str(e)
    raise AssertionError(f"no {error.__name__} ({texts})")


@check
def mismatched_collectives_raise_on_every_rank_and_the_group_survives():
    r = rank()
    raises_on_every_rank(  # float32 against int32 returned garbage, with exit 0
        lambda: dist.all_reduce(np.ones(3, np.float32 if r == 0 else np.int32)), RuntimeError,
        "Detected mismatch between collectives on ranks",
        "rank 0 runs all_reduce(float32 of shape (3,), op=SUM); "
        "rank 1 runs all_reduce(int32 of shape (3,), op=SUM)")
    raises_on_every_rank(lambda: dist.all_reduce(np.ones(3 + r)), RuntimeError,
                         "float64 of shape (3,)", "float64 of shape (4,)")
    raises_on_every_rank(lambda: dist.all_reduce(np.ones((2, 3) if r == 0 else (3, 2))),
                         RuntimeError, "shape (2, 3)", "shape (3, 2)")
    raises_on_every_rank(lambda: dist.all_reduce(
        np.ones(2), op=dist.ReduceOp.SUM if r == 0 else dist.ReduceOp.MAX), RuntimeError,
        "op=SUM", "op=MAX")
    raises_on_every_rank(lambda: dist.broadcast(np.ones(2), src=r), RuntimeError,
                         "root=0", "root=1")
    raises_on_every_rank(lambda: dist.broadcast_object_list([None] * (1 + r)), RuntimeError,
                         "broadcast_object_list(1 entries, root=0)",
                         "broadcast_object_list(2 entries, root=0)")
    raises_on_every_rank(lambda: dist.barrier() if r == 0 else dist.all_gather_object(
        [None, None], r), RuntimeError, "rank 0 runs barrier()", "rank 1 runs all_gather_object()")
    a = np.full(3, r + 1.0, np.float32)
    dist.all_reduce(a)  # nothing moved above: the group works on
    assert a.tolist() == [3.0, 3.0, 3.0], a
    objs = [None, None]
    dist.all_gather_object(objs, "x" * (1000 * r))  # payloads of different sizes are fine
    assert objs == ["", "x" * 1000]


class Frozen(nn.Module):
    def __init__(self, shape, dtype=np.float32):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.table = nn.Parameter(np.zeros(shape, dtype), requires_grad=False)


@check
def ddp_verifies_the_model_across_ranks():
    r = rank()
    frozen = Frozen((2, 3) if r == 0 else (3, 2))  # the same element count, another shape
    before = frozen.fc.weight._data.copy()
    mine = raises_on_every_rank(lambda: DDP(frozen), RuntimeError,
                                "[1]: params[0] in this process ('table') with sizes [3, 2] "
                                "appears not to match sizes of the same param in process 0 "
                                "([2, 3]).")
    assert mine.startswith("rank 1's model differs from rank 0's: ") == (r == 0), mine
    assert np.array_equal(frozen.fc.weight._data, before)  # nothing was broadcast
    raises_on_every_rank(lambda: DDP(Frozen(4, np.float32 if r == 0 else np.float64)),
                         RuntimeError, "with dtype float64 appears not to match dtype")
    raises_on_every_rank(lambda: DDP(mlp(0, (20, 16, 5) if r == 0 else (20, 5))), RuntimeError,
                         "DDP expects same model across all ranks, but Rank 1 has 2 params, "
                         "while rank 0 has inconsistent 4 params.")
    DDP(Frozen((2, 3)))  # the same everywhere: fine


@check
def zero_loads_state_with_a_0d_parameter_on_every_rank():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer

    def setup(seed):
        to.manual_seed(seed)
        w = nn.Parameter(np.random.default_rng(seed).standard_normal(5).astype(np.float32))
        s = nn.Parameter(np.float32(0.5))  # a 0-d parameter: the last element of the buffer
        return [w, s], ZeroRedundancyOptimizer([w, s], optimizer_class=optim.Adam, lr=0.1)

    def step(ps, opt):
        opt.zero_grad()
        ((ps[0] * ps[1]).sum() ** 2).backward()
        opt.step()
    ps, opt = setup(0)
    for _ in range(2):
        step(ps, opt)
    opt.consolidate_state_dict(to=0)
    sd = [opt.state_dict() if rank() == 0 else None]
    dist.broadcast_object_list(sd)
    sd = sd[0]
    assert sd["state"][1]["exp_avg"].shape == ()
    ps2, opt2 = setup(0)
    opt2.load_state_dict(sd)  # raised on the rank holding the 0-d parameter
    opt2.consolidate_state_dict(to=1)
    if rank() == 1:
        back = opt2.state_dict()
        for i, st in sd["state"].items():
            for k, v in st.items():
                assert np.array_equal(back["state"][i][k], v), (i, k)
    plain = optim.Adam(ps2, lr=0.1)
    plain.load_state_dict(sd)
    # a dict one rank rejects (here: another shape on rank 1) is loaded by no rank
    bad = copy.deepcopy(sd)
    if rank() == 1:
        bad["state"][0]["exp_avg"] = np.zeros(4, np.float32)
    ps3, opt3 = setup(1)
    step(ps3, opt3)
    mine = opt3.optim.state_dict()
    text = raises_on_every_rank(lambda: opt3.load_state_dict(bad), ValueError)
    if rank() == 0:
        assert "rank 1 rejected the state dict" in text and "no rank loaded it" in text, text
    after = opt3.optim.state_dict()
    for i, st in mine["state"].items():
        for k, v in st.items():
            assert np.array_equal(after["state"][i][k], v), (i, k)
    assert opt3.param_groups[0]["lr"] == 0.1


# ---- DDP --------------------------------------------------------------------------------------
def train_pair(make_opt, steps: int = 12):
    """Single-process training on whole batches vs DDP on this rank's halves; returns both
    models' parameters."""
    ddp = DDP(mlp(100 + rank()))  # different seeds: DDP broadcasts rank 0's parameters
    ref = mlp(0)
    ref.load_state_dict(ddp.module.state_dict())
    opt_ref, opt = make_opt(ref.parameters()), make_opt(ddp.parameters())
    for x, y in batches(steps):
        train_step(ref, opt_ref, x, y)
        train_step(ddp, opt, half(x), half(y))
    return ddp, params(ref)


@check
def ddp_sgd_momentum_matches_single_process():
    ddp, ref = train_pair(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9))
    assert max_diff(params(ddp), ref) < 1e-5, max_diff(params(ddp), ref)
    assert_ranks_identical(ddp)


@check
def ddp_adam_matches_single_process():
    ddp, ref = train_pair(lambda ps: optim.Adam(ps, lr=1e-2))
    assert max_diff(params(ddp), ref) < 1e-5, max_diff(params(ddp), ref)
    assert_ranks_identical(ddp)


def count_allreduces(pg):
    calls = []
    original = pg.allreduce_

    def counting(buf, op="SUM", **kw):
        calls.append(buf.size)
        original(buf, op, **kw)
    pg.allreduce_ = counting
    return calls, lambda: setattr(pg, "allreduce_", original)


@check
def ddp_one_allreduce_per_flat_buffer():
    pg = dist.group.WORLD
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
    ddp = DDP(model, bucket_cap_mb=0.5)  # no optimizer yet: DDP's own buckets of 0.5 MiB
    x = np.random.default_rng(rank()).random((4, 784), dtype=np.float32)
    y = np.arange(4) % 10
    calls, restore = count_allreduces(pg)
    try:
        nn.functional.cross_entropy(ddp(x), y).backward()
        # packed in reverse order: [b2, w2, b1] fit in 0.5 MiB, w1 (1.5 MiB) is a bucket alone
        assert calls == [784 * 500, 10 + 5000 + 500], calls
        g = [p._grad.copy() for p in model.parameters()]
        assert all(np.array_equal(a, b) for a, b in zip(g, gather(g)[0]))
        opt = optim.Adam(ddp.parameters())  # packs the group: from now on ONE Allreduce
        calls.clear()
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        assert calls == [784 * 500 + 500 + 5000 + 10], calls
        assert ddp._buckets == []  # DDP's own buckets were released
        calls.clear()
        opt.zero_grad()
        with ddp.no_sync():
            nn.functional.cross_entropy(ddp(x), y).backward()
        assert calls == [], calls
    finally:
        restore()


@check
def ddp_no_sync_accumulates_then_reduces_all():
    ddp = DDP(mlp(7))
    ref = copy.deepcopy(ddp.module)
    (x, y), = batches(1)
    nn.functional.cross_entropy(ref(x), y).backward()
    q = len(x) // 4  # this rank's two quarters: [2r q, (2r+1) q) and [(2r+1) q, (2r+2) q)
    a, b = slice(2 * rank() * q, (2 * rank() + 1) * q), slice((2 * rank() + 1) * q,
                                                            (2 * rank() + 2) * q)
    with ddp.no_sync():
        (nn.functional.cross_entropy(ddp(x[a]), y[a]) * 0.5).backward()
    local = [p._grad.copy() for p in ddp.parameters()]
    other = gather(local)[1 - rank()]
    assert not all(np.array_equal(u, v) for u, v in zip(local, other))  # not reduced
    (nn.functional.cross_entropy(ddp(x[b]), y[b]) * 0.5).backward()
    got = [p._grad for p in ddp.parameters()]
    assert max_diff(got, [p._grad for p in ref.parameters()]) < 1e-6


@check
def ddp_broadcasts_buffers_at_construction_and_forward():
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=0.0))  # stats stay put
    bn = net[1]
    bn.running_mean[...] = rank() + 1.0
    ddp = DDP(net)
    assert (bn.running_mean == 1.0).all(), bn.running_mean  # rank 0's, everywhere
    bn.running_var[...] = rank() + 5.0
    ddp(np.ones((4, 4), np.float32) * (rank() + 1)).sum().backward()  # train-mode forward
    assert (bn.running_var == 5.0).all(), bn.running_var
    ddp.eval()
    bn.running_var[...] = rank() + 7.0
    with to.no_grad():
        ddp(np.ones((2, 4), np.float32))  # eval: no broadcast
    assert (bn.running_var == rank() + 7.0).all()


@check
def ddp_reduces_after_a_backward_through_hooks():
    """A tensor hook sends backward down autograd's explicit path: gradients still averaged."""
    ddp = DDP(mlp(3))
    seen = []
    x = np.full((2, 20), rank() + 1.0, np.float32)
    out = ddp(x)
    out.register_hook(lambda g: seen.append(g.shape))
    out.sum().backward()
    g = [p._grad.copy() for p in ddp.parameters()]
    assert seen == [(2, 5)] and all(np.array_equal(a, b) for a, b in zip(g, gather(g)[0]))


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(6, 3)

    def forward(self, x, use_b=True):
        out = self.a(x)
        return out + self.b(x) if use_b else out


@check
def ddp_unused_parameters():
    to.manual_seed(1)
    ddp = DDP(TwoHeads())
    x = np.ones((2, 6), np.float32)
    try:  # unused on every rank: both raise before any collective
        ddp(x, use_b=False).sum().backward()
    except RuntimeError as e:
        assert "['b.weight', 'b.bias'] received no gradient" in str(e), e
        assert "find_unused_parameters=True" in str(e)
    else:
        raise AssertionError("no RuntimeError for unused parameters")
    ddp = DDP(TwoHeads(), find_unused_parameters=True)
    ref = copy.deepcopy(ddp.module)
    opt = optim.SGD(ddp.parameters(), lr=0.1)
    opt.zero_grad()
    ddp(x * (rank() + 1), use_b=rank() == 0).sum().backward()  # b used on rank 0 only
    (ref(x).sum() + ref(2 * x, use_b=False).sum()).backward()
    for p, q in zip(ddp.parameters(), ref.parameters()):
        assert p._grad is not None and np.allclose(p._grad, q._grad / 2, atol=1e-6)
    opt.zero_grad()
    ddp(x, use_b=False).sum().backward()  # b unused everywhere: stays None
    assert ddp.module.b.weight._grad is None and ddp.module.a.weight._grad is not None


@check
def ddp_state_dict_and_checkpoint_resume():
    ddp = DDP(mlp(3))
    assert list(ddp.state_dict()) == ["module.0.weight", "module.0.bias", "module.2.weight",
                                      "module.2.bias"]
    assert ddp.module is not None and isinstance(ddp.module, nn.Sequential)
    opt = optim.Adam(ddp.parameters(), lr=1e-2)
    data = batches(6, seed=5)

    for x, y in data[:3]:
        train_step(ddp, opt, half(x), half(y))
    path = shared_path("ddp")
    if rank() == 0:
        to.save(path, model=ddp, optimizer=opt)
    dist.barrier()
    for x, y in data[3:]:
        train_step(ddp, opt, half(x), half(y))
    final = params(ddp)
    ddp2 = DDP(mlp(50 + rank()))
    opt2 = optim.Adam(ddp2.parameters(), lr=1e-2)
    to.load_into(path, model=ddp2, optimizer=opt2)
    for x, y in data[3:]:
        train_step(ddp2, opt2, half(x), half(y))
    assert all(np.array_equal(a, b) for a, b in zip(params(ddp2), final))  # bit for bit
    dist.barrier()
    if rank() == 0:
        os.remove(path)


# ---- ZeRO-1 ------------------------------------------------------------------------------------
def zero_pair(steps: int = 12):
    """DDP + ZeRO(Adam) on halves vs single-process Adam on whole batches, two param groups;
    the flat buffers (16*20+16 = 336 and 16*5+5 = 85 elements) are cut inside parameters."""
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    ddp = DDP(mlp(200 + rank()))
    ref = copy.deepcopy(ddp.module)
    groups = lambda m: [{"params": list(m[0].parameters())},  # noqa: E731
                        {"params": list(m[2].parameters()), "lr": 3e-3}]
    zero = ZeroRedundancyOptimizer(groups(ddp.module), optimizer_class=optim.Adam, lr=1e-2)
    plain = optim.Adam(groups(ref), lr=1e-2)
    data = batches(steps, seed=9)
    for x, y in data:
        train_step(ref, plain, x, y)
        train_step(ddp, zero, half(x), half(y))
    return ddp, ref, zero, plain


def state_bytes(opt) -> int:
    return sum(v.nbytes for st in opt.state.values() for k, v in st.items() if k != "step")


def on_own_arrays(model: nn.Module) -> list[np.ndarray]:
    """Make ``model``'s parameters Parameters over arrays of the user's own (``from_numpy``: not
    end to end); return the arrays."""
    arrays = [p.detach().numpy().copy() for p in model.parameters()]
    for (name, _), a in zip(list(model.named_parameters()), arrays):
        mod, attr = name.rsplit(".", 1)
        setattr(model.get_submodule(mod), attr, nn.Parameter(to.from_numpy(a)))
    return arrays


@check
def zero_and_ddp_step_the_users_own_arrays():
    """ZeRO reads parameters that do not lie end to end into its flat buffer and writes them
    back; DDP averages a gradient assigned by hand in the user's own tensor."""
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    model = mlp(300)
    arrays = on_own_arrays(model)
    ref = copy.deepcopy(model)
    ddp = DDP(model)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optim.Adam, lr=1e-2)
    plain = optim.Adam(ref.parameters(), lr=1e-2)
    for x, y in batches(6, seed=11):
        train_step(ref, plain, x, y)
        train_step(ddp, zero, half(x), half(y))
    assert all(p._data is a for p, a in zip(model.parameters(), arrays))
    assert max_diff(arrays, params(ref)) < 1e-5, max_diff(arrays, params(ref))
    assert_ranks_identical(ddp)
    other = mlp(301)
    on_own_arrays(other)
    ddp = DDP(other)  # (no optimizer: its own buckets)
    p = next(iter(ddp.parameters()))
    mine = to.from_numpy(np.full(p.shape, float(rank() + 1), np.float32))
    p.grad = mine  # the user's tensor: the backward adds into it, then DDP averages it there
    (x, y), = batches(1, seed=12)
    nn.functional.cross_entropy(ddp(half(x)), to.from_numpy(half(y))).backward()
    assert p.grad is mine
    every = gather(mine.numpy().copy())
    assert np.array_equal(every[0], every[-1]) and every[0].any()


@check
def zero_adam_matches_single_process_with_half_the_state():
    ddp, ref, zero, plain = zero_pair()
    assert max_diff(params(ddp), params(ref)) < 1e-5, max_diff(params(ddp), params(ref))
    assert_ranks_identical(ddp)
    mine, full = state_bytes(zero.optim), state_bytes(plain)
    assert mine == 2 * 4 * (168 + 43 - rank()), mine  # exp_avg and exp_avg_sq of the shards
    assert abs(mine / full - 0.5) < 0.01, (mine, full)
    try:
        zero.state_dict()
    except RuntimeError as e:
        assert "consolidate_state_dict" in str(e)
    else:
        raise AssertionError("state_dict before consolidate_state_dict did not raise")

    class Whole(optim.Adam):  # a subclass might read whole parameters: not assumed elementwise
        pass
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    for cls in (Whole, object):
        try:
            ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls)
        except TypeError as e:
            assert "elementwise" in str(e), e
        else:
            raise AssertionError(f"{cls} accepted")
    # cautious=True rescales each update by a count over the whole parameter: refused, whether
    # asked for at construction, in an added group, or set on a group later
    for make in (lambda: ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optim.AdamW,
                                                 cautious=True),
                 lambda: ZeroRedundancyOptimizer([{"params": list(ddp.parameters()),
                                                   "cautious": True}],
                                                 optimizer_class=optim.SGD, lr=0.1)):
        try:
            make()
        except ValueError as e:
            assert "cautious=True is not supported" in str(e), e
        else:
            raise AssertionError("a cautious ZeroRedundancyOptimizer was accepted")
    zero.param_groups[0]["cautious"] = True
    try:
        zero.step()
    except ValueError as e:
        assert "cautious=True is not supported" in str(e), e
    else:
        raise AssertionError("a group made cautious after construction stepped")
    del zero.param_groups[0]["cautious"]


@check
def zero_consolidation_round_trips():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    ddp, ref, zero, plain = zero_pair(steps=4)
    zero.consolidate_state_dict(to=0)
    sd = [zero.state_dict() if rank() == 0 else None]
    dist.broadcast_object_list(sd, src=0)
    sd = sd[0]
    want = plain.state_dict()
    assert sd["param_groups"] == want["param_groups"], (sd["param_groups"], want["param_groups"])
    assert sd["state"].keys() == want["state"].keys()
    for i, st in want["state"].items():
        assert st.keys() == sd["state"][i].keys()
        for k, v in st.items():
            assert v.shape == sd["state"][i][k].shape and np.allclose(v, sd["state"][i][k],
                                                                       atol=1e-5), (i, k)
    other = optim.Adam([{"params": list(ref[0].parameters())},
                        {"params": list(ref[2].parameters())}], lr=1.0)
    other.load_state_dict(sd)  # ZeRO's consolidated state loads into the plain optimizer
    # ... and the plain optimizer's state loads into ZeRO: the shards of it, exactly
    fresh = DDP(mlp(5))
    zero2 = ZeroRedundancyOptimizer([{"params": list(fresh.module[0].parameters())},
                                     {"params": list(fresh.module[2].parameters())}],
                                    optimizer_class=optim.Adam, lr=0.5)
    zero2.load_state_dict(want)
    zero2.consolidate_state_dict(to=1)
    if rank() == 1:
        back = zero2.state_dict()
        assert back["param_groups"] == want["param_groups"]
        for i, st in want["state"].items():
            for k, v in st.items():
                assert np.array_equal(v, back["state"][i][k]), (i, k)
    assert zero2.optim.param_groups[1]["lr"] == 3e-3


@check
def zero_shards_8bit_state_at_block_boundaries_bit_for_bit():
    """ZeRO(AdamW8bit): group 0's 12000-element buffer is cut at 6024 (the block boundary
    nearest its middle, inside the 7000-element matrix: rank 0's piece of it, 1024 elements,
    is below min_8bit_size and still quantized); parameters, consolidated state and a plain
    state dict loaded into ZeRO step bit for bit as the plain 8-bit optimizer."""
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    shapes = [(5000,), (70, 100), (300,), (4096,)]
    rng = np.random.default_rng(4)
    x = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(6)]

    def make(cls, xs):
        ps = [nn.Parameter(a.copy()) for a in xs]
        groups = [{"params": ps[:2]}, {"params": ps[2:], "lr": 3e-3}]
        if cls is optim.AdamW8bit:
            return ps, cls(groups, lr=1e-2)
        return ps, ZeroRedundancyOptimizer(groups, optimizer_class=optim.AdamW8bit, lr=1e-2)

    def run(ps, opt, gs):
        for g in gs:
            for p, gi in zip(ps, g):
                p.grad = gi.copy()  # the same on both ranks: their average is exact
            opt.step()

    ps, zero = make(None, x)
    qs, plain = make(optim.AdamW8bit, x)
    assert [sh.starts for g in zero._shards for sh in g] == [[0, 6024], [0, 2092]]
    run(ps, zero, grads[:3])
    run(qs, plain, grads[:3])
    assert all(np.array_equal(p._data, q._data) for p, q in zip(ps, qs))
    pieces = [st["state1"].numpy().dtype for st in zero.optim.state.values()]
    assert pieces == ([np.uint8, np.uint8, np.float32, np.uint8] if rank() == 0
                      else [np.uint8, np.uint8]), pieces
    zero.consolidate_state_dict(to=0)
    sd = [zero.state_dict() if rank() == 0 else None]
    dist.broadcast_object_list(sd, src=0)
    want = plain.state_dict()
    assert sd[0]["param_groups"] == want["param_groups"]
    for i, st in want["state"].items():
        assert st.keys() == sd[0]["state"][i].keys(), (i, st.keys())
        for k, v in st.items():
            assert np.array_equal(np.asarray(v), np.asarray(sd[0]["state"][i][k])), (i, k)
    # the plain optimizer's state loads into a fresh ZeRO (cut into shards) and continues
    # exactly; a wrong absmax is refused on every rank and changes nothing
    rs, zero2 = make(None, [q._data for q in qs])
    bad = copy.deepcopy(want)
    bad["state"][1]["absmax1"] = np.ones(3, np.float32)
    raises_on_every_rank(lambda: zero2.load_state_dict(bad), ValueError, "one per block")
    zero2.load_state_dict(want)
    run(rs, zero2, grads[3:])
    run(qs, plain, grads[3:])
    assert all(np.array_equal(r._data, q._data) for r, q in zip(rs, qs))
    raises_on_every_rank(lambda: ZeroRedundancyOptimizer(  # checked by the 8-bit class itself
        [nn.Parameter(np.zeros(3))], optimizer_class=optim.Lion8bit), TypeError, "float64")


class Rejecting:
    """A checkpoint entry whose loading fails."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        raise ValueError("this entry is rejected")


def shard_arrays(opt) -> list[np.ndarray]:
    """This rank's optimizer state (a ZeroRedundancyOptimizer's shard), copied."""
    state = opt.optim.state_dict()["state"]
    return [np.array(np.asarray(v.numpy() if hasattr(v, "numpy") else v), copy=True)
            for i in sorted(state) for _, v in sorted(state[i].items())]


@check
def zero_checkpoint_resumes_bit_for_bit_and_ddp_leaves_its_gradients():
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    data = batches(6, seed=13)
    path = shared_path("zero")

    def setup(seed):
        ddp = DDP(mlp(seed))
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optim.AdamW,
                                            lr=1e-2, weight_decay=0.1)

    ddp, opt = setup(1)
    pg = dist.group.WORLD
    calls, restore = count_allreduces(pg)
    try:
        train_step(ddp, opt, half(data[0][0]), half(data[0][1]))
    finally:
        restore()
    assert calls == [len(list(ddp.parameters()))], calls  # only ZeRO's has-gradient flags
    for x, y in data[1:3]:
        train_step(ddp, opt, half(x), half(y))
    opt.consolidate_state_dict()
    if rank() == 0:
        to.save(path, model=ddp, optimizer=opt, last=Rejecting())
    dist.barrier()
    for x, y in data[3:]:
        train_step(ddp, opt, half(x), half(y))
    final = params(ddp)
    ddp2, opt2 = setup(2 + rank())
    # a load that fails after the sharded optimizer took its shard puts every object back
    train_step(ddp2, opt2, half(data[0][0]), half(data[0][1]))
    before, shard = params(ddp2), shard_arrays(opt2)
    raises_on_every_rank(lambda: to.load_into(path, model=ddp2, optimizer=opt2, last=Rejecting()),
                         ValueError, "rejected")
    after = shard_arrays(opt2)
    assert max_diff(params(ddp2), before) == 0
    assert len(after) == len(shard) > 0 and max_diff(after, shard) == 0
    to.load_into(path, model=ddp2, optimizer=opt2)
    for x, y in data[3:]:
        train_step(ddp2, opt2, half(x), half(y))
    assert all(np.array_equal(a, b) for a, b in zip(params(ddp2), final))
    assert_ranks_identical(ddp2)
    dist.barrier()
    if rank() == 0:
        os.remove(path)


# ---- fit ----------------------------------------------------------------------------------------
def fit_data(n: int = 40):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, 20)).astype(np.float32)
    return x, (x[:, :5].argmax(1)).astype(np.int64)


@check
def fit_under_ddp_matches_single_process_and_reduces_metrics():
    import io
    data = fit_data()
    ddp = DDP(mlp(20 + rank()))
    ref = copy.deepcopy(ddp.module)
    stream = io.StringIO()
    # 32 training samples: ranks take 0,2,4.. and 1,3,5..; 2 per batch, 4 per optimizer step on
    # each rank, so each step averages the gradient of 8 consecutive samples, as batch 8 does
    hist = to.fit(ddp, data, nn.CrossEntropyLoss(), optim.SGD(ddp.parameters(), lr=0.1,
                                                              momentum=0.9),
                  epochs=2, batch_size=2, logical_batch_size=4, val_split=0.2, shuffle=False,
                  progress=stream)
    single = to.fit(ref, data, nn.CrossEntropyLoss(), optim.SGD(ref.parameters(), lr=0.1,
                                                                momentum=0.9),
                    epochs=2, batch_size=8, val_split=0.2, shuffle=False, progress=False)
    assert max_diff(params(ddp), params(ref)) < 1e-5, max_diff(params(ddp), params(ref))
    assert_ranks_identical(ddp)
    last, want = hist[-1], single[-1]
    assert (last.train.n, last.val.n, last.train.batches) == (32, 8, 16), last
    assert abs(last.train.loss - want.train.loss) < 1e-5 and last.train.accuracy == \
        want.train.accuracy
    assert abs(last.val.loss - want.val.loss) < 1e-5 and last.val.accuracy == want.val.accuracy
    assert gather(hist.as_dict()["epochs"][-1]["train"]["loss"])[0] == last.train.loss
    assert (stream.getvalue() != "") == (rank() == 0), stream.getvalue()  # rank 0 reports


@check
def fit_under_ddp_checkpoint_resumes_bit_for_bit():
    """With ZeRO: fit consolidates its state on rank 0 before saving."""
    from tinyopt.distributed.optim import ZeroRedundancyOptimizer
    data = fit_data(60)
    path = shared_path("fit-ddp")
    if rank() == 0 and os.path.exists(path):
        os.remove(path)
    dist.barrier()

    def run(epochs, resume=None):
        to.manual_seed(7 + rank())  # different global generators per rank: dropout differs
        net = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 5))
        ddp = DDP(net)
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optim.Adam, lr=1e-2)
        sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        h = to.fit(ddp, data, nn.CrossEntropyLoss(), opt, epochs=epochs, batch_size=6,
                   val_split=0.2, scheduler=sched, seed=None, progress=False,
                   checkpoint=path, resume=resume)
        return ddp, h
    full, h_full = run(3)
    assert os.path.exists(path)
    run(2)
    resumed, h_res = run(3, resume=path)
    assert all(np.array_equal(a, b) for a, b in zip(params(resumed), params(full)))
    assert [r.train.loss for r in h_res] == [r.train.loss for r in h_full]
    dist.barrier()
    if rank() == 0:
        os.remove(path)


@check
def fit_under_ddp_refuses_a_checkpoint_written_without_it():
    data = fit_data()
    path = os.path.join(tempfile.gettempdir(), f"tinyopt-plain-fit-{os.getpid()}.tinyopt")
    plain = mlp(3)
    to.fit(plain, data, nn.CrossEntropyLoss(), optim.SGD(plain.parameters(), lr=0.1),
           epochs=1, batch_size=8, seed=0, progress=False, checkpoint=path)  # on each rank
    ddp = DDP(mlp(4))
    opt = optim.SGD(ddp.parameters(), lr=0.1)
    before = params(ddp)
    raises_on_every_rank(lambda: to.fit(ddp, data, nn.CrossEntropyLoss(), opt, epochs=2,
                                        batch_size=4, seed=0, progress=False, resume=path),
                         ValueError, "holds no generator states of ranks")
    assert max_diff(params(ddp), before) == 0  # nothing was restored
    os.remove(path)


@check
def example_mnist_ddp_runs():
    import mnist_ddp
    history = mnist_ddp.main(["--epochs", "2", "--limit", "2000", "--batch-size", "100",
                              "--zero"])
    losses = [loss for loss, _ in history]
    assert losses[1] < losses[0] and gather(losses)[0] == losses, losses
    if rank() == 0:
        assert history[-1][1] > 0.6, history  # test accuracy after 2 short epochs


def main() -> None:
    dist.init_process_group("mpi")
    failures = {}
    for fn in CHECKS:
        try:
            fn()
            failures[fn.__name__] = None
        except Exception:
            failures[fn.__name__] = f"rank {rank()}: {traceback.format_exc()}"
            if os.environ.get("TINYOPT_MPI_CHECKS_VERBOSE"):
                print(failures[fn.__name__], file=sys.stderr, flush=True)
    every = gather(failures)
    if rank() == 0:
        merged = {name: next((f[name] for f in every if f[name]), None) for name in failures}
        print("RESULTS " + json.dumps(merged), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
