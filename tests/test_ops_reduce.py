"""Reductions: sum, mean, var/std, max/min (full, and along a dim with indices), argmax/argmin,
logsumexp, softmax, log_softmax.  Forward against numpy (float32, float64), backward against finite
differences, NaN/inf behaviour, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt.engine import ops as O

from gradcheck import gradcheck

SETTINGS = settings(max_examples=12, deadline=None)
SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)
DTYPES = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@st.composite
def shape_and_dims(draw, shapes=SHAPES):
    """A shape and a `dim` argument: None, an int or a tuple, with negative aliases."""
    shape = draw(shapes)
    nd = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return shape, None
    if kind == "int":
        return shape, draw(st.integers(-nd, nd - 1))
    dims = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    return shape, tuple(d - nd if draw(st.booleans()) else d for d in dims)


def np_axes(dim):
    return dim if dim is None or isinstance(dim, int) else tuple(dim)


# ---- sum / mean / var / std ------------------------------------------------------------------
REDUCTIONS = {
    "sum": (lambda t, d, k: t.sum(d, keepdim=k), lambda a, d, k: a.sum(axis=d, keepdims=k)),
    "mean": (lambda t, d, k: t.mean(dim=d, keepdim=k), lambda a, d, k: a.mean(axis=d, keepdims=k)),
    "var": (lambda t, d, k: t.var(d, keepdim=k), lambda a, d, k: a.var(axis=d, ddof=1, keepdims=k)),
    "var0": (lambda t, d, k: t.var(d, correction=0, keepdim=k),
             lambda a, d, k: a.var(axis=d, keepdims=k)),
    "std": (lambda t, d, k: t.std(d, keepdim=k), lambda a, d, k: a.std(axis=d, ddof=1, keepdims=k)),
}


def reduced_size(shape, dim):
    axes = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else dim
    return int(np.prod([shape[a] for a in axes]))


@pytest.mark.filterwarnings("ignore:Degrees of freedom")
@pytest.mark.parametrize("name", list(REDUCTIONS))
@SETTINGS
@given(sd=shape_and_dims(), keepdim=st.booleans())
def test_reduction_forward(name, sd, keepdim):
    shape, dim = sd
    f, ref = REDUCTIONS[name]
    x = rand(shape)
    for dtype in DTYPES:
        a = x.astype(dtype)
        out = f(to.tensor(a), dim, keepdim)
        with np.errstate(all="ignore"):
            want = ref(a.astype(np.float64), np_axes(dim), keepdim)
        assert out.shape == want.shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))


@pytest.mark.parametrize("name", list(REDUCTIONS))
@SETTINGS
@given(sd=shape_and_dims(), keepdim=st.booleans(), seed=st.integers(0, 100))
def test_reduction_backward(name, sd, keepdim, seed):
    shape, dim = sd
    if name in ("var", "std") and reduced_size(shape, dim) < 2:
        return  # var with correction 1 of one element is nan
    f, _ = REDUCTIONS[name]
    gradcheck(lambda t: f(t, dim, keepdim), rand(shape, seed))


def test_sum_keeps_int_and_is_exact():
    i = to.tensor(np.array([[2 ** 62, 1], [3, 4]]))
    assert i.sum().dtype == np.int64
    assert i.sum().item() == 2 ** 62 + 8
    assert i.sum(1).tolist() == [2 ** 62 + 1, 7] and i.sum(0).tolist() == [2 ** 62 + 3, 5]


def test_sum_mean_details():
    x = to.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert x.sum(dtype=to.float64).dtype == np.float64
    assert x.sum(()).item() == 15.0 and x.mean([]).item() == 2.5  # () means all dims (PyTorch)
    assert x.mean(dtype=to.float64).item() == 2.5
    s = to.tensor(3.0)
    assert s.sum().item() == 3.0 and s.sum(0).item() == 3.0 and s.mean(-1).item() == 3.0
    empty = to.tensor(np.zeros((0, 3)))
    np.testing.assert_array_equal(empty.sum(0).numpy(), [0, 0, 0])
    assert empty.sum().item() == 0.0
    assert np.isnan(empty.mean().item())
    # float32 sums accumulate accurately
    big = to.tensor(np.full(10 ** 5, 0.1, dtype=np.float32))
    assert abs(big.sum().item() - 10 ** 4) < 1e-2


def test_a_sum_is_a_new_tensor_not_a_view():
    """``x.sum()`` (also of a 0-d tensor, which sums nothing) and ``mean`` are new tensors, as
    in PyTorch: not views of ``x`` or of an inner node, so a later write into ``x`` does not
    show in them, and a write into them is an ordinary recorded one."""
    torch = pytest.importorskip("torch")
    got = []
    for lib in (to, torch):
        row = []
        for x in (lib.tensor(2.0), lib.tensor([2.0, 3.0]), lib.ones(2, 3)):
            sums = (x.sum(), x.mean(), x.sum(-1), x.sum(-1, keepdim=True))
            assert not any(t._is_view() for t in sums)
            x.add_(1.0)
            row += [t.numpy().copy() for t in sums]
        p = lib.nn.Parameter(lib.tensor([0.5, -1.0]))
        s = (p * 3.0).sum()
        s.mul_(2.0)
        (s * s).backward()
        row += [s.detach().numpy().copy(), p.grad.numpy().copy()]
        got.append(row)
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


def test_logsumexp_max_and_min_along_a_dim_are_new_tensors_not_views():
    """``logsumexp``/``max``/``min`` along a dim are new tensors, as torch's: no ``_base``, a
    view of one has it as its base, a write into one is an ordinary recorded write; values and
    gradients are torch's, and a write into a ``logsumexp`` (whose backward reads its output)
    before backward raises torch's error (the CRF's forward algorithm: a ``logsumexp`` a word
    and tag)."""
    torch = pytest.importorskip("torch")
    data = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -0.5]], np.float32)
    got = []
    for lib in (to, torch):
        row = []
        for graph in (False, True):
            x = lib.nn.Parameter(lib.tensor(data)) if graph else lib.tensor(data)
            h = x * 1.5 if graph else x
            outs = [lib.logsumexp(h, -1), lib.logsumexp(h, 0, keepdim=True)]
            for f in (lib.max, lib.min):
                outs += list(f(h, -1))
            for r in outs:
                assert not r._is_view() and r._base is None
                assert r.view(-1)._base is r
            outs[2].mul_(2.0) if graph else outs[0].add_(1.0)
            row += [t.detach().numpy().copy() for t in outs]
            if graph:
                (outs[0] * lib.tensor([1.0, -2.0]) + outs[1].sum() + outs[2] * outs[2]).sum(
                    ).backward()
                row.append(x.grad.numpy().copy())
                for keep in (False, True):
                    r = lib.logsumexp(x * 1.5, -1, keepdim=keep)
                    r.mul_(2.0)
                    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                        r.sum().backward()
        got.append(row)
    for a, b in zip(*got):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_the_mean_of_one_element_is_that_element_as_a_new_tensor():
    """The mean over one element (the smooth L1 loss of one sample, ``v.mean()``) gives torch's
    bits, -0.0, NaN, subnormals and the largest floats included, in float32 and float64, with
    torch's gradient; it is a new tensor (a write into ``x`` does not show in it)."""
    torch = pytest.importorskip("torch")
    vals = np.array([-0.0, np.nan, 1e-45, 3.4e38, 1 / 3, -2.5], np.float32)
    cases = [((), None), ((1,), None), ((1, 1), None), ((1, 1), 0), ((3, 1), 1), ((1, 3), 0),
             ((1, 2, 1), 0)]
    for dtype in (np.float32, np.float64):
        for shape, dim in cases:
            data = np.resize(vals, shape).astype(dtype)
            got = []
            for lib in (to, torch):
                x = lib.nn.Parameter(lib.tensor(data.copy()))
                m = x.mean() if dim is None else x.mean(dim)
                assert not m._is_view()
                (m * lib.arange(1, m.numel() + 1, dtype=m.dtype).reshape(m.shape)).sum().backward()
                before = m.detach().numpy().copy()
                with lib.no_grad():
                    x.add_(1.0)
                got.append((before, m.detach().numpy().copy(), x.grad.numpy().copy()))
            for a, b in zip(*got):
                assert a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8),
                                              np.atleast_1d(b).view(np.uint8))


