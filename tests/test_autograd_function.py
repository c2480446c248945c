"""``torch.autograd.Function`` (``tinyopt.autograd.function``): custom ops with Python backward,
differentiable, replayed inside plans, with PyTorch's ctx API and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt import nn
from tinyopt.autograd import Function, once_differentiable


class Legendre3(Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


class ScaledClamp(Function):
    """Two inputs, a non-tensor argument, ctx attributes, needs_input_grad, two outputs of which
    one is an integer mask marked non-differentiable."""

    @staticmethod
    def forward(ctx, x, w, limit):
        ctx.limit = limit
        ctx.save_for_backward(x, w)
        inside = (x.abs() < limit)
        ctx.mark_non_differentiable(inside)
        return x.clamp(-limit, limit) * w, inside

    @staticmethod
    def backward(ctx, g, g_inside):
        x, w = ctx.saved_tensors
        inside = (x.abs() < ctx.limit).to(g.dtype)
        gx = g * w * inside if ctx.needs_input_grad[0] else None
        gw = g * x.clamp(-ctx.limit, ctx.limit) if ctx.needs_input_grad[1] else None
        return gx, gw, None


class SetupStyle(Function):
    """The newer style: forward without ctx, plus setup_context."""

    @staticmethod
    def forward(x, y):
        return x * y.exp(), x + y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.set_materialize_grads(False)

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        gx = gy = None
        if g1 is not None:
            gx, gy = g1 * y.exp(), g1 * x * y.exp()
        if g2 is not None:
            gx = g2 if gx is None else gx + g2
            gy = g2 if gy is None else gy + g2
        return gx, gy


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (3, 4))
    w = rng.uniform(-1, 1, (3, 4))
    gradcheck(lambda p: Legendre3.apply(p * 1.0), x)
    gradcheck(lambda p, q: ScaledClamp.apply(p, q, 0.7)[0], x, w)
    gradcheck(lambda p, q: SetupStyle.apply(p, q)[0] + SetupStyle.apply(p, q)[1] * 2, x, w)
    gradcheck(lambda p, q: SetupStyle.apply(p, q)[1], x, w)  # only one output used


def test_outputs_and_flags():
    x = to.tensor(np.array([-2.0, 0.5, 3.0], np.float32), requires_grad=True)
    w = to.ones(3)
    y, inside = ScaledClamp.apply(x, w, 1.0)
    assert y.requires_grad and not inside.requires_grad and inside.dtype == to.bool
    np.testing.assert_array_equal(inside.numpy(), [False, True, False])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])
    with to.no_grad():
        assert not Legendre3.apply(x).requires_grad


def test_inside_a_plan_with_a_module_and_an_optimizer():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return Legendre3.apply(self.fc(x)).sum(1)

    to.manual_seed(0)
    net = Net()
    opt = to.optim.SGD(net.parameters(), lr=0.01)
    x = np.random.default_rng(1).uniform(-1, 1, (8, 3)).astype(np.float32)
    losses = []
    before = to.engine.cache_info().misses
    for _ in range(6):
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert to.engine.cache_info().misses - before <= 3  # replayed, not rebuilt every step


def test_legendre_tutorial_trains_like_torch():
    torch = pytest.importorskip("torch")

    class TorchLegendre3(torch.autograd.Function):
        forward = staticmethod(Legendre3.forward)
        backward = staticmethod(Legendre3.backward)

    def train(lib, fn):
        x = lib.linspace(-math.pi, math.pi, 200, dtype=lib.float64)
        y = lib.sin(x)
        a, b, c, d = (lib.full((), v, dtype=lib.float64, requires_grad=True)
                      for v in (0.0, -1.0, 0.0, 0.3))
        for _ in range(30):
            loss = (a + b * fn.apply(c + d * x) - y).pow(2).sum()
            loss.backward()
            with lib.no_grad():
                for p in (a, b, c, d):
                    p -= 5e-5 * p.grad
                    p.grad = None
        return [float(p.item()) for p in (a, b, c, d)] + [loss.item()]

    np.testing.assert_allclose(train(to, Legendre3), train(torch, TorchLegendre3), rtol=1e-9,
                               atol=1e-12)


def test_errors_match_torch():
    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return g.reshape(1)

    class NoForward(Function):
        pass

    x = to.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"returned an incorrect number of gradients "
                                           r"\(expected 2, got 1\)"):
        TooFew.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - got "
                                           r"\[1\] but expected shape compatible with \[2\]"):
        WrongShape.apply(x).backward()
    with pytest.raises(NotImplementedError, match="You must implement the forward function"):
        NoForward.apply(x)
    with pytest.raises(RuntimeError, match="Legacy autograd function"):
        Legendre3()(x)
