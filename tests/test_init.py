"""nn.init: PyTorch's formulas for gains, fans, bounds and standard deviations; reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyopt
from tinyopt import nn
from tinyopt.nn import init


@pytest.fixture(autouse=True)
def _seeded():
    """Statistical assertions below use fixed draws, so they cannot flake."""
    tinyopt.manual_seed(0)


def param(*shape, dtype=np.float32):
    return nn.Parameter(np.zeros(shape, dtype))


@pytest.mark.parametrize("name, param_, expected", [
    ("linear", None, 1.0), ("conv2d", None, 1.0), ("sigmoid", None, 1.0),
    ("tanh", None, 5 / 3), ("relu", None, math.sqrt(2)), ("selu", None, 0.75),
    ("leaky_relu", None, math.sqrt(2 / (1 + 0.01 ** 2))),
    ("leaky_relu", math.sqrt(5), math.sqrt(2 / 6)), ("leaky_relu", 0, math.sqrt(2)),
])
def test_calculate_gain(name, param_, expected):
    assert init.calculate_gain(name, param_) == pytest.approx(expected)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", True)


def test_calculate_gain_matches_torch():
    torch = pytest.importorskip("torch")
    for name in ["linear", "conv1d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]:
        assert init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))


@pytest.mark.parametrize("shape, fans", [
    ((5, 3), (3, 5)), ((8, 4, 3, 3), (36, 72)), ((2, 6, 5), (30, 10)),
])
def test_fan_in_fan_out(shape, fans):
    assert init._calculate_fan_in_and_fan_out(param(*shape)) == fans


def test_fan_needs_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(param(4))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(param(4, 4), mode="fan_avg")


def _uniform_bound_ok(arr, bound):
    # the draws fill the interval: within the bound, and reaching close to it on both sides
    assert np.abs(arr).max() <= bound
    assert arr.max() > 0.95 * bound and arr.min() < -0.95 * bound


def test_kaiming_uniform_bound_linear_default():
    p = param(200, 300)
    assert init.kaiming_uniform_(p, a=math.sqrt(5)) is p
    gain = math.sqrt(2 / (1 + 5))
    _uniform_bound_ok(p.data, gain * math.sqrt(3 / 300))  # = 1 / sqrt(fan_in)
    assert p.data.dtype == np.float32


def test_kaiming_uniform_fan_out_relu():
    p = param(64, 16, 3, 3)
    init.kaiming_uniform_(p, mode="fan_out", nonlinearity="relu")
    _uniform_bound_ok(p.data, math.sqrt(2) * math.sqrt(3 / (64 * 9)))


def test_kaiming_normal_std():
    p = param(400, 250)
    init.kaiming_normal_(p, nonlinearity="relu")
    assert p.data.std() == pytest.approx(math.sqrt(2 / 250), rel=0.02)
    assert abs(p.data.mean()) < 0.01 * math.sqrt(2 / 250) * 10


def test_xavier_uniform_and_normal():
    p = param(300, 500)
    init.xavier_uniform_(p, gain=2.0)
    _uniform_bound_ok(p.data, 2.0 * math.sqrt(6 / 800))
    init.xavier_normal_(p)
    assert p.data.std() == pytest.approx(math.sqrt(2 / 800), rel=0.02)


def test_uniform_normal_constant():
    p = param(100, 100)
    init.uniform_(p, -0.5, 2.0)
    assert p.data.min() >= -0.5 and p.data.max() < 2.0 and p.data.mean() == pytest.approx(0.75,
                                                                                           abs=0.03)
    init.normal_(p, mean=3.0, std=0.5)
    assert p.data.mean() == pytest.approx(3.0, abs=0.02)
    assert p.data.std() == pytest.approx(0.5, rel=0.03)
    assert (init.constant_(p, 0.25).data == 0.25).all()
    assert (init.ones_(p).data == 1).all() and (init.zeros_(p).data == 0).all()
    with pytest.raises(ValueError, match="from=1 > to=0"):
        init.uniform_(p, 1, 0)
    with pytest.raises(ValueError, match="std >= 0.0"):
        init.normal_(p, std=-1)


def test_trunc_normal_bounds_and_std():
    p = param(200, 200)
    init.trunc_normal_(p, mean=0.0, std=1.0, a=-1.0, b=1.5)
    assert p.data.min() >= -1.0 and p.data.max() <= 1.5
    init.trunc_normal_(p, std=0.02)  # the common ViT use: bounds far outside, plain normal
    assert p.data.std() == pytest.approx(0.02, rel=0.03)
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(p, a=1.0, b=0.0)


def test_eye_and_orthogonal():
    p = param(3, 5)
    np.testing.assert_array_equal(init.eye_(p).data, np.eye(3, 5))
    q = param(6, 4)
    init.orthogonal_(q, gain=2.0)
    np.testing.assert_allclose(q.data.T @ q.data, 4 * np.eye(4), atol=1e-5)
    with pytest.raises(ValueError, match="2 dimensions"):
        init.eye_(param(2, 2, 2))


def test_in_place_keeps_storage_and_works_on_arrays():
    p = param(4, 4)
    storage = p._data
    init.kaiming_uniform_(p)
    assert p._data is storage
    arr = np.zeros((4, 4))
    assert init.normal_(arr) is arr and arr.any()
    with pytest.raises(TypeError, match="floating-point"):
        init.normal_(np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="Parameter or numpy array"):
        init.zeros_([1.0, 2.0])


def test_zero_element_warns_and_is_noop():
    with pytest.warns(UserWarning, match="no-op"):
        init.kaiming_uniform_(param(0, 3))


def test_manual_seed_reproducible_and_explicit_generator():
    tinyopt.manual_seed(7)
    a = init.kaiming_uniform_(param(5, 5)).data.numpy().copy()
    b = init.normal_(param(5)).data.numpy().copy()
    tinyopt.manual_seed(7)
    np.testing.assert_array_equal(init.kaiming_uniform_(param(5, 5)).data, a)
    np.testing.assert_array_equal(init.normal_(param(5)).data, b)
    g1, g2 = tinyopt.Generator(3), tinyopt.Generator(3)
    x = init.xavier_normal_(param(4, 4), generator=g1).data
    state = tinyopt.get_rng_state()
    y = init.xavier_normal_(param(4, 4), generator=g2).data
    np.testing.assert_array_equal(x, y)
    assert tinyopt.get_rng_state() == state  # an explicit generator leaves the global one alone


def test_float64_parameters_are_filled_in_float64():
    p = param(10, 10, dtype=np.float64)
    init.uniform_(p)
    assert p.data.dtype == np.float64 and len(np.unique(p.data)) == 100


@pytest.mark.parametrize("shape, groups", [((6, 3, 3), 1), ((4, 2, 3, 5), 2), ((3, 5, 2, 3, 3), 1)])
def test_dirac_is_torchs_identity_convolution(shape, groups):
    w = init.dirac_(param(*shape), groups=groups).data.numpy()
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(w, torch.nn.init.dirac_(torch.empty(shape), groups).numpy())
    with pytest.raises(ValueError, match="divisible by groups"):
        init.dirac_(param(5, 2, 3), groups=2)
    with pytest.raises(ValueError, match="3, 4, or 5"):
        init.dirac_(param(2, 2))


def test_sparse_zeroes_that_many_rows_of_every_column():
    w = init.sparse_(param(40, 30), sparsity=0.3, std=0.5).data.numpy()
    assert ((w == 0).sum(axis=0) == 12).all()  # ceil(0.3 * 40) a column
    assert np.std(w[w != 0]) == pytest.approx(0.5, rel=0.1)
    with pytest.raises(ValueError, match="2 dimensions"):
        init.sparse_(param(2, 2, 2), 0.5)


@pytest.mark.parametrize("name", ["uniform", "normal", "constant", "eye", "dirac", "xavier_uniform",
                                  "xavier_normal", "kaiming_uniform", "kaiming_normal",
                                  "orthogonal", "sparse"])
def test_names_without_underscore_are_deprecated_aliases(name):
    args = {"constant": (0.5,), "sparse": (0.5,)}.get(name, ())
    p = param(4, 4, 3) if name == "dirac" else param(4, 4)
    with pytest.warns(FutureWarning, match=f"`nn.init.{name}` is now deprecated in favor of "
                                           f"`nn.init.{name}_`"):
        assert getattr(init, name)(p, *args) is p