def test_reduction_errors():
    x = to.tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError, match=r"Dimension out of range.*\[-2, 1\].*got 2"):
        x.sum(2)
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got -3\)$"):  # torch's words
        x.mean(-3)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.sum((0, -2))
    with pytest.raises(RuntimeError, match=r"mean\(\).*Got: Long"):  # (torch's words)
        to.tensor([1, 2]).mean()
    with pytest.raises(RuntimeError, match=r"std and var only support floating point"):
        to.tensor([1, 2]).var()
    with pytest.raises(RuntimeError, match=r"max\(\): Expected reduction dim to be specified"):
        to.tensor(np.zeros((0,))).max()


# ---- max / min / argmax / argmin -------------------------------------------------------------
@pytest.mark.parametrize("op", ["max", "min"])
@SETTINGS
@given(shape=SHAPES, data=st.data())
def test_max_min_along_dim(op, shape, data):
    nd = len(shape)
    d = data.draw(st.integers(-nd, nd - 1))
    keepdim = data.draw(st.booleans())
    x = rand(shape, data.draw(st.integers(0, 100)))
    x = np.round(x, 1)  # ties, so "the first index" is tested
    npv, npi = (np.max, np.argmax) if op == "max" else (np.min, np.argmin)
    for dtype in DTYPES:
        a = x.astype(dtype)
        r = getattr(to.tensor(a), op)(dim=d, keepdim=keepdim)
        values, indices = r
        assert r.values is values and r.indices is indices
        np.testing.assert_array_equal(values.numpy(), npv(a, axis=d, keepdims=keepdim))
        np.testing.assert_array_equal(indices.numpy(), npi(a, axis=d, keepdims=keepdim))
        assert indices.dtype == np.int64 and values.dtype == dtype
        arg = getattr(to.tensor(a), "arg" + op)(d, keepdim=keepdim)
        np.testing.assert_array_equal(arg.numpy(), npi(a, axis=d, keepdims=keepdim))
        full = getattr(to.tensor(a), op)()
        assert full.shape == () and full.item() == npv(a)
        assert getattr(to.tensor(a), "arg" + op)().item() == npi(a)
    # backward: the gradient goes to the selected element (distinct values)
    y = rand(shape, 7)
    gradcheck(lambda t: getattr(t, op)(d, keepdim=keepdim)[0], y)
    gradcheck(lambda t: getattr(t, op)(), y)


