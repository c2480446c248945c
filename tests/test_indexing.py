"""Indexing (``engine/ops/indexing.py``): ``x[key]`` and ``x[key] = v`` with PyTorch's results and
gradients (finite differences and torch 2.13), and offsets as run-time inputs: a slice or index
that changes every step reuses one compiled plan."""

import numpy as np
import pytest
from gradcheck import gradcheck

import tinyopt as to
from tinyopt import nn

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
X = np.arange(60.0).reshape(3, 4, 5) / 7 - 3

KEYS = [
    (1,), (-1, 2), (slice(1, 3),), (slice(None), slice(None, None, 2)), (Ellipsis, 1),
    (None, 0), (slice(None), None, 1), (0, slice(1, None), Ellipsis), (1, -1, -2),
    ([0, 2],), ([2, 0, 2], [1, 3, 3]), (slice(None), [3, 0]), (0, slice(None), [4, 1]),
    ([0, 1], slice(None), [2, 3]), (np.array([[0, 1], [2, 2]]),), (Ellipsis, [1, 1]),
    (slice(0, 2), [1, 2], 3), (np.array([1, 0, 1], bool),), (X[:, :, 0] > 0,),
    (slice(None), X[0, :, 0] > -2), (X > 0,), (Ellipsis, None), (slice(5, 10),),
]


@needs_torch
@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_indexing_matches_torch_values_and_gradients(key):
    def tkey(k):
        return tuple(torch.tensor(e) if isinstance(e, (list, np.ndarray)) else e for e in k)
    ours = to.tensor(X)[key]
    theirs = torch.tensor(X)[tkey(key)]
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    if ours.numel():
        gradcheck(lambda x: x[key] * 1.5, X)
        p, tp = to.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
        w = np.random.default_rng(0).standard_normal(ours.shape)
        (p[key] * to.tensor(w)).sum().backward()
        (tp[tkey(key)] * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy())


@needs_torch
@pytest.mark.parametrize("key", KEYS[:20], ids=[str(i) for i in range(20)])
def test_setitem_matches_torch_with_and_without_autograd(key):
    def tkey(k):
        return tuple(torch.tensor(e) if isinstance(e, (list, np.ndarray)) else e for e in k)
    region = torch.tensor(X)[tkey(key)].shape
    v = np.random.default_rng(1).standard_normal(region)
    ours, theirs = to.tensor(X), torch.tensor(X)
    ours[key] = to.tensor(v)
    theirs[tkey(key)] = torch.tensor(v)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours[key] = 0.5  # a number, broadcast
    theirs[tkey(key)] = 0.5
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # with autograd: both the tensor written into and the value get gradients
    gx, gv = [], []
    for lib, k in ((to, key), (torch, tkey(key))):
        x = lib.tensor(X, requires_grad=True)
        val = lib.tensor(v, requires_grad=True)
        y = x * 2
        y[k] = val * 3
        (y * y).sum().backward()
        gx.append(x.grad.numpy())
        gv.append(val.grad.numpy())
    np.testing.assert_allclose(gx[0], gx[1])
    np.testing.assert_allclose(gv[0], gv[1])


def test_repeated_indices_accumulate_gradients():
    p = to.tensor(np.zeros((3, 2)), requires_grad=True)
    (p[[0, 2, 2, 2]] * to.tensor([[1.0, 2.0]] * 4)).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [[1, 2], [0, 0], [3, 6]])


def test_index_errors_are_torchs():
    t = to.tensor(X)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 4"):
        t[:, [0, 7]]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        to.tensor(1.0)[0]
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(5\) must match "
                                           r"the existing size \(3\) at non-singleton dimension 1"):
        t[0] = to.ones(3)  # (torch's words)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        t[[0, 1]] = to.ones(3)
    assert to.tensor(1.0)[...].shape == () and to.tensor(1.0)[None].shape == (1,)
    w = to.Parameter(np.ones((4, 3)))
    computed = (to.Parameter(np.ones(2)) * 0 + 1).long() * 9  # out of range, known when run
    with pytest.raises(IndexError, match="^index 9 is out of bounds for dimension 0 with size 4$"):
        w[computed].sum().backward()  # (torch's words, not numpy's "axis 0")


