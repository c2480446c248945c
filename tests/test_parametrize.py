"""``nn.utils.parametrize`` and ``nn.utils.parametrizations`` (weight_norm, spectral_norm,
orthogonal) and the deprecated hook-based ``nn.utils.weight_norm``, against PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn
from tinyopt.nn.utils import parametrizations as P
from tinyopt.nn.utils import parametrize

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _pair(make, *args, **kw):
    """The same module in both libraries, float64, with the same weights."""
    t = make(torch.nn)(*args, **kw).double()
    o = make(nn)(*args, **kw)
    o.to(np.float64)
    o.load_state_dict({k: v.detach().numpy().copy() for k, v in t.state_dict().items()})
    return t, o


def _run(t, o, x, steps=1):
    """Forward, backward; the outputs and every parameter's gradient, both libraries."""
    out = []
    for lib, m in ((torch, t), (to, o)):
        m.zero_grad()
        y = m(lib.tensor(x))
        y.pow(3).sum().backward()
        out.append([y.detach().numpy()] + [p.grad.numpy().copy() for _, p in
                                           sorted(m.named_parameters())])
    for a, b in zip(*out):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)

    def right_inverse(self, A):
        return A.triu()


class TSymmetric(torch.nn.Module):
    forward = Symmetric.forward
    right_inverse = Symmetric.right_inverse


def test_register_a_custom_parametrization():
    t, o = _pair(lambda n: n.Linear, 4, 4)
    w = o.weight
    opt = to.optim.SGD(o.parameters(), lr=0.1)  # built before: keeps the same Parameter
    torch.nn.utils.parametrize.register_parametrization(t, "weight", TSymmetric())
    parametrize.register_parametrization(o, "weight", Symmetric())
    assert type(o).__name__ == type(t).__name__ == "ParametrizedLinear"
    assert list(o.state_dict()) == list(t.state_dict())
    assert o.parametrizations.weight.original is w and parametrize.is_parametrized(o, "weight")
    _run(t, o, RNG.standard_normal((3, 4)))
    opt.step()
    assert np.allclose(o.weight.numpy(), o.weight.numpy().T)
    with parametrize.cached():
        assert o.weight is o.weight
    value = RNG.standard_normal((4, 4))
    o.weight = value  # right_inverse
    np.testing.assert_allclose(o.parametrizations.weight.original.numpy(), np.triu(value))
    parametrize.remove_parametrizations(o, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(t, "weight")
    assert type(o) is nn.Linear and list(o.state_dict()) == list(t.state_dict())
    assert o.weight is w  # the same Parameter, holding the parametrized value
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a "
                                         "parametrized element with name 'nope'"):
        parametrize.register_parametrization(o, "nope", Symmetric())


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_both_forms(dim):
    t, o = _pair(lambda n: n.Conv2d, 2, 3, 3)
    torch.nn.utils.parametrizations.weight_norm(t, dim=dim)
    P.weight_norm(o, dim=dim)
    assert list(o.state_dict()) == list(t.state_dict())
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(o.state_dict()[k].numpy(), v.numpy(), rtol=1e-12)
    _run(t, o, RNG.standard_normal((2, 2, 5, 5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t2, o2 = _pair(lambda n: n.Linear, 3, 2)
        torch.nn.utils.weight_norm(t2, dim=dim)
    with pytest.warns(FutureWarning, match="torch.nn.utils.weight_norm` is deprecated"):
        nn.utils.weight_norm(o2, dim=dim)
    assert list(o2.state_dict()) == list(t2.state_dict())
    _run(t2, o2, RNG.standard_normal((4, 3)))
    nn.utils.remove_weight_norm(o2)
    assert list(o2.state_dict()) == ["bias", "weight"]
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        nn.utils.remove_weight_norm(o2)


def test_spectral_norm_power_iteration_matches_torch():
    t, o = _pair(lambda n: n.Linear, 5, 4)
    torch.nn.utils.parametrizations.spectral_norm(t)
    P.spectral_norm(o)
    pt, po = t.parametrizations.weight[0], o.parametrizations.weight[0]
    po._u, po._v = to.tensor(pt._u.numpy()), to.tensor(pt._v.numpy())  # (their random start)
    x = RNG.standard_normal((3, 5))
    for train in (True, True, False):
        t.train(train)
        o.train(train)
        _run(t, o, x)
        np.testing.assert_allclose(po._u.numpy(), pt._u.numpy(), rtol=1e-9)
    assert list(o.state_dict()) == list(t.state_dict())


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
@pytest.mark.parametrize("orthogonal_map", [None, "cayley"])
def test_orthogonal_matches_torch(shape, orthogonal_map):
    t, o = _pair(lambda n: n.Linear, shape[1], shape[0], bias=False)
    torch.nn.utils.parametrizations.orthogonal(t, orthogonal_map=orthogonal_map)
    P.orthogonal(o, orthogonal_map=orthogonal_map)
    pt, po = t.parametrizations.weight[0], o.parametrizations.weight[0]
    po.base = to.tensor(pt.base.numpy())  # (its random completion of a non-square matrix)
    w = o.weight.numpy()
    small = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(small, np.eye(min(shape)), atol=1e-12)
    _run(t, o, RNG.standard_normal((2, shape[1])))