def test_max_gradient_on_ties():
    p = to.Parameter(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]))
    p.max().backward()  # full max: shared evenly among the tied maxima (PyTorch)
    np.testing.assert_array_equal(p.grad, [[0, 0.5, 0.5], [0, 0, 0]])
    p.grad = None
    p.max(dim=1).values.sum().backward()  # along a dim: to the returned (first) index
    np.testing.assert_array_equal(p.grad, [[0, 1, 0], [1, 0, 0]])
    p.grad = None
    p.min(1)[0].sum().backward()
    np.testing.assert_array_equal(p.grad, [[1, 0, 0], [0, 0, 1]])


def test_max_min_with_nan_and_inf():
    x = np.array([[1.0, np.nan, 5.0], [-np.inf, 2.0, np.inf]])
    t = to.tensor(x)
    assert np.isnan(t.max().item()) and np.isnan(t.min().item())
    v, i = t.max(1)
    assert np.isnan(v.numpy()[0]) and v.numpy()[1] == np.inf
    assert i.tolist() == [1, 2]  # NaN wins, as in PyTorch
    v, i = t.min(1)
    assert np.isnan(v.numpy()[0]) and v.numpy()[1] == -np.inf and i.tolist() == [1, 0]
    assert t.argmax().item() == 1
    assert to.tensor([-np.inf, -np.inf]).max().item() == -np.inf


def test_max_of_int():
    i = to.tensor([[3, 9, 2], [7, 1, 8]])
    assert i.max().item() == 9 and i.max().dtype == np.int64
    assert i.max(0)[0].tolist() == [7, 9, 8] and i.argmin(1).tolist() == [2, 1]


