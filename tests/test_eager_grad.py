"""engine/eager_grad.py: an eager run's backward computed straight over arrays gives the bits of
the planned gradient (autodiff's graph, compiled), op by op and through broadcasting,
accumulation and views; an op that has no array rule, or whose rule declines, runs the nodes of
its graph rule at once, with the same bits.  (``tests/test_eager.py`` runs the whole op table
through this backward against plans.)"""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import cache_clear, eager, eager_grad
from tinyopt.engine import realize as realize_module
from tinyopt.engine.eager_grad import RULES
from tinyopt.engine.graph import toposort
from tinyopt.engine.plan_cache import CACHE
from tinyopt.kernels.grad_sum import add_outer, add_row_sum
from tinyopt.kernels.reduce import sum_axis

F = to.nn.functional
rng = np.random.default_rng(0)


def _r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


X, Y, B, ROW = _r(3, 4), _r(3, 4), _r(4), _r(1, 4)
W, W1, BIAS, X3 = _r(5, 4), _r(1, 4), _r(5), _r(2, 3, 4)
POS = _r(3, 4, lo=0.2, hi=2.0)
V = _r(7)
Z = _r(6, 5)
Z[:, ::2] = -0.0

# name -> (function of Parameters returning a tensor, the Parameters' values)
CASES = {
    "add": (lambda x, y, b: x + y + b + (x + 0.5), (X, Y, B)),
    "sub": (lambda x, y, r: (x - y) - r - (0.25 - x), (X, Y, ROW)),
    "mul": (lambda x, y, b: x * y * b * x * 3.0, (X, Y, B)),
    "neg": (lambda x: -(-x) * x, (X,)),
    # s's summed gradient handed on by ``add`` to x and y alike, then more added to each
    "handed_on": (lambda x, y: x * 3.0 + y * x + (lambda s: s * s + s + s)(x + y), (X, Y)),
    "exp_log": (lambda x, p: to.exp(x) * to.log(p), (X, POS)),
    "of_output": (lambda x: to.relu(x) + to.sigmoid(x) * to.tanh(x) + to.tan(x)
                  + to.expm1(x) + to.reciprocal(x + 3.0), (X,)),
    "rsqrt": (lambda p: to.rsqrt(p), (POS,)),
    "of_input": (lambda x: to.abs(x) + F.silu(x) + F.gelu(x) + F.gelu(x, approximate="tanh")
                 + F.leaky_relu(x, 0.2) + F.softplus(x) + to.clamp(x, -0.5, 0.4) + to.sin(x)
                 + to.cos(x) + to.sinh(x) + to.cosh(x) + to.asin(x * 0.9)
                 + to.acos(x * 0.9) + to.atan(x) + to.erf(x), (X,)),
    "logs": (lambda p: to.log1p(p) + to.log2(p) + to.log10(p), (POS,)),
    "sums": (lambda x: x.sum(0) * x.sum(1, keepdim=True).sum() + x.sum((0, 1)), (X,)),
    "views": (lambda x, v: x.reshape(4, 3).t().reshape(12)[:7] * v
              + x.expand(2, 3, 4).sum(0).reshape(12)[5:], (X, V)),
    "chain": (lambda v: to.relu(to.sigmoid(to.tanh(v * v + v) * v) + v) * v, (V,)),
    "scalars": (lambda v: (v[0] * v[1] + to.tanh(v[2]) - to.exp(v[3]) * v[0]) / to.sigmoid(v[4])
                - to.log(v[5].abs()), (V,)),  # (0-d nodes: their flat loops)
    "softmax": (lambda x: F.softmax(x, dim=1) * F.log_softmax(x, dim=0)
                + F.softmax(x[0], dim=-1), (X,)),
    "logsumexp": (lambda x: to.logsumexp(x, 1) * to.logsumexp(x, 0).sum(), (X,)),
    "pair_losses": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction="none", beta=0.5)
                    + F.huber_loss(x, r.expand(3, 4), reduction="none", delta=0.3)
                    + F.smooth_l1_loss(x, r.expand(3, 4), reduction="none"), (X, Y, ROW)),
    "linear": (lambda x, w, w1, b, x3: F.linear(x, w, b).sum(1) + F.linear(x[1], w).sum()
               + F.linear(x, w1).reshape(3) + F.linear(to.relu(x[0]), w1, b[:1]).sum()
               + F.linear(x3, w, b).sum((0, 2)), (X, W, W1, BIAS, X3)),
    # one row at a time (an actor-critic's environment steps), 1-d and (1, n): from the third
    # row on, the weight's and bias's contributions are added straight into their sums
    # (``kernels/grad_sum.py``); z's -0.0 entries give -0.0 gradients, which sum_axis makes +0.0
    "linear_rows": (lambda x, w, b, z: sum(
        (F.linear(to.relu(x[i % 3]) * (i + 1.0), w, b) if i % 2 else
         F.linear(x[i % 3:i % 3 + 1], w, b).reshape(5)) * z[i] for i in range(6)), (X, W, BIAS, Z)),
    "cat": (lambda x, y: to.cat([x, y * y], 1)[:, 1:6] * to.stack([x[0], y[1], x[2]]).sum(1,
            keepdim=True), (X, Y)),
    # ops without array rules, several contributions each (the nodes their graph rules make
    # are new objects every time: none may be taken for another)
    "graph_rules": (lambda x, p: (p ** x).double() + to.sqrt(p).double() * x.double()
                    + (p ** 1.5).double() + F.elu(x).double() * p.double(), (X, POS)),
    "div": (lambda x, y, p, r: x / p + (x / 3.0) / r.abs() + 2.0 / p + p / y.abs(),
            (X, Y, POS, ROW)),
}


