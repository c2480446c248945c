"""nansum/nanmean, cov/corrcoef, trapezoid/cumulative_trapezoid and the window functions:
values against PyTorch, gradients against finite differences, torch's errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to
from gradcheck import gradcheck

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 6))
FW = np.array([1, 2, 1, 3, 1, 2])
AW = RNG.uniform(0.5, 2.0, 6)


def _both(f, *arrays, rtol=1e-12, atol=1e-12):
    torch = pytest.importorskip("torch")
    ours = f(to, *[to.tensor(a) for a in arrays])
    theirs = f(torch, *[torch.tensor(a) for a in arrays])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=rtol, atol=atol)
    assert ours.shape == tuple(theirs.shape) and ours.dtype == theirs.numpy().dtype


@pytest.mark.parametrize("kw", [{}, {"correction": 0}, {"fweights": FW}, {"aweights": AW},
                                {"fweights": FW, "aweights": AW, "correction": 2}])
def test_cov_and_corrcoef(kw):
    def f(lib, x):
        return lib.cov(x, **{k: lib.tensor(v) if isinstance(v, np.ndarray) else v
                             for k, v in kw.items()})
    _both(f, X)
    _both(lambda lib, x: lib.cov(x[0]), X)
    gradcheck(lambda x: f(to, x), X)


def test_corrcoef_and_cov_edge_cases():
    _both(lambda lib, x: lib.corrcoef(x), X)
    _both(lambda lib, x: x.corrcoef(), X[:1])
    gradcheck(lambda x: to.corrcoef(x), X)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert np.isnan(to.cov(to.ones(3, 1)).numpy()).all()
    assert "degrees of freedom is <= 0" in str(w[0].message)
    with pytest.raises(RuntimeError, match="two or fewer dimensions"):
        to.cov(to.ones(2, 2, 2))
    with pytest.raises(RuntimeError, match="fweights to have integral dtype"):
        to.cov(to.tensor(X), fweights=to.tensor(AW))


def test_nansum_nanmean():
    z = X.copy()
    z[0, 1] = z[2, :] = np.nan
    for f in (lambda lib, x: lib.nansum(x, 1), lambda lib, x: lib.nanmean(x, 1),
              lambda lib, x: x.nanmean(), lambda lib, x: x.nansum(0, keepdim=True)):
        _both(f, z)
    grads = gradcheck(lambda x: to.nanmean(x, 1)[:2], z[:, [0, 2, 3]])
    assert (grads[0][2] == 0).all()
    assert to.nansum(to.tensor([1, 2])).item() == 3
    with pytest.raises(RuntimeError, match="floating point or complex dtype but got Long"):
        to.nanmean(to.tensor([1, 2]))


def test_trapezoid_forms():
    y = RNG.standard_normal((3, 5))
    xs, xs2 = np.sort(RNG.standard_normal(5)), np.sort(RNG.standard_normal((3, 5)), 1)
    _both(lambda lib, a: lib.trapezoid(a), y)
    _both(lambda lib, a: lib.trapezoid(a, dx=0.5, dim=0), y)
    _both(lambda lib, a, b: lib.trapezoid(a, b), y, xs)
    _both(lambda lib, a, b: lib.trapezoid(a, b), y, xs2)
    _both(lambda lib, a, b: lib.trapezoid(a, b, dim=0), y, xs[:3])
    _both(lambda lib, a, b: lib.cumulative_trapezoid(a, b), y, xs)
    _both(lambda lib, a: lib.cumulative_trapezoid(a, dx=0.3, dim=0), y)
    gradcheck(lambda a, b: to.trapezoid(a, b), y, xs)
    gradcheck(lambda a, b: to.cumulative_trapezoid(a, b), y, xs2)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window",
                                  "bartlett_window", "kaiser_window"])
def test_windows(name):
    for n in (0, 1, 5, 8):
        for periodic in (True, False):
            _both(lambda lib: getattr(lib, name)(n, periodic), atol=1e-6, rtol=1e-6)
            _both(lambda lib: getattr(lib, name)(n, periodic, dtype=lib.float64), atol=1e-14,
                  rtol=1e-12)
    with pytest.raises(RuntimeError, match="non-negative window_length"):
        getattr(to, name)(-1)
    with pytest.raises(RuntimeError, match="floating point dtypes"):
        getattr(to, name)(3, dtype=to.int64)
