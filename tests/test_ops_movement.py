"""Shape and movement ops: reshape/view, flatten, transpose/.T, permute, expand, squeeze/unsqueeze,
indexing and slicing, integer-array rows, cat/stack.  Forward against numpy, backward against
finite differences, errors, and views that must not write into their sources."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt.engine import ops as O

from gradcheck import gradcheck

SETTINGS = settings(max_examples=15, deadline=None)
SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def check(f, ref, x, *, grad=True):
    """f on a tinyopt tensor equals ref on the numpy array (float32 and float64); then gradcheck."""
    for dtype in (np.float32, np.float64):
        a = x.astype(dtype)
        out = f(to.tensor(a))
        want = ref(a)
        assert out.shape == want.shape and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=0)  # 1 ulp: exp etc.
    if grad:
        gradcheck(f, x)


# ---- reshape / view / flatten / squeeze / unsqueeze ----------------------------------------------
@SETTINGS
@given(shape=SHAPES, data=st.data())
def test_reshape_and_view(shape, data):
    x = rand(shape)
    n = x.size
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    d = data.draw(st.sampled_from(divisors))
    check(lambda t: t.reshape(d, -1), lambda a: a.reshape(d, -1), x)
    check(lambda t: t.view(-1, d) * 1.0, lambda a: a.reshape(-1, d), x, grad=False)
    check(lambda t: t.reshape((n,)), lambda a: a.reshape(n), x, grad=False)


@SETTINGS
@given(shape=SHAPES, data=st.data())
def test_flatten(shape, data):
    x = rand(shape)
    nd = len(shape)
    s = data.draw(st.integers(-nd, nd - 1))
    e = data.draw(st.integers(s % nd, nd - 1))
    want = lambda a: a.reshape(a.shape[:s % nd] + (-1,) + a.shape[e + 1:])  # noqa: E731
    check(lambda t: t.flatten(s, e), want, x)
    check(lambda t: t.flatten(), lambda a: a.reshape(-1), x, grad=False)


def test_flatten_of_a_scalar_checks_its_dims_as_pytorch():
    x = to.tensor(2.0)
    assert x.flatten().shape == (1,) and x.flatten(-1, 0).shape == (1,)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.flatten(1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        to.nn.Flatten()(x)  # start_dim=1


@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=4).map(tuple), data=st.data())
def test_squeeze_unsqueeze(shape, data):
    x = rand(shape)
    check(lambda t: t.squeeze(), np.squeeze, x)
    d = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check(lambda t: t.unsqueeze(d), lambda a: np.expand_dims(a, d), x)
    if shape:
        d = data.draw(st.integers(-len(shape), len(shape) - 1))
        # squeeze(d) removes dim d only when it has size 1 (PyTorch), otherwise it is a no-op.
        want = (lambda a: np.squeeze(a, d)) if shape[d] == 1 else (lambda a: a)
        check(lambda t: t.squeeze(d), want, x, grad=False)


def test_reshape_edge_cases():
    t = to.tensor(np.arange(6.0))
    assert t.reshape(6) is not t and t.reshape(6)._base is t  # a view, as torch's
    assert t.reshape(2, 3).shape == (2, 3) and t.reshape([3, 2]).shape == (3, 2)
    assert t.view_as(to.tensor(np.zeros((3, 2)))).shape == (3, 2)
    s = to.tensor(5.0)
    assert s.reshape(1, 1).shape == (1, 1) and s.flatten().shape == (1,)
    assert s.unsqueeze(0).shape == (1,) and s.squeeze().shape == ()
    assert to.tensor(np.zeros((0, 3))).reshape(3, 0).shape == (3, 0)


def test_reshape_errors():
    t = to.tensor(np.zeros((2, 3)))
    with pytest.raises(RuntimeError, match=r"shape \[4, 2\] is invalid for input of size 6"):
        t.reshape(4, 2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        t.reshape(-1, -1)
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        t.reshape(4, -1)
    with pytest.raises(IndexError, match=r"out of range.*\[-3, 2\].*got 3"):
        t.unsqueeze(3)
    with pytest.raises(IndexError, match="out of range"):
        t.flatten(0, 5)
    with pytest.raises(RuntimeError, match="start_dim cannot come after end_dim"):
        t.flatten(1, 0)


# ---- transpose / permute / .T ------------------------------------------------------------------
@SETTINGS
@given(shape=SHAPES, data=st.data())
def test_permute_and_transpose(shape, data):
    x = rand(shape)
    nd = len(shape)
    perm = tuple(data.draw(st.permutations(range(nd))))
    check(lambda t: t.permute(*perm), lambda a: a.transpose(perm), x)
    check(lambda t: t.permute(perm) * 2.0, lambda a: a.transpose(perm) * 2, x, grad=False)
    d0, d1 = data.draw(st.integers(-nd, nd - 1)), data.draw(st.integers(-nd, nd - 1))
    check(lambda t: t.transpose(d0, d1), lambda a: np.swapaxes(a, d0, d1), x)
    check(lambda t: t.T, lambda a: a.T, x)


def test_transpose_2d_and_degenerate():
    x = rand((2, 3))
    check(lambda t: t.T.exp(), lambda a: np.exp(a.T), x)  # a computed op on a strided view
    check(lambda t: t.mT.sum(0), lambda a: a.T.sum(0), x, grad=False)  # a reduction on one
    s = to.tensor(3.0)
    for same in (s.T, s.transpose(0, -1), s.permute(())):  # views of all of it, as torch's
        assert same is not s and same._base is s and same.shape == ()
    with pytest.raises(TypeError, match='missing 1 required positional arguments: "dims"'):
        s.permute()  # (as torch's)
    v = to.tensor([1.0, 2.0])
    assert v.T._base is v and v.transpose(0, -1)._base is v and v.T.shape == (2,)


def test_permute_errors():
    t = to.tensor(np.zeros((2, 3, 4)))
    with pytest.raises(RuntimeError, match=r"input.dim\(\) = 3 is not equal to len\(dims\) = 2"):
        t.permute(0, 1)
    with pytest.raises(RuntimeError, match="duplicate dims are not allowed"):
        t.permute(0, 1, 1)
    with pytest.raises(IndexError, match="out of range"):
        t.transpose(0, 3)


# ---- expand --------------------------------------------------------------------------------------
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple), data=st.data())
def test_expand(shape, data):
    x = rand(tuple(data.draw(st.sampled_from([1, s])) for s in shape))
    lead = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    target = lead + shape
    check(lambda t: t.expand(*target), lambda a: np.broadcast_to(a, target), x)
    check(lambda t: t.expand(target) + 0.0, lambda a: np.broadcast_to(a, target) + 0.0, x,
          grad=False)
    minus = lead + (-1,) * len(shape)
    check(lambda t: t.expand(minus), lambda a: np.broadcast_to(a, lead + a.shape), x, grad=False)


def test_expand_as_and_errors():
    t = to.tensor(np.ones((3, 1)))
    assert t.expand_as(to.tensor(np.zeros((2, 3, 4)))).shape == (2, 3, 4)
    assert t.expand(3, 1) is not t and t.expand(3, 1)._base is t
    with pytest.raises(RuntimeError, match=r"expanded size.*\(4\).*existing size \(3\)"):
        t.expand(4, 4)
    with pytest.raises(RuntimeError, match=r"number of sizes provided \(1\)"):
        t.expand(3)


# ---- indexing and slicing --------------------------------------------------------------------
KEYS = [
    (1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (slice(None, 1, 1),),
    (slice(1, 3), slice(None, None, 2)), (Ellipsis, 0), (None, 1), (0, None, slice(1, None)),
    (slice(0, 0),), (Ellipsis, slice(-2, None), None), (-2, -1), (slice(10, 20),),
    (slice(None), 1, slice(None, None, 2)),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_basic_indexing(key):
    x = rand((4, 5, 3))
    k = key[0] if len(key) == 1 else key
    check(lambda t: t[k], lambda a: a[k], x)


def test_indexing_a_1d_tensor_and_scalars():
    x = np.array([1.0, 2.0, 3.0])
    check(lambda t: t[1], lambda a: a[1], x)
    check(lambda t: t[1:] * t[:-1], lambda a: a[1:] * a[:-1], x)
    with pytest.raises(ValueError, match="step must be greater than zero"):
        to.tensor(x)[::-1]  # as in PyTorch (use flip)
    assert to.tensor(x)[2].item() == 3.0
    assert to.tensor(x)[np.int64(0)].item() == 1.0


def test_integer_array_rows():
    x = rand((5, 3))
    for idx in ([0, 2, 2, 4], np.array([4, -1, 0]), np.array([[1, 2], [3, 3]]), []):
        ia = np.asarray(idx, dtype=np.int64)
        check(lambda t: t[idx], lambda a: a[ia], x, grad=ia.size > 0)
    check(lambda t: t[to.tensor([3, 1, 3])], lambda a: a[[3, 1, 3]], x)
    # repeated rows accumulate their gradients
    p = to.Parameter(np.zeros((3, 2)))
    p[np.array([0, 0, 2, 0])].sum().backward()
    np.testing.assert_array_equal(p.grad, [[3, 3], [0, 0], [1, 1]])
    # a computed index (argmax) selects rows too
    t = to.tensor(x)
    rows = t[t.sum(1).argmax(0, keepdim=True)]
    np.testing.assert_array_equal(rows.numpy(), x[[x.sum(1).argmax()]])


def test_indexing_errors():
    t = to.tensor(np.zeros((3, 4)))  # PyTorch's messages
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        t[[0, 3]]
    with pytest.raises(IndexError, match="out of bounds"):
        t[np.array([-4])]
    with pytest.raises(IndexError, match="must be long, int, byte or bool tensors"):
        t[to.tensor([0.0, 1.0])]
    assert t[np.array([0.0, 1.9])].shape == (2, 4)  # arrays and lists: made int64, as torch does
    with pytest.raises(TypeError, match="new\\(\\): invalid data type 'str'"):
        t["a"]
    with pytest.raises(IndexError, match="only integers, slices"):
        t[1.5]


def test_views_never_write_into_their_sources():
    """In-place kernels may reuse dead buffers, but never a leaf's storage behind a view."""
    data = rand((3, 4))
    p = to.Parameter(data.copy())
    x = to.tensor(data.copy())
    outs = [(p.reshape(4, 3) + 1.0).exp(), (p.T * 2.0).relu(), (p[1:] - 1.0).sqrt(),
            (x.reshape(-1) + 1.0).neg(), (x.T[0] * 3.0).tanh(), (x.expand(2, 3, 4) * 1.5).abs()]
    with np.errstate(invalid="ignore"):
        for o in outs:
            o.numpy()
        (sum(o.sum() for o in outs[:3])).backward()
    np.testing.assert_array_equal(p.data, data)
    np.testing.assert_array_equal(x.numpy(), data)