def _bits(a) -> bytes:
    a = np.ascontiguousarray(np.asarray(a))
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()


def _run(fn, values, compile_after: int) -> list[bytes]:
    """The loss, the output and every gradient (as bytes) of one backward of ``fn``."""
    cache_clear()
    CACHE.compile_after = compile_after
    params = [to.nn.Parameter(to.tensor(v)) for v in values]
    out = fn(*params)
    w = to.tensor(np.random.default_rng(1).uniform(0.5, 1.5, out.shape).astype(np.float32))
    loss = (out * w).sum()
    loss.backward()
    return ([_bits(loss.numpy()), _bits(out.numpy())]
            + [_bits(p.grad.numpy()) if p.grad is not None else b"none" for p in params])


@pytest.fixture
def threshold(monkeypatch):
    before = CACHE.compile_after
    # (every realization through the eager path or a plan: ``realize._op_of_values`` aside)
    monkeypatch.setattr(realize_module, "_op_of_values", lambda t: False)
    yield
    CACHE.compile_after = before
    cache_clear()


def _no_backward_graph(*args):
    raise AssertionError("the eager run built the backward graph")


def _spy_by_graph(monkeypatch) -> list[str]:
    """The ops whose graph rule an eager backward runs (``eager_grad._by_graph``)."""
    ops: list[str] = []
    real = eager_grad._by_graph
    monkeypatch.setattr(eager_grad, "_by_graph",
                        lambda t, *a: ops.append(t.op) or real(t, *a))
    monkeypatch.setattr(eager, "_backward_graph", _no_backward_graph)
    return ops


@pytest.mark.parametrize("case", list(CASES))
def test_array_backward_gives_the_planned_bits(case, threshold, monkeypatch):
    fn, values = CASES[case]
    planned = _run(fn, values, 1)
    with monkeypatch.context() as m:
        by_graph = _spy_by_graph(m)
        direct = _run(fn, values, 1 << 30)
    # every op by its array rule (none declined), but in the case of ops without one
    assert all(op not in RULES for op in by_graph) and bool(by_graph) == (case == "graph_rules")
    with monkeypatch.context() as m:
        m.setattr(eager, "gradients", lambda *a: None)
        built = _run(fn, values, 1 << 30)  # the eager run's whole backward graph
    assert direct == planned == built


def test_one_row_linear_layers_add_into_their_gradient_sums(threshold, monkeypatch):
    calls: list[str] = []
    for name in ("add_outer", "add_row_sum"):
        real = getattr(eager_grad, name)
        monkeypatch.setattr(eager_grad, name,
                            lambda *a, real=real, name=name: calls.append(name) or real(*a))
    fn, values = CASES["linear_rows"]
    _run(fn, values, 1 << 30)
    # six rows: the first contribution kept, the second summed into a new array, four added
    assert calls.count("add_outer") == calls.count("add_row_sum") == 4


def test_the_gradient_sum_kernels_round_as_the_two_calls_they_replace():
    # (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 exactly, 0 with the product rounded first: a fused
    # multiply-add would give the former
    a = np.full(3, 1 + 2.0 ** -12, np.float32)
    out = np.full((3, 3), -(1 + 2.0 ** -11), np.float32)
    add_outer(out, a, a)
    assert _bits(out) == _bits(np.zeros((3, 3), np.float32))
    g = np.array([-0.0, 0.0, -0.0, 2.5], np.float32)
    total = np.array([-0.0, -0.0, 1.0, -0.0], np.float32)
    one_row = np.empty((1, 4), np.float32)
    sum_axis(g.reshape(1, 1, 4), one_row)  # (starts from 0: -0.0 gives +0.0)
    expected = total + one_row[0]
    add_row_sum(total, g, np.float32(0))
    assert _bits(total) == _bits(expected) != _bits(np.array([-0.0, -0.0, 1.0, 2.5], np.float32))


def test_the_cases_reach_every_rule(threshold, monkeypatch):
    seen: set[str] = set()
    for fn, values in CASES.values():
        params = [to.nn.Parameter(to.tensor(v)) for v in values]
        seen.update(t.op for t in toposort([fn(*params)]))
    assert not set(RULES) - seen, sorted(set(RULES) - seen)


def test_an_op_without_a_rule_runs_its_graph_rule_at_once(threshold, monkeypatch):
    fn = lambda x, y: to.tanh(y ** x) * x  # noqa: E731  (pow has no array rule)
    planned = _run(fn, (X, POS), 1)
    ops = _spy_by_graph(monkeypatch)
    assert _run(fn, (X, POS), 1 << 30) == planned
    assert ops == ["pow"]


def test_a_declining_rule_runs_its_graph_rule(threshold, monkeypatch):
    fn, values = CASES["chain"]
    planned = _run(fn, values, 1)
    ops = _spy_by_graph(monkeypatch)
    monkeypatch.setitem(RULES, "tanh", lambda t, g, vals: None)
    assert _run(fn, values, 1 << 30) == planned
    assert ops == ["tanh"]


def test_a_second_backward_through_a_freed_graph_raises(threshold):
    CACHE.compile_after = 1 << 30
    cache_clear()
    w = to.nn.Parameter(to.tensor(V))
    h = to.tanh(w * w)
    h.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        (h * w).sum().backward()
