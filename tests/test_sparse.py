"""Sparse COO tensors (``tinyopt.engine.sparse``): construction, coalesce, to_dense, to_sparse and
``sparse.mm`` with gradients, against PyTorch; out-of-range indices refused."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to

RNG = np.random.default_rng(0)
IDX = np.array([[0, 1, 1, 2, 0, 3], [2, 0, 2, 1, 2, 3]])
VALS = RNG.standard_normal(6)
X = RNG.standard_normal((4, 3))


def test_mm_gradients_match_finite_differences():
    gradcheck(lambda v, x: to.sparse.mm(to.sparse_coo_tensor(IDX, v, (4, 4)), x), VALS, X)
    gradcheck(lambda v: to.sparse_coo_tensor(IDX, v, (4, 4)).to_dense(), VALS)
    gradcheck(lambda v: to.sparse_coo_tensor(IDX, v, (4, 4)).coalesce().values() * 2, VALS)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    tv = torch.tensor(VALS, requires_grad=True)
    tx = torch.tensor(X, requires_grad=True)
    ta = torch.sparse_coo_tensor(torch.tensor(IDX), tv, (4, 4))
    ty = torch.sparse.mm(ta, tx)
    (ty * ty).sum().backward()
    ov, ox = to.tensor(VALS, requires_grad=True), to.tensor(X, requires_grad=True)
    oa = to.sparse_coo_tensor(IDX, ov, (4, 4))
    oy = to.sparse.mm(oa, ox)
    (oy * oy).sum().backward()
    np.testing.assert_allclose(oy.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ov.grad.numpy(), tv.grad.numpy(), rtol=1e-12)
    tc, oc = ta.coalesce(), oa.coalesce()
    np.testing.assert_array_equal(oc.indices().numpy(), tc.indices().numpy())
    np.testing.assert_allclose(oc.values().numpy(), tc.values().detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(oa.to_dense().numpy(), ta.to_dense().detach().numpy())
    assert (oa._nnz(), oc._nnz(), oa.is_coalesced(), oc.is_coalesced()) == \
        (ta._nnz(), tc._nnz(), ta.is_coalesced(), tc.is_coalesced())
    dense = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0]])
    np.testing.assert_array_equal(to.tensor(dense).to_sparse().indices().numpy(),
                                  torch.tensor(dense).to_sparse().indices().numpy())
    td, od = torch.tensor(dense, requires_grad=True), to.tensor(dense, requires_grad=True)
    torch.sparse.mm(td.to_sparse(), tx[:3]).sum().backward()
    to.sparse.mm(od.to_sparse(), to.tensor(X[:3])).sum().backward()
    np.testing.assert_allclose(od.grad.numpy(), td.grad.numpy())  # 0 at the structural zeros
    for f in (lambda lib, a, x: lib.mm(a, x), lambda lib, a, x: lib.spmm(a, x),
              lambda lib, a, x: a @ x, lambda lib, a, x: a.t().mm(x[:4]) * 2,
              lambda lib, a, x: lib.sparse.sum(a), lambda lib, a, x: (a * 3).to_dense()):
        np.testing.assert_allclose(f(to, oa, ox).numpy(), f(torch, ta, tx).detach().numpy(),
                                   rtol=1e-12)


def test_errors_match_torch():
    with pytest.raises(RuntimeError, match="found negative index -1 for dim 0"):
        to.sparse_coo_tensor([[-1, 0]], [1.0, 2.0], (3,))
    with pytest.raises(RuntimeError, match="size is inconsistent with indices: for dim 1, size "
                                           "is 2 but found index 5"):
        to.sparse_coo_tensor([[0, 1], [5, 0]], [1.0, 2.0], (2, 2))
    with pytest.raises(RuntimeError, match="indices and values must have same nnz"):
        to.sparse_coo_tensor([[0, 1]], [1.0], (2,))
    a = to.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (2, 2))
    with pytest.raises(RuntimeError, match="Cannot get indices on an uncoalesced tensor"):
        a.indices()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        to.sparse.mm(a, to.ones(3, 1))
    with pytest.raises(AttributeError, match="not supported for sparse COO tensors"):
        a.exp()
    assert a.is_sparse and not to.ones(1).is_sparse and str(a.layout) == "torch.sparse_coo"
    assert to.sparse_coo_tensor([[0, 2]], [1.0, 2.0]).shape == (3,)  # size from the indices