# ---- cat / stack -----------------------------------------------------------------------------
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), data=st.data())
def test_cat(shape, data):
    nd = len(shape)
    d = data.draw(st.integers(-nd, nd - 1))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    xs = []
    for k, s in enumerate(sizes):
        sh = list(shape)
        sh[d] = s
        xs.append(rand(tuple(sh), k))
    for dtype in (np.float32, np.float64):
        out = O.cat([to.tensor(a.astype(dtype)) for a in xs], dim=d)
        np.testing.assert_array_equal(out.numpy(), np.concatenate([a.astype(dtype) for a in xs], d))
        assert out.dtype == dtype
    gradcheck(lambda *ps: O.cat(ps, d), *xs)


@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple), data=st.data())
def test_stack(shape, data):
    nd = len(shape)
    d = data.draw(st.integers(-nd - 1, nd))
    xs = [rand(shape, k) for k in range(data.draw(st.integers(1, 3)))]
    out = O.stack([to.tensor(a) for a in xs], d)
    np.testing.assert_array_equal(out.numpy(), np.stack(xs, d))
    gradcheck(lambda *ps: O.stack(ps, dim=d), *xs)


def test_cat_accepts_arrays_and_reuses_a_tensor():
    a = to.Parameter(np.array([1.0, 2.0]))
    out = O.cat([a, np.array([3.0]), a])
    np.testing.assert_array_equal(out.numpy(), [1, 2, 3, 1, 2])
    (out * to.tensor(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))).sum().backward()
    np.testing.assert_array_equal(a.grad, [5.0, 7.0])