def test_max_errors():
    x = to.tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        x.max(2)
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        x.argmax(5)


@pytest.mark.parametrize("call", [
    lambda x: x.argmax(dim=1), lambda x: x.max(1)[0], lambda x: x.min(1, keepdim=True)[1],
    lambda x: x.argmin(1), lambda x: x.amax(1), lambda x: x.amin(-1, keepdim=True),
    lambda x: x.max(0), lambda x: x.argmax(), lambda x: x.argmin(0), lambda x: x.min(),
    lambda x: x.amax(), lambda x: x.amax(0)])
def test_max_min_of_an_empty_tensor_are_torchs(call):
    """Along a non-empty dimension the results are empty (a GCN's accuracy over an empty
    split); over an empty one, or over everything, torch's errors (argmax() never answers 0)."""
    torch = pytest.importorskip("torch")

    def run(lib):
        try:
            r = call(lib.zeros(0, 3))
            return tuple(r.shape), str(r.dtype).split(".")[-1]
        except (IndexError, RuntimeError) as e:
            return type(e).__name__, str(e)

    assert run(to) == run(torch)


def test_max_of_an_empty_tensor_keeps_the_graph():
    x = to.zeros(0, 3, requires_grad=True)
    x.max(1)[0].sum().backward()
    assert x.grad.shape == (0, 3)


# ---- logsumexp / softmax / log_softmax ---------------------------------------------------------
def np_logsumexp(a, axis, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    r = m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=axis)


def np_softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@SETTINGS
@given(sd=shape_and_dims(), keepdim=st.booleans(), seed=st.integers(0, 100))
def test_logsumexp(sd, keepdim, seed):
    shape, dim = sd
    if dim is None:
        dim = tuple(range(len(shape)))
    x = rand(shape, seed) * 3
    for dtype in DTYPES:
        out = to.tensor(x.astype(dtype)).logsumexp(dim, keepdim=keepdim)
        want = np_logsumexp(x, np_axes(dim), keepdim)
        assert out.shape == want.shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda t: t.logsumexp(dim, keepdim), x)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@SETTINGS
@given(shape=SHAPES, data=st.data())
def test_softmax_and_log_softmax(op, shape, data):
    nd = len(shape)
    d = data.draw(st.integers(-nd, nd - 1))
    x = rand(shape, data.draw(st.integers(0, 100))) * 3
    want = np_softmax(x, d) if op == "softmax" else np.log(np_softmax(x, d))
    for dtype in DTYPES:
        out = getattr(to.tensor(x.astype(dtype)), op)(d)
        assert out.shape == x.shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda t: getattr(O, op)(t, dim=d), x)


def test_softmax_is_stable_and_handles_inf():
    x = to.tensor(np.array([[1000.0, 1000.0, -1000.0], [0.0, -np.inf, 0.0]]))
    np.testing.assert_allclose(x.softmax(1).numpy(), [[0.5, 0.5, 0.0], [0.5, 0.0, 0.5]])
    np.testing.assert_allclose(x.log_softmax(1).numpy()[0, :2], [-np.log(2)] * 2)
    assert x.log_softmax(1).numpy()[1, 1] == -np.inf
    np.testing.assert_allclose(x.logsumexp(1).numpy(), [1000 + np.log(2), np.log(2)])
    big = to.tensor(np.array([88.0, 88.0], dtype=np.float32))  # exp(88) * 2 overflows float32
    assert np.isfinite(big.logsumexp(0).item()) and np.isfinite(big.softmax(0).numpy()).all()
    # An all -inf row: logsumexp is -inf (PyTorch), softmax is nan.
    ninf = to.tensor(np.array([[-np.inf, -np.inf]]))
    assert ninf.logsumexp(1).item() == -np.inf
    with np.errstate(invalid="ignore"):
        assert np.isnan(ninf.softmax(1).numpy()).all()
    nan = to.tensor(np.array([[np.nan, 1.0]]))
    with np.errstate(invalid="ignore"):
        assert np.isnan(nan.softmax(1).numpy()).all() and np.isnan(nan.logsumexp(1).item())


