"""engine/eager.py: a graph structure runs node by node until it repeats, then as a compiled plan
-- and the two give the same bits.  Over the op table: every op's forward and backward, eager
against planned, bit for bit (the cases together must reach every registered op); the hot
threshold; hooks, retain_graph, autograd.grad, no_grad writes, held values, the step inside the
backward, low precision and errors on the eager path."""

from __future__ import annotations


import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import cache_clear, cache_info
from tinyopt.engine import realize as realize_module
from tinyopt.engine.op import OPS
from tinyopt.engine.plan_cache import CACHE

F = to.nn.functional
rng = np.random.default_rng(0)


def _r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def _ints(hi, *shape):
    """Random indices, the same in every run of a case (``_run`` reseeds)."""
    return to.tensor(_INDEX_RNG[0].integers(0, hi, shape))


_INDEX_RNG = [np.random.default_rng(2)]


# ---- the op table -------------------------------------------------------------------------------
# name -> (function of Parameters returning a tensor or a tuple of tensors, the Parameters' values)
X, Y, M = _r(3, 4), _r(3, 4), _r(4, 5)
POS = _r(3, 4, lo=0.2, hi=2.0)
IMG, W3 = _r(2, 3, 6, 6), _r(4, 3, 3, 3) * 0.3
SEQ = _r(5, 2, 3)
IDX = _ints(3, 4)
CASES = {
    "unary": (lambda x: tuple(f(x) for f in (
        to.abs, to.atan, to.ceil, to.cos, to.cosh, to.erf, to.exp, to.expm1, to.floor, to.neg,
        to.round, to.sign, to.sin, to.sinh, to.square, to.tan, to.tanh, to.trunc, to.sigmoid,
        to.relu, F.silu, F.softplus, F.elu, F.leaky_relu, F.hardtanh, F.mish, F.logsigmoid,
        F.gelu, lambda v: F.gelu(v, approximate="tanh"), lambda v: to.clamp(v, -0.5, 0.4),
        lambda v: to.clamp_min(v, 0.1), lambda v: to.nan_to_num(v / 0.0),
        lambda v: to.asin(v * 0.9), lambda v: to.acos(v * 0.9), to.reciprocal)), (X,)),
    "positive": (lambda x: tuple(f(x) for f in (to.log, to.log10, to.log1p, to.log2, to.sqrt,
                                                to.rsqrt)), (POS,)),
    "binary": (lambda x, y: (x + y, x - y, x * y, x / y, to.div(x, y, rounding_mode="trunc"),
                             [to.floor_divide(x, y)], to.fmod(x, y), to.remainder(x, y),
                             to.maximum(x, y), to.minimum(x, y), to.lerp(x, y, 0.3),
                             to.lerp(x, y, to.sigmoid(y)), to.where(x > y, x, y),
                             to.pow(x.abs() + 0.5, y), x ** 2, 2.0 ** y,
                             to.xlogy(x.abs(), y.abs() + 1), to.hypot(x, y),
                             to.logaddexp(x, y)), (X, Y)),
    "compare": (lambda x, y: (to.eq(x, y), to.ne(x, y), x < y, x <= y, x > y, x >= y,
                              to.logical_and(x > 0, y > 0), to.logical_or(x > 0, y > 0),
                              to.logical_xor(x > 0, y > 0), to.logical_not(x > 0),
                              to.isfinite(x / 0.0), to.isinf(x / 0.0), to.isnan(x / 0.0),
                              to.isneginf(x / 0.0), to.isposinf(x / 0.0), (x > 0).all(),
                              (x > 0).any(), to.argsort(x, 1), x.argmax(1), x.argmin(0)),
                (X, Y)),
    "integer": (lambda x, y: _integer((x * 10).long(), (y * 10).long() | 1), (X, Y)),
    "reduce": (lambda x: (x.sum(), x.sum(1), x.mean(0), x.max(), x.min(), x.max(1)[0],
                          x.min(0)[0], x.prod(1), x.cumsum(1), x.cumprod(0), to.logsumexp(x, 1),
                          F.softmax(x, 1), F.log_softmax(x, 0), x.norm(), to.linalg.vector_norm(
                              x, 3, dim=1), x.var(1), x.std(), to.amax(x, 0)), (X,)),
    "movement": (lambda x: (x.reshape(4, 3), x.permute(1, 0), x[:, None].expand(3, 2, 4),
                            x[1:, ::2], x.flip(0), x.roll(1, 1), to.cat([x, x * 2], 0),
                            to.stack([x, x], 1), x.tril(), x.triu(1), x.t().contiguous(),
                            x.clone(), x.unsqueeze(0).squeeze(0), x.transpose(0, 1)[1],
                            x.to(to.float32), to.diagonal(x)), (X,)),
    "indexing": (lambda x: (x[IDX[:3], IDX[1:]], x.gather(1, _ints(4, 3, 2)),
                            x.scatter(1, to.tensor([[0], [1], [2]]), 1.5),
                            x.scatter_add(0, _ints(3, 2, 4), x[:2]),
                            x.index_add(0, to.tensor([0, 2]), x[:2] * 3),
                            to.take_along_dim(x, _ints(4, 3, 4), 1), x[IDX],
                            x.masked_fill(x > 0.5, 0.0), x.index_select(1, to.tensor([3, 0])),
                            F.one_hot(IDX, 5)), (X,)),
    "setitem": (lambda x: _setitem(x), (X,)),
    "linalg": (lambda x, m: (x @ m, to.einsum("ij,jk->ik", x, m), F.linear(x, m.t(), m[0]),
                             F.relu(F.linear(x, m.t())), to.mm(x, m), to.outer(x[0], m[0]),
                             to.bmm(x[None], m[None]), to.addmm(m[0], x, m)), (X, M)),
    "conv": (lambda img, w: (F.conv2d(img, w, padding=1), F.relu(F.conv2d(img, w, w[:, 0, 0, 0])),
                             F.max_pool2d(F.relu(F.conv2d(img, w, padding=1)), 2),
                             F.conv2d(img, w, stride=2), F.conv_transpose2d(img, w.transpose(0, 1)),
                             F.conv1d(img[:, :, 0], w[:, :, 0]), F.avg_pool2d(img, 2),
                             F.max_pool2d(img, 3, 2), F.adaptive_avg_pool2d(img, (4, 5)),
                             [F.adaptive_avg_pool2d(img, (0, 2))],
                             F.interpolate(img, scale_factor=2, mode="bilinear"),
                             F.interpolate(img, size=(3, 4), mode="nearest"),
                             F.pad(img, (1, 2, 0, 1)),
                             F.pixel_shuffle(img[:, :1].expand(2, 4, 6, 6), 2)),
             (IMG, W3)),
    "wide conv": (lambda img, w: F.conv2d(img.repeat(1, 12, 1, 1), w.repeat(8, 12, 1, 1)),
                  (IMG, W3)),
    "norm": (lambda img, g: (F.batch_norm(img, None, None, g[0, :, 0, 0], g[1, :, 0, 0],
                                          training=True),
                             F.batch_norm(img, to.zeros(3), to.ones(3), training=True),
                             F.layer_norm(img, (6, 6)), F.group_norm(img, 3, g[0, :, 0, 0]),
                             F.instance_norm(img), F.normalize(img, dim=1),
                             F.layer_norm(img, (6,), g[0, 0, 0].expand(6), g[1, 0, 0].expand(6)),
                             F.batch_norm(img, to.zeros(3), to.ones(3), g[0, :, 0, 0]),
                             F.prelu(img, g[0, :, 0, 0])), (IMG, _r(2, 3, 1, 1) + 1)),
    "bn module": (lambda img: _bn(img), (IMG,)),
    "embedding": (lambda w, psw, ws, we: (F.embedding(_ints(6, 2, 3), w),
                                         F.embedding(_ints(6, 3), we),
                             F.embedding_bag(_ints(6, 7), w, to.tensor([0, 3]), mode="mean"),
                             F.embedding_bag(_ints(6, 7), w, to.tensor([0, 3]), mode="max"),
                             F.embedding_bag(_ints(6, 2, 3), w, mode="sum",
                                             per_sample_weights=psw),
                             F.embedding(_ints(6, 5), ws, sparse=True),
                             F.linear(F.embedding(_ints(6, 5), w, padding_idx=1), w)),  # tied
                  (_r(6, 4), _r(2, 3), _r(6, 4), _r(6, 4))),
    "attention": (lambda q, k: (F.scaled_dot_product_attention(q, k, k),
                                F.scaled_dot_product_attention(q, k, k, is_causal=True),
                                *_mha(q[0], k[0])), (_r(2, 3, 4, 8), _r(2, 3, 4, 8))),
    "big cross-entropy": (lambda x: F.cross_entropy(x, _ints(64, 1 << 14)),
                          (_r(1 << 14, 64).astype(np.float32),)),
    "losses": (lambda x, y: (F.cross_entropy(x, IDX[:3]),
                             F.cross_entropy(x, IDX[:3], reduction="none"),
                             F.nll_loss(F.log_softmax(x, 1), IDX[:3]),
                             F.nll_loss(x, IDX[:3], reduction="sum"),
                             F.binary_cross_entropy(to.sigmoid(x), to.sigmoid(y)),
                             F.binary_cross_entropy_with_logits(x, to.sigmoid(y)),
                             F.kl_div(F.log_softmax(x, 1), F.softmax(y, 1), reduction="batchmean"),
                             F.huber_loss(x, y), F.smooth_l1_loss(x, y), F.mse_loss(x, y),
                             F.l1_loss(x, y), F.pairwise_distance(x, y),
                             F.cosine_similarity(x, y),
                             F.margin_ranking_loss(x[0], y[0], to.ones(4))),
               (X, Y)),
    "rnn": (lambda x: _rnn(x), (SEQ,)),
    "hook": (lambda x: _hooked(x), (X,)),
    "float32": (lambda x, m: (to.tanh(x.float() @ m.float()).sum(1), F.softmax(x.float(), 1)),
                (X, M)),
    "low precision": (lambda x: (x.to(to.bfloat16) * 3, to.exp(x.half()), x.half().float() + x),
                      (X,)),
    "volume": (lambda v, w: (F.conv3d(v, w, padding=1), F.conv_transpose3d(v, w.transpose(0, 1)),
                             F.max_pool3d(v, 2), F.avg_pool3d(v, 2),
                             F.adaptive_avg_pool3d(v, (2, 3, 1))),
               (_r(1, 2, 4, 5, 4), _r(3, 2, 2, 2, 2) * 0.5)),
    "grid sample": (lambda img, theta: F.grid_sample(
        img, F.affine_grid(theta, [2, 3, 4, 5], align_corners=False), align_corners=False),
        (IMG, _r(2, 2, 3) * 0.5)),
    "solve": (lambda a, b: (to.linalg.inv(a), to.linalg.solve(a, b), to.atan2(a, a.t())),
              (_r(3, 3) * 0.2 + 2 * np.eye(3), _r(3, 2))),
    "view ops": (lambda x: _view_ops(x), (X,)),
    "sparse": (lambda v, d: _sparse(v, d), (_r(4), _r(3, 2))),
    "autograd.Function": (lambda x: _Cube.apply(x * 2) + 1, (X,)),
}


