"""Selection ops (``engine/ops/selection.py``): gather/scatter, index_select/index_add, masked
selection, sorting, and the data-dependent results, against torch 2.13 (values and gradients)
and finite differences."""

import numpy as np
import pytest
from torchref import compare

import tinyopt as to

X = np.random.default_rng(3).standard_normal((3, 4, 5))
I = np.random.default_rng(4).integers(0, 4, (3, 2, 5))   # along dim 1 (size 4)
S = np.random.default_rng(5).standard_normal((3, 2, 5))
# no position written twice: scatter's gradient (PyTorch's, a gather) is then the true one
U = np.argsort(np.random.default_rng(6).random((3, 4, 5)), axis=1)[:, :2]

CASES = {
    "gather": (lambda L, x: x.gather(1, L.tensor(I)), (X,)),
    "gather smaller index": (lambda L, x: L.gather(x, 2, L.tensor(I[:2, :, :3] % 5)), (X,)),
    "take_along_dim": (lambda L, x: L.take_along_dim(x, L.tensor(I[:, :, :1]), 1), (X,)),
    "take": (lambda L, x: L.take(x, L.tensor([[0, 59], [7, 7]])), (X,)),
    "scatter": (lambda L, x, s: x.scatter(1, L.tensor(U), s), (X, S)),
    "scatter value": (lambda L, x: x.scatter(1, L.tensor(I), value=2.5), (X,)),
    "scatter_add": (lambda L, x, s: x.scatter_add(1, L.tensor(I), s), (X, S)),
    "index_select": (lambda L, x: x.index_select(2, L.tensor([4, 0, 0])), (X,)),
    "index_add": (lambda L, x, s: x.index_add(1, L.tensor([3, 0]), s, alpha=2.0), (X, S)),
    "index_fill": (lambda L, x: x.index_fill(0, L.tensor([2]), -1.0), (X,)),
    "index_copy": (lambda L, x, s: x.index_copy(1, L.tensor([2, 0]), s), (X, S)),
    "masked_select": (lambda L, x: x.masked_select(x > 0.2), (X,)),
    "masked_select broadcast": (lambda L, x: L.masked_select(x, L.tensor(X[0] > 0)), (X,)),
    "sort": (lambda L, x: x.sort(1), (X,)),
    "sort descending": (lambda L, x: L.sort(x, 0, descending=True), (X,)),
    "argsort": (lambda L, x: x.argsort(-1), (X,)),
    "topk": (lambda L, x: x.topk(3, 2), (X,)),
    "topk smallest": (lambda L, x: L.topk(x, 2, dim=0, largest=False), (X,)),
    "kthvalue": (lambda L, x: x.kthvalue(2, 1), (X,)),
    "median": (lambda L, x: x.median(), (X,)),
    "median dim": (lambda L, x: x.median(2, keepdim=True), (X,)),
    "nanmedian": (lambda L, x: x.nanmedian(), (X,)),
    "nanmedian dim": (lambda L, x: L.nanmedian(x, 1), (X,)),
    "max dim": (lambda L, x: x.max(1), (X,)),
    "min dim keepdim": (lambda L, x: L.min(x, 0, keepdim=True), (X,)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_against_torch(name):
    fn, arrays = CASES[name]
    compare(fn, *arrays)


def test_in_place_variants():
    for name, fn in [("scatter_", lambda L, x, s: x.scatter_(1, L.tensor(U), s)),
                     ("scatter_add_", lambda L, x, s: x.scatter_add_(1, L.tensor(I), s)),
                     ("index_add_", lambda L, x, s: x.index_add_(1, L.tensor([3, 0]), s)),
                     ("index_fill_", lambda L, x, s: x.index_fill_(2, L.tensor([1]), 7.0))]:
        compare(lambda L, x, s: fn(L, x * 1.0, s), X, S)


def test_repeated_indices_add_up_and_out_of_range_indices_raise():
    x = to.zeros(2, 3)
    out = x.scatter_add(1, to.tensor([[0, 0, 2], [1, 1, 1]]), to.ones(2, 3))
    np.testing.assert_array_equal(out.numpy(), [[2, 0, 1], [0, 3, 0]])
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x.gather(1, to.tensor([[3]]))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        x.gather(1, to.tensor([[-1]]))
    with pytest.raises(RuntimeError, match="Expected dtype int64 for index"):
        x.gather(1, to.tensor([[0]], dtype=to.int32))
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, to.tensor([2]))
    # a computed index out of range raises when the plan runs, and writes nothing out of bounds
    w = to.nn.Parameter(np.ones((2, 3)))
    bad = (w.sum(1, keepdim=True) * 2).long()   # 6: out of range, known only when run
    with pytest.raises(RuntimeError, match="index 6 is out of bounds"):
        w.gather(1, bad).sum().backward()


def test_data_dependent_results_match_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[3, 0, 1], [0, 3, 3]])
    for fn in [lambda L, t: t.nonzero(), lambda L, t: L.nonzero(t, as_tuple=True),
               lambda L, t: t.unique(), lambda L, t: L.unique(t, return_inverse=True,
                                                              return_counts=True),
               lambda L, t: L.bincount(t.reshape(-1)), lambda L, t: L.argwhere(t),
               lambda L, t: L.where(t > 0), lambda L, t: L.bincount(t[0], minlength=6),
               lambda L, t: L.searchsorted(L.tensor([0, 1, 3, 5]), t),
               lambda L, t: L.bucketize(t, L.tensor([1, 2]), right=True)]:
        ours, theirs = fn(to, to.tensor(a)), fn(torch, torch.tensor(a))
        ours = ours if isinstance(ours, tuple) else (ours,)
        theirs = theirs if isinstance(theirs, tuple) else (theirs,)
        for o, t in zip(ours, theirs):
            assert o.dtype == to.int64
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    w = np.array([0.5, 1.5, 2.0])
    np.testing.assert_allclose(to.bincount(to.tensor([2, 0, 2]), to.tensor(w)).numpy(),
                               torch.bincount(torch.tensor([2, 0, 2]), torch.tensor(w)).numpy())


