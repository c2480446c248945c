"""``tinyopt.autograd`` and the autograd methods of tensors, against torch 2.13 when installed:
backward with retain_graph and gradient=, autograd.grad, detach, requires_grad_, retain_grad,
hooks and post-accumulate-grad hooks."""

import numpy as np
import pytest

import tinyopt as to

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
A = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])


def graph(lib, x, w):
    h = (x @ w.T).tanh()
    return h, (h * h).sum(1)


@needs_torch
def test_backward_with_gradient_and_retain_graph():
    results = []
    for lib in (to, torch):
        x = lib.tensor(A, requires_grad=True)
        w = lib.tensor(A[:, ::-1].copy(), requires_grad=True)
        h, y = graph(lib, x, w)
        y.backward(lib.tensor([1.0, -2.0]), retain_graph=True)
        g1 = x.grad.numpy().copy()
        y.backward(lib.tensor([0.5, 0.5]))
        results.append((g1, x.grad.numpy().copy(), w.grad.numpy().copy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    x = to.tensor(A, requires_grad=True)
    _, y = graph(to, x, x)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        y.backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        y.backward(to.ones(3))


@needs_torch
def test_autograd_grad_returns_gradients_without_touching_grad():
    results = []
    for lib in (to, torch):
        x = lib.tensor(A, requires_grad=True)
        w = lib.tensor(A[:, ::-1].copy(), requires_grad=True)
        h, y = graph(lib, x, w)
        gx, gh = lib.autograd.grad(y.sum(), [x, h], retain_graph=True)
        (gw,) = lib.autograd.grad([y[0], y[1]], [w], grad_outputs=[lib.tensor(2.0),
                                                                 lib.tensor(-1.0)])
        assert x.grad is None and w.grad is None
        results.append((gx.numpy(), gh.numpy(), gw.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    x = to.tensor(A, requires_grad=True)
    unused = to.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        to.autograd.grad((x * 2).sum(), [x, unused])
    gx, gu = to.autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)
    np.testing.assert_array_equal(gx.numpy(), 2.0)
    assert gu is None
    with pytest.raises(NotImplementedError, match="first order"):
        to.autograd.grad((x * 2).sum(), [x], create_graph=True)


@needs_torch
def test_detach_requires_grad_and_retain_grad():
    results = []
    for lib in (to, torch):
        x = lib.tensor(A, requires_grad=True)
        h = x * 3
        h.retain_grad()
        d = h.detach()
        assert not d.requires_grad and d.is_leaf
        y = (h * d + h.exp()).sum()
        y.backward()
        assert h.retains_grad and not x.retains_grad
        z = lib.tensor(A)
        assert not z.requires_grad
        z.requires_grad_()
        (z * z).sum().backward()
        results.append((x.grad.numpy(), h.grad.numpy(), z.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        (to.tensor(A, requires_grad=True) * 2).requires_grad_(False)
    with pytest.raises(RuntimeError, match="floating point"):
        to.tensor([1, 2]).requires_grad_()


@needs_torch
def test_hooks_on_leaves_and_non_leaves_change_gradients_as_torch():
    results = []
    for lib in (to, torch):
        seen = []
        x = lib.tensor(A, requires_grad=True)
        h = x * 2
        h.register_hook(lambda g: g * 10)            # scales what flows back through h
        x.register_hook(lambda g: seen.append(g.numpy().copy()))  # observes, changes nothing
        handle = x.register_hook(lambda g: g + 1)    # then removed
        handle.remove()
        (h.sin()).sum().backward()
        results.append((x.grad.numpy().copy(), seen[0]))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        to.tensor(A).register_hook(lambda g: g)


def test_post_accumulate_grad_hooks_run_after_the_gradient_is_in_place():
    w1 = to.nn.Parameter(np.ones((2, 2)))
    w2 = to.nn.Parameter(np.ones(2))
    order = []
    w1.register_post_accumulate_grad_hook(lambda p: order.append(("w1", p.grad.numpy().copy())))
    h = w2.register_post_accumulate_grad_hook(lambda p: order.append(("w2", p.grad.numpy().sum())))
    for _ in range(2):
        ((to.tensor([1.0, 2.0]) @ w1) * w2).sum().backward()
    assert [n for n, _ in order] == ["w2", "w1", "w2", "w1"]  # last leaves first
    np.testing.assert_array_equal(order[2][1], 2 * order[0][1])  # after accumulation
    h.remove()
    order.clear()
    ((to.tensor([1.0, 2.0]) @ w1) * w2).sum().backward()
    assert [n for n, _ in order] == ["w1"]
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w1 * 2).register_post_accumulate_grad_hook(lambda p: None)


def test_backward_inputs_accumulates_only_into_those():
    a = to.tensor([1.0, 2.0], requires_grad=True)
    b = to.tensor([3.0, 4.0], requires_grad=True)
    (a * b).sum().backward(inputs=[b])
    assert a.grad is None
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0])
    to.autograd.backward([(a * b).sum(), (a * a).sum()], inputs=[a])
    np.testing.assert_array_equal(a.grad.numpy(), [3.0 + 2.0, 4.0 + 4.0])


def test_grad_mode_context_managers_and_decorators():
    x = to.tensor([1.0], requires_grad=True)
    with to.no_grad():
        assert not (x * 2).requires_grad
        with to.enable_grad():
            assert (x * 2).requires_grad
    with to.inference_mode():
        assert not (x * 2).requires_grad
    with to.set_grad_enabled(False):
        assert not to.is_grad_enabled()
    assert to.is_grad_enabled()

    @to.no_grad()
    def f():
        return (x * 2).requires_grad
    assert f() is False
    to.set_grad_enabled(False)
    assert not to.is_grad_enabled()
    to.set_grad_enabled(True)

    @to.no_grad  # without parentheses, as PyTorch allows (for enable_grad too)
    def g():
        return (x * 2).requires_grad

    @to.enable_grad
    def h():
        return (x * 2).requires_grad
    assert g() is False and g.__name__ == "g"
    with to.no_grad():
        assert h() is True
    with pytest.raises(TypeError, match="function to decorate"):
        to.no_grad(5)
