"""engine/realize.py: values the user still holds come out of the run that computed the loss, so
the usual training loops run the model's forward and backward once a batch (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.engine import eager as eager_module
from tinyopt.engine import plan as plan_module

MODEL_OPS = {"rnn_scan", "rnn_scan_grad"}


@pytest.fixture
def runs(monkeypatch):
    """The ops of every run, planned or eager (``engine/eager.py``), in order (a list the test
    reads and clears)."""
    log: list[set[str]] = []
    run, run_eagerly = plan_module.Plan.run, eager_module.run

    def counted(self, leaves):
        log.append({t.op for t in self.nodes})
        return run(self, leaves)

    def counted_eagerly(fwd, *args):
        log.append({t.op for t in fwd})
        return run_eagerly(fwd, *args)
    monkeypatch.setattr(plan_module.Plan, "run", counted)
    monkeypatch.setattr(eager_module, "run", counted_eagerly)
    return log


def test_accuracy_after_backward_reads_the_output_of_the_same_run(runs):
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = to.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    correct = total = 0
    for _ in range(3):
        x = to.tensor(rng.standard_normal((8, 20)).astype(np.float32))
        y = to.tensor(rng.integers(0, 4, 8))
        runs.clear()
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        logits = np.array(out.numpy())
        opt.step()
        pred = out.argmax(1)
        correct += (pred == y).sum().item()
        total += loss.item()
        assert len(runs) == 1  # forward and backward, once; the rest reads kept values
        np.testing.assert_array_equal(out.numpy(), logits)  # not recomputed with new weights
    assert 0 <= correct <= 24 and np.isfinite(total)


def test_rnn_hidden_detach_for_the_next_batch_does_not_rerun_the_model(runs):
    to.manual_seed(0)
    rnn, head = nn.LSTM(5, 7, batch_first=True), nn.Linear(7, 3)
    opt = to.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
    rng = np.random.default_rng(1)
    h = None
    for _ in range(3):
        x = to.tensor(rng.standard_normal((2, 6, 5)).astype(np.float32))
        y = to.tensor(rng.integers(0, 3, 12))
        runs.clear()
        opt.zero_grad()
        out, h = rnn(x, h)
        loss = nn.functional.cross_entropy(head(out).reshape(-1, 3), y)
        loss.backward()
        opt.step()
        h = tuple(t.detach() for t in h)
        loss.item()
        assert len(runs) == 1 and runs[0] & MODEL_OPS, runs  # h_n, c_n: views of the kept run
        assert all(not t.requires_grad for t in h)


def test_which_nodes_are_held_can_change_from_step_to_step(runs):
    """The plan cache keeps the held-node check per signature: holding an intermediate at one
    step and not at the next (or a different code path) still gives each step the right plan,
    the held value from the same run, and the loss of the graph built."""
    to.manual_seed(0)
    lin = nn.Linear(6, 4)
    W, b = lin.weight.numpy().copy(), lin.bias.numpy().copy()
    rng = np.random.default_rng(2)
    for hold, relu in ([(True, True), (False, True), (True, True),
                        (False, False), (True, False), (False, True)]):
        x = rng.standard_normal((3, 6)).astype(np.float32)
        runs.clear()
        h = lin(to.tensor(x))
        a = nn.functional.relu(h) if relu else h * 2.0
        loss = a.sum()
        if not hold:
            del h
        loss.backward()
        ref_h = x @ W.T + b
        ref = np.maximum(ref_h, 0) if relu else ref_h * np.float32(2.0)
        assert len(runs) == 1
        np.testing.assert_allclose(loss.item(), ref.sum(), rtol=1e-5)
        if hold:  # kept from the run: no second run to read it
            np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-6)
            assert len(runs) == 1
        lin.weight.grad = None
        lin.bias.grad = None


def test_a_node_only_its_views_in_the_graph_hold_is_not_kept(monkeypatch):
    """A view holds its base, but that is not the program holding it: nanoGPT's
    ``y.transpose(1, 2).contiguous().view(B, T, C)`` and ``logits.view(-1, V)`` left the bases
    as outputs of every run (GPT-2's logits: 103 MB copied a step).  Held by the program, the
    view or the base still comes out of the run with its value."""
    outputs: list[list[tuple]] = []  # the shapes of each run's outputs but the loss's
    run = plan_module.Plan.run

    def recorded(self, leaves):
        outputs.append(sorted(self.nodes[i].shape for i in self.output_slots
                              if self.nodes[i].shape in ((2, 3, 4), (2, 4, 3), (24,))))
        return run(self, leaves)
    monkeypatch.setattr(plan_module.Plan, "run", recorded)
    to.manual_seed(0)
    lin = nn.Linear(6, 4)
    x = np.random.default_rng(3).standard_normal((2, 3, 6)).astype(np.float32)
    ref = (x @ lin.weight.numpy().T + lin.bias.numpy()) * np.float32(2.0)

    def forward(hold: str):
        y = lin(to.tensor(x)) * 2.0  # (2, 3, 4), whose only consumer is a view
        flat = y.transpose(1, 2).reshape(-1)  # a view (24,) of a copy (2, 4, 3)
        return flat.sum(), {"view": flat, "base": y}.get(hold)

    def steps(hold: str):
        outputs.clear()
        for _ in range(3):  # (a plan from the second sighting on)
            loss, held = forward(hold)
            loss.backward()
            lin.weight.grad = lin.bias.grad = None
        return held
    steps("")
    assert outputs and outputs[-1] == []
    held = steps("view")
    assert outputs and outputs[-1] == [(2, 4, 3), (24,)]  # a held view keeps its base
    np.testing.assert_allclose(held.numpy(), ref.transpose(0, 2, 1).reshape(-1), rtol=1e-6)
    held = steps("base")
    assert outputs and outputs[-1] == [(2, 3, 4)]
    np.testing.assert_allclose(held.numpy(), ref, rtol=1e-6)


def test_a_node_over_computed_values_is_computed_alone_with_the_bits_of_its_graph(runs):
    """The actor-critic's ``probs.item()`` then ``value.item()``: the second reads the hidden
    layer the first computed, so only its own op runs (as PyTorch had computed it); the value is
    that of realizing its whole graph, and a write since falls back to the whole graph."""
    to.manual_seed(0)
    body, head, value = nn.Linear(4, 16), nn.Linear(16, 2), nn.Linear(16, 1)
    x = to.tensor(np.random.default_rng(0).standard_normal(4).astype(np.float32))

    def forward():
        h = nn.functional.relu(body(x))
        return nn.functional.softmax(head(h), dim=-1), value(h)

    whole = []
    for _ in range(2):
        _, v = forward()
        whole.append(v.numpy().copy())  # the hidden layer not computed yet: the whole graph
    runs.clear()
    probs, v = forward()
    probs[1].item()
    assert len(runs) == 1
    got = v.numpy()
    assert len(runs) == 1  # no second run: one linear over the hidden layer's value
    assert got.tobytes() == whole[0].tobytes() == whole[1].tobytes()
    probs, v = forward()
    probs[1].item()
    with to.no_grad():
        value.bias.add_(1.0)  # written after v was made: v's graph runs, as without the rule
    with pytest.raises(RuntimeError, match="modified by an inplace operation|in-place write"):
        v.numpy()
