"""Storage (engine/storage.py): views share their base's storage and version counter; every torch
view op is a view in tinyopt too, or raises where torch cannot make one (issue 25, point 2)."""

from __future__ import annotations

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine.inplace import relocate
from tinyopt.engine.storage import storage_of

VIEWS = {  # torch's view ops, each applied to a (3, 4) tensor
    "view": lambda t: t.view(4, 3),
    "view_as": lambda t: t.view_as(t),
    "reshape (viewable)": lambda t: t.reshape(-1),
    "flatten": lambda t: t.flatten(),
    "t": lambda t: t.t(),
    "T": lambda t: t.T,
    "mT": lambda t: t.mT,
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "movedim": lambda t: t.movedim(0, 1),
    "narrow": lambda t: t.narrow(1, 1, 2),
    "select": lambda t: t.select(0, 1),
    "basic indexing": lambda t: t[1:, ::2],
    "int indexing": lambda t: t[2],
    "None indexing": lambda t: t[None, 0],
    "diagonal": lambda t: t.diagonal(),
    "diagonal offset": lambda t: t.diagonal(1),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t.unsqueeze(0).squeeze(0),
    "expand": lambda t: t[:1].expand(3, 4),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "split": lambda t: t.split(2, 1)[1],
    "chunk": lambda t: t.chunk(3)[2],
    "unbind": lambda t: t.unbind(1)[3],
    "tensor_split": lambda t: t.tensor_split(2)[1],
    "as_strided": lambda t: t.as_strided((2, 2), (4, 1), 1),
    "detach": lambda t: t.detach(),
    "data": lambda t: t.data,
    "view of a view": lambda t: t.t()[1:].unsqueeze(0),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_torch_view_op_shares_storage(name):
    base = to.tensor(np.arange(12.).reshape(3, 4))
    v = VIEWS[name](base)
    assert np.shares_memory(v.numpy(), base.numpy())
    assert storage_of(v) is storage_of(base)
    before = base.numpy().copy()
    with to.no_grad():
        v.fill_(-1.0)  # (one value: legal even on an expanded view)
    changed = base.numpy() != before
    assert changed.any() and (base.numpy()[changed] == -1).all()
    assert v.tolist() == np.full(v.shape, -1.0).tolist()


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_view_op_matches_torch(name):
    torch = pytest.importorskip("torch")
    data = np.arange(12.).reshape(3, 4)
    ours, theirs = to.tensor(data), torch.tensor(data)
    v, w = VIEWS[name](ours), VIEWS[name](theirs)
    assert tuple(v.shape) == tuple(w.shape) and v.tolist() == w.tolist()
    size_gt_1 = [i for i, n in enumerate(v.shape) if n > 1]  # (a size-1 stride is arbitrary)
    assert [v.stride(i) for i in size_gt_1] == [w.stride(i) for i in size_gt_1]
    assert v.is_contiguous() == w.is_contiguous() and v.storage_offset() == w.storage_offset()
    with to.no_grad():
        v.fill_(-1.0)
    with torch.no_grad():
        w.fill_(-1.0)
    assert ours.tolist() == theirs.tolist()
    assert (ours._version, v._version) == (theirs._version, w._version)


EMPTY_VIEWS = {  # of a (4, 3) tensor: where torch's empty results start, and their strides
    "rows past the end": lambda t: t[4:], "rows from far past the end": lambda t: t[9:],
    "no rows in the middle": lambda t: t[2:2], "no columns": lambda t: t[1:, 3:],
    "backwards": lambda t: t[-1:0], "stepped": lambda t: t[::2][2:],
    "step 2": lambda t: t[1, 2:2:2],
    "narrow": lambda t: t.narrow(1, 2, 0), "split": lambda t: t.split(2, 1)[1][:, 1:],
    "tensor_split": lambda t: t.tensor_split([4])[1], "transposed": lambda t: t.t()[1:, 4:],
    "select, then none": lambda t: t[:, 1][4:], "None": lambda t: t[None, 4:],
    "view of an empty": lambda t: t[4:].view(3, 0), "empty, then None": lambda t: t[4:][None],
    "unbind": lambda t: t[:, 3:].unbind(0)[2], "unsqueeze": lambda t: t[4:].unsqueeze(0),
    "unsqueeze inside": lambda t: t.t()[3:].unsqueeze(1),
    "squeeze of a transposed empty": lambda t: t.t()[:, None, 4:].squeeze(),
    "squeeze one dim": lambda t: t.t()[None, 1:, ::2][:, :, 2:].squeeze(0),
}


@pytest.mark.parametrize("make", [lambda L: L.ones(4, 3), lambda L: L.ones(4, 3) * 2,
                                  lambda L: L.nn.Parameter(L.ones(4, 3))])
def test_empty_views_start_where_torchs_do(make):
    """An empty slice keeps its start and its step, as torch's (numpy's starts at 0 with step 1),
    for a plain tensor, a graph node and a parameter."""
    torch = pytest.importorskip("torch")
    for name, view in EMPTY_VIEWS.items():
        got = [(tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.is_contiguous())
               for v in (view(make(to)), view(make(torch)))]
        assert got[0] == got[1], name


def test_from_numpy_of_an_empty_array_keeps_its_strides_as_torch():
    torch = pytest.importorskip("torch")
    for a in (np.zeros((0, 3), np.float32), np.ones((4, 3))[4:], np.ones((4, 3)).T[3:],
              np.zeros((2, 0, 4)), np.ones((4, 3))[:, 3:]):
        ours, theirs = to.from_numpy(a), torch.from_numpy(a)
        assert ours.stride() == theirs.stride() and ours.storage_offset() == 0
        assert ours[1:].stride() == theirs[1:].stride()
    assert to.tensor(np.zeros((0, 3))).stride() == (3, 1)  # (a copy: contiguous, as torch's)


def test_view_raises_where_torch_cannot_view_and_reshape_copies_there():
    x = to.tensor(np.arange(6.).reshape(2, 3))
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's "
                                           "size and stride"):
        x.t().view(-1)
    y = x * 1.0 + to.zeros(2, 3, requires_grad=True)  # a graph node: same rule
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        y.t().view(6)
    r = x.t().reshape(-1)  # a copy, as torch's
    r.zero_()
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert x.reshape(-1)._is_view() and x.t().contiguous().view(-1).shape == (6,)