def test_stack_reads_its_inputs_as_they_were_and_records_no_view_of_them():
    """``stack`` copies: in-place writes into its inputs after it (a graph node; a Parameter
    under ``no_grad``, once the stack is computed) change neither its value nor its gradient,
    as in PyTorch; and its inputs keep no view record of the stack's inner reshapes."""
    from tinyopt.engine.storage import storage_of
    torch = pytest.importorskip("torch")
    got = []
    for lib in (to, torch):
        p = lib.nn.Parameter(lib.tensor([0.5, -1.0, 2.0]))
        h = p * 3.0
        c = lib.tensor([1.0, 2.0, 3.0])
        s = lib.stack([h, c, p], 1)
        if lib is to:
            assert storage_of(p).views() == [] and storage_of(h).views() == []
        h.mul_(2.0)
        (s * lib.tensor([[1.0, 2.0, 3.0]])).sum().backward()
        got.append((s.detach().numpy().copy(), p.grad.numpy().copy(), h.detach().numpy().copy()))
        with lib.no_grad():
            p.add_(1.0)
        got.append(s.detach().numpy().copy())
    for a, b in zip(got[0] + (got[1],), got[2] + (got[3],)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[1], got[0][0])


def test_cat_stack_errors():
    a, b = to.tensor(np.zeros((2, 3))), to.tensor(np.zeros((2, 4)))
    with pytest.raises(RuntimeError, match=r"dimension 0.*\(2, 3\).*\(2, 4\)"):
        O.cat([a, b])
    assert O.cat([a, b], 1).shape == (2, 7)
    with pytest.raises(RuntimeError, match="non-empty"):
        O.cat([])
    assert O.cat([a, to.tensor(np.zeros((2, 3), np.float32))]).dtype == np.float64  # promotion
    assert O.cat([to.tensor([1]), to.tensor([0.5])]).dtype == np.float32  # int + float32
    assert O.cat([to.tensor([1]), to.tensor([2])]).dtype == np.int64
    with pytest.raises(RuntimeError, match=r"equal size.*\(2, 3\).*\(2, 4\)"):
        O.stack([a, b])
    with pytest.raises(IndexError, match="out of range"):
        O.cat([a, a], 2)