def test_sort_ties_and_nan_follow_torch():
    torch = pytest.importorskip("torch")
    a = np.array([2.0, np.nan, 1.0, 2.0, -np.inf, 1.0])
    for desc in (False, True):
        o = to.sort(to.tensor(a), descending=desc, stable=True)
        t = torch.sort(torch.tensor(a), descending=desc, stable=True)
        np.testing.assert_array_equal(o.values.numpy(), t.values.numpy())
        np.testing.assert_array_equal(o.indices.numpy(), t.indices.numpy())


def test_nonzero_of_a_0d_tensor_has_no_coordinates():
    """Issue 25.11: ``nonzero`` of a 0-d tensor had shape (1, 1); torch's is (1, 0)."""
    assert to.tensor(3.0).nonzero().shape == (1, 0)
    assert to.tensor(0.0).nonzero().shape == (0, 0)
    assert to.argwhere(to.tensor(True)).shape == (1, 0)
    assert [t.tolist() for t in to.tensor(3.0).nonzero(as_tuple=True)] == [[0]]
    torch = pytest.importorskip("torch")
    for v in (3.0, 0.0):
        assert tuple(torch.tensor(v).nonzero().shape) == to.tensor(v).nonzero().shape


def test_take_wraps_negative_indices_and_raises_torchs_error():
    """Issue 25.14: ``take()`` refused negative indices; torch reads i < 0 as i + numel."""
    x = to.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.take(to.tensor([-1, 0, -4])).tolist() == [4.0, 1.0, 1.0]
    assert x.take(to.tensor([0, 1]) - 2).tolist() == [3.0, 4.0]  # computed, known when run
    for bad in (4, -5):
        with pytest.raises(IndexError, match=rf"^out of range: tried to access index {bad} on a "
                                             rf"tensor of 4 elements\.$"):
            x.take(to.tensor([0, bad]))
    torch = pytest.importorskip("torch")
    assert torch.tensor([[1.0, 2.0], [3.0, 4.0]]).take(torch.tensor([-1, 0, -4])).tolist() == \
        [4.0, 1.0, 1.0]


def test_index_ops_out_of_range_raise_torchs_errors():
    """index_add raised an IndexError ("index out of range in self") where torch raises a
    RuntimeError naming the index; scatter's message carried a prefix of tinyopt's."""
    x = to.arange(6.0).reshape(2, 3)
    cases = [(lambda m, x: x.index_add(0, m.tensor([7]), m.ones(1, 3)), RuntimeError,
              "index 7 is out of bounds for dimension 0 with size 2"),
             (lambda m, x: x.index_fill(0, m.tensor([4]), 1.0), IndexError,
              "index 4 is out of bounds for dimension 0 with size 2"),
             (lambda m, x: x.index_copy(0, m.tensor([4]), m.ones(1, 3)), IndexError,
              r"index_copy_\(\): index 4 is out of bounds for dimension 0 with size 2"),
             (lambda m, x: x.index_select(0, m.tensor([-1])), IndexError,
              "index out of range in self"),
             (lambda m, x: x.scatter(0, m.tensor([[9, 0, 0]]), m.ones(1, 3)), RuntimeError,
              "index 9 is out of bounds for dimension 0 with size 2")]
    for fn, kind, words in cases:
        with pytest.raises(kind, match=f"^{words}$"):
            fn(to, x)
    torch = pytest.importorskip("torch")
    tx = torch.arange(6.0).reshape(2, 3)
    for fn, kind, words in cases:
        with pytest.raises(kind, match=f"^{words}$"):
            fn(torch, tx)