def test_detach_shares_storage_and_version_counter():
    x = to.tensor([1., 2., 3.])
    d = x.detach()
    assert d is not x and not d._is_view()
    d.add_(1)
    assert x.tolist() == [2., 3., 4.] and x._version == d._version == 1
    y = to.tensor([1., 2.], requires_grad=True) * 2.0
    yd = y.detach()
    yd.mul_(10)  # torch: y's values change, its gradient does not
    assert y.tolist() == [20., 40.] and y._version == 1 and y.grad_fn is not None


def test_data_shares_memory_but_not_the_version_counter():
    x = to.tensor([1., 2., 3.])
    d = x.data
    d.mul_(2)
    assert x.tolist() == [2., 4., 6.]
    assert (x._version, d._version) == (0, 1)  # torch's .data: writes invalidate nothing


def test_storage_tracks_live_views_and_versions():
    x = to.zeros(4)
    s = storage_of(x)
    views = [x[:2], x[2:]]
    assert s.base is x and all(any(v is w for w in s.views()) for v in views)
    views[0].add_(1)
    views[1][0] = 5
    assert s.version == 2 == x._version == views[0]._version
    del views
    import gc
    gc.collect()
    assert s.views() == []


def test_parameter_views_write_its_storage():
    p = to.nn.Parameter(to.zeros(2, 3))
    with to.no_grad():
        p.t()[2].fill_(1.0)
        p.diagonal().add_(2.0)
    assert p.tolist() == [[2, 0, 1], [0, 2, 1]]
    assert p._version == 2


def test_unfold_and_as_strided_check_their_arguments_as_torch():
    x = to.ones(4, 6)
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 6 but size "
                                           "is 7"):
        x.unfold(1, 7, 1)
    with pytest.raises(RuntimeError, match="step is 0 but must be > 0"):
        x.unfold(1, 2, 0)
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 96"):
        x.as_strided((5, 5), (6, 1))  # (never reads outside the storage)
    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        x.as_strided((2,), (-1,))
    assert x[1].as_strided((2,), (1,)).tolist() == [1.0, 1.0]  # offset: x[1]'s own


def test_relocate_moves_the_memory_of_a_base_and_its_views():
    x = to.tensor(np.arange(6.).reshape(2, 3))
    row, d = x[1], x.detach()
    shared = np.zeros((2, 3))
    relocate(storage_of(x), shared)
    row.add_(10)
    d[0, 0] = -1
    assert shared.tolist() == [[-1, 1, 2], [13, 14, 15]] == x.tolist()
    with pytest.raises(ValueError, match="shape"):
        relocate(storage_of(x), np.zeros(3))


def test_the_module_docstring_example_holds():
    import doctest

    import tinyopt.engine.storage as storage
    assert doctest.testmod(storage).failed == 0