def test_softmax_dtype_and_errors():
    x = to.tensor(np.zeros((2, 3), np.float32))
    assert x.softmax(1, dtype=to.float64).dtype == np.float64
    with pytest.raises(NotImplementedError, match="\"softmax_lastdim_kernel_impl\" not "
                                                  "implemented for 'Long'"):  # (torch's error)
        to.tensor([1, 2]).softmax(0)
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        x.log_softmax(2)
    r = to.tensor([1, 2]).logsumexp(0)  # integers: float32, as torch's
    assert r.dtype == to.float32 and abs(r.item() - np.log(np.e + np.e**2)) < 1e-6


def test_softmax_matches_torch():
    torch = pytest.importorskip("torch")
    x = rand((4, 5, 3), 3) * 4
    g = rand((4, 5, 3), 4)
    for op in ("softmax", "log_softmax"):
        for d in range(3):
            p = to.Parameter(x)
            (getattr(p, op)(d) * g).sum().backward()
            tx = torch.tensor(x, requires_grad=True)
            (getattr(tx, op)(d) * torch.tensor(g)).sum().backward()
            np.testing.assert_allclose(getattr(p, op)(d).numpy(),
                                       getattr(tx, op)(d).detach().numpy(), rtol=1e-12,
                                       atol=1e-14)
            np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_functions_accept_arrays_and_lists():
    a = rand((2, 3))
    for got, want in [
        (O.sum(a), a.sum()), (O.mean(a, 1), a.mean(1)), (O.var(a), a.var(ddof=1)),
        (O.std(a, 0), a.std(0, ddof=1)), (O.max(a), a.max()), (O.min(a, 1)[0], a.min(1)),
        (O.argmax(a), a.argmax()), (O.argmin(a, 0), a.argmin(0)),
        (O.logsumexp(a, 1), np_logsumexp(a, 1)), (O.softmax(a, 1), np_softmax(a, 1)),
        (O.log_softmax(a, 0), np.log(np_softmax(a, 0))), (O.sum([1, 2, 3]), 6),
        (O.softmax([0.0, 0.0], 0), [0.5, 0.5]),
    ]:
        assert isinstance(got, to.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_log_softmax_of_a_row_with_inf_matches_pytorch():
    # PyTorch: log_softmax([inf, 1]) is all NaN, an all -inf row too; logsumexp([inf, 1]) is inf.
    x = to.tensor(np.array([[np.inf, 1.0], [-np.inf, -np.inf], [1.0, 2.0]], np.float32))
    out = x.log_softmax(1).numpy()
    assert np.isnan(out[:2]).all()
    np.testing.assert_allclose(out[2], [-1.3132616, -0.3132617], rtol=1e-6)
    np.testing.assert_array_equal(x.logsumexp(1).numpy()[:2], [np.inf, -np.inf])


# ---- more reductions and scans, against torch 2.13 ----------------------------------------------
from torchref import compare  # noqa: E402

R3 = np.random.default_rng(8).standard_normal((3, 4, 5))
Z3 = np.where(np.random.default_rng(9).random((3, 4, 5)) < 0.25, 0.0, R3)  # with zeros
T3 = np.round(R3 * 2) / 2  # with ties
REDUCE_CASES = {
    "prod": (lambda L, x: x.prod(), Z3), "prod dim": (lambda L, x: x.prod(1), Z3),
    "prod keepdim": (lambda L, x: L.prod(x, -1, keepdim=True), R3),
    "cumsum": (lambda L, x: x.cumsum(1), R3), "cumsum last": (lambda L, x: L.cumsum(x, -1), R3),
    "cumprod": (lambda L, x: x.cumprod(2), R3), "cumprod zeros": (lambda L, x: x.cumprod(1), Z3),
    "logcumsumexp": (lambda L, x: x.logcumsumexp(0), R3),
    "amax": (lambda L, x: x.amax(1), T3), "amax dims": (lambda L, x: L.amax(x, (0, 2)), T3),
    "amin all": (lambda L, x: x.amin(), T3), "amin keepdim": (lambda L, x: x.amin(-1, True), T3),
    "norm": (lambda L, x: x.norm(), R3), "norm p": (lambda L, x: x.norm(3, dim=1), R3),
    "vector_norm": (lambda L, x: L.linalg.vector_norm(x, 1, (0, 2)), R3),
    "std": (lambda L, x: x.std(1), R3), "std unbiased=False": (lambda L, x: x.std(0, False), R3),
    "var correction": (lambda L, x: L.var(x, 2, correction=0, keepdim=True), R3),
    "mean dtype": (lambda L, x: x.mean((0, 1)), R3), "logsumexp": (lambda L, x: x.logsumexp(1), R3),
    "max": (lambda L, x: x.max(), T3), "max with tensor": (lambda L, x: L.max(x, x.flip(2)), R3),
}


@pytest.mark.parametrize("name", list(REDUCE_CASES))
def test_more_reductions_against_torch(name):
    fn, x = REDUCE_CASES[name]
    # at ties the function is not differentiable: PyTorch's convention (split the gradient
    # evenly) is checked against torch only
    compare(fn, x, rtol=1e-9, fd=x is not T3)


def test_integer_and_bool_reductions_follow_torch():
    torch = pytest.importorskip("torch")
    for fn in [lambda L, t: t.sum(), lambda L, t: (t > 1).sum(), lambda L, t: t.prod(1),
               lambda L, t: t.cumsum(0), lambda L, t: (t > 1).any(), lambda L, t: (t > 0).all(1),
               lambda L, t: L.count_nonzero(t), lambda L, t: t.amax(0)]:
        a = np.array([[1, 2, 3], [0, 5, 1]], np.int32)
        o, w = fn(to, to.tensor(a)), fn(torch, torch.tensor(a))
        assert str(o.dtype) == str(w.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(o.numpy(), w.numpy())


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_a_0d_input_is_pytorchs(op):
    # found by tests/test_fuzz_api.py (was "ValueError: not enough values to unpack")
    f = getattr(to.nn.functional, op)
    for v, want in [(2.5, 1.0 if op == "softmax" else 0.0), (np.nan, np.nan), (np.inf, np.nan)]:
        x = to.tensor(np.float32(v), requires_grad=True)
        y = f(x, dim=-1)
        y.backward()
        assert y.numpy().shape == () and y.numpy().dtype == np.float32
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(x.grad.numpy(), 0.0 if v == 2.5 else np.nan)
    with pytest.raises(IndexError, match="Dimension out of range"):
        f(to.tensor(np.float32(1)), dim=1)


def test_keepdims_is_numpys_spelling_of_keepdim():
    x = to.tensor(np.arange(24.0).reshape(2, 3, 4))
    for name in ("sum", "mean", "amax", "amin", "prod", "logsumexp", "var", "std", "argmax",
                 "argmin", "any", "all"):
        a = getattr(to, name)(x, 1, keepdims=True)
        b = getattr(x, name)(1, keepdim=True)
        assert a.shape == b.shape == (2, 1, 4), name
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert x.max(2, keepdims=True)[0].shape == (2, 3, 1)
    assert x.median(0, keepdims=True)[1].shape == (1, 3, 4)


_ZERO_D = ["prod(0)", "prod(-1, keepdim=True)", "logcumsumexp(0)", "max(0)", "min(-1)",
           "argmax(0)", "argmin(0, keepdim=True)", "cumsum(0)", "sum(0)", "amax(0)",
           "logsumexp(0)"]


@pytest.mark.parametrize("call", _ZERO_D)
def test_reductions_over_a_dim_of_a_0d_tensor_are_torchs(call):
    """Issue 25.14: ``prod(0)``/``logcumsumexp(0)`` (and max/min/argmax over a dim) of a 0-d
    tensor raised "not enough values to unpack"; torch reads it as one element."""
    got = eval(f"x.{call}", {"x": to.tensor(3.0)})
    got = tuple(got) if isinstance(got, tuple) else (got,)
    expect = {"argmax": 0, "argmin": 0}.get(call.split("(")[0], 3.0)
    assert all(r.shape == () for r in got) and got[0].item() == expect
    if len(got) == 2:
        assert got[1].item() == 0 and got[1].dtype == to.int64
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range "
                                         r"of \[-1, 0\], but got 1\)$"):
        eval(f"x.{call.replace('(0', '(1').replace('(-1', '(1')}", {"x": to.tensor(3.0)})
    torch = pytest.importorskip("torch")
    theirs = eval(f"x.{call}", {"x": torch.tensor(3.0)})
    theirs = tuple(theirs) if isinstance(theirs, tuple) else (theirs,)
    for a, b in zip(got, theirs):
        assert a.shape == tuple(b.shape) and a.item() == b.item()


def test_integer_and_bool_inputs_get_torchs_errors():
    """mean/var/std of integers raised a TypeError of tinyopt's; argmax/topk/median of bools
    computed where torch refuses."""
    x, b = to.tensor([1, 2, 3]), to.tensor([True, False])
    with pytest.raises(RuntimeError, match=r"^mean\(\): could not infer output dtype. Input dtype "
                                           r"must be either a floating point or complex dtype. "
                                           r"Got: Long$"):
        x.mean()
    for f in (x.var, x.std):
        with pytest.raises(RuntimeError, match="^std and var only support floating point and "
                                               "complex dtypes$"):
            f()
    with pytest.raises(RuntimeError, match=r"^argmax\(\): does not support bool input$"):
        b.argmax()
    with pytest.raises(RuntimeError, match="^topk does not support bool dtypes on CPU$"):
        b.topk(1)
    with pytest.raises(NotImplementedError, match="\"median_cpu\" not implemented for 'Bool'"):
        b.median()
    assert x.mean(dtype=to.float32).item() == 2.0


def test_logcumsumexp_of_infinities_is_torchs():
    """Issue 25.9 (logsumexp's edges): logcumsumexp of -inf, +inf and their mixes was NaN (its
    shift by the maximum made inf - inf)."""
    inf = float("inf")
    for row, expect in (([-inf, -inf], [-inf, -inf]), ([inf, inf], [inf, inf]),
                        ([1.0, inf, -inf], [1.0, inf, inf]), ([-inf, 2.0], [-inf, 2.0]),
                        ([1000.0, inf], [1000.0, inf])):
        got = to.logcumsumexp(to.tensor(row), 0).tolist()
        np.testing.assert_allclose(got, expect, rtol=1e-6)
    x = to.tensor([0.5, -1.0, 2.0], dtype=to.float64, requires_grad=True)
    w = to.tensor([1.0, 2.0, 3.0], dtype=to.float64)
    (to.logcumsumexp(x, 0) * w).sum().backward()
    xs = np.array([0.5, -1.0, 2.0])
    out = np.log(np.cumsum(np.exp(xs)))
    expect = np.exp(xs) * np.cumsum((np.array([1.0, 2.0, 3.0]) * np.exp(-out))[::-1])[::-1]
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)


