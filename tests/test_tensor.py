"""Tensor semantics as PyTorch has them: values computed at once, storage shared by ``.data``,
``.grad``, ``.numpy()`` and state dicts, in-place ops and their errors, values kept after
backward, printing, dtypes and devices.  Compared against torch 2.13 when it is installed."""

import copy
import warnings

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn

try:
    import torch
except ImportError:  # pragma: no cover - the comparisons skip
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def arr(t):
    return t.detach().numpy() if torch is not None and isinstance(t, torch.Tensor) else \
        np.asarray(t)


# ---- comparisons give bool tensors; masks index as in PyTorch -----------------------------------
@needs_torch
def test_comparisons_and_logic_are_bool():
    a = np.array([[1.0, -2.0, 3.0], [0.0, 5.0, -6.0]], np.float32)
    for fn in [lambda L, x: x > 0, lambda L, x: x == 3.0, lambda L, x: x <= -2,
               lambda L, x: (x > 0) & (x < 4), lambda L, x: (x > 0) | (x < -5),
               lambda L, x: ~(x > 0), lambda L, x: (x > 0) ^ (x > 2),
               lambda L, x: L.logical_and(x > 0, x < 4), lambda L, x: L.logical_not(x),
               lambda L, x: L.isnan(x / x), lambda L, x: L.isfinite(1 / x),
               lambda L, x: (x > 0).any(), lambda L, x: (x > -7).all(1),
               lambda L, x: (x > 0) * (x < 4)]:
        ours, theirs = fn(to, to.tensor(a)), fn(torch, torch.tensor(a))
        assert ours.dtype == to.bool and theirs.dtype == torch.bool
        np.testing.assert_array_equal(arr(ours), arr(theirs))


@needs_torch
def test_boolean_masks_index_assign_and_backpropagate_as_torch():
    a = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0], [7.0, 8.0, -9.0]])
    # x[x > 0] is a 1-d selection (int64 comparisons made it a row gather before)
    assert to.tensor(a)[to.tensor(a) > 0].shape == (5,)
    for key in [lambda x: x > 0, lambda x: (x > 0)[:, 0], lambda x: x[:, 1] < 0]:
        p, tp = to.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        (p[key(p)] ** 2 * 3).sum().backward()
        (tp[key(tp)] ** 2 * 3).sum().backward()
        np.testing.assert_allclose(p[key(p)].numpy(), arr(tp[key(tp)]))
        np.testing.assert_allclose(arr(p.grad), arr(tp.grad))
    # assignment through a mask, in place
    x, tx = to.tensor(a), torch.tensor(a)
    x[x < 0] = 0.5
    tx[tx < 0] = 0.5
    np.testing.assert_array_equal(arr(x), arr(tx))
    # and with autograd: the value's gradient is the masked part of the output's
    v, tv = to.tensor([2.0], requires_grad=True), torch.tensor([2.0], requires_grad=True)
    y, ty = to.tensor(a) * 1.0, torch.tensor(a) * 1.0
    y[y < 0] = v * 3
    ty[ty < 0] = tv * 3
    (y * to.tensor(a)).sum().backward()
    (ty * torch.tensor(a)).sum().backward()
    np.testing.assert_allclose(arr(v.grad), arr(tv.grad))
    with pytest.raises(IndexError, match="shape of the mask"):
        to.tensor(a)[to.tensor([True, False])]


# ---- values, storage and in place ----------------------------------------------------------------
def test_ops_over_concrete_tensors_run_at_once_and_views_share_storage():
    x = to.zeros(3, 4)
    row = x[1]
    row += 1.0                  # writes x through the view, as in PyTorch
    x.t()[2].fill_(5.0)         # a column through a transposed view
    x.view(-1)[0] = 7.0
    expect = np.zeros((3, 4), np.float32)
    expect[1] += 1
    expect[:, 2] = 5
    expect[0, 0] = 7
    np.testing.assert_array_equal(x.numpy(), expect)
    assert x.op == "input" and (x * 2).op == "input"  # no graph, no plan
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(-1)
    assert x.t().reshape(-1).shape == (12,)


