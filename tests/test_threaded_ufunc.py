"""kernels/threaded_ufunc.py: large contiguous elementwise calls run in chunks on the shared threads
with the ufunc's own bits, whatever the threads, in place too, and every other call is the
ufunc's (GELU, the kernels that use it)."""

from __future__ import annotations

import gc

import numba
import numpy as np
import pytest

from tinyopt.kernels import elementwise as K
from tinyopt.kernels import threaded_ufunc as T

N = T.MIN_ELEMENTS * 2 + 123  # several chunks and a short last one


def _operands(dtype, n=N):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30]
    g = rng.standard_normal(n).astype(dtype)
    return g, x


def _ufunc_values(kernel, *ins):
    out = np.empty_like(ins[-1])
    kernel._ufunc(*ins, out=out)
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunks_give_the_ufuncs_bits_whatever_the_threads(dtype, threads):
    g, x = _operands(dtype)
    want_y, want_dx = _ufunc_values(K.gelu, x), _ufunc_values(K.gelu_grad, g, x)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        y = np.empty_like(x)
        assert K.gelu(x, out=y) is y
        dx = np.empty_like(x)
        K.gelu_grad(g, x, out=dx)
        bound = np.empty_like(x)
        K.gelu_grad.bound(bound, g, x)()
    finally:
        numba.set_num_threads(before)
    for got, want in ((y, want_y), (dx, want_dx), (bound, want_dx)):
        assert got.tobytes() == want.tobytes()


def test_in_place_over_either_input():
    g, x = _operands(np.float32)
    want = _ufunc_values(K.gelu_grad, g, x)
    g1 = g.copy()
    K.gelu_grad(g1, x, out=g1)
    x1 = x.copy()
    K.gelu_grad.bound(x1, g, x1)()
    y = x.copy()
    K.gelu(y, out=y)
    assert g1.tobytes() == want.tobytes() and x1.tobytes() == want.tobytes()
    assert y.tobytes() == _ufunc_values(K.gelu, x).tobytes()


@pytest.mark.filterwarnings("ignore:invalid value")  # numpy's ufunc loop, over the NaN inputs
def test_other_calls_are_the_ufuncs():
    g, x = _operands(np.float32)
    # an output overlapping a shifted input: numpy's buffered ufunc, not chunks over the memory
    buf = np.concatenate([x, x[:1]])
    K.gelu(buf[1:], out=buf[:-1])
    assert buf[:-1].tobytes() == _ufunc_values(K.gelu, np.roll(x, -1)).tobytes()
    # strided, broadcast, small: the same values as the ufunc
    xs = np.repeat(x[:, None], 2, axis=1)[:, 0]
    assert K.gelu(xs, out=np.empty_like(x)).tobytes() == _ufunc_values(K.gelu, x).tobytes()
    small = x[:100].copy()
    assert K.gelu.bound(np.empty_like(small), small) is not None
    row = g[: 1000].reshape(1, 1000)
    out = np.empty((3, 1000), np.float32)
    K.gelu_grad(row, np.stack([x[:1000]] * 3), out=out)
    assert out[2].tobytes() == _ufunc_values(K.gelu_grad, g[:1000], x[:1000]).tobytes()


def test_a_bound_call_keeps_its_arrays_alive():
    g, x = _operands(np.float32)
    want = _ufunc_values(K.gelu, x)
    out = np.empty_like(x)
    call = K.gelu.bound(out, x.copy())  # the only reference to the input is the bound call's
    gc.collect()
    np.empty_like(x).fill(7.0)
    call()
    assert out.tobytes() == want.tobytes()