def test_a_sum_over_a_contiguous_run_and_over_a_strided_one_are_two_kernels():
    """``kernels.reduce``: a sum of x[a, r, b] over r with B == 1 is ``sum_rows``'s (four float64
    partial sums by r mod 4, the tail into the first, (s0 + s1) + (s2 + s3)), any other
    ``sum_axis``'s (r order, in the dtype); each refuses the other's shape, and ``sum_kernel(B)``
    picks, so a first step compiles only the one it uses."""
    from tinyopt.kernels import reduce as RK
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 11, 1)) * 1e3).astype(np.float32)
    out = np.empty((3, 1), np.float32)
    RK.sum_kernel(1)(x, out)
    for a in range(3):
        s = [0.0] * 4
        for r in range(11):
            s[r % 4 if r < 8 else 0] += float(x[a, r, 0])
        assert out[a, 0] == np.float32((s[0] + s[1]) + (s[2] + s[3]))
    x5 = (rng.standard_normal((3, 11, 5)) * 1e3).astype(np.float32)
    out5 = np.empty((3, 5), np.float32)
    RK.sum_kernel(5)(x5, out5)
    for a in range(3):
        want = np.zeros(5, np.float32)
        for r in range(11):
            want = want + x5[a, r]
        assert (out5[a].view(np.uint32) == want.view(np.uint32)).all()
    with pytest.raises(ValueError, match="sum_rows"):
        RK.sum_axis(x, out)
    with pytest.raises(ValueError, match="sum_rows"):
        RK.sum_rows(x5, out5)
