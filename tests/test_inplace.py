"""In-place writes (engine/inplace.py): writes through views are writes to the base, with
autograd; torch's safety errors (issue 25, points 1 and 5)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to

X = np.array([[1., 2., 3.], [4., 5., 6.]])
W = np.array([[1., -2., 3.], [0.5, 5., -6.]])


def _write(snippet):
    """y = x * 1 with x a leaf that requires grad; ``snippet(y)`` writes in place; then y's value
    and the gradient of sum(y * W)."""
    x = to.tensor(X, requires_grad=True)
    y = x * 1.0
    snippet(y)
    (y * to.tensor(W)).sum().backward()
    return y.detach().numpy(), x.grad.numpy()


def _expect(values, kept):
    """y's expected value and x.grad: W where the write kept x's value (``kept`` is 1 there, or
    the factor the write scaled it by), 0 where it overwrote it."""
    return np.asarray(values, dtype=float), W * np.asarray(kept, dtype=float)


@pytest.mark.parametrize("name, snippet, values, kept", [
    ("y[0].mul_(10)", lambda y: y[0].mul_(10),
     [[10, 20, 30], [4, 5, 6]], [[10, 10, 10], [1, 1, 1]]),
    ("y[0][1] = 0", lambda y: y[0].__setitem__(1, 0),
     [[1, 0, 3], [4, 5, 6]], [[1, 0, 1], [1, 1, 1]]),
    ("y.t().add_(1)", lambda y: y.t().add_(1),
     [[2, 3, 4], [5, 6, 7]], [[1, 1, 1], [1, 1, 1]]),
    ("y.view(-1).zero_()", lambda y: y.view(-1).zero_(),
     [[0, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]),
    ("y[:, :2].copy_(c)", lambda y: y[:, :2].copy_(to.tensor([[7., 8.], [9., 10.]])),
     [[7, 8, 3], [9, 10, 6]], [[0, 0, 1], [0, 0, 1]]),
    ("y.narrow(1, 0, 1).fill_(7)", lambda y: y.narrow(1, 0, 1).fill_(7),
     [[7, 2, 3], [7, 5, 6]], [[0, 1, 1], [0, 1, 1]]),
    ("y[:, 0].zero_()", lambda y: y[:, 0].zero_(),
     [[0, 2, 3], [0, 5, 6]], [[0, 1, 1], [0, 1, 1]]),
    ("y.diagonal().mul_(3)", lambda y: y.diagonal().mul_(3),
     [[3, 2, 3], [4, 15, 6]], [[3, 1, 1], [1, 3, 1]]),
    ("y.t()[1].sub_(1) (a view of a view)", lambda y: y.t()[1].sub_(1),
     [[1, 1, 3], [4, 4, 6]], [[1, 1, 1], [1, 1, 1]]),
])
def test_a_write_through_a_view_writes_the_base_and_is_differentiated(name, snippet, values,
                                                                       kept):
    got_y, got_grad = _write(snippet)
    want_y, want_grad = _expect(values, kept)
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_grad, want_grad)


def test_a_write_through_a_view_by_a_tensor_that_requires_grad_reaches_it():
    x = to.tensor(X, requires_grad=True)
    w = to.tensor([2., 3., 4.], requires_grad=True)
    y = x * 1.0
    y[1].mul_(w)
    (y * to.tensor(W)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), W * [[1, 1, 1], [2, 3, 4]])
    np.testing.assert_array_equal(w.grad.numpy(), W[1] * X[1])


def test_copy_into_a_view_then_using_the_view():
    x = to.tensor(X, requires_grad=True)
    y = x * 2.0
    v = y[:, :2]
    v.copy_(to.tensor([[7., 8.], [9., 10.]]))
    (v * 2).sum().backward()
    np.testing.assert_array_equal(v.detach().numpy(), [[7, 8], [9, 10]])
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))  # every read value was copied


def test_views_of_a_base_see_a_write_through_another_view_and_into_the_base():
    x = to.tensor(X, requires_grad=True)
    y = x * 1.0
    row, col = y[0], y[:, 2]
    row.mul_(10)
    assert col.tolist() == [30.0, 6.0]
    y.add_(1)
    assert row.tolist() == [11.0, 21.0, 31.0] and col.tolist() == [31.0, 7.0]


def test_a_concrete_base_written_through_a_view_by_a_grad_operand_requires_grad():
    buf = to.zeros(2, 3)
    w = to.tensor([1., 2., 3.], requires_grad=True)
    buf[1].copy_(w * 2)
    assert buf.requires_grad and buf.grad_fn is not None
    buf.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2, 2, 2])


def test_no_grad_writes_are_plain_memory_writes():
    base = np.zeros((2, 3))
    t = to.from_numpy(base)
    with to.no_grad():
        t[0].add_(1)
        t.t()[2].fill_(5)
    np.testing.assert_array_equal(base, [[1, 1, 5], [0, 0, 5]])
    assert t._version == 2


def test_a_no_grad_write_into_a_node_changes_its_values_not_its_gradient():
    x = to.tensor(X, requires_grad=True)
    y = x * 2.0
    with to.no_grad():
        y[0].mul_(10)
    (y * to.tensor(W)).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [[20, 40, 60], [8, 10, 12]])
    np.testing.assert_array_equal(x.grad.numpy(), 2 * W)  # torch: the write is not recorded


def test_diagonal_add_writes_the_matrix():
    cov = to.ones(3, 3)
    cov.diagonal().add_(0.5)
    np.testing.assert_array_equal(cov.numpy(), np.ones((3, 3)) + 0.5 * np.eye(3))


# ---- torch's errors -----------------------------------------------------------------------------
LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_OF_LEAF = "a view of a leaf Variable that requires grad is being used in an in-place operation."
MULTI = ("is a view and is being modified inplace. This view is the output of a function that "
         "returns multiple views.")
NO_GRAD = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."
OVERLAP = "unsupported operation: more than one element of the written-to tensor refers to a single"


def test_in_place_on_a_leaf_or_a_view_of_a_leaf_that_requires_grad_raises():
    x = to.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF):
        x.add_(1)
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
        x[0].add_(1)
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
        x[0] = 1.0
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
        x.t().zero_()
    assert x._version == 0 and x.tolist() == X.tolist()


@pytest.mark.parametrize("views", [lambda y: y.unbind(0), lambda y: y.split(1),
                                   lambda y: y.chunk(2), lambda y: y.split([1, 1])])
def test_in_place_on_a_multi_output_view_raises(views):
    y = to.tensor(X, requires_grad=True) * 1.0
    a = views(y)[0]
    with pytest.raises(RuntimeError, match=MULTI):
        a.mul_(2)
    with to.no_grad():
        a.mul_(2)  # (without autograd it is a plain write)
    assert y[0].tolist() == [2.0, 4.0, 6.0]


def test_a_multi_output_view_used_after_its_base_was_written_raises():
    y = to.tensor(X, requires_grad=True) * 1.0
    a, b = y.unbind(0)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="its base or another view of its base has been "
                                           "modified inplace"):
        (b * 2).sum().backward()


def test_in_place_with_grad_on_a_view_made_under_no_grad_raises():
    y = to.tensor(X, requires_grad=True) * 1.0
    with to.no_grad():
        v = y[0]
    with pytest.raises(RuntimeError, match=NO_GRAD):
        v.mul_(2)


def test_writing_overlapping_memory_raises_except_one_value():
    y = to.ones(3).expand(2, 3)
    with pytest.raises(RuntimeError, match=OVERLAP):
        y.add_(1)
    with pytest.raises(RuntimeError, match=OVERLAP):
        y.copy_(to.zeros(2, 3))
    y.fill_(7)  # torch allows one value (and y[0] = ..., a region without overlap)
    y[0] = 2.0
    assert y.tolist() == [[2.0, 2.0, 2.0]] * 2


@pytest.mark.parametrize("make, write", [
    (lambda x: x.exp(), lambda y: y[0].mul_(2)),           # exp saved its output
    (lambda x: x.sigmoid(), lambda y: y.view(-1).add_(1)),
    (lambda x: (x * 1) * (x * 1), None),
])
def test_backward_through_a_saved_value_written_since_raises_torchs_error(make, write):
    x = to.tensor(X, requires_grad=True)
    if write is None:  # z = h * h saved h; h written after
        h = x * 1
        y = h * h
        h.add_(1)
    else:
        y = make(x)
        write(y)
    with pytest.raises(RuntimeError, match=r"one of the variables needed for gradient "
                                           r"computation has been modified by an inplace "
                                           r"operation: .* is at version 1; expected version 0"):
        y.sum().backward()


def test_a_write_into_a_value_nobody_saved_keeps_the_right_gradient():
    x = to.tensor(X, requires_grad=True)
    y = x * 1.0
    z = y + 1            # add saves nothing
    y.mul_(3)
    (z * to.tensor(W)).sum().backward()
    np.testing.assert_array_equal(z.detach().numpy(), X + 1)  # z was computed from the old y
    np.testing.assert_array_equal(x.grad.numpy(), W)


def test_torchs_original_self_of_an_in_place_op_is_its_own():
    x = to.tensor(X, requires_grad=True)
    h = x * 2
    h.mul_(x)             # saves the old h (a copy in torch): later writes do not invalidate it
    h[0] = h[1] * 3
    h.sum().backward()
    # h = 2 x^2; the loss is 4 sum(h[1]): d/dx[1] = 16 x[1], and x[0] was overwritten
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], 16 * X[1]])


# ---- against torch ------------------------------------------------------------------------------
def test_the_issue_snippets_match_torch():
    torch = pytest.importorskip("torch")
    snippets = [lambda y: y[0].mul_(10), lambda y: y[0].__setitem__(1, 0),
                lambda y: y.t().add_(1), lambda y: y.view(-1).zero_(),
                lambda y: y.narrow(1, 0, 1).fill_(7), lambda y: y[:, 0].zero_(),
                lambda y: y.diagonal().add_(1)]
    for snippet in snippets:
        out = []
        for lib in (to, torch):
            x = lib.tensor(X, requires_grad=True)
            y = x * 1.0
            snippet(y)
            (y * lib.tensor(W)).sum().backward()
            out.append((np.array(y.tolist()), np.array(x.grad.tolist())))
        np.testing.assert_array_equal(out[0][0], out[1][0])
        np.testing.assert_array_equal(out[0][1], out[1][1])


def test_an_alias_with_a_graph_of_its_own_reads_memory_written_since():
    """A detach() alias written with an operand that requires grad is a graph node of its own
    (torch's AddBackward0): a later write into it keeps that graph (it was dropped), and a plain
    write into its base's memory shows through it, as the two share memory in torch (it kept
    the value from before the write)."""
    torch = pytest.importorskip("torch")
    out = []
    for lib in (to, torch):
        y = lib.zeros(3)
        a, b = y.detach(), y[1:].detach()
        w = lib.ones(3, requires_grad=True)
        a.add_(w)
        a.mul_(lib.full((3,), 3.0))  # (a write without a grad operand kept a's graph: it lost it)
        b.mul_(w[1:])
        with lib.no_grad():
            y.add_(10)
            y[0] = 5.0
        ((a * 2).sum() + b.sum()).backward()
        out.append((a.tolist(), b.tolist(), a.requires_grad, b.requires_grad, w.grad.tolist()))
    assert out[0] == out[1]


def test_a_view_of_an_alias_written_with_a_grad_operand_is_refused():
    """torch would make the alias a CopySlices node and give ``w`` a gradient through it; tinyopt
    cannot, so it refuses at once and changes nothing (it differentiated the view alone: a loss
    over the alias gave ``w`` no gradient)."""
    y = to.zeros(3)
    w = to.ones(2, requires_grad=True)
    for a in (y.detach(), y.data, y[1:].detach()):
        for write in (lambda v: v.__setitem__(0, w[0]), lambda v: v[:2].add_(w),
                      lambda v: v.unsqueeze(0)[0, :2].mul_(w)):
            with pytest.raises(RuntimeError, match="into a view of a detach"):
                write(a)
    np.testing.assert_array_equal(y.numpy(), 0.0)
    a = y.detach()
    a[:2].add_(w.detach())  # no grad operand: a plain write, allowed
    a.add_(to.ones(3, requires_grad=True))  # the alias itself: a graph of its own, allowed
    b = y[1:].detach()
    b.add_(to.ones(2, requires_grad=True))
    assert a.requires_grad and b.requires_grad
    with to.no_grad():
        a[0].add_(w[0])  # under no_grad nothing is recorded: allowed



def test_an_empty_tensors_strides_are_torchs_contiguous_ones():
    """``stride()`` of an empty tensor, made or viewed, is torch's ((0, 3): (3, 1)), not the
    (0, 0) its array may keep; code that reads strides to pick a layout sees torch's.  (Not
    ``from_numpy`` of an empty array: torch gives it (0, 0) strides, tinyopt now (5, 1).)"""
    torch = pytest.importorskip("torch")
    cases = [lambda L: L.ones(0, 3), lambda L: L.zeros(2, 0), lambda L: L.empty(0, 3, 4),
             lambda L: L.tensor([]), lambda L: L.ones(0, 3).t(), lambda L: L.ones(3, 0, 2)[:, :, 1],
             lambda L: L.ones(2, 0, 3).permute(2, 0, 1), lambda L: L.ones(3, 0, 2).contiguous()]
    for make in cases:
        mine, theirs = make(to), make(torch)
        assert mine.stride() == theirs.stride()
        assert mine.is_contiguous() == theirs.is_contiguous()
