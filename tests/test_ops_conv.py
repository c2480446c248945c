"""conv2d, max_pool2d, avg_pool2d: forward against numpy references (and torch when installed),
backward against central finite differences in float64, PyTorch's errors, plan reuse."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt.engine.ops.conv import avg_pool2d, conv2d, max_pool2d


# ---- numpy references -----------------------------------------------------------------------------
def ref_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """padding = (top, bottom, left, right)."""
    N, C, H, W = x.shape
    OC, Cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0), padding[:2], padding[2:]))
    OH = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    OW = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((N, OC, OH, OW))
    OCg = OC // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                xs = xp[:, g * Cg:(g + 1) * Cg, i * dh:i * dh + sh * (OH - 1) + 1:sh,
                        j * dw:j * dw + sw * (OW - 1) + 1:sw]
                out[:, g * OCg:(g + 1) * OCg] += np.einsum(
                    "oc,ncyz->noyz", w[g * OCg:(g + 1) * OCg, :, i, j], xs)
    if b is not None:
        out += b[None, :, None, None]
    return out


def _out_size(size, k, s, p, d, ceil):
    o = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= size + p:
        o -= 1
    return o


def ref_pool(x, k, s, p, d=1, ceil=False, kind="max", count_include_pad=True):
    N, C, H, W = x.shape
    OH, OW = _out_size(H, k, s, p, d, ceil), _out_size(W, k, s, p, d, ceil)
    out = np.zeros((N, C, OH, OW))
    for y in range(OH):
        for z in range(OW):
            h0, w0 = y * s - p, z * s - p
            hs = [h0 + i * d for i in range(k) if 0 <= h0 + i * d < H]
            ws = [w0 + j * d for j in range(k) if 0 <= w0 + j * d < W]
            win = x[:, :, hs][:, :, :, ws]
            if kind == "max":
                out[:, :, y, z] = win.max(axis=(2, 3))
            else:
                size = (min(h0 + k, H + p) - h0) * (min(w0 + k, W + p) - w0)
                div = size if count_include_pad else len(hs) * len(ws)
                out[:, :, y, z] = win.sum(axis=(2, 3)) / div
    return out


rng = np.random.default_rng(0)

CONV_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(0, 2), dilation=(2, 1)),
    dict(padding=2, dilation=2, groups=2),
    dict(padding="same"),
    dict(padding="same", dilation=(1, 2)),
    dict(padding="valid", groups=4),
]


def _torch_padding(kw, kh, kwid):
    p = kw.get("padding", 0)
    if p == "valid":
        return (0, 0, 0, 0)
    if p == "same":
        d = kw.get("dilation", 1)
        dh, dw = (d, d) if isinstance(d, int) else d
        th, tw = dh * (kh - 1), dw * (kwid - 1)
        return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    ph, pw = (p, p) if isinstance(p, int) else p
    return (ph, ph, pw, pw)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("kw", CONV_CASES)
def test_conv2d_forward_matches_numpy(kw):
    groups = kw.get("groups", 1)
    x = rng.standard_normal((2, 4, 7, 8))
    w = rng.standard_normal((6 if groups != 4 else 4, 4 // groups, 3, 2))
    b = rng.standard_normal(w.shape[0])
    got = conv2d(x, w, b, **kw).numpy()
    want = ref_conv2d(x, w, b, _pair(kw.get("stride", 1)), _torch_padding(kw, 3, 2),
                      _pair(kw.get("dilation", 1)), groups)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kw", CONV_CASES)
def test_conv2d_forward_matches_torch(kw):
    torch = pytest.importorskip("torch")
    groups = kw.get("groups", 1)
    x = rng.standard_normal((2, 4, 7, 8)).astype(np.float32)
    w = rng.standard_normal((4, 4 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    got = conv2d(x, w, b, **kw)
    assert got.dtype == np.float32
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [
    dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
    dict(padding="same"),
    dict(stride=2),
])
def test_conv2d_gradients(kw):
    x = rng.standard_normal((2, 4, 6, 5))
    w = rng.standard_normal((4, 4 // kw.get("groups", 1), 3, 2))
    b = rng.standard_normal(4)
    gradcheck(lambda x, w, b: conv2d(x, w, b, **kw), x, w, b, max_elems=30)


def test_conv2d_unbatched_and_no_bias():
    x = rng.standard_normal((3, 5, 5))
    w = rng.standard_normal((2, 3, 3, 3))
    y = conv2d(x, w, padding=1)
    assert y.shape == (2, 5, 5)
    np.testing.assert_allclose(y.numpy(), ref_conv2d(x[None], w, padding=(1, 1, 1, 1))[0],
                               atol=1e-12)
    gradcheck(lambda x, w: conv2d(x, w), x, w, max_elems=20)


def test_conv2d_gradient_of_input_only_leaf_weight_not_needed():
    """A conv on a plain input (the first layer) computes no input gradient, only the weight's."""
    w = to.Parameter(rng.standard_normal((2, 1, 3, 3)))
    x = rng.standard_normal((3, 1, 6, 6))
    conv2d(x, w).sum().backward()
    g = np.ones((3, 2, 4, 4))
    want = np.stack([[np.einsum("nyz,nyz->", g[:, o], x[:, 0, i:i + 4, j:j + 4])
                      for i in range(3) for j in range(3)] for o in range(2)]).reshape(2, 1, 3, 3)
    np.testing.assert_allclose(w.grad, want, rtol=1e-12)