def _integer(i, j):
    """Integer ops over graph nodes (no derivative: a list)."""
    return [i & 3, i | 4, i ^ 5, ~i, to.div(i, j, rounding_mode="trunc"), F.one_hot(i.abs() % 4, 4)]


def _setitem(x):
    y = x * 1.0
    y[1] = x[0] * 2
    y[:, 2] += 1.0
    return y


def _bn(img):
    bn, inorm = to.nn.BatchNorm2d(3).double(), to.nn.InstanceNorm2d(3, track_running_stats=True)
    out = bn(img) + inorm(img)
    return out, [bn.running_mean, inorm.running_var]


def _rnn(x):
    to.manual_seed(3)
    lstm, gru = to.nn.LSTM(3, 4, bidirectional=True).double(), to.nn.GRU(3, 2).double()
    packed = to.nn.utils.rnn.pack_padded_sequence(x, [5, 3])
    return (lstm(x)[0], gru(x)[1], to.nn.RNN(3, 2).double()(x)[0],
            to.nn.utils.rnn.pad_packed_sequence(gru(packed)[0])[0])


def _mha(q, k):
    to.manual_seed(4)
    mha = to.nn.MultiheadAttention(8, 2).double()
    return mha(q, k, k, need_weights=True)


def _hooked(x):
    y = x * 2
    y.register_hook(lambda g: g * 3)
    return y.tanh()


