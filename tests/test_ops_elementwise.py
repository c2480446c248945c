"""Elementwise ops: forward against numpy (float32, float64), backward against central finite
differences (float64) over broadcast shapes, scalars/arrays as operands, errors, NaN/inf, casts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tinyopt as to
from tinyopt.engine import ops as O

from gradcheck import gradcheck

SETTINGS = settings(max_examples=15, deadline=None)
PAIRS = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1,
                                      max_side=4)
SHAPES = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
DTYPES = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)


def rand(shape, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


def away_from(x, points=(0.0,), gap=0.1):
    """Push values at least ``gap`` away from the kinks of a piecewise op."""
    for p in points:
        near = np.abs(x - p) < gap
        x = np.where(near, p + np.where(x >= p, gap, -gap) * 2, x)
    return x


def erf(x):
    return np.vectorize(math.erf)(x)


# ---- binary arithmetic ---------------------------------------------------------------------------
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "pow": (lambda a, b: a ** b, np.power),
    "maximum": (O.maximum, np.maximum),
    "minimum": (O.minimum, np.minimum),
}


def binary_inputs(name, sa, sb, seed=0):
    a, b = rand(sa, seed), rand(sb, seed + 1)
    if name == "div":
        b = away_from(b, gap=0.3)
    if name == "pow":
        a = rand(sa, seed, 0.5, 2.0)
    return a, b  # maximum/minimum: continuous random values never tie (ties: a separate test)


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(shapes=PAIRS)
def test_binary_forward(name, dtype, shapes):
    f, ref = BINARY[name]
    sa, sb = shapes.input_shapes
    a, b = binary_inputs(name, sa, sb)
    a, b = a.astype(dtype), b.astype(dtype)
    out = f(to.tensor(a), to.tensor(b))
    assert out.shape == shapes.result_shape and out.dtype == dtype
    np.testing.assert_allclose(out.numpy(), ref(a, b), **tol(dtype))


@pytest.mark.parametrize("name", list(BINARY))
@SETTINGS
@given(shapes=PAIRS, seed=st.integers(0, 100))
def test_binary_backward(name, shapes, seed):
    f, _ = BINARY[name]
    sa, sb = shapes.input_shapes
    gradcheck(f, *binary_inputs(name, sa, sb, seed))


def test_maximum_minimum_ties_split_the_gradient():
    a, b = to.Parameter([1.0, 2.0, 3.0]), to.Parameter([1.0, 0.0, 5.0])
    O.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(b.grad, [0.5, 0.0, 1.0])
    a.grad = b.grad = None
    O.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad, [0.5, 1.0, 0.0])


def test_pow_special_exponents():
    x = to.Parameter(np.array([0.0, 1.5, 2.0]))
    (x ** 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])  # d x^0 / dx = 0, even at x = 0
    x.grad = None
    (x ** 2).sum().backward()
    np.testing.assert_allclose(x.grad, [0.0, 3.0, 4.0])
    # d (c^x)/dx = c^x log c, and the gradient of 0^y at y > 0 is 0 (PyTorch).
    y = to.Parameter(np.array([1.0, 2.0]))
    (2.0 ** y).sum().backward()
    np.testing.assert_allclose(y.grad, [2 * math.log(2), 4 * math.log(2)])
    base, e = to.Parameter(np.array([0.0])), to.Parameter(np.array([2.0]))
    (base ** e).sum().backward()
    assert e.grad[0] == 0.0 and base.grad[0] == 0.0


# ---- scalars and numpy arrays as operands --------------------------------------------------------
def test_python_scalars_and_arrays_are_operands():
    a = np.array([[1.0, -2.0, 3.0]], dtype=np.float32)
    t = to.tensor(a)
    cases = {
        "2 - t": (2 - t, 2 - a), "t - 2": (t - 2, a - 2), "2 * t": (2 * t, 2 * a),
        "2.5 + t": (2.5 + t, 2.5 + a), "1 / t": (1 / t, 1 / a), "t / 4": (t / 4, a / 4),
        "2 ** t": (2 ** t, 2.0 ** a), "t ** 2": (t ** 2, a ** 2), "-t": (-t, -a),
        "np * t": (np.array([[2.0], [3.0]], np.float32) * t, np.array([[2.0], [3.0]]) * a),
        "t + np": (t + np.ones(3, np.float32), a + 1),
        "np - t": (np.ones(3, np.float32) - t, 1 - a),
        "np / t": (np.full(3, 6.0, np.float32) / t, 6 / a),
        "np scalar * t": (np.float32(3.0) * t, 3 * a),
        "list + t": ([1.0, 1.0, 1.0] + t, a + 1),
        "maximum(t, 0)": (O.maximum(t, 0.0), np.maximum(a, 0)),
        "minimum(np, t)": (O.minimum(np.zeros(3, np.float32), t), np.minimum(0, a)),
        "where(t > 0, t, 0)": (O.where(t > 0, t, 0.0), np.where(a > 0, a, 0)),
        "where(np, 1, t)": (O.where(np.array([True, False, True]), 1.0, t),
                            np.where([1, 0, 1], 1, a)),
    }
    for name, (got, want) in cases.items():
        assert isinstance(got, to.Tensor), name
        assert got.dtype == np.float32, name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, err_msg=name)


def test_reversed_operators_differentiate():
    x = to.Parameter(np.array([1.0, 2.0, 4.0]))
    (2 - x).sum().backward()
    np.testing.assert_array_equal(x.grad, [-1, -1, -1])
    x.grad = None
    (np.array([1.0, 2.0, 3.0]) * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [1, 2, 3])
    x.grad = None
    (8 / x).sum().backward()
    np.testing.assert_allclose(x.grad, [-8, -2, -0.5])


def test_dtype_promotion():
    f32, f64 = to.tensor([1.0]), to.tensor(np.array([1.0]))
    assert f64.dtype == np.float64  # a float64 numpy array keeps its dtype
    assert (f32 + f64).dtype == np.float64
    assert (f32 * 2).dtype == np.float32 and (f64 * 2.0).dtype == np.float64
    i = to.tensor([1, 2, 3])
    assert i.dtype == np.int64
    assert (i + 1).dtype == np.int64 and (i + 1).tolist() == [2, 3, 4]
    assert (i * i).tolist() == [1, 4, 9] and (i - 5).tolist() == [-4, -3, -2]
    assert (-i).tolist() == [-1, -2, -3] and abs(-i).tolist() == [1, 2, 3]
    assert O.maximum(i, 2).tolist() == [2, 2, 3] and O.minimum(i, 2).tolist() == [1, 2, 2]
    assert (i * 2.5).dtype == np.float32 and (i * 2.5).tolist() == [2.5, 5.0, 7.5]
    assert (i / 2).dtype == np.float32 and (i / 2).tolist() == [0.5, 1.0, 1.5]
    assert (i + f64).dtype == np.float64
    big = to.tensor(np.array([2 ** 62 + 1]))
    assert (big + 0).tolist() == [2 ** 62 + 1]  # integer arithmetic is exact, not via float64


# ---- unary ---------------------------------------------------------------------------------------
def np_gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def np_softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


UNARY = {  # name: (tinyopt fn, numpy reference, input range)
    "neg": (lambda x: -x, np.negative, (-3, 3)),
    "abs": (lambda x: x.abs(), np.abs, (-3, 3)),
    "exp": (lambda x: x.exp(), np.exp, (-3, 3)),
    "log": (lambda x: x.log(), np.log, (0.2, 3)),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, (0.2, 3)),
    "square": (lambda x: x.square(), np.square, (-3, 3)),
    "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0), (-3, 3)),
    "leaky_relu": (O.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x), (-3, 3)),
    "leaky_relu_0.2": (lambda x: O.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
                       (-3, 3)),
    "gelu": (O.gelu, np_gelu, (-4, 4)),
    "gelu_tanh": (lambda x: O.gelu(x, approximate="tanh"), np_gelu_tanh, (-4, 4)),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "tanh": (lambda x: x.tanh(), np.tanh, (-3, 3)),
    "silu": (O.silu, lambda x: x / (1 + np.exp(-x)), (-6, 6)),
    "softplus": (O.softplus, np_softplus, (-6, 6)),
    "softplus_beta": (lambda x: O.softplus(x, beta=2.0, threshold=5.0),
                      lambda x: np_softplus(x, 2.0, 5.0), (-6, 6)),
    "clamp": (lambda x: x.clamp(-1.0, 0.5), lambda x: np.clip(x, -1.0, 0.5), (-3, 3)),
    "clamp_min": (lambda x: x.clamp(min=0.25), lambda x: np.maximum(x, 0.25), (-3, 3)),
    "clamp_max": (lambda x: O.clamp(x, max=0.25), lambda x: np.minimum(x, 0.25), (-3, 3)),
}
KINKS = {"abs": (0.0,), "relu": (0.0,), "leaky_relu": (0.0,), "leaky_relu_0.2": (0.0,),
         "clamp": (-1.0, 0.5), "clamp_min": (0.25,), "clamp_max": (0.25,),
         "softplus_beta": (2.5,)}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_forward(name, dtype):
    f, ref, (lo, hi) = UNARY[name]
    x = rand((3, 5), 1, lo, hi).astype(dtype)
    out = f(to.tensor(x))
    assert out.shape == x.shape and out.dtype == dtype
    want = ref(x.astype(np.float64))
    t = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), want, **t)


@pytest.mark.parametrize("name", list(UNARY))
@settings(max_examples=8, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 100))
def test_unary_backward(name, shape, seed):
    f, _, (lo, hi) = UNARY[name]
    x = away_from(rand(shape, seed, lo, hi), KINKS.get(name, ()), gap=0.05)
    gradcheck(f, x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_matches_torch(approximate, dtype):
    torch = pytest.importorskip("torch")
    x = np.linspace(-8, 8, 101).astype(dtype)
    p = to.Parameter(x)
    y = O.gelu(p, approximate=approximate)
    (y * y).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    (ty * ty).sum().backward()
    t = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **t)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), **t)


def test_activations_match_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.concatenate([np.linspace(-30, 30, 61), [-100.0, 100.0, 0.0]])
    tx = torch.tensor(x)
    pairs = [(O.silu, F.silu), (O.softplus, F.softplus), (lambda t: t.sigmoid(), torch.sigmoid),
             (lambda t: O.softplus(t, 0.5, 3.0), lambda t: F.softplus(t, 0.5, 3.0)),
             (lambda t: O.leaky_relu(t, 0.1), lambda t: F.leaky_relu(t, 0.1))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(to.tensor(x)).numpy(), theirs(tx).numpy(), rtol=1e-12,
                                   atol=1e-300)


def test_activation_gradients_at_kinks_follow_pytorch():
    x = to.Parameter(np.array([0.0, 0.0, -1.0, 0.5]))
    x.relu().sum().backward()
    assert x.grad[0] == 0.0  # relu'(0) = 0
    x.grad = None
    x.abs().sum().backward()
    assert x.grad[0] == 0.0  # sign(0) = 0
    x.grad = None
    x.clamp(-1.0, 0.5).sum().backward()
    np.testing.assert_array_equal(x.grad, [1, 1, 1, 1])  # bounds pass the gradient


# ---- where, comparisons, casts -------------------------------------------------------------------
@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3),
       seed=st.integers(0, 100))
def test_where(shapes, seed):
    sc, sa, sb = shapes.input_shapes
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, size=sc).astype(bool)
    a, b = rand(sa, seed), rand(sb, seed + 1)
    out = O.where(c, to.tensor(a), to.tensor(b))
    assert out.shape == shapes.result_shape
    np.testing.assert_array_equal(out.numpy(), np.where(c, a, b))
    gradcheck(lambda x, y: O.where(c, x, y), a, b)


def test_where_conditions():
    a = to.tensor([1.0, 2.0, 3.0, 4.0])
    # bools, a bool array, a computed mask (bool * bool is bool, as in PyTorch)
    for cond in ([True, False, True, False], np.array([2, 0, -1, 0]) != 0,
                 (a != 2) * (a != 4), (a != 2) & (a != 4)):
        np.testing.assert_array_equal(O.where(cond, a, -a).numpy(), [1, -2, 3, -4])
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        O.where(np.array([2, 0, -1, 0]), a, -a)  # PyTorch accepts bool conditions only
    np.testing.assert_array_equal(O.where(a > 2, 1.0, 0.0).numpy(), [0, 0, 1, 1])
    assert O.where(a > 2, 1, 0).dtype == np.int64  # Python numbers: their own dtype


def test_pow_of_negative_bases():
    x = to.Parameter(np.array([-3.0, -0.5, 2.0]))
    y = x ** 3.0
    np.testing.assert_array_equal(y.numpy(), [-27.0, -0.125, 8.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [27.0, 0.75, 12.0])
    with np.errstate(invalid="ignore"):
        assert np.isnan((x ** 0.5).numpy()[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_comparisons(dtype):
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype=dtype)
    b = np.array([2, 2, 2], dtype=dtype)
    ta, tb = to.tensor(a), to.tensor(b)
    for got, want in [(ta == tb, a == b), (ta != tb, a != b), (ta < tb, a < b), (ta <= tb, a <= b),
                      (ta > tb, a > b), (ta >= tb, a >= b), (ta > 2, a > 2), (2 > ta, 2 > a),
                      (ta.eq(tb), a == b), (ta.ge(1), a >= 1)]:
        assert got.dtype == np.bool_ and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_comparisons_with_nan():
    t = to.tensor([np.nan, 1.0])
    assert (t == t).tolist() == [False, True] and (t != t).tolist() == [True, False]
    assert (t < 2.0).tolist() == [False, True] and (t > 2.0).tolist() == [False, False]


def test_casts():
    x = to.tensor([-1.7, -0.5, 0.5, 2.9])
    assert x.long().dtype == np.int64 and x.long().tolist() == [-1, 0, 0, 2]  # toward zero
    assert x.double().dtype == np.float64
    np.testing.assert_array_equal(x.double().numpy(), x.numpy().astype(np.float64))
    i = to.tensor([1, 2])
    assert i.float().dtype == np.float32 and i.float().tolist() == [1.0, 2.0]
    assert i.to(to.float64).dtype == np.float64 and i.to("float32").dtype == np.float32
    assert x.to(x.dtype) is x
    assert x.type_as(i).dtype == np.int64
    # Gradients flow through float casts, in the source's dtype.
    p = to.Parameter(np.array([1.0, 2.0], dtype=np.float32))
    (p.double() * np.array([3.0, 4.0])).sum().backward()
    assert p.grad.dtype == np.float32
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])
    # ...and stop at a cast to int.
    q = to.Parameter([1.5, 2.5])
    assert not q.long().requires_grad


# ---- errors --------------------------------------------------------------------------------------
def test_broadcast_mismatch_names_op_and_shapes():
    a, b = to.tensor(np.ones((2, 3))), to.tensor(np.ones((4,)))
    for fn, name in [(lambda: a + b, "add"), (lambda: a * b, "mul"), (lambda: a / b, "div"),
                     (lambda: a - b, "sub"), (lambda: O.maximum(a, b), "maximum"),
                     (lambda: a < b, "lt"), (lambda: O.where(np.ones(3, bool), a, b), "where")]:
        with pytest.raises(RuntimeError, match=rf"{name}.*\(2, 3\).*\(4,\)"):
            fn()


def test_float_functions_of_int_tensors_compute_in_float32():
    # As in PyTorch: exp/log/sqrt/... of an integer tensor are float32; relu keeps the dtype.
    i = to.tensor([1, 2, 3])
    a = np.array([1.0, 2.0, 3.0], np.float32)
    for got, want in [(i.exp(), np.exp(a)), (i.log(), np.log(a)), (i.sqrt(), np.sqrt(a)),
                      (i.sigmoid(), 1 / (1 + np.exp(-a))), (O.gelu(i.float()), np_gelu(a)),
                      (i.tanh(), np.tanh(a)), (i / 2, a / 2)]:  # (torch refuses gelu of ints)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert i.relu().dtype == np.int64 and i.abs().dtype == np.int64


def test_clamp_with_crossed_bounds_gives_max():
    x = to.Parameter(np.array([0.0, 1.5, 3.0]))
    y = x.clamp(2.0, 1.0)  # min(max(x, 2), 1), as in PyTorch
    np.testing.assert_array_equal(y.numpy(), [1.0, 1.0, 1.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])


def test_bad_arguments():
    x = to.tensor([1.0])
    with pytest.raises(ValueError, match="approximate"):
        O.gelu(x, approximate="fast")
    with pytest.raises(RuntimeError, match="clamp"):
        x.clamp()


def test_backward_needs_a_scalar():
    p = to.Parameter(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"scalar.*\(2, 3\)"):
        (p * 2).backward()
    assert p.grad is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        to.tensor([1.0]).sum().backward()


def test_nothing_computes_before_realization():
    p = to.Parameter(np.ones(3))
    y = (p * 2).exp()
    assert y.value is None and p.grad is None


# ---- NaN and inf propagate like numpy / PyTorch --------------------------------------------------
def test_nan_and_inf_propagate():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 2.0])
    t = to.tensor(x, dtype=to.float64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(t.relu().numpy(), [np.nan, np.inf, 0, 0, 0, 2])
        np.testing.assert_array_equal(t.exp().numpy(), np.exp(x))
        np.testing.assert_array_equal(t.log().numpy(), np.log(x))
        np.testing.assert_array_equal(t.sqrt().numpy(), np.sqrt(x))
        np.testing.assert_array_equal(t.tanh().numpy(), np.tanh(x))
        np.testing.assert_array_equal(t.sigmoid().numpy(), [np.nan, 1, 0, 0.5, 1 / (1 + np.e),
                                                            1 / (1 + np.exp(-2))])
        np.testing.assert_array_equal(t.abs().numpy(), np.abs(x))
        np.testing.assert_array_equal((t * 0).numpy(), x * 0)
        np.testing.assert_array_equal((t / 0.0).numpy(), x / 0.0)
        np.testing.assert_array_equal(t.clamp(-1, 1).numpy(), [np.nan, 1, -1, 0, -1, 1])
    assert np.isnan(O.maximum(t, 0.0).numpy()[0]) and np.isnan(O.minimum(0.0, t).numpy()[0])
    np.testing.assert_array_equal(O.maximum(t, 0.0).numpy()[1:], [np.inf, 0, 0, 0, 2])
    # PyTorch's values at (nan, inf, -inf): x * sigmoid(x) is -inf * 0 = nan at -inf.
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(O.silu(t).numpy()[:3], [np.nan, np.inf, np.nan])
        np.testing.assert_array_equal(O.softplus(t).numpy()[:3], [np.nan, np.inf, 0.0])
        np.testing.assert_array_equal(O.gelu(t).numpy()[:3], [np.nan, np.inf, np.nan])
        np.testing.assert_array_equal(O.gelu(t, "tanh").numpy()[:3], [np.nan, np.inf, np.nan])
        np.testing.assert_array_equal(O.leaky_relu(t).numpy()[:3], [np.nan, np.inf, -np.inf])


def test_relu_at_nan_inf_and_signed_zeros_is_pytorchs():
    # PyTorch: relu = clamp_min(x, 0) (-0.0 stays -0.0), backward = threshold_backward(g, y, 0):
    # 0 where y <= 0 (even for a NaN g), else g, so a NaN input passes its gradient (issue 9.12)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, np.nan])
    g = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, np.nan])
    want_y = np.array([np.nan, np.inf, 0.0, 0.0, -0.0, 1.5, 0.0, np.nan])
    want_g = np.array([1.0, 2.0, 0.0, 0.0, 0.0, 6.0, 0.0, np.nan])
    for dtype in (np.float32, np.float64):
        p = to.Parameter(x.astype(dtype))
        y = p.relu()
        (y * to.tensor(g.astype(dtype))).sum().backward()
        assert y.numpy().tobytes() == want_y.astype(dtype).tobytes()
        assert p.grad.numpy().tobytes() == want_g.astype(dtype).tobytes()
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.relu(tx)
    ty.backward(torch.tensor(g))
    assert ty.detach().numpy().tobytes() == want_y.tobytes()
    assert tx.grad.numpy().tobytes() == want_g.tobytes()


def test_abs_clears_the_sign_bit_as_pytorch():
    x = np.array([-0.0, 0.0, np.nan, -np.nan, -np.inf, -2.5, 3.0])
    for dtype in (np.float32, np.float64):
        got = to.tensor(x.astype(dtype)).abs().numpy()
        assert got.tobytes() == np.abs(x.astype(dtype)).tobytes()  # fabs: sign bit cleared
    assert to.tensor(np.array([-5, 7, -(2**62)])).abs().numpy().tolist() == [5, 7, 2**62]
    torch = pytest.importorskip("torch")
    assert torch.tensor(x).abs().numpy().tobytes() == np.abs(x).tobytes()


def test_nan_gradient_propagates():
    p = to.Parameter(np.array([np.nan, 1.0]))
    (p * p).sum().backward()
    assert np.isnan(p.grad[0]) and p.grad[1] == 2.0


def test_functions_accept_arrays_and_lists():
    a = rand((2, 3))
    for got, want in [
        (O.exp(a), np.exp(a)), (O.relu(a), np.maximum(a, 0)), (O.gelu(a), np_gelu(a)),
        (O.clamp(a, 0, 1), np.clip(a, 0, 1)), (O.leaky_relu(a), np.where(a > 0, a, 0.01 * a)),
        (O.softplus(a), np_softplus(a)), (O.sigmoid(a), 1 / (1 + np.exp(-a))),
        (O.tanh(a), np.tanh(a)), (O.silu(a), a / (1 + np.exp(-a))), (O.square(a), a * a),
        (O.abs(a), np.abs(a)), (O.neg(a), -a), (O.sqrt(4.0), 2.0), (O.exp([0.0, 1.0]), [1, np.e]),
        (O.add(a, 1), a + 1), (O.maximum(a, 0.0), np.maximum(a, 0)), (O.where(a > 0, a, 0.0),
                                                                     np.where(a > 0, a, 0)),
    ]:
        assert isinstance(got, to.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


# ---- ops composed: one graph, many op families, checked end to end ------------------------------
COMPOSE_UNARY = [  # each maps a (3, 3) tensor to a (3, 3) tensor
    lambda t: t.exp(), lambda t: t.tanh(), lambda t: -t, lambda t: t * t, lambda t: t.T,
    lambda t: t.sum(0, keepdim=True) - t, lambda t: t.softmax(-1), lambda t: t[[2, 1, 0]],
    lambda t: t.log_softmax(0), lambda t: t.sigmoid(),
    lambda t: t.mean(1, keepdim=True).expand(3, 3), lambda t: t.max(0)[0] * t,
    lambda t: t.logsumexp(1, keepdim=True) * t, lambda t: t @ t,
    lambda t: O.cat([t[:1], t[1:] * 2]), lambda t: t[[2, 0, 0]], lambda t: O.gelu(t),
    lambda t: t.reshape(9).reshape(3, 3), lambda t: O.stack([t[:, 1], t[:, 0], t[:, 2]], 1),
]
COMPOSE_BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b,
                  lambda a, b: a / (b * b + 1)]


@settings(max_examples=15, deadline=None)
@given(program=st.lists(st.tuples(st.booleans(), st.integers(0, 100), st.integers(0, 100),
                                  st.integers(0, 100)), min_size=1, max_size=6),
       seed=st.integers(0, 100))
def test_composed_ops_backward(program, seed):
    """Random graphs mixing op families (values reused, views of views, in-place candidates):
    the planner and autodiff must agree with finite differences, and leave leaves untouched."""
    def f(p, q):
        vals = [p, q]
        for unary, k, i, j in program:
            if unary:
                vals.append(COMPOSE_UNARY[k % len(COMPOSE_UNARY)](vals[i % len(vals)]))
            else:
                vals.append(COMPOSE_BINARY[k % len(COMPOSE_BINARY)](vals[i % len(vals)],
                                                                    vals[j % len(vals)]))
        return vals[-1] + vals[-2] * 0.5
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5
    gradcheck(f, a, b, rtol=1e-4, atol=1e-6)


# ---- the rest of PyTorch's math API, against torch 2.13 -----------------------------------------
from torchref import compare  # noqa: E402

_g = np.random.default_rng(11)
P = _g.uniform(0.2, 0.9, (3, 4))          # in (0, 1): every function defined and smooth
Q = _g.standard_normal((3, 4))
MATH_CASES = {
    "sin": (lambda L, x: x.sin(), P), "cos": (lambda L, x: L.cos(x), P),
    "tan": (lambda L, x: x.tan(), P), "sinh": (lambda L, x: x.sinh(), P),
    "cosh": (lambda L, x: x.cosh(), P), "asin": (lambda L, x: x.asin(), P),
    "acos": (lambda L, x: x.acos(), P), "atan": (lambda L, x: L.atan(x), Q),
    "rsqrt": (lambda L, x: x.rsqrt(), P), "log1p": (lambda L, x: x.log1p(), P),
    "expm1": (lambda L, x: x.expm1(), Q), "log2": (lambda L, x: x.log2(), P),
    "log10": (lambda L, x: x.log10(), P), "erf": (lambda L, x: x.erf(), Q),
    "reciprocal": (lambda L, x: x.reciprocal(), P), "sign": (lambda L, x: x.sign(), Q),
    "floor": (lambda L, x: (x * 3).floor(), Q), "ceil": (lambda L, x: (x * 3).ceil(), Q),
    "round": (lambda L, x: (x * 3).round(), Q), "round decimals": (lambda L, x: x.round(decimals=1), Q),
    "trunc": (lambda L, x: (x * 3).trunc(), Q), "remainder": (lambda L, x: x.remainder(0.3), Q),
    "fmod": (lambda L, x: L.fmod(x, 0.3), Q), "% tensor": (lambda L, x: (x * 5) % (x + 2), P),
    "pow tensors": (lambda L, x: x ** (x * 2), P), "rpow": (lambda L, x: 2.0 ** x, Q),
    "lerp": (lambda L, x: x.lerp(x * 3, 0.3), Q), "lerp tensor weight": (lambda L, x: L.lerp(x, -x, x), P),
    "clip": (lambda L, x: x.clip(-0.5, 0.5), Q), "clamp tensors": (lambda L, x: x.clamp(x * 0 - 0.5, x * 0 + 0.3), Q),
    "clamp_min": (lambda L, x: x.clamp_min(0.1), Q), "nan_to_num": (lambda L, x: (x.log()).nan_to_num(), Q),
    "where scalars": (lambda L, x: L.where(x > 0, x, 0.0), Q),
    "where scalar first": (lambda L, x: L.where(x > 0, 1.0, x * 2), Q),
    "masked_fill": (lambda L, x: x.masked_fill(x < 0, 0.5), Q),
    "addcmul": (lambda L, x: x.addcmul(x, x, value=0.5), Q), "addcdiv": (lambda L, x: L.addcdiv(x, x, x + 3), P),
    "xlogy": (lambda L, x: L.xlogy(x, x), P), "logaddexp": (lambda L, x: L.logaddexp(x, -x), Q),
    "atan2": (lambda L, x: L.atan2(x, x.flip(0) - 0.2), Q),
    "hypot": (lambda L, x: L.hypot(x, x * 2), P), "div trunc": (lambda L, x: x.div(0.3, rounding_mode="trunc"), Q),
    "div floor": (lambda L, x: L.div(x, 0.3, rounding_mode="floor"), Q),
    "abs": (lambda L, x: x.abs(), Q), "neg": (lambda L, x: -x, Q), "square": (lambda L, x: x.square(), Q),
    "sigmoid": (lambda L, x: x.sigmoid(), Q), "maximum": (lambda L, x: L.maximum(x, -x + 0.1), Q),
}


@pytest.mark.parametrize("name", list(MATH_CASES))
def test_math_against_torch(name):
    fn, x = MATH_CASES[name]
    piecewise = name in ("floor", "ceil", "round", "trunc", "sign", "round decimals",
                         "div trunc", "div floor")
    # floor-like functions have zero gradient (PyTorch); div with rounding has none in torch
    compare(fn, x, rtol=1e-9, grad=not name.startswith("div "), fd=not piecewise)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_integer_math_against_torch(dtype):
    torch = pytest.importorskip("torch")
    a = np.array([[3, -2, 0], [7, 1, -5]]).astype(dtype) if dtype != "bool" else \
        np.array([[True, False, True], [False, False, True]])
    cases = [lambda t: t * 2, lambda t: t + t, lambda t: t // 2 if dtype != "bool" else t & t,
             lambda t: t % 3 if dtype != "bool" else t | t, lambda t: t / 2, lambda t: t.abs() if dtype != "bool" else ~t,
             lambda t: t.exp(), lambda t: t.sqrt(), lambda t: t.float(), lambda t: t == 0,
             lambda t: t.sign() if dtype != "bool" else t ^ t, lambda t: t.clamp(0, 2) if dtype != "bool" else t,
             lambda t: t > 0, lambda t: t.sum(), lambda t: t.max(), lambda t: t.neg() if dtype != "bool" else t.logical_not()]
    for fn in cases:
        ours, theirs = fn(to.tensor(a)), fn(torch.tensor(a))
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), fn
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_floor_divide_has_no_gradient_as_in_torch():
    x = to.tensor([5.0, -3.0], requires_grad=True)
    y = x // 2
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        y.sum().backward()


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_of_equal_infinities_is_that_infinity(name):
    """Issue 25.9: logaddexp(-inf, -inf) and logaddexp(inf, inf) were NaN (inf - inf)."""
    a = np.array([-INF, INF, -INF, INF, 1.0, NAN, 3.0, -2.0, 0.0], np.float32)
    b = np.array([-INF, INF, INF, -INF, -INF, 1.0, 3.0, 5.0, 1e-3], np.float32)
    got = getattr(to, name)(to.tensor(a), to.tensor(b)).numpy()
    base = np.logaddexp if name == "logaddexp" else np.logaddexp2
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, base(a.astype(np.float64), b), rtol=1e-6)
    assert list(got[:4]) == [-INF, INF, INF, INF]
    gradcheck(lambda t, u: getattr(to, name)(t, u), [0.5, -1.0, 3.0], [0.25, 2.0, -4.0])
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(got, getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy(),
                               rtol=1e-6)


def test_atan2_quadrants_signed_zeros_infinities_and_origin_gradient():
    """C's atan2 on every pair of special values; the gradient at the origin (where r^2 is 0,
    or underflows) is 0 with torch's signs, not NaN; integers compute in float32."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 2.5], np.float32)
    a, b = (v.ravel() for v in np.meshgrid(vals, vals))
    got = to.atan2(to.tensor(a), to.tensor(b)).numpy()
    want = np.arctan2(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    y = to.tensor([0.0, -0.0, 0.0, 1e-30, -2.0], requires_grad=True)
    x = to.tensor([0.0, 0.0, -0.0, 0.0, 0.3], requires_grad=True)
    to.atan2(y, x).sum().backward()
    gy, gx = y.grad.numpy(), x.grad.numpy()
    assert list(gy[:4]) == [0.0] * 4 and list(np.signbit(gy[:4])) == [False, False, True, False]
    assert list(gx[:4]) == [0.0] * 4 and list(np.signbit(gx[:4])) == [True, False, True, True]
    np.testing.assert_allclose([gy[4], gx[4]], [0.3 / 4.09, 2.0 / 4.09], rtol=1e-6)
    assert to.atan2(to.tensor([1, 2]), to.tensor([3, 0])).dtype == to.float32
    with pytest.raises(RuntimeError, match="can't be cast"):
        to.tensor([1, 2]).atan2_(to.tensor([1, 1]))
    t = to.tensor([1.0, -1.0])
    t.arctan2_(to.tensor([-1.0, -1.0]))
    np.testing.assert_allclose(t.numpy(), [0.75 * np.pi, -0.75 * np.pi], rtol=1e-6)
    torch = pytest.importorskip("torch")
    yt, xt = (torch.tensor(v.detach().numpy(), requires_grad=True) for v in (y, x))
    torch.atan2(yt, xt).sum().backward()
    assert np.array_equal(np.signbit(yt.grad.numpy()), np.signbit(gy))
    assert np.array_equal(np.signbit(xt.grad.numpy()), np.signbit(gx))


def test_logsumexp_of_infinities_is_torchs():
    for row, expect in (([-INF, -INF], -INF), ([INF, INF], INF), ([INF, -INF], INF),
                        ([NAN, INF], NAN)):
        got = to.logsumexp(to.tensor(row), 0).item()
        assert got == expect or (math.isnan(expect) and math.isnan(got)), (row, got)


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod", "div_trunc", "div_floor"])
@pytest.mark.parametrize("divisor", ["number", "tensor", "0-d"])
def test_integer_division_by_zero_raises_torchs_error(op, divisor):
    """Issue 25.10: integer ``//``, ``%``, ``fmod`` by zero gave 0, trunc division -2**63."""
    fns = {"floor_divide": lambda m, a, b: a // b, "remainder": lambda m, a, b: a % b,
           "fmod": lambda m, a, b: m.fmod(a, b),
           "div_trunc": lambda m, a, b: m.div(a, b, rounding_mode="trunc"),
           "div_floor": lambda m, a, b: m.div(a, b, rounding_mode="floor")}
    fn = fns[op]

    def zero(m):
        return {"number": 0, "tensor": m.tensor([2, 0, 3]), "0-d": m.tensor(0)}[divisor]
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        fn(to, to.tensor([7, -7, 5]), zero(to))
    for dtype in (to.int32, to.uint8, to.int64):  # nonzero divisors still work, exactly
        a = to.tensor([7, 9, 2**31 - 1 if dtype == to.int32 else 5], dtype=dtype)
        b = to.tensor([2, 3, 7], dtype=dtype)
        assert fn(to, a, b).dtype == dtype
    big = to.tensor([2**62 + 1, -(2**62 + 1)])
    assert to.div(big, 3, rounding_mode="trunc").tolist() == [(2**62 + 1) // 3,
                                                              -((2**62 + 1) // 3)]
    assert (fn(to, to.tensor([7.0, -7.0]), 0.0).numpy() != 0).any()  # floats: inf/NaN, no error
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        fn(torch, torch.tensor([7, -7, 5]), zero(torch))
    for sign in (1, -1):
        a, b = sign * (2**62 + 1), 3
        assert (to.div(to.tensor([a, -a, 7]), to.tensor([b, b, -2]), rounding_mode="trunc")
                .tolist() == torch.div(torch.tensor([a, -a, 7]), torch.tensor([b, b, -2]),
                                       rounding_mode="trunc").tolist())


def test_clamp_with_a_nan_bound_is_nan_as_in_torch():
    """Issue 25.11: ``clamp(min=nan)`` ignored the NaN."""
    x = to.tensor([1.0, -2.0, NAN])
    for kw in (dict(min=NAN), dict(max=NAN), dict(min=NAN, max=1.0),
               dict(min=to.tensor(NAN)), dict(max=to.tensor([NAN, 0.0, 0.0]))):
        got = to.clamp(x, **kw).numpy()
        lo, hi = kw.get("min", -INF), kw.get("max", INF)
        lo = lo.numpy() if isinstance(lo, to.Tensor) else lo
        hi = hi.numpy() if isinstance(hi, to.Tensor) else hi
        expect = np.where(np.isnan(lo) | np.isnan(hi), NAN,
                          np.minimum(np.maximum(x.numpy(), lo), hi))
        np.testing.assert_array_equal(got, expect)
    assert np.isnan(to.clamp(to.tensor([1, 2]), min=NAN).numpy()).all()
    p = to.tensor([1.0, 2.0], requires_grad=True)
    to.clamp(p, min=NAN).sum().backward()
    assert p.grad.tolist() == [0.0, 0.0]  # torch: grad * (x >= min) & (x <= max)


def test_xlogy_of_zero_and_nan_is_nan_as_in_torch():
    x, y = [0.0, 0.0, 2.0, 0.0, NAN], [NAN, 0.0, NAN, 3.0, 1.0]
    got = to.xlogy(to.tensor(x), to.tensor(y)).numpy()
    np.testing.assert_array_equal(got, [NAN, 0.0, NAN, 0.0, NAN])
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(got, torch.xlogy(torch.tensor(x), torch.tensor(y)).numpy())


def test_where_and_masked_fill_on_bool_tensors():
    """Issue 25.14: ``where``/``masked_fill_`` of bool tensors raised numpy's UFuncTypeError (the
    bool inputs took the kernel's int64 loop)."""
    c = to.tensor([True, False, True])
    assert to.where(c, to.tensor([True, True, True]), to.tensor([False] * 3)).tolist() == \
        [True, False, True]
    x = to.ones(3, dtype=to.bool)
    assert x.masked_fill_(c, False).tolist() == [False, True, False] and x.dtype == to.bool
    assert to.where(c, to.tensor([1, 2, 3]), to.tensor([4, 5, 6])).tolist() == [1, 5, 3]


_INT_REFUSED = [("gelu", lambda m, x: m.nn.functional.gelu(x), "GeluKernelImpl", "iub"),
                ("silu", lambda m, x: m.nn.functional.silu(x), "silu_cpu", "iub"),
                ("leaky_relu", lambda m, x: m.nn.functional.leaky_relu(x), "leaky_relu_cpu",
                 "iub"),
                ("softplus", lambda m, x: m.nn.functional.softplus(x), "softplus_cpu", "iub"),
                ("logaddexp", lambda m, x: m.logaddexp(x, x), "logaddexp_cpu", "iub"),
                ("hypot", lambda m, x: m.hypot(x, x), "hypot_cpu", "iub"),
                ("abs", lambda m, x: x.abs(), "abs_cpu", "b"),
                ("floor", lambda m, x: x.floor(), "floor_vml_cpu", "b"),
                ("round", lambda m, x: x.round(), "round_vml_cpu", "b")]


@pytest.mark.parametrize("case", _INT_REFUSED, ids=[c[0] for c in _INT_REFUSED])
@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
def test_ops_torch_does_not_compute_on_integers_or_bools_raise_its_error(case, dtype):
    """They computed in float32 and returned what torch refuses (``gelu`` of an int64 tensor)."""
    _, fn, kernel, kinds = case
    name = {"int64": "Long", "uint8": "Byte", "bool": "Bool"}[dtype]
    x = to.tensor([1, 0, 2]).to(getattr(to, dtype))
    if np.dtype(dtype).kind not in kinds:
        assert fn(to, x).dtype == x.dtype  # (integers keep their dtype where torch computes)
        return
    with pytest.raises(NotImplementedError, match=f"^\"{kernel}\" not implemented for '{name}'$"):
        fn(to, x)
    torch = pytest.importorskip("torch")
    with pytest.raises(NotImplementedError, match=f"not implemented for '{name}'"):
        fn(torch, torch.tensor([1, 0, 2]).to(getattr(torch, dtype)))


def test_bool_sign_square_relu_and_python_ints_outside_small_dtypes_are_torchs():
    """``sign`` and ``square`` of bools were float32 (torch: bool and int64); an int scalar out
    of a small integer dtype's range raised numpy's OverflowError (torch wraps it)."""
    b = to.tensor([True, False])
    assert b.sign().dtype == to.bool and b.sign().tolist() == [True, False]
    assert b.square().dtype == to.int64 and b.square().tolist() == [1, 0]
    with pytest.raises(RuntimeError, match="^Boolean inputs not supported for relu$"):
        b.relu()
    u, i8 = to.tensor([1, 2], dtype=to.uint8), to.tensor([1, 2], dtype=to.int8)
    assert (u + (-1)).tolist() == [0, 1] and (u * -1).tolist() == [255, 254]
    assert (u + 300).tolist() == [45, 46] and (i8 + 200).tolist() == [-55, -54]
    assert to.full((2,), -1, dtype=to.uint8).tolist() == [255, 255]
    assert to.where(u > 1, u, -1).tolist() == [255, 2]
    assert u.masked_fill(u > 1, -1).tolist() == [1, 255]
    with pytest.raises(RuntimeError, match="^Integers to negative integer powers are not allowed"):
        u ** -1
    torch = pytest.importorskip("torch")
    tu = torch.tensor([1, 2], dtype=torch.uint8)
    assert (tu + (-1)).tolist() == [0, 1] and torch.where(tu > 1, tu, -1).tolist() == [255, 2]
    assert torch.tensor([True, False]).sign().dtype == torch.bool
    assert torch.tensor([True, False]).square().dtype == torch.int64


_FLOAT_ONLY = [  # float-only ops torch refuses integers for: (name, call under either library)
    ("mean", lambda m, x: x.mean()), ("var", lambda m, x: x.var()),
    ("softmax", lambda m, x: x.softmax(0)), ("log_softmax", lambda m, x: x.log_softmax(0)),
    ("cross_entropy", lambda m, x: m.nn.functional.cross_entropy(x.reshape(1, 3),
                                                                 m.tensor([0]))),
    ("dropout", lambda m, x: m.nn.functional.dropout(x, 0.5)),
    ("logcumsumexp", lambda m, x: x.logcumsumexp(0)), ("lerp", lambda m, x: m.lerp(x, x, 0.5)),
    ("layer_norm", lambda m, x: m.nn.functional.layer_norm(x, (3,))),
    ("mse_loss", lambda m, x: m.nn.functional.mse_loss(x, x)),
    ("l1_loss", lambda m, x: m.nn.functional.l1_loss(x, x)),
    ("smooth_l1_loss", lambda m, x: m.nn.functional.smooth_l1_loss(x, x)),
    ("binary_cross_entropy", lambda m, x: m.nn.functional.binary_cross_entropy(x, x)),
    ("kl_div", lambda m, x: m.nn.functional.kl_div(x, x)),
    ("cosine_similarity", lambda m, x: m.nn.functional.cosine_similarity(x, x, dim=0)),
    ("elu", lambda m, x: m.nn.functional.elu(x)), ("mish", lambda m, x: m.nn.functional.mish(x)),
    ("group_norm", lambda m, x: m.nn.functional.group_norm(x.reshape(1, 3, 1), 1))]


@pytest.mark.parametrize("case", _FLOAT_ONLY, ids=[c[0] for c in _FLOAT_ONLY])
def test_float_only_ops_refuse_integers_with_torchs_error(case):
    """They raised a TypeError of tinyopt's own where torch raises NotImplementedError or
    RuntimeError with its words."""
    _, fn = case
    with pytest.raises((NotImplementedError, RuntimeError)) as ours:
        fn(to, to.tensor([1, 2, 0]))
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as theirs:
        fn(torch, torch.tensor([1, 2, 0]))
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


CLAMP_BOUNDS = [("uint8", 0, 300), ("uint8", -1, 100), ("uint8", 5, -1), ("uint8", -255, None),
                ("int8", -200, 5), ("int16", -40000, None), ("int32", None, -5), ("uint8", 0, 2.5),
                ("int64", 0, 2 ** 62), ("bool", 0, 5), ("float16", 0, 1e6), ("float16", 0.1, None),
                ("float32", 0, 1e300), ("float32", float("nan"), 1), ("float64", 0, 1e300)]


@pytest.mark.parametrize("dtype, lo, hi", CLAMP_BOUNDS)
def test_clamp_converts_number_bounds_to_the_dtype_as_torch(dtype, lo, hi):
    """Issue 25: torch converts clamp's bounds to the tensor's dtype, checked: a uint8 tensor
    takes -1 as 255 (tinyopt clamped to -1 as a float), 300 raises torch's overflow error."""
    torch = pytest.importorskip("torch")

    def run(lib):
        x = lib.tensor([True, False, True]) if dtype == "bool" else \
            lib.tensor([0, 3, 100], dtype=getattr(lib, dtype))
        try:
            r = x.clamp(lo, hi)
        except RuntimeError as e:
            return str(e)
        return str(r.tolist()), str(r.dtype).split(".")[-1]

    assert run(to) == run(torch)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_nan_and_inf_flags_of_16_bit_floats(dtype):
    """isnan/isinf/isfinite/isposinf/isneginf read a float16 or bfloat16 tensor's values (they
    called every non-float32/64 tensor an integer one: never NaN, always finite)."""
    pytest.importorskip("ml_dtypes")
    x = to.tensor([1.0, math.nan, math.inf, -math.inf, -0.0]).to(getattr(to, dtype))
    for name, want in [("isnan", [0, 1, 0, 0, 0]), ("isinf", [0, 0, 1, 1, 0]),
                       ("isfinite", [1, 0, 0, 0, 1]), ("isposinf", [0, 0, 1, 0, 0]),
                       ("isneginf", [0, 0, 0, 1, 0])]:
        got = getattr(x, name)()
        assert got.dtype == np.bool_ and got.tolist() == [bool(w) for w in want], name