def test_an_integer_index_is_the_view_any_other_spelling_of_it_gives():
    """``x[i]`` with a Python int (a loop over a tensor) gives what ``x[i, ...]`` gives: the same
    bits, a view that a later write into ``x`` shows in (a node not yet computed and a computed
    one alike), the same gradient, torch's error out of range."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    for shape in ((3, 4), (12,)):
        for i in range(-shape[0], shape[0]):
            got = []
            for key in (i, (i, ...)):
                p = nn.Parameter(to.tensor(data.reshape(shape)))
                y = p * 2.0
                r, later = y[key], y[key]
                first = r.detach().numpy().copy()
                with to.no_grad():
                    y.add_(1.0)
                (later * to.arange(1, later.numel() + 1).reshape(later.shape)).sum().backward()
                got.append((first, r.detach().numpy().copy(), later.detach().numpy().copy(),
                            p.grad.numpy().copy(), r._is_view()))
            assert got[0][4] and got[1][4]
            for a, b in zip(got[0][:4], got[1][:4]):
                assert a.shape == b.shape
                np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8),
                                              np.atleast_1d(b).view(np.uint8))
            np.testing.assert_array_equal(got[0][1], got[0][0] + 1)  # (the write shows)
    c = to.tensor(data)
    row = c[1]
    c[1, 2] = 100.0
    assert row.numpy()[2] == 100.0 and [float(v) for v in c[0]] == list(data[0].astype(float))
    for bad in (3, -4, 2**63, -2**63 - 1):
        with pytest.raises((IndexError, ValueError)) as err:
            c[bad]
        with pytest.raises(type(err.value), match=str(err.value)):
            c[bad, ...]


def _view_record(t):
    """What a view carries besides its value, comparable across two tensors."""
    info = t.view_info
    steps = [(s.op, s.attrs, s.shape, s.dtype, [e.numpy().tolist() for e in s.extras])
             for s in info.steps]
    return (t.shape, t.dtype, t.requires_grad, t.grad_fn, t.is_leaf, t._is_view(),
            steps, info.creation, info.name, info.alias, info.alias_at, t.op, t.srcs)


@pytest.mark.parametrize("dtype", [to.float32, to.int64, to.bool, to.bfloat16, to.uint32])
def test_an_integer_index_of_a_concrete_tensor_is_the_view_the_general_path_makes(dtype):
    """``x[i]`` of a realized tensor (iterating one) takes a short path: it gives what the
    general path (``x[i,]``) gives -- bits, view record, base, shared version counter -- in
    grad mode and under ``no_grad``, of a tensor, of a view, of a ``.data`` alias, and of a
    tensor that requires grad under ``no_grad``."""
    data = (np.arange(24).reshape(4, 3, 2) % 5).astype(np.float32)
    base = to.tensor(data).to(dtype)
    for x in (base, base[1:], base.data, base[2].t(), to.tensor(data[:, 0, 0]).to(dtype)):
        for grad in (True, False):
            with to.set_grad_enabled(grad):
                for i in range(-x.shape[0], x.shape[0]):
                    a, b = x[i], x[i, ]
                    assert _view_record(a) == _view_record(b)
                    assert a._base is b._base is (x._base if x._base is not None else x)
                    np.testing.assert_array_equal(a.numpy(), b.numpy())
                    assert a.numpy().base is not None  # (a view of x's memory, even 0-d)
                    v0 = b._version
                    with to.no_grad():
                        x[i] = x[i - 1 if i > 0 else i + 1]
                    assert a._version == b._version == v0 + 1
                    np.testing.assert_array_equal(a.numpy(), b.numpy())
    p = nn.Parameter(to.tensor(data[:, 0, 0]))
    with to.no_grad():
        rows = list(p)
    with to.no_grad():
        assert [_view_record(r) for r in rows] == [_view_record(p[i, ]) for i in range(4)]
    ys = list(p * 2.0)  # (a graph: the general path, gradients flow)
    sum(y * k for k, y in enumerate(ys)).backward()
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 2.0, 4.0, 6.0])
    leaf = to.tensor([1.0, 2.0, 3.0], requires_grad=True)  # (concrete, but a gradient to record)
    rows = list(leaf)
    assert all(r.requires_grad and r.grad_fn is not None for r in rows)
    (rows[0] + 3 * rows[2]).backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [1.0, 0.0, 3.0])


def test_a_slice_that_moves_every_step_compiles_once():
    """A language model's ``data[i:i + bptt]``: offsets are bound per run, not compiled in."""
    to.manual_seed(0)
    data = to.randint(0, 50, (400, 4))         # (tokens, batch), as word_language_model batches
    emb, head = nn.Embedding(50, 8), nn.Linear(8, 50)
    opt = to.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.1)
    to.engine.cache_clear()
    bptt = 35
    for i in range(0, data.size(0) - 1, bptt):
        n = min(bptt, data.size(0) - 1 - i)
        x, y = data[i:i + n], data[i + 1:i + 1 + n].reshape(-1)
        loss = nn.functional.cross_entropy(head(emb(x)).view(-1, 50), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    info = to.engine.cache_info()
    # the 35-token steps (the first eager) and the short last one (eager: seen once)
    assert info.misses == 1 and info.hits == 9 and info.eager == 2

    # offsets into a graph node (a slice of an activation, an index per step) are inputs too
    w = to.nn.Parameter(np.ones((6, 3)))
    to.engine.cache_clear()
    for t in range(5):
        h = w * 2
        (h[t:t + 2].sum() + h[:, t % 3].sum() + h[t].sum() + h[[t, 0]].sum()).backward()
    assert to.engine.cache_info().misses == 1


def test_index_tensors_may_be_computed_in_the_graph():
    w = to.nn.Parameter(np.arange(12.0).reshape(4, 3))
    idx = (w.sum(1) > 10).long() * 2 + 1   # computed from the graph: bound when it runs
    out = w[idx]
    out.sum().backward()
    np.testing.assert_array_equal(idx.numpy(), [1, 3, 3, 3])
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [0, 1, 0, 3])