def _view_ops(x):
    y = x * 1.0
    d = y.detach()  # an alias of y: regenerated from y's new node after the write below
    with to.no_grad():
        y[0, 1] = 5.0  # a write autograd does not see: an "alias" node carries the value
    return (x.as_strided((2, 2), (1, 2), 1), x.unfold(1, 2, 1), y * 2, [d + 0])


def _sparse(v, d):
    s = to.sparse_coo_tensor(to.tensor([[0, 1, 2, 2], [1, 0, 2, 1]]), v, (3, 3))
    return to.sparse.mm(s, d), s.to_dense() * 2


class _Cube(to.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2


NOT_REACHED = {"batch_norm_eval_stats": "its sources are always concrete: it runs when built",
               "rebased_multi_view": "a multi-output view rebased by a write raises torch's error "
                                     "when used (tests/test_inplace.py), so no graph runs it"}
"""Registered ops no graph holds, and why."""


def _bits(a) -> bytes:
    a = np.ascontiguousarray(np.asarray(a))
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()


def _run(case: str, compile_after: int, ops: set[str] | None = None) -> list[bytes]:
    """Every output value, the loss and every gradient of ``case`` (as bytes), with the plan
    cache compiling on the ``compile_after``-th sighting; the ops of its plans into ``ops``."""
    fn, values = CASES[case]
    cache_clear()
    CACHE.compile_after = compile_after
    # (every realization through the eager path or a plan: not one op over computed values,
    # ``realize._op_of_values``, which computes such a node as an eager run does)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(realize_module, "_op_of_values", lambda t: False)
    try:
        return _run_case(fn, values, ops)
    finally:
        monkeypatch.undo()


def _run_case(fn, values, ops: set[str] | None) -> list[bytes]:
    to.manual_seed(0)
    _INDEX_RNG[0] = np.random.default_rng(2)
    params = [to.nn.Parameter(to.tensor(v)) for v in values]
    out = fn(*params)
    outs, fixed = [], []  # (a list in a case's tuple: values without a derivative)
    for o in out if isinstance(out, tuple) else (out,):
        (fixed.extend(o) if isinstance(o, list) else outs.append(o))
    wrng = np.random.default_rng(1)
    terms = [(o.float() * to.tensor(wrng.uniform(0.5, 1.5, o.shape).astype(np.float32))).sum()
             for o in outs if o.requires_grad]
    outs += fixed
    got = []
    if terms:
        loss = terms[0]
        for t in terms[1:]:
            loss = loss + t
        loss.backward()
        got.append(_bits(loss.numpy()))
    got += [_bits(o.numpy()) for o in outs]
    got += [_bits(p.grad.numpy()) if p.grad is not None else b"none" for p in params]
    if ops is not None:
        for plan in CACHE._plans.values():
            ops.update(t.op for t in plan.nodes)
    return got


@pytest.fixture
def restore_threshold():
    before = CACHE.compile_after
    yield
    CACHE.compile_after = before
    cache_clear()


@pytest.mark.parametrize("case", list(CASES))
def test_eager_and_planned_give_the_same_bits(case, restore_threshold):
    eager = _run(case, 1 << 30)
    assert cache_info().misses == 0 and cache_info().eager >= 1  # no plan was compiled
    planned = _run(case, 1)
    assert cache_info().eager == 0
    assert len(eager) == len(planned)
    for k, (a, b) in enumerate(zip(eager, planned)):
        assert a == b, f"{case}: value {k} differs between the eager and the planned run"


def test_the_cases_reach_every_op(restore_threshold):
    seen: set[str] = set()
    for case in CASES:
        _run(case, 1, seen)
    missing = set(OPS) - seen - set(NOT_REACHED)
    assert not missing, f"ops no case of test_eager reaches: {sorted(missing)}"


# ---- the hot threshold and the plan cache -------------------------------------------------------
def _chain(w, n: int):
    h = w
    for k in range(n):
        h = to.tanh(h * (k + 1.0)) if k % 2 else h + 0.5
    return h.sum()


def test_a_structure_runs_eagerly_once_and_is_compiled_when_it_repeats(restore_threshold):
    CACHE.compile_after = 2
    cache_clear()
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    grads = []
    for _ in range(3):
        w.grad = None
        _chain(w, 6).backward()
        grads.append(w.grad.numpy().copy())
    info = cache_info()
    assert (info.eager, info.misses, info.hits) == (1, 1, 1)
    assert all(np.array_equal(g, grads[0]) for g in grads)


def test_one_off_structures_never_fill_the_cache_nor_warn(restore_threshold, caplog):
    import logging
    CACHE.compile_after = None  # (the default: adaptive)
    cache_clear()
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    with caplog.at_level(logging.INFO, logger="tinyopt"):
        for n in range(1, 201):  # 200 structures, each seen once
            _chain(w, n).backward()
    info = cache_info()
    assert info.eager == 200 and info.misses == 0 and info.currsize == 0 and info.nbytes == 0
    assert not caplog.records


def test_many_repeated_structures_fit_the_byte_bound_without_thrashing(restore_threshold, caplog):
    """100 structures, each hot: more than the count bound of 64 plans there was, and no
    warning, since only bytes bound the cache by default."""
    import logging
    CACHE.compile_after = 2
    cache_clear()
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    with caplog.at_level(logging.WARNING, logger="tinyopt"):
        for _ in range(3):
            for n in range(1, 101):
                _chain(w, n).backward()
    info = cache_info()
    assert info.maxsize is None and info.currsize == 100 and info.misses == 100
    assert info.hits == 100 and info.eager == 100 and not caplog.records
    # plans count their Python objects too: about NODE_BYTES a node
    from tinyopt.engine.plan import NODE_BYTES
    assert info.nbytes >= NODE_BYTES * sum(len(p.nodes) for p in CACHE._plans.values())


def test_the_thrashing_warning_names_the_bound_that_evicted(restore_threshold, caplog):
    import logging

    from tinyopt.engine import set_cache_limit
    CACHE.compile_after = 1
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    for bound, value in (("maxsize", 2), ("max_bytes", 1)):
        cache_clear()
        CACHE.maxsize, CACHE.max_bytes = None, 1 << 30
        set_cache_limit(**{bound: value})
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tinyopt"):
            for n in (1, 2, 3, 1, 2, 3):
                _chain(w, n).backward()
        assert len(caplog.records) == 1
        assert f"set_cache_limit({bound}=...)" in caplog.records[0].getMessage()
    CACHE.maxsize, CACHE.max_bytes = None, 1 << 30


def test_compile_after_comes_from_the_environment(monkeypatch):
    from tinyopt.engine.plan_cache import COMPILE_AFTER, PlanCache
    monkeypatch.delenv("TINYOPT_COMPILE_AFTER", raising=False)
    assert PlanCache().compile_after is COMPILE_AFTER is None  # adaptive
    monkeypatch.setenv("TINYOPT_COMPILE_AFTER", "5")
    assert PlanCache().compile_after == 5


def _adaptive(monkeypatch, seconds_per_node: float) -> None:
    """The default, adaptive threshold, with compiling estimated to cost ``seconds_per_node``
    whatever the compiles take."""
    from tinyopt.engine import plan_cache
    monkeypatch.setattr(plan_cache, "COMPILE_SECONDS_PER_NODE", seconds_per_node)
    monkeypatch.setattr(plan_cache, "PER_NODE_BOUNDS", (seconds_per_node, seconds_per_node))
    CACHE.compile_after = None
    cache_clear()


def test_a_training_loop_compiles_at_its_second_step_however_costly(restore_threshold,
                                                                      monkeypatch):
    _adaptive(monkeypatch, 10.0)  # 10 s a node: never worth it by cost alone
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    for _ in range(3):
        _chain(w, 6).backward()
        (w * 2.0).sum().item()  # (another structure in between: still a loop over a few)
    info = cache_info()
    assert (info.eager, info.misses, info.hits) == (2, 2, 2)


def test_structures_that_recur_rarely_compile_once_their_eager_runs_cost_a_compile(
        restore_threshold, monkeypatch):
    """An episode loop over many lengths: each structure recurs after more than RECUR_GAP
    others, so it stays eager while its eager runs cost less than compiling it would (ski
    rental), whatever the number of its sightings; and is compiled at its second sighting when
    compiling is cheap."""
    from tinyopt.engine.plan_cache import RECUR_GAP
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
    lengths = range(1, RECUR_GAP + 4)
    for per_node, want in ((10.0, (3 * len(lengths), 0, 0)),
                           (0.0, (len(lengths), len(lengths), len(lengths)))):
        _adaptive(monkeypatch, per_node)
        grads = []
        for _ in range(3):
            for n in lengths:
                w.grad = None
                _chain(w, n).backward()
                grads.append(w.grad.numpy().copy())
        info = cache_info()
        assert (info.eager, info.misses, info.hits) == want, per_node
        k = len(lengths)
        assert all(np.array_equal(a, b) for a, b in zip(grads[:k], grads[k:2 * k]))
        assert all(np.array_equal(a, b) for a, b in zip(grads[:k], grads[2 * k:]))


@pytest.mark.parametrize("replays, slow_first", [(1, False), (12, False), (12, True)])
def test_replays_that_save_little_make_rare_structures_wait_longer(restore_threshold,
                                                                   monkeypatch, replays,
                                                                   slow_first):
    """Ski rental counts what a plan would save, not what the eager runs cost: once replays of
    the plans the cost rule compiled are measured to take nearly an eager run's time (an
    episode's update replays the forward its steps realized already), a rarely recurring
    structure needs that many more eager runs before it is compiled -- from the first replay
    measured (an estimate that had to climb from "replays are free" kept compiling meanwhile).
    A structure compiled on one eager run (which may have loaded the kernels: 100 units here)
    gives no measure of what replays save.  Every run takes one unit of a fake clock here,
    replays too."""
    from tinyopt.engine import plan_cache, realize
    from tinyopt.engine.graph import toposort
    now, jumps = [0.0], []

    def clock():
        now[0] += 1.0 + (jumps.pop(0) if jumps else 0.0)
        return now[0]
    monkeypatch.setattr(realize, "perf_counter", clock)
    monkeypatch.setattr(plan_cache, "RECUR_GAP", -1)  # every structure recurs rarely
    w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))

    def loss(op):
        h = w
        for k in range(4):
            h = op(to.tanh(h * (k + 1.0)), 0.5)
        return h.sum()
    nodes = len(toposort([loss(to.add)]))
    assert len(toposort([loss(to.sub)])) == nodes
    _adaptive(monkeypatch, 3.0 / nodes)  # a compile estimated at three eager runs

    def sightings_to_compile(op):
        for n in range(1, 60):
            misses = cache_info().misses
            w.grad = None
            loss(op).backward()
            got = w.grad.numpy().copy()
            if n == 1:
                first = got
            np.testing.assert_array_equal(got, first)  # eager and planned: the same bits
            if cache_info().misses > misses:
                return n
        return None

    assert sightings_to_compile(to.add) == 3  # replays assumed free: break-even at three runs
    for _ in range(replays):  # replays measured as long as eager runs (counted at most 0.9)
        loss(to.add).backward()
    if slow_first:
        jumps[:] = [0.0, 99.0]  # its first run takes 100 units: compiled at the second
        assert sightings_to_compile(to.mul) == 2
        for _ in range(replays):  # 1 unit each: "replays save 99%" if counted
            loss(to.mul).backward()
    assert sightings_to_compile(to.sub) >= 20  # a tenth or so saved a run: ~30 runs


