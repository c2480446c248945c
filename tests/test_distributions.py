"""tinyopt.distributions against torch.distributions 2.13: log_prob, entropy, cdf, kl_divergence
and their gradients (values and gradients vs torch, gradients vs finite differences), shapes,
validation errors; sampling tested statistically with a fixed seed and for reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyopt as to
from tinyopt.distributions import Bernoulli, Categorical, Normal, kl_divergence
from torchref import compare

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

rng = np.random.default_rng(0)
LOGITS = rng.standard_normal((3, 4))
PROBS = rng.uniform(0.05, 1.0, (3, 4))
ACTIONS = np.array([0, 3, 1])


# ---- Categorical ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    "logits_log_prob", "probs_log_prob", "logits_entropy", "probs_entropy", "probs_property",
    "logits_property", "log_prob_broadcast", "one_dim", "kl", "perplexity"])
def test_categorical_against_torch(case):
    a = np.array(ACTIONS)

    def fn(lib, x, *rest):
        D = lib.distributions.Categorical
        if case == "logits_log_prob":
            return D(logits=x).log_prob(lib.tensor(a))
        if case == "probs_log_prob":
            return D(probs=x).log_prob(lib.tensor(a))
        if case == "logits_entropy":
            return D(logits=x).entropy()
        if case == "probs_entropy":
            return D(probs=x).entropy()
        if case == "probs_property":
            return D(logits=x).probs
        if case == "logits_property":
            return D(probs=x).logits
        if case == "log_prob_broadcast":  # sample_shape (2,) of actions against batch (3,)
            return D(logits=x).log_prob(lib.tensor(np.stack([a, a[::-1]])))
        if case == "one_dim":
            d = D(logits=x[0])
            return d.log_prob(lib.tensor(2)) + d.entropy()
        if case == "kl":
            return lib.distributions.kl_divergence(D(logits=x), D(probs=rest[0]))
        return D(logits=x).perplexity()
    if case == "kl":
        compare(fn, LOGITS, PROBS)
    else:
        compare(fn, PROBS if case.startswith("probs") or case == "logits_property" else LOGITS)


def test_categorical_with_zero_probabilities_matches_torch():
    """A zero probability: log_prob of that class is log(eps) (torch clamps), entropy finite."""
    p = np.array([[0.0, 0.3, 0.7], [0.5, 0.5, 0.0]])
    compare(lambda lib, x: lib.distributions.Categorical(probs=x).entropy(), p, fd=False)
    compare(lambda lib, x: lib.distributions.Categorical(probs=x).log_prob(
        lib.tensor([0, 1])), p, fd=False)
    q = np.array([[0.2, 0.3, 0.5], [0.5, 0.0, 0.5]])
    compare(lambda lib, x, y: lib.distributions.kl_divergence(
        lib.distributions.Categorical(probs=x), lib.distributions.Categorical(probs=y)),
        p, q, grad=False)


def test_categorical_shapes_and_properties():
    d = Categorical(logits=to.zeros(2, 5))
    assert d.batch_shape == (2,) and d.event_shape == () and d.param_shape == (2, 5)
    assert d.sample().shape == (2,) and d.sample().dtype == to.int64
    assert d.sample((3, 4)).shape == (3, 4, 2)
    assert d.sample(to.Size([7])).shape == (7, 2)
    assert d.mode.tolist() == [0, 0]
    assert np.isnan(d.mean.numpy()).all() and d.mean.shape == (2,)
    assert d.enumerate_support().shape == (5, 2)
    assert d.enumerate_support(expand=False).shape == (5, 1)
    assert d.expand((3, 2)).batch_shape == (3, 2)
    assert d.expand((3, 2)).log_prob(to.zeros(3, 2, dtype=to.int64)).shape == (3, 2)
    assert d.support.upper_bound == 4 and d.support.is_discrete
    with pytest.raises(TypeError):
        d.sample(3)  # torch.Size(3) is not a shape either


def _torch_error(fn):
    try:
        fn(torch)
    except Exception as e:  # noqa: BLE001 - the error is the result
        return type(e), str(e)
    raise AssertionError("torch did not raise")


@pytest.mark.parametrize("make", [
    lambda lib: lib.distributions.Categorical(),
    lambda lib: lib.distributions.Categorical(probs=lib.tensor([0.5]), logits=lib.tensor([0.])),
    lambda lib: lib.distributions.Categorical(probs=lib.tensor(0.5)),
    lambda lib: lib.distributions.Categorical(logits=lib.tensor(0.5)),
    lambda lib: lib.distributions.Categorical(probs=lib.tensor([-0.5, 1.5])),
    lambda lib: lib.distributions.Categorical(probs=lib.tensor([float("nan"), 1.0])),
    lambda lib: lib.distributions.Categorical(logits=lib.tensor([float("nan"), 1.0])),
    lambda lib: lib.distributions.Categorical(logits=lib.zeros(2, 3)).log_prob(
        lib.tensor([0, 3])),
    lambda lib: lib.distributions.Categorical(logits=lib.zeros(2, 3)).log_prob(
        lib.tensor([0.5, 1.0])),
    lambda lib: lib.distributions.Categorical(logits=lib.zeros(2, 3)).log_prob(
        lib.tensor([0, 1, 2])),
    lambda lib: lib.distributions.Categorical(logits=lib.zeros(2, 3)).log_prob(1),
    lambda lib: lib.distributions.Normal(lib.tensor([0.0]), lib.tensor([-1.0])),
    lambda lib: lib.distributions.Normal(lib.tensor([float("nan")]), 1.0),
    lambda lib: lib.distributions.Normal(0.0, "1"),
    lambda lib: lib.distributions.Bernoulli(probs=lib.tensor([1.5])),
    lambda lib: lib.distributions.Bernoulli(probs=0.5).log_prob(lib.tensor(0.5)),
    lambda lib: lib.distributions.Bernoulli(),
    lambda lib: lib.distributions.kl_divergence(
        lib.distributions.Categorical(logits=lib.zeros(2)), lib.distributions.Normal(0.0, 1.0)),
], ids=["none", "both", "probs_0d", "logits_0d", "negative_probs", "nan_probs", "nan_logits",
        "value_out_of_support", "value_not_integer", "value_not_broadcastable",
        "value_not_tensor", "negative_scale", "nan_loc", "bad_arg_type", "probs_above_one",
        "bernoulli_value", "bernoulli_none", "kl_not_implemented"])
def test_validation_errors_are_torchs(make):
    if torch is None:
        pytest.skip("torch is not installed")
    # validation is on by default in both; torch.compile turns torch's default off for the rest
    # of the process (its first call does), so a test that compiled earlier must not decide this
    old = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    try:
        kind, message = _torch_error(make)
    finally:
        torch.distributions.Distribution.set_default_validate_args(old)
    with pytest.raises(kind) as err:
        make(to)
    assert str(err.value) == message.replace("torch.distributions", "tinyopt.distributions")


def test_validation_can_be_turned_off():
    d = Categorical(probs=to.tensor([-0.5, 1.5]), validate_args=False)
    assert d.probs.tolist() == [-0.5, 1.5]
    old = to.distributions.Distribution._validate_args
    try:
        to.distributions.Distribution.set_default_validate_args(False)
        assert Normal(0.0, -1.0).scale.item() == -1.0
    finally:
        to.distributions.Distribution.set_default_validate_args(old)
    with pytest.raises(ValueError):
        Normal(0.0, -1.0)


def test_categorical_sampling_is_distributed_as_probs_and_seeded():
    p = np.array([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])
    d = Categorical(probs=to.tensor(p * 3.0))  # unnormalized on purpose
    to.manual_seed(1234)
    n = 20000
    s = d.sample((n,)).numpy()
    assert s.shape == (n, 2) and s.dtype == np.int64
    for row in range(2):
        freq = np.bincount(s[:, row], minlength=3) / n
        # each frequency within 5 standard errors of its probability
        se = np.sqrt(p[row] * (1 - p[row]) / n)
        assert np.all(np.abs(freq - p[row]) <= 5 * se + 1e-12), (row, freq)
    assert not (s[:, 1] == 1).any()  # a zero probability is never drawn
    to.manual_seed(1234)
    again = d.sample((n,)).numpy()
    np.testing.assert_array_equal(s, again)
    g = to.Generator().manual_seed(5)
    to.manual_seed(5)
    assert Categorical(logits=to.zeros(10)).sample((50,)).tolist() == \
        to.multinomial(to.ones(10), 50, True, generator=g).tolist()


# ---- Normal --------------------------------------------------------------------------------------
LOC = rng.standard_normal(4)
SCALE = rng.uniform(0.5, 2.0, 4)
VALUE = rng.standard_normal((2, 4))


@pytest.mark.parametrize("case", ["log_prob", "entropy", "cdf", "kl", "variance_stddev",
                                  "log_prob_of_tensor_value"])
def test_normal_against_torch(case):
    def fn(lib, loc, scale, value):
        d = lib.distributions.Normal(loc, scale)
        if case == "log_prob":
            return d.log_prob(value)
        if case == "entropy":
            return d.entropy()
        if case == "cdf":
            return d.cdf(value)
        if case == "kl":
            return lib.distributions.kl_divergence(d, lib.distributions.Normal(value[0], scale))
        if case == "variance_stddev":
            return d.variance * d.stddev + d.mean
        return d.log_prob(value) + lib.distributions.Normal(value, 1.0).log_prob(loc)
    compare(fn, LOC, SCALE, VALUE)


def test_normal_of_numbers_is_float32_with_empty_batch_shape():
    d = Normal(0.0, 1.0)
    assert d.batch_shape == () and d.loc.dtype == to.float32
    assert d.sample((3,)).shape == (3,) and d.sample((3,)).dtype == to.float32
    if torch is not None:
        np.testing.assert_allclose(d.log_prob(to.tensor(0.3)).item(),
                                   torch.distributions.Normal(0.0, 1.0).log_prob(
                                       torch.tensor(0.3)).item(), rtol=1e-6)


def test_normal_sampling_statistics_rsample_gradients_and_seed():
    loc, scale = to.tensor([1.0, -2.0], requires_grad=True), to.tensor([0.5, 3.0],
                                                                        requires_grad=True)
    d = Normal(loc, scale)
    to.manual_seed(7)
    n = 40000
    s = d.sample((n,))
    assert s.shape == (n, 2) and not s.requires_grad
    x = s.numpy()
    se = np.array([0.5, 3.0]) / math.sqrt(n)
    assert np.all(np.abs(x.mean(0) - [1.0, -2.0]) < 5 * se)
    assert np.all(np.abs(x.std(0) / [0.5, 3.0] - 1) < 5 / math.sqrt(2 * n))
    to.manual_seed(7)
    np.testing.assert_array_equal(d.sample((n,)).numpy(), x)
    # rsample: x = loc + eps * scale, so d(sum x)/d loc = n, d(sum x)/d scale = sum eps
    to.manual_seed(3)
    r = d.rsample((5,))
    assert r.requires_grad
    r.sum().backward()
    to.manual_seed(3)
    eps = to.randn(5, 2).numpy()
    np.testing.assert_allclose(r.detach().numpy(), 1.0 * np.array([1.0, -2.0]) + eps *
                               np.array([0.5, 3.0]), rtol=1e-6)
    np.testing.assert_allclose(loc.grad.numpy(), [5.0, 5.0])
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-6)


def test_normal_icdf_says_it_is_not_supported():
    with pytest.raises(NotImplementedError, match="erfinv"):
        Normal(0.0, 1.0).icdf(to.tensor(0.5))


# ---- Bernoulli -----------------------------------------------------------------------------------
BPROBS = rng.uniform(0.05, 0.95, (2, 3))
BVALUES = (rng.random((2, 3)) < 0.5).astype(np.float64)


@pytest.mark.parametrize("case", ["probs_log_prob", "logits_log_prob", "probs_entropy",
                                  "logits_entropy", "logits_property", "probs_property", "kl",
                                  "mean_variance"])
def test_bernoulli_against_torch(case):
    def fn(lib, x):
        B = lib.distributions.Bernoulli
        value = lib.tensor(BVALUES)  # samples, not a differentiable input
        d = B(probs=x) if case.startswith("probs") or case in ("logits_property", "kl") \
            else B(logits=x)
        if case.endswith("log_prob"):
            return d.log_prob(value)
        if case.endswith("entropy"):
            return d.entropy()
        if case == "logits_property":
            return d.logits
        if case == "probs_property":
            return d.probs
        if case == "kl":
            return lib.distributions.kl_divergence(d, B(probs=x.flip(0)))
        return d.mean + d.variance
    compare(fn, BPROBS if case.startswith("probs") or case in ("logits_property", "kl")
            else BPROBS - 0.5)


def test_bernoulli_sampling_mode_and_seed():
    p = np.array([0.1, 0.5, 0.9])
    d = Bernoulli(probs=to.tensor(p))
    assert d.batch_shape == (3,) and d.sample().dtype == to.float64
    to.manual_seed(11)
    n = 20000
    s = d.sample((n,)).numpy()
    assert set(np.unique(s)) <= {0.0, 1.0}
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(s.mean(0) - p) < 5 * se)
    to.manual_seed(11)
    np.testing.assert_array_equal(d.sample((n,)).numpy(), s)
    mode = d.mode.numpy()
    assert mode[0] == 0 and np.isnan(mode[1]) and mode[2] == 1
    assert Bernoulli(0.3).batch_shape == () and Bernoulli(logits=0.0).probs.item() == 0.5
    assert d.enumerate_support().shape == (2, 3)


# ---- REINFORCE, the idiom the distributions are for ---------------------------------------------
def test_reinforce_gradient_matches_torch_for_the_same_actions():
    """A policy-gradient step over an episode whose actions are given: the loss and every
    parameter's gradient match torch's."""
    if torch is None:
        pytest.skip("torch is not installed")
    states = rng.standard_normal((6, 4)).astype(np.float32)
    actions = [1, 0, 2, 2, 1, 0]
    returns = np.linspace(1.0, 0.2, 6).astype(np.float32)
    w1, w2 = (rng.standard_normal((8, 4)) * 0.5).astype(np.float32), \
        (rng.standard_normal((3, 8)) * 0.5).astype(np.float32)

    def run(lib):
        nn = lib.nn
        policy = nn.Sequential(nn.Linear(4, 8, bias=False), nn.Tanh(),
                               nn.Linear(8, 3, bias=False), nn.Softmax(dim=1))
        policy.load_state_dict({"0.weight": lib.tensor(w1), "2.weight": lib.tensor(w2)})
        losses = []
        for s, a, R in zip(states, actions, returns):
            m = lib.distributions.Categorical(policy(lib.tensor(s).unsqueeze(0)))
            losses.append(-m.log_prob(lib.tensor([a])) * float(R) - 0.01 * m.entropy())
        loss = lib.cat(losses).sum()
        loss.backward()
        return loss.item(), [p.grad.numpy().copy() for p in policy.parameters()]
    (l1, g1), (l2, g2) = run(to), run(torch)
    assert math.isclose(l1, l2, rel_tol=1e-5)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_kl_divergence_dispatch():
    with pytest.raises(NotImplementedError, match="Normal and q type Bernoulli"):
        kl_divergence(Normal(0.0, 1.0), Bernoulli(0.5))

    class MyNormal(Normal):
        pass
    assert kl_divergence(MyNormal(0.0, 1.0), Normal(1.0, 1.0)).item() == pytest.approx(0.5)


def test_unsupported_distributions_say_which_exist():
    with pytest.raises(AttributeError, match="Bernoulli, Categorical and Normal"):
        to.distributions.Dirichlet  # noqa: B018
