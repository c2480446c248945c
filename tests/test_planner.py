"""The memory planner: live buffers never overlap, buffers are reused, peak well below the sum."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt.engine.tensor import LEAF_OPS
from tinyopt.engine.ops import cross_entropy, linear, relu
from tinyopt.engine.plan import Plan
from tinyopt.engine.planner import ALIGN, plan_memory
from tinyopt.engine.graph import toposort


def _check_no_overlap(mp, n_nodes):
    blocks = list(mp.blocks.items())
    for i, (ra, a) in enumerate(blocks):
        assert a.offset % ALIGN == 0
        assert a.offset + a.nbytes <= mp.arena_bytes
        for rb, b in blocks[i + 1:]:
            live_together = not (a.last < b.first or b.last < a.first)
            if live_together and a.nbytes and b.nbytes:
                disjoint = a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
                assert disjoint, (ra, a, rb, b)


@st.composite
def random_graphs(draw):
    n = draw(st.integers(2, 40))
    srcs, kind, nbytes, inplace = [], [], [], []
    for i in range(n):
        if i < 2 or draw(st.integers(0, 9)) == 0:
            srcs.append(())
            kind.append("leaf")
        else:
            kind.append(draw(st.sampled_from(["compute", "compute", "compute", "view"])))
            k = 1 if kind[-1] == "view" else draw(st.integers(1, min(3, i)))  # views alias src 0
            srcs.append(tuple(draw(st.lists(st.integers(0, i - 1), min_size=k, max_size=k))))
        nbytes.append(draw(st.sampled_from([0, 4, 64, 100, 256, 1000])))
        inplace.append(draw(st.booleans()))
    keep = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    return srcs, nbytes, kind, inplace, keep


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_live_buffers_never_overlap(g):
    srcs, nbytes, kind, inplace, keep = g
    # A view takes its source's size; in-place reuse requires equal sizes, which the planner checks.
    for i, k in enumerate(kind):
        if k == "view":
            nbytes[i] = nbytes[srcs[i][0]]
    mp = plan_memory(srcs, nbytes, kind, inplace, keep)
    _check_no_overlap(mp, len(srcs))
    # Every computed node's value lives from its own step until its last reader has run.
    for i, k in enumerate(kind):
        r = mp.root[i]
        if k == "compute":
            assert r is not None
            blk = mp.blocks[r]
            assert blk.first <= i
            readers = [j for j, ss in enumerate(srcs) if i in ss]
            # Readers through views count too: follow view chains.
            stack = list(readers)
            while stack:
                j = stack.pop()
                assert blk.last >= j, (i, j, blk)
                if kind[j] == "view":
                    stack.extend(m for m, ss in enumerate(srcs) if j in ss)
            if i in keep:
                assert blk.last == len(srcs)


def _mlp_plan(batch):
    rng = np.random.default_rng(0)
    w1 = to.Parameter(rng.standard_normal((500, 784)).astype(np.float32))
    b1 = to.Parameter(np.zeros(500, np.float32))
    w2 = to.Parameter(rng.standard_normal((10, 500)).astype(np.float32))
    b2 = to.Parameter(np.zeros(10, np.float32))
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), rng.integers(0, 10, batch))
    return to.engine.get_plan(loss=loss)


def test_mlp_training_step_peak_is_well_below_sum_of_nodes():
    plan = _mlp_plan(256)
    total = sum(t.numel() * t.dtype.itemsize for t in plan.nodes if t.op not in LEAF_OPS)
    assert plan.peak_bytes < 0.6 * total
    _check_no_overlap(plan.memory, len(plan.nodes))


def test_inplace_reuse_and_views_share_storage():
    x = to.Parameter(np.ones((4, 4), np.float32), requires_grad=False)  # a graph, not values
    y = ((x * 2.0).exp().reshape(16) + 1.0).sqrt()  # exp, add and sqrt can all reuse mul's buffer
    plan = Plan(toposort([y]), [y], None)
    roots = {plan.memory.root[i] for i, t in enumerate(plan.nodes) if t.op not in LEAF_OPS}
    assert len(roots) == 1
    np.testing.assert_allclose(y.numpy(), np.sqrt(np.exp(np.full(16, 2.0)) + 1), rtol=1e-6)


def test_no_inplace_write_over_a_transposed_view():
    a = np.arange(12.0).reshape(3, 4)
    x = to.Parameter(a, requires_grad=False)
    y = ((x * 2.0).T + 1.0).exp()  # add reads a transpose of mul's buffer: it needs its own block
    plan = Plan(toposort([y]), [y], None)
    add = next(i for i, t in enumerate(plan.nodes) if t.op == "add")
    mul = next(i for i, t in enumerate(plan.nodes) if t.op == "mul")
    assert plan.memory.root[add] != plan.memory.root[mul]
    np.testing.assert_allclose(y.numpy(), np.exp((a * 2.0).T + 1.0))


def test_a_cached_plan_keeps_no_model_or_batch_alive():
    import gc
    import weakref

    from tinyopt import nn

    def train_once():
        model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                              nn.Linear(2 * 4 * 4, 3))
        opt = to.optim.Adam(model.parameters())
        x = np.random.default_rng(0).random((2, 1, 6, 6), dtype=np.float32)
        for _ in range(2):
            opt.zero_grad()
            loss = cross_entropy(model(x), np.array([0, 2]))
            loss.backward()
            opt.step()
        return [weakref.ref(p) for p in model.parameters()] + [weakref.ref(x)]

    to.engine.cache_clear()
    refs = train_once()
    gc.collect()
    assert to.engine.cache_info().currsize >= 1
    assert all(r() is None for r in refs)
    train_once()  # the same structure replays the cached plan
    assert to.engine.cache_info().hits >= 2