# ---- what works through plans works eagerly -----------------------------------------------------
@pytest.fixture
def eager_only():
    before = CACHE.compile_after
    CACHE.compile_after = 1 << 30
    cache_clear()
    yield
    CACHE.compile_after = before
    cache_clear()


def test_eager_hooks_retain_graph_grad_and_held_values(eager_only):
    x = to.nn.Parameter(to.tensor(np.array([0.5, -1.0, 2.0])))
    seen = []
    h = x * 3.0
    h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    h.retain_grad()
    y = to.tanh(h)
    loss = (y * y).sum()
    loss.backward(retain_graph=True)
    t = np.tanh(3 * x.numpy())
    dh = 2 * t * (1 - t * t)
    np.testing.assert_allclose(seen[0], dh)
    np.testing.assert_allclose(h.grad.numpy(), 2 * dh)  # (retained after the hooks, as torch)
    np.testing.assert_allclose(x.grad.numpy(), 3 * 2 * dh)
    np.testing.assert_allclose(y.numpy(), t)  # held: kept from the same run
    loss.backward()  # retain_graph: a second backward works, and accumulates
    np.testing.assert_allclose(x.grad.numpy(), 2 * 3 * 2 * dh)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    (g,) = to.autograd.grad((to.sin(x) * 2).sum(), x)
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(x.numpy()))
    assert cache_info().misses == 0 and cache_info().eager >= 3