@needs_torch
def test_manual_sgd_updates_parameters_in_place_like_torch():
    """The issue's silent no-op: ``p -= lr * p.grad`` under no_grad must update p."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    xs = rng.standard_normal((4, 8, 3)).astype(np.float32)
    ys = rng.integers(0, 5, (4, 8))
    ours = nn.Linear(3, 5)
    theirs = torch.nn.Linear(3, 5)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(w0))
        theirs.bias.zero_()
    with to.no_grad():
        ours.weight.copy_(w0)
        ours.bias.zero_()
    to.engine.cache_clear()
    for x, y in zip(xs, ys):
        for lib, model in ((to, ours), (torch, theirs)):
            model.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            with lib.no_grad():
                for p in model.parameters():
                    p -= 0.5 * p.grad
    np.testing.assert_allclose(arr(ours.weight), arr(theirs.weight), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(arr(ours.bias), arr(theirs.bias), rtol=1e-5, atol=1e-6)
    info = to.engine.cache_info()
    # the first step runs eagerly, the second compiles, in-place updates keep the cached plan
    assert info.eager == 1 and info.misses == 1 and info.hits == 2


@needs_torch
def test_in_place_methods_match_torch():
    a = np.array([[1.5, -2.0, 3.0], [0.5, -0.25, 4.0]], np.float32)
    b = np.array([0.5, 2.0, -1.0], np.float32)
    cases = [lambda x, o: x.add_(o, alpha=2), lambda x, o: x.sub_(o), lambda x, o: x.mul_(o),
             lambda x, o: x.div_(2.0), lambda x, o: x.pow_(2), lambda x, o: x.clamp_(-1, 1),
             lambda x, o: x.clamp_(min=0.0), lambda x, o: x.zero_(), lambda x, o: x.fill_(3),
             lambda x, o: x.copy_(o), lambda x, o: x.neg_(), lambda x, o: x.abs_().sqrt_(),
             lambda x, o: x.exp_().log_(), lambda x, o: x.masked_fill_(x > 1, -7.0),
             lambda x, o: x.lerp_(o, 0.25), lambda x, o: x.addcmul_(o, o, value=0.5),
             lambda x, o: x.addcdiv_(o, o + 3, value=2), lambda x, o: x.sigmoid_(),
             lambda x, o: x.relu_(), lambda x, o: x.tanh_(), lambda x, o: x.floor_(),
             lambda x, o: x.round_(), lambda x, o: x.__setitem__((slice(None), 1), o[0])]
    for fn in cases:
        x, tx = to.tensor(a), torch.tensor(a)
        r = fn(x, to.tensor(b))
        fn(tx, torch.tensor(b))
        assert r is x or r is None  # (__setitem__ returns None)
        np.testing.assert_allclose(x.numpy(), tx.numpy(), rtol=1e-6, atol=1e-7)


@needs_torch
def test_in_place_rules_and_errors_are_torchs():
    p = to.nn.Parameter(to.ones(3))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                           "an in-place operation"):
        p.add_(1)
    with pytest.raises(RuntimeError, match="a leaf Variable"):
        p[0] = 2.0
    with to.no_grad():
        p.mul_(2.0)
        p[1] = 5.0
    np.testing.assert_array_equal(p.numpy(), [2, 5, 2])
    i = to.tensor([1, 2])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output "
                                           "type Long"):
        i.add_(1.5)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast "
                                           r"shape \[2, 3\]"):
        to.ones(3).add_(to.ones(2, 3))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        to.ones(3).expand(2, 3).mul_(2)
    # p.data and .detach() write into p without autograd, as in PyTorch
    p.data.sub_(1.0)
    p.detach().mul_(2.0)
    np.testing.assert_array_equal(p.numpy(), [2, 8, 2])


def test_a_node_built_before_an_in_place_change_raises_instead_of_reading_new_values():
    w = to.nn.Parameter(to.ones(3))
    z = (w * to.tensor([1.0, 2.0, 3.0])).sum()   # reads w when it runs
    with to.no_grad():
        w.mul_(10.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.item()
    # built after the change: fine, and computed from the new values
    (w * to.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3])


@needs_torch
def test_in_place_with_autograd_on_non_leaves_matches_torch():
    a = np.array([0.5, -1.0, 2.0])

    def run(lib):
        x = lib.tensor(a, requires_grad=True)
        h = x * 2
        h.add_(1.0)
        h.mul_(x)
        h[0] = h[1] * 3
        h.relu_()
        out = lib.zeros(2, 3)
        out[1] = h            # a buffer filled with a value that requires grad
        out.sum().backward()
        return h.detach().numpy().copy(), x.grad.numpy().copy()

    for ours, theirs in zip(run(to), run(torch)):
        np.testing.assert_allclose(ours, theirs)


def test_grad_and_data_are_tensors_sharing_storage():
    p = to.nn.Parameter(np.arange(3.0))
    (p * p).sum().backward()
    g = p.grad
    assert isinstance(g, to.Tensor) and isinstance(p.data, to.Tensor)
    assert g is p.grad  # one object while the storage is the same
    assert np.shares_memory(np.asarray(g), p._grad) and np.shares_memory(p.data.numpy(), p._data)
    np.testing.assert_array_equal(g, [0.0, 2.0, 4.0])
    assert g.norm().item() == pytest.approx(np.sqrt(20.0))
    g.mul_(0.5)  # in place on the gradient
    np.testing.assert_array_equal(p._grad, [0.0, 1.0, 2.0])
    p.grad = np.ones(3)          # numpy assignment still works
    p.data = np.full(3, 4.0)
    np.testing.assert_array_equal(p._grad, 1.0)
    np.testing.assert_array_equal(p._data, 4.0)
    p.grad = None
    assert p.grad is None


def test_state_dict_values_are_tensors_sharing_storage():
    m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3) if hasattr(nn, "BatchNorm1d") else
                      nn.Identity())
    sd = m.state_dict()
    w = sd["0.weight"]
    assert isinstance(w, to.Tensor) and not w.requires_grad
    assert np.shares_memory(w.numpy(), m[0].weight._data)
    snapshot = {k: v.clone() for k, v in sd.items()}
    deep = copy.deepcopy(sd)
    with to.no_grad():
        m[0].weight.add_(1.0)
    np.testing.assert_array_equal(w.numpy(), m[0].weight.numpy())
    np.testing.assert_array_equal(snapshot["0.weight"].numpy() + 1, m[0].weight.numpy())
    np.testing.assert_array_equal(deep["0.weight"].numpy() + 1, m[0].weight.numpy())
    m.load_state_dict(snapshot)
    np.testing.assert_array_equal(m[0].weight.numpy(), snapshot["0.weight"].numpy())


@needs_torch
def test_outputs_keep_their_values_after_backward_and_the_optimizer_step():
    """``out = model(x); loss.backward(); opt.step(); out.argmax(1)`` reads the predictions the
    loss was computed from (a recomputation would use the updated weights)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib in (to, torch):
        model = lib.nn.Linear(4, 3)
        with lib.no_grad():
            model.weight.copy_(lib.tensor(w))
            model.bias.zero_()
        opt = lib.optim.SGD(model.parameters(), lr=5.0)
        out = model(lib.tensor(x))
        loss = lib.nn.functional.cross_entropy(out, lib.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        results.append(((out.argmax(1) == lib.tensor(y)).sum().item(), out.detach().numpy(),
                        loss.item()))
    (ca, oa, la), (cb, ob, lb) = results
    assert ca == cb
    np.testing.assert_allclose(oa, ob, rtol=1e-5, atol=1e-6)
    assert la == pytest.approx(lb, rel=1e-6)


def test_backward_frees_the_graph_unless_retained():
    p = to.nn.Parameter(np.array([1.0, 2.0]))
    loss = (p * p).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_array_equal(p.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    assert loss.item() == 5.0  # its value stays


# ---- printing ------------------------------------------------------------------------------------
@needs_torch
def test_repr_matches_torch():
    cases = [lambda L: L.tensor([1.0, 2.5]), lambda L: L.tensor(3.0), lambda L: L.tensor(3.25),
             lambda L: L.tensor([1, 2]), lambda L: L.tensor([1.0, 2.0], dtype=L.float64),
             lambda L: L.tensor([1e-5, 1e5]), lambda L: L.tensor([True, False]),
             lambda L: L.tensor([1, 2], dtype=L.int32), lambda L: L.zeros(0),
             lambda L: L.zeros(2, 0), lambda L: L.arange(12.0).reshape(3, 4) / 7,
             lambda L: L.arange(2000.0).reshape(40, 50), lambda L: L.arange(3000),
             lambda L: L.tensor([float("nan"), float("inf"), -1.5]),
             lambda L: L.tensor([1.0, 2.0], requires_grad=True),
             lambda L: L.arange(8.0).reshape(2, 2, 2), lambda L: L.tensor([123456789.0, 1.0]),
             lambda L: L.nn.Parameter(L.ones(2))]
    for fn in cases:
        assert repr(fn(to)) == repr(fn(torch)), repr(fn(torch))
    assert repr(to.tensor([1.0, 2.0], requires_grad=True) * 2) == \
        "tensor([2., 4.], grad_fn=<MulBackward0>)"
    assert f"{to.tensor(2.3456):+.2f}" == "+2.35"


# ---- dtypes and devices --------------------------------------------------------------------------
@needs_torch
def test_dtype_names_casts_and_promotion_match_torch():
    for name in ("float32", "float", "float64", "double", "int64", "long", "int32", "int",
                 "int16", "int8", "uint8", "bool"):
        assert str(getattr(to, name)) == str(getattr(torch, name)).removeprefix("torch.")
    x = to.tensor([1.7, -2.2])
    assert x.long().dtype == to.int64 and x.int().dtype == to.int32
    assert x.double().dtype == to.float64 and x.bool().dtype == to.bool
    assert x.long().float().dtype == to.float32 and x.type() == "torch.FloatTensor"
    assert x.type(to.float64).dtype == to.float64 and x.type("torch.LongTensor").dtype == to.int64
    assert to.full((2,), 7).dtype == to.int64 and to.full((2,), 7.0).dtype == to.float32
    assert to.full((2,), True).dtype == to.bool
    assert to.arange(3).dtype == to.int64 and to.arange(3.0).dtype == to.float32
    np.testing.assert_allclose(to.arange(0, 1, 0.3).numpy(), torch.arange(0, 1, 0.3).numpy())
    values = {"b": [True, False], "i32": np.array([1, 2], np.int32), "i64": [3, 4],
              "u8": np.array([1, 2], np.uint8), "f32": [1.5, 2.5],
              "f64": np.array([1.5, 2.5])}
    scalars = [2, 2.5, True]
    for ka, va in values.items():
        for kb, vb in values.items():
            ours = (to.tensor(va) + to.tensor(vb)) if ka != "b" or kb != "b" else None
            if ours is None:
                continue
            ta, tb = (torch.from_numpy(to.tensor(v).numpy()) for v in (va, vb))
            theirs = ta + tb
            assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (ka, kb)
            zero_d = to.tensor(va) * to.tensor(vb)[0]
            tz = ta * tb[0]
            assert str(zero_d.dtype) == str(tz.dtype).removeprefix("torch."), (ka, kb, "0-d")
        for s in scalars:
            ours = to.tensor(va) * s
            theirs = torch.from_numpy(to.tensor(va).numpy()) * s
            assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (ka, s)


def test_devices():
    x = to.ones(2)
    assert x.device == to.device("cpu") and str(x.device) == "cpu" and not x.is_cuda
    assert x.to("cpu") is x and x.cpu() is x and x.to(to.device("cpu")) is x
    assert x.to("cpu", to.float64).dtype == to.float64 and x.to(to.ones(1).long()).dtype == to.int64
    assert repr(to.device("cuda", 1)) == "device(type='cuda', index=1)"
    for bad in (lambda: x.cuda(), lambda: x.to("cuda"), lambda: to.zeros(2, device="cuda"),
                lambda: x.to(to.device("mps"))):
        with pytest.raises(RuntimeError, match="CPU only"):
            bad()
    assert not to.cuda.is_available() and not to.accelerator.is_available()
    assert to.accelerator.current_accelerator() is None
    assert not to.backends.mps.is_available() and not to.backends.cudnn.is_available()
    to.backends.cudnn.benchmark = True  # accepted
    model = nn.Linear(2, 2)
    assert model.to(to.device("cpu")) is model
    with pytest.raises(RuntimeError, match="CPU only"):
        model.to("cuda")


def test_a_list_of_python_floats_gives_the_tensor_any_other_spelling_gives():
    """``tensor([float(r)])`` in a loop takes a short path: the same bits, dtype, shape and
    flags as the general conversion (a tuple of the same floats), and torch's bits."""
    floats = [0.1, -0.0, 1e-46, 3.4028235677973366e+38, 1e300, -1e300, float("nan"),
              float("inf"), 2.0**-149, 1.0 + 2.0**-24, 1.0 + 3 * 2.0**-25, 16777217.0]
    cases = [[f] for f in floats] + [floats, floats[:3] * 5]
    torch = None
    try:
        import torch
    except ImportError:
        pass
    for data in cases:
        with np.errstate(over="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            a, b = to.tensor(data), to.tensor(tuple(data))
            c = to.tensor(data, requires_grad=True)
        assert (a.dtype, a.shape, a.requires_grad, a.is_leaf) == (b.dtype, b.shape, False, True)
        assert c.requires_grad and c.is_leaf and c.dtype == to.float32
        np.testing.assert_array_equal(a.numpy().view(np.uint32), b.numpy().view(np.uint32))
        assert a.numpy().flags.owndata and a.numpy().flags.writeable  # (a copy of its own)
        if torch is not None:
            np.testing.assert_array_equal(a.numpy().view(np.uint32),
                                          torch.tensor(data).numpy().view(np.uint32))
    assert to.tensor([]).shape == (0,) and to.tensor([]).dtype == to.float32
    assert to.tensor([1.0, 2]).dtype == to.float32 and to.tensor([1.0, True]).dtype == to.float32
    assert to.tensor([1.0], dtype=to.float64).dtype == to.float64


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64", "int32",
                                   "uint8", "bool"])
def test_item_of_one_element_of_any_shape_is_torchs_number(dtype):
    """``.item()`` reads the one element of a tensor of any shape as torch's Python number
    (type and value), of a value or of a graph node; more elements raise torch's error."""
    torch = pytest.importorskip("torch")
    for shape in ((), (1,), (1, 1, 1)):
        for value in (0.0, 1.0, -2.5, 3e38):
            ref = torch.full(shape, value).to(getattr(torch, dtype))
            mine = to.full(shape, value).to(getattr(to, dtype))
            node = (nn.Parameter(to.full(shape, value)) * 1.0).to(getattr(to, dtype))
            assert node.value is None  # (a graph node: item() computes it)
            for t in (mine, node):
                got, want = t.item(), ref.item()
                assert type(got) is type(want)
                assert got == want or (got != got and want != want)
    for shape in ((2,), (0,), (1, 2)):
        n = int(np.prod(shape))
        with pytest.raises(RuntimeError, match=f"^a Tensor with {n} elements cannot be converted "
                                               "to Scalar$"):
            to.zeros(shape).item()
        with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
            torch.zeros(shape).item()


def test_tensor_constructors_and_legacy_types():
    assert to.Tensor(2, 3).shape == (2, 3) and to.Tensor(2, 3).dtype == to.float32
    assert to.Tensor([1, 2]).dtype == to.float32
    assert to.LongTensor([1, 2]).dtype == to.int64 and to.FloatTensor(3).shape == (3,)
    assert isinstance(to.ones(2).long(), to.LongTensor)
    a = np.arange(3.0)
    t = to.from_numpy(a)
    a[0] = 9
    assert t[0].item() == 9.0 and np.shares_memory(np.asarray(t), a)
    assert to.as_tensor(a) is not None and to.as_tensor(a).numpy() is a
    assert to.is_tensor(t) and not to.is_tensor(a)
    x = to.randn(3, requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.grad_fn is None


def test_deprecated_alpha_first_overloads_warn_and_compute_as_torch():
    for name in ("add", "add_", "sub", "sub_"):
        x = to.tensor([1.0, 2.0])
        with pytest.warns(UserWarning, match=rf"This overload of {name} is deprecated"):
            out = getattr(x, name)(2.0, to.tensor([1.0, 1.0]))
        sign = 1 if name.startswith("add") else -1
        np.testing.assert_array_equal(out.numpy(), [1 + sign * 2, 2 + sign * 2])
        assert (out is x) == name.endswith("_")
    with pytest.raises(TypeError, match="invalid combination"):
        to.ones(2).add_(to.ones(2), to.ones(2))


def test_in_place_shape_methods_match_torch():
    torch = pytest.importorskip("torch")

    def run(lib):
        out = []
        y = lib.arange(6.0).reshape(2, 3)
        z = y[0]
        y.t_()
        y[0, 1] = 100.0
        out += [y.clone(), z.clone()]  # a view taken before keeps its old shape and storage
        a = lib.arange(6.0)
        a.resize_(2, 2)
        out.append(a.clone())
        b = lib.arange(6.0)
        b.as_strided_((2, 2), (1, 2))
        out.append(b.clone())
        c = lib.ones(3, 1)
        c.squeeze_()
        c.unsqueeze_(0).transpose_(0, 1)
        out.append(c.clone())
        w = lib.ones(2, 3, requires_grad=True)
        h = w * 2
        g = h * 3  # built before the in-place change: reads h as (2, 3)
        h.t_()
        (h * lib.arange(2.0)).sum().backward(retain_graph=True)
        g.sum().backward()
        out += [w.grad.clone(), lib.tensor(list(h.shape))]
        return [np.asarray(t.detach().numpy()) for t in out]

    for ours, theirs in zip(run(to), run(torch)):
        np.testing.assert_array_equal(ours, theirs)
    x = to.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x.unsqueeze_(0)
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        x.resize_(3)
    with pytest.raises(RuntimeError, match="out of bounds"):
        to.ones(4).as_strided_((3,), (2,))