def test_python_range_indexes_and_assigns_like_a_list():
    x = to.zeros(4, 5)
    y = to.tensor([1, 0, 4, 2])
    x[range(4), y] = 2.0
    np.testing.assert_array_equal(x[range(4), y].numpy(), [2.0] * 4)
    assert x[range(1, 3)].shape == (2, 5) and x[:, range(0)].shape == (4, 0)
    np.testing.assert_array_equal(x[range(3, 0, -1), 1].numpy(), x.numpy()[[3, 2, 1], 1])


# ---- hostile keys: a differential fuzz against torch (issue 25.14) -------------------------------
# Every key is built from the atoms below (out-of-range and negative integers, huge ones, Python
# and 0-d bools, floats, strings, slices with zero, negative or float steps, None and several
# ``...``, lists of ints, floats and bools, nested lists, masks of the wrong shape, empty and
# wrongly typed index tensors), one to three at a time, on tensors of 0 to 3 dimensions (empty
# ones too), read, written with a number and with a tensor, and both with autograd.  Rule: the
# same values, gradients and shape as torch, or an error of torch's type and words.
HOSTILE_SHAPES = [(), (3,), (0,), (2, 3), (2, 0), (3, 4, 2), (1, 3)]
HOSTILE_CASES = 672  # the count of the first report: a fixed-seed sample, ~3 s