def test_eager_outputs_own_their_values_and_no_grad_writes(eager_only):
    p = to.nn.Parameter(to.tensor(np.arange(6.0).reshape(2, 3)))
    v = p.reshape(3, 2)  # a view of a Parameter shares its memory, as torch's does
    got = v.numpy()
    with to.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(got, np.arange(1.0, 7.0).reshape(3, 2))
    out = (p * 1.0).numpy()  # an eager node's output owns its value
    with to.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(out, np.arange(1.0, 7.0).reshape(2, 3))
    h = p * 2.0
    with to.no_grad():
        h[0] = -1.0  # a write into a node under no_grad realizes it first
    np.testing.assert_array_equal(h.numpy(), [[-1, -1, -1], [10, 12, 14]])


def test_eager_batch_norm_updates_its_running_stats_once(eager_only):
    bn = to.nn.BatchNorm1d(3)
    x = to.nn.Parameter(to.tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3)))
    out = bn(x)
    out.sum().backward()
    out.numpy()
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * np.array([4.5, 5.5, 6.5]),
                               rtol=1e-6)
    assert int(bn.num_batches_tracked) == 1


def test_eager_step_inside_the_backward_falls_back_to_the_same_separate_step(eager_only):
    """``fuse_with_backward`` on a structure seen once: the backward runs eagerly and the
    optimizer steps after it, giving the bits of the fused step of a plan."""
    def train(compile_after):
        CACHE.compile_after = compile_after
        cache_clear()
        to.manual_seed(0)
        model = to.nn.Sequential(to.nn.Linear(1200, 1000), to.nn.ReLU(), to.nn.Linear(1000, 3))
        opt = to.optim.Adam(model.parameters(), lr=1e-3)
        x = to.tensor(np.linspace(-1, 1, 1200, dtype=np.float32)[None])
        for _ in range(2):
            opt.zero_grad()
            opt.fuse_with_backward(F.cross_entropy(model(x), to.tensor([1])))
        return [p.numpy().copy() for p in model.parameters()]
    eager, planned = train(1 << 30), train(1)
    assert all(np.array_equal(a, b) for a, b in zip(eager, planned))