def test_conv2d_reuses_its_plan(compile_at_once):
    w = to.Parameter(rng.standard_normal((4, 2, 3, 3)).astype(np.float32))
    conv2d(rng.standard_normal((2, 2, 8, 8)).astype(np.float32), w, padding=1).sum().backward()
    hits = to.engine.cache_info().hits
    for _ in range(2):
        w.grad = None
        conv2d(rng.standard_normal((2, 2, 8, 8)).astype(np.float32), w, padding=1).sum().backward()
    assert to.engine.cache_info().hits == hits + 2


@pytest.mark.parametrize("args, kwargs, exc, msg", [
    ((np.zeros((2, 3)), np.zeros((1, 3, 1, 1))), {}, RuntimeError, "Expected 3D"),
    ((np.zeros((1, 4, 5, 5)), np.zeros((8, 3, 3, 3))), {}, RuntimeError,
     r"expected input\[1, 4, 5, 5\] to have 3 channels, but got 4"),
    ((np.zeros((1, 4, 5, 5)), np.zeros((3, 2, 3, 3))), dict(groups=2), RuntimeError,
     "divisible by 2"),
    ((np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 3, 3))), {}, RuntimeError,
     "Kernel size can't be greater"),
    ((np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3))), dict(padding="same", stride=2), ValueError,
     "not supported for strided"),
    ((np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3))), dict(padding="full"), ValueError,
     "invalid padding string"),
    ((np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3))), dict(stride=0), RuntimeError,
     "non-positive stride"),
    ((np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 3, 3)), np.zeros(2)), {}, RuntimeError,
     r"bias has shape \(2,\), expected \(1,\)"),
])
def test_conv2d_errors(args, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        conv2d(*args, **kwargs)


def test_conv_weight_grad_over_a_large_batch_is_summed_in_blocks_exactly():
    """N*OH*OW > 4096 takes the blocked weight-gradient GEMM; it must equal the reference."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 1, 64, 64)), rng.standard_normal((2, 1, 3, 3))
    g = rng.standard_normal((2, 2, 64, 64))
    wt = to.Parameter(w.copy())
    (conv2d(x, wt, padding=1) * g).sum().backward()
    want = np.zeros_like(w)
    for idx in np.ndindex(w.shape):  # the conv is linear in w: dW = <conv(x, e_idx), g>
        e = np.zeros_like(w)
        e[idx] = 1.0
        want[idx] = (ref_conv2d(x, e, padding=(1, 1, 1, 1)) * g).sum()
    np.testing.assert_allclose(wt.grad, want, rtol=1e-10)


# ---- pooling -------------------------------------------------------------------------------------
POOL_CASES = [(2, None, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False), (2, 3, 1, 1, True)]


@pytest.mark.parametrize("k, s, p, d, ceil", POOL_CASES)
def test_max_pool2d_forward_and_gradient(k, s, p, d, ceil):
    x = rng.standard_normal((2, 3, 7, 6))
    got = max_pool2d(x, k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(got, ref_pool(x, k, s or k, p, d, ceil))
    gradcheck(lambda x: max_pool2d(x, k, s, p, d, ceil_mode=ceil), x, max_elems=30)


@pytest.mark.parametrize("k, s, p, _, ceil", POOL_CASES)
@pytest.mark.parametrize("cip", [True, False])
def test_avg_pool2d_forward_and_gradient(k, s, p, _, ceil, cip):
    x = rng.standard_normal((2, 3, 7, 6))
    got = avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip).numpy()
    np.testing.assert_allclose(got, ref_pool(x, k, s or k, p, 1, ceil, "avg", cip), atol=1e-12)
    gradcheck(lambda x: avg_pool2d(x, k, s, p, ceil, cip), x, max_elems=30)


@pytest.mark.parametrize("k, s, p, d, ceil", POOL_CASES)
def test_pools_match_torch(k, s, p, d, ceil):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    y, idx = max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    ty, tidx = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil, return_indices=True)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    for cip in (True, False):
        np.testing.assert_allclose(avg_pool2d(x, k, s, p, ceil, cip).numpy(),
                                   F.avg_pool2d(torch.tensor(x), k, s, p, ceil, cip).numpy(),
                                   rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(avg_pool2d(x, k, s, p, ceil, divisor_override=3).numpy(),
                               F.avg_pool2d(torch.tensor(x), k, s, p, ceil,
                                            divisor_override=3).numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool2d_overlapping_windows_accumulate_and_nan_wins():
    x = to.Parameter(np.array([[[[1.0, 5.0, 2.0], [0.0, 3.0, 4.0]]]]))
    max_pool2d(x, (2, 2), stride=1).sum().backward()
    np.testing.assert_array_equal(x.grad, [[[[0, 2, 0], [0, 0, 0]]]])
    y = max_pool2d(np.array([[[1.0, np.nan], [3.0, 2.0]]]), 2).numpy()
    assert y.shape == (1, 1, 1) and np.isnan(y).all()


def test_avg_pool2d_divisor_override_gradient_and_unbatched():
    x = rng.standard_normal((3, 5, 5))
    y = avg_pool2d(x, 2, divisor_override=3)
    assert y.shape == (3, 2, 2)
    np.testing.assert_allclose(y.numpy(), ref_pool(x[None], 2, 2, 0, kind="avg")[0] * 4 / 3)
    gradcheck(lambda x: avg_pool2d(x, 3, 2, 1, divisor_override=5), x, max_elems=20)


@pytest.mark.parametrize("fn, kwargs, msg", [
    (max_pool2d, dict(kernel_size=2, padding=2), "pad should be at most half"),
    (avg_pool2d, dict(kernel_size=3, padding=2), "pad should be at most half"),
    (max_pool2d, dict(kernel_size=5), "Output size is too small"),
    (max_pool2d, dict(kernel_size=0), "kernel_size must be greater than zero"),
    (avg_pool2d, dict(kernel_size=2, stride=0), "stride must be greater than zero"),
])
def test_pool_errors(fn, kwargs, msg):
    with pytest.raises(RuntimeError, match=msg):
        fn(np.zeros((1, 2, 3, 3)), **kwargs)
    with pytest.raises(RuntimeError, match="Expected 3D"):
        fn(np.zeros((3, 3)), 2)


def test_max_pool_dense_kernel_matches_general_kernel_on_ties_and_nans():
    # The in-bounds fast path must pick exactly the indices of the general kernel: first maximum
    # in window order on ties, first NaN when there is one.
    from tinyopt.kernels import conv as KC
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, size=(6, 9, 8)).astype(np.float32)  # many ties
    x[rng.random(x.shape) < 0.05] = np.nan
    for kh, kw, sh, sw in ((2, 2, 2, 2), (3, 3, 1, 1), (3, 2, 2, 3)):
        oh, ow = (9 - kh) // sh + 1, (8 - kw) // sw + 1
        general = np.empty((6, oh, ow), np.int64)
        dense = np.empty((6, oh, ow), np.int64)
        KC.max_pool2d_indices(x, general, kh, kw, sh, sw, 0, 0, 1, 1)
        KC.max_pool2d_indices_dense[kh, kw, sh, sw](x, dense)
        np.testing.assert_array_equal(dense, general)


# ---- direct convolution kernels against the general im2col + GEMM path ----------------------------
DIRECT_CASES = [  # (C, OC, H, W, kh, kw, conv2d keyword arguments)
    (1, 8, 9, 8, 3, 3, dict(padding=1)),
    (3, 5, 7, 9, 3, 2, dict()),                       # odd output channels: one left unpaired
    (2, 4, 8, 7, 5, 5, dict(padding=2, dilation=2)),
    (3, 2, 6, 6, 1, 1, dict()),
    (2, 3, 7, 6, 3, 3, dict(padding="same", dilation=(1, 2))),   # asymmetric padding
    (2, 2, 5, 5, 3, 3, dict(padding=(3, 0))),         # more padding than the kernel: cropped
    (2, 3, 1, 9, 1, 3, dict(padding=(0, 1))),         # conv1d as (N, C, 1, L)
]


def _conv_both_paths(monkeypatch, x, w, b, kw):
    """(y, dx, dw, db) from the direct kernels and from im2col + GEMM, for the same loss."""
    from tinyopt.engine.ops import conv as conv_ops
    g = np.random.default_rng(5).standard_normal(conv2d(x, w, b, **kw).shape)
    results = []
    for direct in (True, False):
        monkeypatch.setattr(conv_ops, "_direct", lambda *a, d=direct: d)
        xp, wp, bp = (to.Parameter(a.copy()) for a in (x, w, b))
        y = conv2d(xp, wp, bp, **kw)
        assert (y.op == "conv2d") == direct
        (y * g).sum().backward()
        results.append((y.numpy(), xp.grad, wp.grad, bp.grad))
    return results


@pytest.mark.parametrize("C, OC, H, W, kh, kw, kwargs", DIRECT_CASES)
def test_direct_conv_matches_the_im2col_gemm_path(monkeypatch, C, OC, H, W, kh, kw, kwargs):
    """Other order of summation (channels, then taps, per output; bias last): equal to 1e-12."""
    x = rng.standard_normal((3, C, H, W))
    w = rng.standard_normal((OC, C, kh, kw))
    b = rng.standard_normal(OC)
    direct, general = _conv_both_paths(monkeypatch, x, w, b, kwargs)
    for d, g in zip(direct, general):
        np.testing.assert_allclose(d, g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("C, OC, H, W, kh, kw, kwargs", DIRECT_CASES[1:5])
def test_direct_conv_gradients(C, OC, H, W, kh, kw, kwargs):
    x = rng.standard_normal((2, C, H, W))
    w = rng.standard_normal((OC, C, kh, kw))
    gradcheck(lambda x, w, b: conv2d(x, w, b, **kwargs), x, w, rng.standard_normal(OC),
              max_elems=25)


def test_direct_conv_float32_matches_torch_on_a_batch_of_many_blocks():
    """The CNN's layers at batch 64: the weight gradient sums 8 blocks of samples."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1)
    for C, OC, H in ((1, 8, 28), (8, 16, 14)):
        x = r.standard_normal((64, C, H, H)).astype(np.float32)
        w = (r.standard_normal((OC, C, 3, 3)) * 0.3).astype(np.float32)
        b = r.standard_normal(OC).astype(np.float32)
        g = r.standard_normal((64, OC, H, H)).astype(np.float32)
        xp, wp, bp = to.Parameter(x), to.Parameter(w), to.Parameter(b)
        y = conv2d(xp, wp, bp, padding=1)
        (y * g).sum().backward()
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        ty = torch.nn.functional.conv2d(tx, tw, tb, padding=1)
        ty.backward(torch.tensor(g))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
        for mine, theirs in ((xp.grad, tx.grad), (wp.grad, tw.grad), (bp.grad, tb.grad)):
            np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-4,
                                       atol=1e-4 * np.abs(theirs.numpy()).max())