def test_contiguous():
    x = rand((2, 3))
    check(lambda t: t.T.contiguous(), lambda a: a.T, x)


def test_t_method():
    x = rand((2, 3))
    check(lambda a: a.t(), lambda a: a.T, x)
    v = to.tensor([1.0, 2.0])
    assert v.t() is not v and v.t()._base is v
    with pytest.raises(RuntimeError, match="<= 2 dimensions"):
        to.tensor(np.zeros((1, 2, 3))).t()


def test_functions_accept_arrays_and_lists():
    a = rand((2, 3))
    for got, want in [
        (O.reshape(a, -1), a.reshape(-1)), (O.flatten(a), a.reshape(-1)),
        (O.permute(a, 1, 0), a.T), (O.transpose(a, 0, 1), a.T), (O.t(a), a.T),
        (O.expand(a, 2, 2, 3), np.broadcast_to(a, (2, 2, 3))), (O.squeeze(a[None]), a),
        (O.unsqueeze(a, 0), a[None]), (O.getitem(a, (1, slice(None, 2))), a[1, :2]),
        (O.cat([a, a], 1), np.concatenate([a, a], 1)), (O.stack([a, a.tolist()]), np.stack([a, a])),
        (O.contiguous(a), a), (O.to(a, "float32"), a.astype(np.float32)),
    ]:
        assert isinstance(got, to.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


# ---- the rest of PyTorch's shape API, against torch 2.13 ---------------------------------------
from torchref import compare  # noqa: E402

A3 = np.random.default_rng(7).standard_normal((2, 3, 4))
SHAPE_CASES = {
    "view": lambda L, x: x.view(4, 6), "view_as": lambda L, x: x.view_as(L.ones(6, 4)),
    "reshape_as": lambda L, x: x.reshape_as(L.ones(3, 8)),
    "expand": lambda L, x: x[:, :1].expand(2, 5, 4), "expand_as": lambda L, x: x[0].expand_as(x),
    "repeat": lambda L, x: x.repeat(2, 1, 3), "repeat new dim": lambda L, x: x.repeat(2, 1, 1, 1),
    "repeat_interleave": lambda L, x: x.repeat_interleave(2, dim=1),
    "repeat_interleave flat": lambda L, x: L.repeat_interleave(x, 2),
    "repeat_interleave counts": lambda L, x: x.repeat_interleave(L.tensor([1, 0, 3]), dim=1),
    "flip": lambda L, x: x.flip(0, 2), "flip list": lambda L, x: L.flip(x, [1]),
    "fliplr": lambda L, x: x[0].fliplr(), "roll": lambda L, x: x.roll(1, 2),
    "roll dims": lambda L, x: L.roll(x, (1, -2), (0, 2)), "roll flat": lambda L, x: x.roll(3),
    "split": lambda L, x: x.split(2, dim=2), "split sizes": lambda L, x: x.split([1, 2], 1),
    "chunk": lambda L, x: x.chunk(3, 2), "unbind": lambda L, x: x.unbind(1),
    "tensor_split": lambda L, x: x.tensor_split(3, dim=2),
    "narrow": lambda L, x: x.narrow(2, 1, 2), "select": lambda L, x: x.select(1, -1),
    "movedim": lambda L, x: x.movedim(0, -1), "movedim seq": lambda L, x: L.movedim(x, (0, 1), (2, 0)),
    "swapaxes": lambda L, x: x.swapaxes(0, 2), "t": lambda L, x: x[0].t(), "mT": lambda L, x: x.mT,
    "T 2d": lambda L, x: x[1].T, "squeeze tuple": lambda L, x: x[:1, :, :1].squeeze((0, 2)),
    "unsqueeze": lambda L, x: x.unsqueeze(-1), "unflatten": lambda L, x: x.unflatten(2, (2, 2)),
    "tril": lambda L, x: x.tril(), "triu offset": lambda L, x: L.triu(x, -1),
    "diagonal": lambda L, x: x.diagonal(1, 1, 2), "diag": lambda L, x: L.diag(x[0, 0]),
    "diag of matrix": lambda L, x: x[0].diag(-1), "trace": lambda L, x: x[0, :, :3].trace(),
    "cat": lambda L, x: L.cat([x, x * 2], 1), "stack": lambda L, x: L.stack([x, x], -1),
    "hstack": lambda L, x: L.hstack([x, x]), "vstack": lambda L, x: L.vstack([x[0], x[1]]),
    "meshgrid": lambda L, x: L.meshgrid(x[0, 0], x[0, 1, :2], indexing="ij"),
    "meshgrid xy": lambda L, x: L.meshgrid(x[0, 0], x[0, 1, :2], indexing="xy"),
    "broadcast_to": lambda L, x: x[:, :1].broadcast_to((2, 3, 4)),
    "broadcast_tensors": lambda L, x: (lambda a, b: a * 2 + b)(
        *L.broadcast_tensors(x[:, :, :1], x[0, 0])),
    "tile": lambda L, x: x.tile((2,)), "contiguous": lambda L, x: x.transpose(0, 2).contiguous(),
}


@pytest.mark.parametrize("name", list(SHAPE_CASES))
def test_shape_api_against_torch(name):
    compare(SHAPE_CASES[name], A3)


def test_shape_queries():
    x = to.zeros(2, 3, 4)
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and repr(x.size()) == "torch.Size([2, 3, 4])"
    assert x.dim() == 3 and x.ndim == 3 and x.numel() == 24 and x.shape == (2, 3, 4)
    assert x.shape[1:] == (3, 4) and len(x) == 2 and x.stride() == (12, 4, 1)
    assert x.is_contiguous() and not x.transpose(0, 1).is_contiguous()


def test_broadcast_shapes_and_tensors():
    assert to.broadcast_shapes((2, 1), (3,), 1) == to.Size([2, 3])
    assert to.broadcast_shapes() == to.Size([])
    a, b = to.broadcast_tensors(to.zeros(2, 1), to.ones(3))
    assert a.shape == b.shape == (2, 3)
    with pytest.raises(RuntimeError):
        to.broadcast_shapes((2,), (3,))


# ---- strided views: diagonal, unfold, as_strided (views since issue 25) -------------------------
@pytest.mark.parametrize("offset, d1, d2", [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (1, 2, 0),
                                            (0, -1, -2), (5, 0, 1)])
def test_diagonal(offset, d1, d2):
    x = rand((3, 4, 5))
    check(lambda t: t.diagonal(offset, d1, d2),
          lambda a: np.diagonal(a, offset, d1, d2), x)


@pytest.mark.parametrize("dim, size, step", [(1, 2, 2), (1, 3, 1), (0, 1, 2), (-1, 5, 1),
                                             (1, 0, 1)])
def test_unfold(dim, size, step):
    x = rand((3, 5))

    def ref(a):
        d = dim % a.ndim
        n = (a.shape[d] - size) // step + 1
        wins = [np.moveaxis(np.take(a, range(i * step, i * step + size), axis=d), d, -1)
                for i in range(n)]
        return np.stack(wins, axis=d)
    check(lambda t: t.unfold(dim, size, step), ref, x, grad=size > 0)


@pytest.mark.parametrize("size, stride, offset", [((2, 3), (3, 1), 0), ((3, 3), (1, 1), 2),
                                                  ((2, 2), (0, 1), 1), ((4,), (3,), 0)])
def test_as_strided(size, stride, offset):
    x = rand((3, 4))
    check(lambda t: t.as_strided(size, stride, offset),
          lambda a: np.lib.stride_tricks.as_strided(a.reshape(-1)[offset:], size,
                                                    [s * a.itemsize for s in stride]), x)


@pytest.mark.parametrize("f, error, words", [
    (lambda x: x.chunk(2), RuntimeError, "chunk expects at least a 1-dimensional tensor"),
    (lambda x: x.split(1), RuntimeError, "split expects at least a 1-dimensional tensor"),
    (lambda x: x.unbind(0), IndexError, "Dimension specified as 0 but tensor has no dimensions"),
    (lambda x: x.narrow(0, 0, 1), RuntimeError, r"narrow\(\) cannot be applied to a 0-dim"),
    (lambda x: x.select(0, 0), IndexError, r"select\(\) cannot be applied to a 0-dim tensor"),
    (lambda x: x.tensor_split(2), RuntimeError, "tensor_split expected at least a 1-dimensional"),
])
def test_views_of_a_0d_tensor_raise_torchs_errors(f, error, words):
    with pytest.raises(error, match=words):
        f(to.tensor(3.0))
    assert to.tensor(3.0).unfold(0, 1, 1).tolist() == [3.0]  # (its one window)


ZERO_D = ["x.squeeze(0)", "x.squeeze(-1)", "x.squeeze((0,))", "x.squeeze()", "x.unsqueeze(-1)",
          "x.narrow(0, 0, 1)", "x.chunk(2)", "x.split(1)", "x.split([1])", "x.unbind(0)",
          "x.select(0, 0)", "x.tensor_split(2)", "x.movedim(0, 0)", "x.movedim(0, 1)",
          "x.roll(1)", "x.roll(1, 0)", "x.roll((1,), (0,))", "x.diagonal()", "x.flip(0)",
          "x.transpose(0, -1)", "x.flatten(0)", "x.unflatten(0, (1,))", "x.permute(0)",
          "x.expand(2)", "x.tile(2)", "x.tile((2, 1))", "x.repeat(2)", "x.unfold(0, 1, 1)",
          "x.cumsum(0)", "x[None]", "x[...]", "x.t()", "lib.stack([x, x])", "lib.cat([x, x])",
          "x.view(-1)", "x.reshape(1, 1)"]


@pytest.mark.parametrize("expr", ZERO_D)
def test_movement_ops_of_a_0d_tensor_match_torch(expr):
    """Issue 25: a 0-d tensor given to a movement op gives torch's result, or torch's error
    type and words (some raised "tuple index out of range")."""
    torch = pytest.importorskip("torch")

    def run(lib):
        x = lib.tensor(3.0)
        try:
            r = eval(expr, {"x": x, "lib": lib})
        except Exception as e:
            return type(e).__name__, str(e).split("\n")[0]
        rs = r if isinstance(r, (tuple, list)) else [r]
        return [(tuple(t.shape), t.tolist()) for t in rs]

    assert run(to) == run(torch)