def test_a_failing_eager_run_leaves_no_half_gradient(eager_only):
    x = to.nn.Parameter(to.tensor(np.array([1.0, 2.0])))
    y = x * 2.0
    y.register_hook(lambda g: (_ for _ in ()).throw(ValueError("hook failed")))
    with pytest.raises(ValueError, match="hook failed"):
        (y * y).sum().backward()
    assert x.grad is None


def test_an_eager_run_computes_no_node_only_realized_values_read(eager_only, monkeypatch):
    """An actor-critic's episode: each step's layer is realized by ``probs.item()`` (the relu
    and softmax the program holds keep their values) and the update backpropagates through all
    steps.  Its eager run takes those values and leaves out the linear layers under them (no
    node it computes reads them), computing one only when a backward rule reads it (here none
    does: relu's and softmax's rules read their outputs, linear's its input); the bits are a
    plan's."""
    from dataclasses import replace

    calls = []
    linear = OPS["linear"]

    def counted(t):
        calls.append(t)
        return linear.forward(t)
    monkeypatch.setitem(OPS, "linear", replace(linear, forward=counted))

    def episode():
        to.manual_seed(0)
        lin1, lin2 = to.nn.Linear(3, 8), to.nn.Linear(8, 2)
        lps = []
        for x in np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3):
            h = F.relu(lin1(to.tensor(x)))
            probs = F.softmax(lin2(h), dim=-1)
            a = int(probs[1].item() > 0.5)
            lps.append(to.log(probs[a]))
        del h, probs  # (as the next step of a loop would rebind them)
        calls.clear()
        (-to.stack(lps).sum()).backward()
        return calls[:], [_bits(p.grad.numpy()) for p in (*lin1.parameters(), *lin2.parameters())]
    computed, bits = episode()
    assert cache_info().eager >= 1 and not computed  # (main: each step's two layers again)
    CACHE.compile_after = 1
    cache_clear()
    assert episode()[1] == bits