def test_direct_weight_gradient_with_inf_and_nan_inputs_reaches_only_the_taps_they_feed():
    """The fast sums run over padded rows; an input holding inf or NaN must not leak a 0 * inf
    from the columns past the output's width into other taps."""
    r = np.random.default_rng(2)
    x = r.standard_normal((3, 2, 6, 7))
    x[0, 0, 2, 6] = np.inf   # last column: read past the row end by the padded-row sums
    x[1, 1, 4, 0] = np.nan   # first column
    w = to.Parameter(r.standard_normal((2, 2, 3, 3)))
    g = r.standard_normal((3, 2, 6, 7))
    (conv2d(x, w, padding=1) * g).sum().backward()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 2, 3, 3))
    with np.errstate(invalid="ignore"):
        for o, c, i, j in np.ndindex(want.shape):
            want[o, c, i, j] = (g[:, o] * xp[:, c, i:i + 6, j:j + 7]).sum()
    np.testing.assert_array_equal(np.isnan(w.grad), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(w.grad), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(w.grad[finite], want[finite], rtol=1e-12)


# ---- fusion: conv2d + ReLU (+ max-pool) as one node, bit for bit the unfused graph ---------------
def _cnn_step(x, params, pool, relu=True):
    """One forward + backward of conv -> (ReLU) -> (max-pool) -> linear; the loss, the input's
    and every parameter's gradient, and the ops of the plan that ran."""
    w, b, lw = (to.Parameter(p.copy()) for p in params)
    xp = to.Parameter(x.copy())
    h = conv2d(xp, w, b, padding=1)
    if relu:
        h = to.nn.functional.relu(h)
    if pool:
        h = max_pool2d(h, *pool)
    loss = (h.reshape(x.shape[0], -1) @ lw).sum()
    ops = {t.op for t in to.engine.get_plan(loss=loss).nodes}  # the plan backward() runs
    loss.backward()
    return [np.asarray(v) for v in (loss, xp.grad, w.grad, b.grad, lw.grad)], ops


@pytest.mark.parametrize("pool, relu", [(None, True), ((2,), True), ((2,), False), ((3, 2), True),
                                        ((2, 1), True), ((3, 3), True)])
def test_fused_conv_relu_pool_is_bit_for_bit_the_unfused_graph(monkeypatch, pool, relu):
    from tinyopt.engine import op_fusion
    r = np.random.default_rng(4)
    x = r.integers(-2, 3, size=(5, 2, 9, 8)).astype(np.float32)  # ties in the pooling windows
    x[0, 0, 3, 4] = np.nan
    x[2, 1, 0, 0] = np.nan
    w = r.integers(-1, 2, size=(4, 2, 3, 3)).astype(np.float32)
    b = np.array([0, 1, -1, 0], np.float32)
    n_out = 4 * (9 * 8 if pool is None else max_pool2d(np.zeros((1, 1, 9, 8)), *pool).numel())
    lw = r.standard_normal((n_out, 3)).astype(np.float32)
    fused, ops = _cnn_step(x, (w, b, lw), pool, relu)
    assert "relu" not in ops and "max_pool2d_indices" not in ops
    monkeypatch.setattr(op_fusion, "RULES", {})
    to.engine.cache_clear()  # plans are cached by the graph's structure, fused or not
    plain, ops = _cnn_step(x, (w, b, lw), pool, relu)
    to.engine.cache_clear()
    assert "max_pool2d_indices" in ops or pool is None
    for a, b_ in zip(fused, plain):
        np.testing.assert_array_equal(a, b_)


def test_no_fusion_when_the_conv_output_or_the_pool_indices_are_read():
    w = to.Parameter(rng.standard_normal((3, 2, 3, 3)))
    x = rng.standard_normal((2, 2, 6, 6))
    h = conv2d(x, w, padding=1)
    y, idx = max_pool2d(to.nn.functional.relu(h), 2, return_indices=True)
    loss = y.sum() + h.sum()   # h read twice: by the ReLU and by the loss
    ops = [t.op for t in to.engine.get_plan(loss=loss).nodes]
    assert "relu" in ops and "max_pool2d_indices" in ops
    y, idx = max_pool2d(to.nn.functional.relu(conv2d(x, w, padding=1)), 2, return_indices=True)
    ops = [t.op for t in to.engine.get_plan(idx, loss=y.sum()).nodes]   # the indices are wanted
    assert "relu" not in ops and "max_pool2d_indices" in ops


@pytest.mark.parametrize("path", ["general", "dense", "after_conv"])
def test_max_pool2d_gradient_goes_to_the_last_of_several_nans(path):
    """Issue 25.11: the gradient went to the first NaN of a window; torch routes it (and the
    index) to the last.  The three kernels: padded windows, dense windows, conv+pool fused."""
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = x[0, 0, 1, 1] = np.nan  # three in window (0, 0)
    x[0, 1, 2, 2] = x[0, 1, 3, 3] = np.nan
    k, kw = (3, dict(padding=1)) if path == "general" else (2, {})
    xs = to.tensor(x, requires_grad=True)
    if path == "after_conv":  # a 1x1 identity convolution (the pool sees x), fused with it
        w = to.Parameter(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1))
        max_pool2d(conv2d(xs, w), 2).sum().backward()
        idx = max_pool2d(xs, 2, return_indices=True)[1]
    else:
        y, idx = max_pool2d(xs, k, return_indices=True, **kw)
        y.sum().backward()
    grad = xs.grad.numpy()
    assert grad[0, 0, 1, 1] == 1 and grad[0, 0, 0, 1] == 0 and grad[0, 0, 1, 0] == 0
    assert grad[0, 1, 3, 3] == 1 and grad[0, 1, 2, 2] == 0
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    ty, tidx = torch.nn.functional.max_pool2d(tx, k, return_indices=True, **kw)
    ty.sum().backward()
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_array_equal(grad, tx.grad.numpy())


