"""matmul (1-D, 2-D, batched with broadcasting) and linear: forward against numpy (float32,
float64), backward against finite differences, arrays as operands, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt.engine import ops as O

from gradcheck import gradcheck

SETTINGS = settings(max_examples=15, deadline=None)
DTYPES = [np.float32, np.float64]


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@st.composite
def matmul_shapes(draw):
    """Operand shapes for matmul: 1-D or n-D on either side, batch dims that broadcast."""
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    ba = tuple(draw(st.sampled_from([1, b])) for b in batch)
    bb = tuple(draw(st.sampled_from([1, b])) for b in batch)
    ba, bb = ba[draw(st.integers(0, len(ba))):], bb[draw(st.integers(0, len(bb))):]
    sa = (k,) if draw(st.integers(0, 4)) == 0 else ba + (n, k)
    sb = (k,) if draw(st.integers(0, 4)) == 0 else bb + (k, m)
    return sa, sb


def check_matmul(sa, sb, seed=0):
    a, b = rand(sa, seed), rand(sb, seed + 1)
    for dtype in DTYPES:
        want = np.matmul(a.astype(dtype), b.astype(dtype))
        for out in (to.tensor(a.astype(dtype)) @ to.tensor(b.astype(dtype)),
                    O.matmul(to.tensor(a.astype(dtype)), b.astype(dtype))):
            assert out.shape == want.shape and out.dtype == dtype
            np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda x, y: x @ y, a, b)


@SETTINGS
@given(shapes=matmul_shapes(), seed=st.integers(0, 100))
def test_matmul(shapes, seed):
    check_matmul(*shapes, seed)


@pytest.mark.parametrize("sa, sb", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 1), (1, 1)), ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
])
def test_matmul_cases(sa, sb):
    check_matmul(sa, sb)


@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_product_matmul_is_bit_identical_to_blas(dtype):
    a, b = rand((7, 1)).astype(dtype), rand((1, 9), 1).astype(dtype)
    np.testing.assert_array_equal((to.tensor(a) @ to.tensor(b)).numpy(), a @ b)
    at = rand((1, 7)).astype(dtype)  # a transposed view, as in a batch-1 weight gradient
    np.testing.assert_array_equal((to.tensor(at).T @ to.tensor(b)).numpy(), at.T @ b)
    gradcheck(lambda x, y: x.T @ y, rand((1, 5)), rand((1, 3), 2))


def test_rank_k_products_on_one_blas_thread_are_bit_identical_to_blas(monkeypatch):
    """A float32 product of a small inner dimension runs on one BLAS thread (engine/ops/linalg.py,
    RANK_K_MAX): the same bits as numpy's threaded BLAS, 2-D and with leading dimensions, as the
    MLP's input gradient (256 x 10) @ (10 x 500) is, odd sizes too, and linear's."""
    from tinyopt.engine.ops import linalg
    calls = []
    real = linalg.single_threaded
    monkeypatch.setattr(linalg, "single_threaded", lambda: calls.append(1) or real())
    for m, k, n in ((256, 10, 500), (300, 7, 999), (1024, 16, 64)):
        g, w = rand((m, k)).astype(np.float32), rand((k, n), 1).astype(np.float32)
        np.testing.assert_array_equal((to.tensor(g) @ to.tensor(w)).numpy(), g @ w)
    g3 = g.reshape(4, 256, k)
    np.testing.assert_array_equal((to.tensor(g3) @ to.tensor(w)).numpy(), g3 @ w)
    assert len(calls) == 4
    small = rand((8, 10)).astype(np.float32)  # below OpenBLAS's own split, and float64: as before
    for a, b in ((small, rand((10, 500)).astype(np.float32)), (rand((256, 10)), rand((10, 500)))):
        np.testing.assert_array_equal((to.tensor(a) @ to.tensor(b)).numpy(), a @ b)
    assert len(calls) == 4
    # linear: 3 input features (its forward on one thread), a batch of 8 rows (its weight
    # gradient), in the plan a repeated step compiles
    for rows, n_in in ((256, 3), (8, 100)):
        x, w = rand((rows, n_in)).astype(np.float32), rand((512, n_in), 1).astype(np.float32)
        g = rand((rows, 512), 2).astype(np.float32)
        wp = to.Parameter(w.copy())
        for _ in range(3):
            before = len(calls)
            wp.grad = None
            y = O.linear(to.tensor(x), wp)
            (y * to.tensor(g)).sum().backward()  # dL/dy = g
            np.testing.assert_array_equal(y.numpy(), x @ w.T)
            np.testing.assert_array_equal(wp.grad.numpy(), g.T @ x)
        assert len(calls) > before


def test_matmul_with_arrays_and_transposed_views():
    a, b = rand((3, 4)), rand((5, 4))
    ta = to.tensor(a)
    np.testing.assert_allclose((ta @ b.T).numpy(), a @ b.T, rtol=1e-12)  # array on the right
    np.testing.assert_allclose((b @ ta.T).numpy(), b @ a.T, rtol=1e-12)  # array on the left
    np.testing.assert_allclose(ta.matmul(to.tensor(b).T).numpy(), a @ b.T, rtol=1e-12)
    gradcheck(lambda x, y: x @ y.T, a, b)
    gradcheck(lambda x, y: (y @ x.T).T, a, b)  # strided operands to BLAS


def test_matmul_errors():
    a, b = to.tensor(np.zeros((3, 4))), to.tensor(np.zeros((5, 6)))
    with pytest.raises(RuntimeError, match=r"matmul.*\(3, 4\).*\(5, 6\)"):
        a @ b
    with pytest.raises(RuntimeError, match=r"matmul.*\(2, 3, 4\).*\(3, 4, 5\).*broadcast"):
        to.tensor(np.zeros((2, 3, 4))) @ to.tensor(np.zeros((3, 4, 5)))
    with pytest.raises(RuntimeError, match="at least 1 dimension"):
        a @ to.tensor(2.0)
    with pytest.raises(TypeError, match=r"matmul.*int64"):
        to.tensor([[1, 2]]) @ to.tensor([[1], [2]])


# ---- linear -------------------------------------------------------------------------------------
@SETTINGS
@given(lead=st.lists(st.integers(1, 3), max_size=2).map(tuple), n_in=st.integers(1, 4),
       n_out=st.integers(1, 4), bias=st.booleans(), seed=st.integers(0, 100))
def test_linear(lead, n_in, n_out, bias, seed):
    x, w, b = rand(lead + (n_in,), seed), rand((n_out, n_in), seed + 1), rand((n_out,), seed + 2)
    for dtype in DTYPES:
        args = [to.tensor(x.astype(dtype)), to.tensor(w.astype(dtype))]
        if bias:
            args.append(to.tensor(b.astype(dtype)))
        out = O.linear(*args)
        want = x.astype(dtype) @ w.astype(dtype).T + (b.astype(dtype) if bias else 0)
        assert out.shape == want.shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    if bias:
        gradcheck(O.linear, x, w, b)
    else:
        gradcheck(O.linear, x, w)


def _mlp_step(x, params, bias):
    """relu(linear(x)) -> linear -> sum: the loss, the input's and each parameter's gradient,
    and the ops of the plan that ran."""
    ps = [to.Parameter(p.copy()) for p in params]
    xp = to.Parameter(x.copy())
    w1, b1, w2 = ps
    h = to.nn.functional.relu(O.linear(xp, w1, b1 if bias else None))
    loss = O.linear(h, w2).sum()
    ops = {t.op for t in to.engine.get_plan(loss=loss).nodes}
    loss.backward()
    return [np.asarray(v) for v in (loss, xp.grad, w1.grad, b1.grad if bias else 0, w2.grad)], ops


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead, bias", [((6,), True), ((2, 3), True), ((5,), False)])
def test_linear_relu_fused_is_bit_for_bit_the_unfused_graph(monkeypatch, dtype, lead, bias):
    from tinyopt.engine import op_fusion
    r = np.random.default_rng(5)
    x = r.integers(-2, 3, size=lead + (4,)).astype(dtype)  # zeros and ties at the ReLU's kink
    x.reshape(-1, 4)[1, 2] = np.nan
    w1 = r.integers(-1, 2, size=(7, 4)).astype(dtype)
    b1 = np.array([0, 1, -1, 0, -0.0, 0.5, 2], dtype)
    w2 = r.standard_normal((3, 7)).astype(dtype)
    fused, ops = _mlp_step(x, (w1, b1, w2), bias)
    assert "linear_relu" in ops and "relu" not in ops
    monkeypatch.setattr(op_fusion, "RULES", {})
    to.engine.cache_clear()  # plans are cached by the graph's structure, fused or not
    plain, ops = _mlp_step(x, (w1, b1, w2), bias)
    to.engine.cache_clear()
    assert "linear_relu" not in ops and "relu" in ops
    for a, b_ in zip(fused, plain):
        assert np.asarray(a).tobytes() == np.asarray(b_).tobytes()


def test_no_linear_relu_fusion_when_the_linear_output_is_read():
    x, w = rand((4, 3)), to.Parameter(rand((2, 3), 1))
    h = O.linear(x, w)
    loss = to.nn.functional.relu(h).sum() + h.sum()   # h read twice
    ops = [t.op for t in to.engine.get_plan(loss=loss).nodes]
    assert "relu" in ops and "linear_relu" not in ops


def test_linear_accepts_arrays_and_grads_only_what_needs_it():
    x, w, b = rand((4, 3)), rand((2, 3), 1), rand((2,), 2)
    p = to.Parameter(w)
    out = O.linear(x, p, b)
    np.testing.assert_allclose(out.numpy(), x @ w.T + b, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(p.grad, np.ones((4, 2)).T @ x, rtol=1e-12)


def test_linear_errors():
    x, w = to.tensor(np.zeros((4, 3))), to.tensor(np.zeros((2, 5)))
    with pytest.raises(RuntimeError, match=r"linear.*\(4, 3\).*\(2, 5\)"):
        O.linear(x, w)
    with pytest.raises(RuntimeError, match=r"linear: bias.*\(3,\).*\(2,\)"):
        O.linear(x, to.tensor(np.zeros((2, 3))), to.tensor(np.zeros(3)))
    with pytest.raises(TypeError, match=r"linear.*int64"):
        O.linear(to.tensor([[1, 2]]), to.tensor([[1, 2]]))


# ---- named products and einsum, against torch 2.13 ------------------------------------------------
from torchref import compare  # noqa: E402

_r = np.random.default_rng(10)
M34, M45, V4, V3 = (_r.standard_normal(s) for s in [(3, 4), (4, 5), (4,), (3,)])
B234, B245, M35 = _r.standard_normal((2, 3, 4)), _r.standard_normal((2, 4, 5)), _r.standard_normal((3, 5))
PRODUCT_CASES = {
    "mm": (lambda L, a, b: a.mm(b), (M34, M45)), "matmul 1d": (lambda L, a, v: a @ v, (M34, V4)),
    "bmm": (lambda L, a, b: L.bmm(a, b), (B234, B245)), "mv": (lambda L, a, v: a.mv(v), (M34, V4)),
    "dot": (lambda L, a, b: L.dot(a, b), (V4, V4 * 2)), "outer": (lambda L, a, b: a.outer(b), (V3, V4)),
    "addmm": (lambda L, c, a, b: L.addmm(c, a, b, beta=0.5, alpha=2.0), (M35, M34, M45)),
    "addmm default": (lambda L, c, a, b: c.addmm(a, b), (M35, M34, M45)),
    "baddbmm": (lambda L, c, a, b: L.baddbmm(c, a, b, alpha=0.5), (M35, B234, B245)),
    "addbmm": (lambda L, c, a, b: L.addbmm(c, a, b), (M35, B234, B245)),
    "addmv": (lambda L, c, a, v: L.addmv(c, a, v, beta=2), (V3, M34, V4)),
    "einsum matmul": (lambda L, a, b: L.einsum("ij,jk->ik", a, b), (M34, M45)),
    "einsum batch": (lambda L, a, b: L.einsum("bij,bjk->bik", a, b), (B234, B245)),
    "einsum implicit": (lambda L, a, b: L.einsum("ij,jk", a, b), (M34, M45)),
    "einsum sum": (lambda L, a: L.einsum("bij->j", a), (B234,)),
    "einsum outer": (lambda L, a, b: L.einsum("i,j->ij", a, b), (V3, V4)),
    "einsum ellipsis": (lambda L, a, b: L.einsum("...ij,...jk->...ik", a, b), (B234, B245)),
    "einsum list": (lambda L, a, b: L.einsum("ij,j->i", [a, b]), (M34, V4)),
    "einsum transpose": (lambda L, a: L.einsum("bij->bji", a), (B234,)),
}


@pytest.mark.parametrize("name", list(PRODUCT_CASES))
def test_products_against_torch(name):
    fn, arrays = PRODUCT_CASES[name]
    compare(fn, *arrays, rtol=1e-9)


def test_product_shape_errors_are_torchs():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x4\)"):
        to.mm(to.ones(3, 4), to.ones(5, 4))
    with pytest.raises(RuntimeError, match="3D tensor"):
        to.bmm(to.ones(3, 4), to.ones(4, 3))
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        to.dot(to.ones(2, 2), to.ones(2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_bias_add_and_the_bias_relu_are_one_kernel_with_the_bits_of_numpys_add(dtype):
    """``kernels.linalg.bias_add(out, b, relu)``: the additions of ``np.add(out, b)``, then with
    ``relu`` torch's ReLU (NaN stays NaN, -0.0 stays -0.0); one kernel for both, so a first step
    with plain and ReLU linear layers compiles it once (same arguments' types: one signature)."""
    from tinyopt.kernels import linalg as LK
    out = np.array([[1.5, -2.0, np.nan, -0.0, 0.0, -np.inf],
                    [np.inf, -1e-30, 3.0, -3.0, 1e30, -0.0]], dtype)
    b = np.array([0.25, 1.0, 1.0, -0.0, -0.0, 2.0], dtype)
    plain, relu = out.copy(), out.copy()
    LK.bias_add(plain, b, False)
    signatures = len(LK.bias_add.signatures)
    LK.bias_add(relu, b, True)
    assert len(LK.bias_add.signatures) == signatures
    want = out + b
    assert plain.tobytes() == want.tobytes()
    want[want < 0] = 0  # (NaN and -0.0 compare False: kept)
    assert relu.tobytes() == want.tobytes()
    assert np.signbit(relu[0, 3]) and np.isnan(relu[0, 2])