def test_a_node_an_eager_run_left_out_is_computed_when_a_backward_rule_reads_it(eager_only):
    """``sin``'s rule reads its input, which the run left out (its one reader, the realized
    ``sin``, gave its value): computed then, from its sources, the bits a plan gives."""
    def grads():
        w = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 5)))
        out = []
        for _ in range(2):
            w.grad = None
            b = to.sin(w * 1.5 + 0.25)  # (the product is left out too: its one reader is the sum)
            b.sum().item()  # b is held: it keeps its value
            (b * 2.0).sum().backward()
            out.append(_bits(w.grad.numpy()))
        return out
    eager = grads()
    assert cache_info().misses == 0
    CACHE.compile_after = 1
    cache_clear()
    assert grads() == eager


def test_a_big_eager_graph_drops_each_array_after_its_last_reader(eager_only, monkeypatch):
    import tracemalloc

    from tinyopt.engine import eager
    p = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 1 << 20, dtype=np.float32)))

    def peak_and_bits():
        h = p
        for k in range(40):  # 40 arrays of 4 MiB
            h = to.tanh(h) if k % 2 else h * 1.5
        tracemalloc.start()
        try:
            bits = _bits(h.numpy())
            return tracemalloc.get_traced_memory()[1], bits
        finally:
            tracemalloc.stop()
    peak, bits = peak_and_bits()
    monkeypatch.setattr(eager, "BIG_BYTES", 1 << 62)  # keeping every array
    peak_all, bits_all = peak_and_bits()
    assert peak < 40 << 20 and peak_all > 150 << 20, (peak, peak_all)
    CACHE.compile_after = 1
    assert bits == bits_all == peak_and_bits()[1]  # and a plan's bits


def test_a_big_eager_run_gives_the_heap_back_and_a_small_one_does_not_pay_for_it(eager_only,
                                                                                   monkeypatch):
    """The arrays a big run freed stay on the C heap unless trimmed (engine/heap.py); a small
    run (the per-sample loops run eagerly at every step) is not trimmed."""
    from tinyopt.engine import eager, heap
    calls = []
    monkeypatch.setattr(eager, "trim_heap", lambda: calls.append(heap.trim_heap()))
    p = to.nn.Parameter(to.tensor(np.linspace(-1, 1, 1 << 20, dtype=np.float32)))
    to.tanh(p * 1.5).sum().backward()  # 4 MiB arrays: small
    assert calls == []
    h = p
    for k in range(8):  # 32 MiB of arrays: big
        h = to.tanh(h) if k % 2 else h * 1.5
    h.sum().backward()
    assert calls == [None]
