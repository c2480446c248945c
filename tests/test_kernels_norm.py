"""kernels/norm.py: the layer-norm statistics, taken four rows at a time, are each row's float64
sums in element order (the bits of one row at a time), tails and NaN/inf rows included; the
input gradient's sums run in 16 lanes in a fixed order (the bits of that order); the statistics
kernel refuses rows that are not C-contiguous.  The embedding gradient's rows are the sums of their
looked-up rows in order, scaled by the counts or not, to the bit, through one accumulation loop."""

import math

import numpy as np
import pytest

from tinyopt.kernels.norm import LN_LANES, embedding_grad, layer_norm_grad_x, layer_norm_stats


def one_row_at_a_time(x: np.ndarray, eps: float) -> np.ndarray:
    """(mu, rstd) of each row: sums in element order in float64, stored in x's dtype."""
    stats = np.empty((x.shape[0], 2), x.dtype)
    for m, row in enumerate(x):
        acc = 0.0
        for v in row:
            acc += float(v)
        mu = acc / len(row)
        ss = 0.0
        for v in row:
            e = float(v) - mu
            ss += e * e
        stats[m] = mu, 1.0 / math.sqrt(ss / len(row) + eps)
    return stats


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 11])
def test_layer_norm_stats_are_each_rows_sums_in_order(dtype, rows):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, 37)) * 1e3 + 1e4).astype(dtype)  # sums that round
    x[rows // 2, 5] = np.nan
    x[-1, 0] = np.inf
    stats = np.empty((rows, 2), dtype)
    with np.errstate(invalid="ignore"):
        layer_norm_stats(x, stats, 1e-5)
        want = one_row_at_a_time(x, 1e-5)
    np.testing.assert_array_equal(stats.view(np.uint8), want.view(np.uint8))


def grad_x_in_lanes(g, x, stats, w):
    """layer norm's input gradient with its two row sums in float64 lanes (element d in lane
    d % LN_LANES, each lane in element order, the lanes added in order), in the kernel's types:
    gw = g * w in the input's dtype (g widened to float64 without a weight, as the kernel's
    float64 stand-in for it makes it)."""
    M, D = x.shape
    mu, r = stats[:, :1], stats[:, 1:]
    gw = g * w if w is not None else g.astype(np.float64)
    terms = [gw.astype(np.float64), (gw * (x - mu) * r).astype(np.float64)]
    sums = []
    for t in terms:
        t = np.concatenate([t, np.zeros((M, -D % LN_LANES))], axis=1)
        lanes = np.zeros((M, LN_LANES))
        for k in range(0, t.shape[1], LN_LANES):
            lanes += t[:, k:k + LN_LANES]
        total = np.zeros(M)
        for k in range(LN_LANES):
            total += lanes[:, k]
        sums.append(total[:, None] / D)
    return (r * (gw - sums[0] - (x - mu) * r * sums[1])).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("D, has_w", [(5, True), (16, False), (37, True), (384, True)])
def test_layer_norm_grad_x_sums_in_lanes_in_a_fixed_order(dtype, D, has_w):
    rng = np.random.default_rng(D)
    M = 7
    x = (rng.standard_normal((M, D)) * 3 + 1).astype(dtype)
    g = (rng.standard_normal((M, D)) * 1e3).astype(dtype)  # sums that round
    g[2, D // 2] = np.nan
    g[4, 0] = np.inf
    w = rng.standard_normal(D).astype(dtype) if has_w else None
    stats = np.empty((M, 2), dtype)
    layer_norm_stats(x, stats, 1e-5)
    out = np.empty((M, D), dtype)
    with np.errstate(invalid="ignore"):
        layer_norm_grad_x(g, x, stats, w if has_w else np.ones(1), has_w, out)
        want = grad_x_in_lanes(g, x, stats, w)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    assert np.isnan(out[2]).all() and not np.isfinite(out[4]).any()
    assert np.isfinite(out[[0, 1, 3, 5, 6]]).all()


def test_layer_norm_stats_refuses_rows_that_are_not_contiguous():
    """The statistics' row loop reads the arrays through pointers to C-contiguous rows (cheaper
    to compile: see ``layer_norm_chunks``); a strided view is refused, not read as if it were
    contiguous."""
    x = np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        layer_norm_stats(x, np.empty((4, 2)), 1e-5)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """The same NaN positions and, elsewhere, the same bits (a zero's sign included)."""
    return bool((np.isnan(a) == np.isnan(b)).all()
                and (a[~np.isnan(a)].view(np.uint8) == b[~np.isnan(b)].view(np.uint8)).all())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_grad_sums_rows_in_order_scaled_by_the_counts_or_not(dtype):
    """Without ``scale_by_freq`` a row is the dtype's sum of its looked-up rows in k order from
    +0; with it, each term is g / count in float64, added in float64 and rounded to the dtype.
    The kernel runs both through the float64 loop (a division by 1 without scaling): the bits
    of the dtype's sum, also where the float64 sum rounds again (terms near the dtype's largest
    value, sums that overflow).  An index out of range is reported by its position."""
    rng = np.random.default_rng(7)
    K, D, V, padding_idx = 40, 7, 6, 2
    g = (rng.standard_normal((K, D)) * 1e3).astype(dtype)
    g[3, 2], g[5, 1], g[6, 0] = np.nan, np.inf, -0.0
    g[7:12] = (np.finfo(dtype).max * rng.uniform(0.3, 0.7, (5, D))).astype(dtype)
    idx = rng.integers(0, V - 1, K)  # (row V - 1 never looked up: +0)
    n = np.bincount(idx, minlength=V)
    for scale in (False, True):
        out = np.full((V, D), 5.0, dtype)
        counts, err = np.empty(V, np.int64), np.empty(1, np.int64)
        want = np.zeros((V, D), dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            embedding_grad(g, idx, padding_idx, scale, counts, out, err)
            for k, i in enumerate(idx):
                if i != padding_idx:
                    want[i] = (want[i] + g[k] if not scale else
                               (want[i].astype(np.float64) + g[k].astype(np.float64) / n[i])
                               .astype(dtype))
        assert err[0] == -1 and bits_equal(out, want), scale
        assert np.isinf(out).any() and np.isnan(out).any()
    bad = idx.copy()
    bad[9] = V
    embedding_grad(g, bad, -1, False, counts, out, err)
    assert err[0] == 9


def test_embedding_grad_refuses_arrays_that_are_not_contiguous():
    """The kernel reads its arrays through typed pointers to C-contiguous rows (see its
    docstring); a strided view is refused, not read as if it were contiguous.  (Without
    reference counting the check is the build's: numba builds the kernel for each layout, and
    a contiguous call after a refused one takes a build of its own and its values.)"""
    g = np.arange(24.0).reshape(4, 6)[:, ::2]
    args = (np.array([1, 0, 1, 1]), -1, False, np.empty(2, np.int64))
    for strided in (g, np.asfortranarray(g)):
        with pytest.raises(ValueError, match="C-contiguous"):
            embedding_grad(strided, *args, np.empty((2, 3)), np.empty(1, np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):  # (the output too)
        embedding_grad(np.ascontiguousarray(g), *args, np.empty((2, 6))[:, ::2],
                       np.empty(1, np.int64))
    out = np.empty((2, 3))
    embedding_grad(np.ascontiguousarray(g), *args, out, np.empty(1, np.int64))
    np.testing.assert_array_equal(out, [g[1], g[0] + g[2] + g[3]])