def _hostile_atoms(shape):
    n = shape[0] if shape else 1
    return [0, 1, -1, n, -n - 1, n + 5, 2**40, -2**40, 2**63, True, False, 1.0, -0.5, "a", None,
            Ellipsis, slice(None), slice(1, None), slice(None, None, 2), slice(None, None, -1),
            slice(None, None, 0), slice(5, 100), slice(-100, 2), slice(1.5, 2), [0], [0, -1], [n],
            [True] * max(n, 1), [True, False], [], [[0, 1]], [0.5], [[True]], np.int64(1),
            np.array([0, 1]), np.array([True] * max(n, 1)), np.bool_(True), (0, 0),
            ("T", "int64", [0, max(n - 1, 0)]), ("T", "int64", [n]), ("T", "int64", [-n - 1]),
            ("T", "int64", []), ("T", "int32", [0]), ("T", "uint8", [1] * max(n, 1)),
            ("T", "uint8", [1, 0, 1]), ("T", "bool", [True] * max(n, 1)),
            ("T", "bool", [True, False, True, False]), ("T", "float32", [0.0]),
            ("T", "int64", 0), ("T", "bool", True), ("T", "bool", False), ("T", "int16", [0]),
            ("T", "int8", [0]), ("T", "ones", shape), ("T", "int64", [[0], [1]]),
            ("T", "float64", 1.0), ("T", "int64", [0, 0])]


def _hostile_cases(seed: int, count: int) -> list:
    import random
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        shape = rng.choice(HOSTILE_SHAPES)
        atoms = _hostile_atoms(shape)
        parts = [rng.choice(atoms) for _ in range(rng.choice([1, 1, 1, 2, 2, 3]))]
        key = parts[0] if len(parts) == 1 and rng.random() < 0.6 else tuple(parts)
        cases.append((shape, key, rng.choice(["get", "get", "set", "set_tensor", "get_grad",
                                              "set_grad"])))
    return cases


def _hostile_key(key, lib):
    if isinstance(key, tuple) and key and key[0] == "T":
        _, dtype, data = key
        if dtype == "ones":  # a bool mask of the tensor's own shape
            return lib.ones(tuple(data), dtype=lib.bool) if data else lib.tensor(True)
        return lib.tensor(data, dtype=getattr(lib, dtype))
    if isinstance(key, tuple):
        return tuple(_hostile_key(k, lib) for k in key)
    return key.copy() if isinstance(key, np.ndarray) else key


def _hostile_run(lib, shape, key, op):
    """("ok", results...) or ("error", type name, message) of one case under ``lib``."""
    try:
        x = lib.arange(int(np.prod(shape)), dtype=lib.float32).reshape(shape)
        k = _hostile_key(key, lib)
        if op == "get":
            r = x[k]
            return "ok", r.numpy().tolist(), tuple(r.shape)
        if op in ("set", "set_tensor"):
            x[k] = -1.0 if op == "set" else lib.tensor([7.0, 8.0])
            return "ok", x.numpy().tolist()
        x.requires_grad_()
        y = x * 2.0
        if op == "get_grad":
            r = y[k]
            (r * lib.arange(r.numel(), dtype=lib.float32).reshape(r.shape)).sum().backward()
            return "ok", r.detach().numpy().tolist(), tuple(r.shape), x.grad.numpy().tolist()
        w = lib.tensor(3.0, requires_grad=True)
        y[k] = w * 2
        (y * (lib.arange(y.numel(), dtype=lib.float32).reshape(y.shape) + 1)).sum().backward()
        return "ok", y.detach().numpy().tolist(), x.grad.numpy().tolist(), w.grad.item()
    except Exception as e:  # noqa: BLE001 (the differential compares every exception)
        return "error", type(e).__name__, str(e)


def test_hostile_keys_give_torchs_results_or_torchs_errors():
    """Issue 25.14: of 672 hostile keys, 130 raised another exception type than torch (numpy's
    errors, errors where torch computes, results where torch refuses).  Without torch: every
    error is a clear one (IndexError, TypeError, ValueError, RuntimeError)."""
    import warnings
    cases = _hostile_cases(0, HOSTILE_CASES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's deprecation warning for uint8 masks)
        ours = [_hostile_run(to, *c) for c in cases]
        if torch is None:
            clear = {"IndexError", "TypeError", "ValueError", "RuntimeError"}
            assert all(r[0] == "ok" or r[1] in clear for r in ours)
            return
        theirs = [_hostile_run(torch, *c) for c in cases]
    bad = [(c, a, b) for c, a, b in zip(cases, ours, theirs) if a != b]
    assert not bad, f"{len(bad)} of {len(cases)} differ from torch, e.g. {bad[:3]}"
    assert {r[0] for r in theirs} == {"ok", "error"}  # (the sample holds both)