def test_a_median_over_a_nan_is_nan_at_the_first_nans_index_as_torch():
    """A row holding a NaN has the NaN as its median and the first NaN's index (kthvalue alone
    sorts NaN last: it gave a number), with the gradient on that NaN; ``median()`` of a tensor
    holding a NaN is NaN, its gradient shared by the NaNs; rows without one keep their median."""
    torch = pytest.importorskip("torch")
    n = np.nan
    data = np.array([[1.0, n, 2.0, n, 0.0], [3.0, 1.0, 2.0, 0.0, 5.0], [n, n, 4.0, 1.0, 1.0]])
    for dtype in (np.float32, np.float64):
        for dim, keepdim in ((None, False), (1, False), (0, False), (1, True), (-1, True)):
            got = []
            for lib in (torch, to):
                x = lib.tensor(data.astype(dtype), requires_grad=True)
                if dim is None:
                    values, indices = lib.median(x), None
                else:
                    values, indices = lib.median(x, dim, keepdim=keepdim)
                (values * lib.arange(1.0, values.numel() + 1).reshape(values.shape)).sum().backward()
                got.append((values.detach().numpy(), None if indices is None else
                            indices.numpy(), x.grad.numpy()))
            for want, have in zip(got[0], got[1]):
                if want is not None:
                    assert have.shape == want.shape and have.dtype == want.dtype
                    np.testing.assert_array_equal(have, want)


def test_nanmedian_skips_nans_as_torch():
    """The lower median of a row's numbers (NaN where the row has none, at its first NaN), with
    its index and the gradient on it; ``nanmedian()``'s gradient shared by the elements equal to
    it (or by the NaNs of an all-NaN tensor); integers as ``median``."""
    torch = pytest.importorskip("torch")
    n = np.nan
    data = np.array([[1.0, n, 3.0, n], [n, 5.0, n, n], [2.0, 2.0, 1.0, 0.5], [4.0, 3.0, n, 7.0]])
    for dtype, x0, dims in ((np.float32, data, (None, 1, -1)), (np.float64, data.T, (None, 0)),
                            (np.float64, np.full(3, n), (None,))):
        for dim in dims:
            got = []
            for lib in (torch, to):
                x = lib.tensor(x0.astype(dtype), requires_grad=True)
                r = lib.nanmedian(x) if dim is None else x.nanmedian(dim, keepdim=dim == -1)
                values = r if dim is None else r[0]
                w = lib.arange(1.0, values.numel() + 1).reshape(values.shape)
                (values * w).sum().backward()
                got.append((values.detach().numpy(), None if dim is None else r[1].numpy(),
                            x.grad.numpy()))
            for want, have in zip(*got):
                if want is not None:
                    assert have.shape == want.shape and have.dtype == want.dtype
                    np.testing.assert_array_equal(have, want)
    # a row of NaNs: NaN, at one of them (torch's index there is std::nth_element's choice)
    values, indices = to.tensor([[n, n, n, n], [1.0, n, n, 2.0]]).nanmedian(1)
    assert np.isnan(values[0].item()) and 0 <= indices[0].item() < 4 and values[1].item() == 1.0
    for dtype in (to.float16, to.bfloat16):  # (16-bit floats read as such: NaN is seen)
        x = to.tensor([[1.0, n, 3.0], [2.0, n, n]]).to(dtype)
        assert np.isnan(x.median().item()) and x.nanmedian().item() == 2.0
        assert x.median(1)[1].tolist() == [1, 1] and x.nanmedian(1)[0].tolist() == [1.0, 2.0]
    ints = np.array([[5, 1, 3], [2, 8, 4]])
    for r, t in zip(to.nanmedian(to.tensor(ints), 1), torch.nanmedian(torch.tensor(ints), 1)):
        np.testing.assert_array_equal(r.numpy(), t.numpy())


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_the_median_of_no_elements_is_torchs(name):
    """NaN (an integer dtype's lowest value) for ``median()``, differentiable; ``median(dim)``
    over an empty dim raises torch's IndexError; over another dim an empty result."""
    torch = pytest.importorskip("torch")
    for dtype in ("float32", "float64", "int64"):
        ours, theirs = (getattr(lib.zeros(2, 0, dtype=getattr(lib, dtype)), name)()
                        for lib in (to, torch))
        assert ours.dtype == dtype
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    x = to.zeros(0, 3, requires_grad=True)
    getattr(x, name)().backward()
    assert x.grad.shape == (0, 3)
    values, indices = getattr(x, name)(1)
    assert values.shape == indices.shape == (0,)
    for dim in (0, -2):
        with pytest.raises(IndexError, match=r"^median\(\): Expected reduction dim 0 to have "
                                             r"non-zero size\.$"):
            getattr(x, name)(dim)


def test_the_median_of_all_elements_shares_its_gradient_among_equal_elements_as_torch():
    """``median()``'s gradient is split evenly among the elements equal to the median (torch's
    ``evenly_distribute_backward``), not given to one of them; ``median(dim)`` gives it to the
    returned index, as torch's."""
    torch = pytest.importorskip("torch")
    data = np.array([[1.0, 3.0, 1.0], [1.0, 2.0, 5.0]], np.float32)
    got = []
    for lib in (torch, to):
        x = lib.tensor(data, requires_grad=True)
        (lib.median(x) * 3.0 + lib.median(x, 1)[0].sum()).backward()
        got.append(x.grad.numpy().copy())
    np.testing.assert_array_equal(got[1], got[0])