# ---- the direct kernels' chunks: the same bits whoever runs them ---------------------------------
def _direct_cnn_step(x, params):
    """Forward + backward of conv -> ReLU -> max-pool (fused), conv -> ReLU (fused), conv (plain):
    the output and every gradient, as bytes."""
    w1, b1, w2, b2, w3 = (to.Parameter(p.copy()) for p in params)
    xp = to.Parameter(x.copy())
    F = to.nn.functional
    h = max_pool2d(F.relu(conv2d(xp, w1, b1, padding=1)), 2)
    h = F.relu(conv2d(h, w2, b2, padding=(1, 0)))
    y = conv2d(h, w3, padding=2, dilation=2)
    (y * y).sum().backward()
    return [np.asarray(a).tobytes() for a in (y, xp.grad, w1.grad, b1.grad, w2.grad, b2.grad,
                                              w3.grad)]


@pytest.mark.parametrize("N", [1, 37])
def test_direct_conv_chunks_give_the_same_bits_on_any_threads(monkeypatch, N):
    """The direct kernels run chunks of samples on the threads numpy's BLAS shares, on
    chunk_threads' workers where it shares none, or one after the other; the weight gradient's
    blocks are fixed by the batch size and added in order: every way, the same bits (float32; odd
    sizes, widths that are no multiple of a vector, batch 1)."""
    from tinyopt.engine import cache_clear
    from tinyopt.engine.ops import conv as conv_ops
    from tinyopt.kernels import chunk_threads
    from tinyopt.kernels.native import shared_threads
    r = np.random.default_rng(11)
    x = r.standard_normal((N, 3, 17, 13)).astype(np.float32)
    params = [(r.standard_normal(s) * 0.3).astype(np.float32)
              for s in ((6, 3, 3, 3), (6,), (5, 6, 3, 3), (5,), (4, 5, 3, 2))]
    assert conv_ops._chunks(37, 37 * 6 * 17 * 13 * 3 * 9) > 1   # the big layer is cut

    def run():
        cache_clear()
        return _direct_cnn_step(x, params)

    shared = run()
    monkeypatch.setattr(shared_threads, "chunk_runner", lambda: shared_threads._SERIAL)
    assert run() == shared                    # chunk_threads' workers
    monkeypatch.setattr(chunk_threads, "_pool", chunk_threads._Pool(0))
    monkeypatch.setattr(conv_ops, "_chunks", lambda N, macs: 1)
    assert run() == shared                    # one thread, one chunk
    cache_clear()


