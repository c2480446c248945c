"""kernels/norm.py: the layer-norm statistics, taken four rows at a time, are each row's float64
sums in element order (the bits of one row at a time), tails and NaN/inf rows included."""

import math

import numpy as np
import pytest

from tinyopt.kernels.norm import layer_norm_stats


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