def test_direct_conv_chunks_run_on_the_threads_numpys_blas_shares(monkeypatch):
    """Python workers found the second core taken by the OpenMP threads that spin after each of
    numpy's GEMMs (on 2 cores the CNN's step at batch 256 took as long as on one): where BLAS runs
    on OpenMP's threads, the direct kernels' chunks run there too, never on chunk_threads' pool."""
    from tinyopt.engine import cache_clear
    from tinyopt.kernels import chunk_threads
    from tinyopt.kernels.native import shared_threads
    runner = shared_threads.chunk_runner()
    if not runner.parallel:
        pytest.skip("numpy's BLAS shares no OpenMP threads here")
    cuts = []

    def counting(chunk, n, args):
        cuts.append(n)
        runner(chunk, n, args)
    counting.parallel = True

    def refuse(fn, n):
        raise AssertionError("a direct conv's chunks went to chunk_threads' pool")
    monkeypatch.setattr(shared_threads, "chunk_runner", lambda: counting)
    monkeypatch.setattr(chunk_threads, "run_chunks", refuse)
    r = np.random.default_rng(13)
    params = [(r.standard_normal(s) * 0.3).astype(np.float32)
              for s in ((6, 3, 3, 3), (6,), (5, 6, 3, 3), (5,), (4, 5, 3, 2))]
    cache_clear()
    _direct_cnn_step(r.standard_normal((37, 3, 17, 13)).astype(np.float32), params)
    cache_clear()
    assert len(cuts) >= 9 and max(cuts) > 1   # 3 convs: forward, input and weight gradients
