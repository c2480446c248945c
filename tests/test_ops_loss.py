"""Losses: cross_entropy (weights, ignore_index, label smoothing, reductions, (N,C) and (N,C,d)
inputs), nll_loss, mse_loss, l1_loss, binary_cross_entropy_with_logits (weight, pos_weight), and
one_hot.  Forward against numpy and torch, backward against finite differences, errors."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyopt as to
from tinyopt.engine import ops as O

from gradcheck import gradcheck

SETTINGS = settings(max_examples=15, deadline=None)
DTYPES = [np.float32, np.float64]
REDUCTIONS = ["mean", "sum", "none"]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def np_log_softmax(x, axis=1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def np_cross_entropy(x, y, weight=None, ignore_index=-100, reduction="mean", eps=0.0,
                     log_probs=False):
    """PyTorch's cross_entropy / nll_loss written out in numpy, for (N, C, d...) inputs."""
    C = x.shape[1]
    w = np.ones(C) if weight is None else weight
    logp = x if log_probs else np_log_softmax(x, 1)
    logp = np.moveaxis(logp, 1, -1).reshape(-1, C)
    yf = y.reshape(-1)
    keep = yf != ignore_index
    ys = np.where(keep, yf, 0)
    nll = -w[ys] * logp[np.arange(len(ys)), ys]
    smooth = -(logp * w).sum(1)
    loss = np.where(keep, (1 - eps) * nll + eps / C * smooth, 0.0)
    if reduction == "none":
        return loss.reshape(y.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / np.where(keep, w[ys], 0).sum()


@st.composite
def ce_case(draw):
    N, C = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    extra = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    seed = draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C) + extra) * 2
    y = rng.integers(0, C, size=(N,) + extra)
    ignore = draw(st.sampled_from([-100, 0]))
    if draw(st.booleans()) and ignore == -100:
        y.reshape(-1)[0] = -100
    weight = rng.uniform(0.5, 2.0, size=C) if draw(st.booleans()) else None
    eps = draw(st.sampled_from([0.0, 0.1, 0.5]))
    reduction = draw(st.sampled_from(REDUCTIONS))
    if reduction == "mean" and (y != ignore).sum() == 0:
        y.reshape(-1)[0] = (ignore + 1) % C if C > 1 else 0
        ignore = -100 if C == 1 else ignore
    return x, y, dict(weight=weight, ignore_index=ignore, reduction=reduction,
                      label_smoothing=eps)


@SETTINGS
@given(case=ce_case())
def test_cross_entropy(case):
    x, y, kw = case
    F = to.engine.ops
    want = np_cross_entropy(x, y, kw["weight"], kw["ignore_index"], kw["reduction"],
                            kw["label_smoothing"])
    for dtype in DTYPES:
        out = F.cross_entropy(to.tensor(x.astype(dtype)), y, **kw)
        assert out.shape == np.shape(want) and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda p: F.cross_entropy(p, to.tensor(y), **kw), x)


@SETTINGS
@given(case=ce_case())
def test_nll_loss(case):
    x, y, kw = case
    kw.pop("label_smoothing")
    logp = np_log_softmax(x, 1)
    want = np_cross_entropy(logp, y, kw["weight"], kw["ignore_index"], kw["reduction"],
                            log_probs=True)
    for dtype in DTYPES:
        out = O.nll_loss(to.tensor(logp.astype(dtype)), to.tensor(y), **kw)
        assert out.shape == np.shape(want) and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda p: O.nll_loss(p, y, **kw), logp)
    # log_softmax + nll_loss is cross_entropy
    ce = O.cross_entropy(to.tensor(x), y, **kw).numpy()
    np.testing.assert_allclose(O.nll_loss(to.tensor(x).log_softmax(1), y, **kw).numpy(), ce,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_and_nll_match_torch(reduction, dtype):
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    rng = np.random.default_rng(5)
    for shape in [(6, 4), (3, 4, 2, 3), (4,)]:
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        ysh = () if len(shape) == 1 else (shape[0],) + shape[2:]
        y = rng.integers(0, 4, size=ysh)
        w = rng.uniform(0.2, 2.0, size=4).astype(dtype)
        if len(shape) > 1:
            y.reshape(-1)[1] = 2  # ignored below
        for kw in [dict(), dict(weight=w), dict(ignore_index=2), dict(label_smoothing=0.2),
                   dict(weight=w, ignore_index=2, label_smoothing=0.3)]:
            if len(shape) == 1 and kw.get("ignore_index") == int(y):
                continue
            p = to.Parameter(x)
            ours = O.cross_entropy(p, y, reduction=reduction, **kw)
            tx = torch.tensor(x, requires_grad=True)
            tkw = {k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()}
            theirs = TF.cross_entropy(tx, torch.tensor(y), reduction=reduction, **tkw)
            np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), **tol(dtype),
                                       err_msg=f"{shape} {kw}")
            ours.sum().backward()
            theirs.sum().backward()
            np.testing.assert_allclose(p.grad, tx.grad.numpy(), **tol(dtype),
                                       err_msg=f"{shape} {kw}")
            if "label_smoothing" not in kw and len(shape) > 1:
                lp = np_log_softmax(x.astype(np.float64), 1).astype(dtype)
                ours = O.nll_loss(to.tensor(lp), y, reduction=reduction, **kw)
                theirs = TF.nll_loss(torch.tensor(lp), torch.tensor(y), reduction=reduction,
                                     **tkw)
                np.testing.assert_allclose(ours.numpy(), theirs.numpy(), **tol(dtype))


def test_cross_entropy_details():
    x = to.tensor(np.array([[1000.0, 0.0], [0.0, -1000.0]]))
    np.testing.assert_allclose(O.cross_entropy(x, [0, 1], reduction="none").numpy(), [0, 1000])
    # every row ignored: the mean is 0/0 = nan, as in PyTorch (and, as there, no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(O.cross_entropy(x, [-100, -100]).item())
    assert O.cross_entropy(x, [-100, -100], reduction="sum").item() == 0.0
    p = to.Parameter(np.zeros((2, 3)))
    O.cross_entropy(p, [1, -100]).backward()
    np.testing.assert_allclose(p.grad, [[1 / 3, -2 / 3, 1 / 3], [0, 0, 0]])
    # labels may be a Python list, a numpy array or an int64 tensor; logits an array
    a = O.cross_entropy(np.zeros((2, 3)), to.tensor([0, 2])).item()
    assert abs(a - np.log(3)) < 1e-12
    # a computed (non-leaf) label tensor works too
    y = to.tensor([[0.0, 5.0, 1.0]]).argmax(1)
    assert abs(O.cross_entropy(np.zeros((1, 3)), y).item() - np.log(3)) < 1e-12


def test_cross_entropy_errors():
    x = to.tensor(np.zeros((4, 3)))
    with pytest.raises(IndexError, match=r"^Target 3 is out of bounds\.$"):
        O.cross_entropy(x, [0, 1, 2, 3]).item()
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        O.cross_entropy(x, [0, -1, 2, 2]).item()
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        O.nll_loss(x, [0, 5, 2, 2]).item()
    with pytest.raises(TypeError, match=r"cross_entropy.*int64.*float"):
        O.cross_entropy(x, np.array([0.0, 1.0, 2.0, 1.0]))
    with pytest.raises(RuntimeError, match="^Expected floating point type for target with "
                       "class probabilities, got Long$"):
        O.cross_entropy(x, np.zeros((4, 3), np.int64))
    with pytest.raises(ValueError, match=r"cross_entropy: input of shape \(4, 3\).*\(4,\).*\(3,\)"):
        O.cross_entropy(x, [0, 1, 2])
    with pytest.raises(ValueError, match=r"weight has shape \(2,\), expected \(3,\)"):
        O.cross_entropy(x, [0, 1, 2, 0], weight=np.ones(2))
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        O.cross_entropy(x, [0, 1, 2, 0], reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        O.cross_entropy(x, [0, 1, 2, 0], label_smoothing=1.5)
    with pytest.raises(NotImplementedError, match="^\"log_softmax_lastdim_kernel_impl\" not "
                                                  "implemented for 'Long'$"):  # (torch's error)
        O.cross_entropy(to.tensor([[1, 2]]), [0])
    with pytest.raises(ValueError, match=r"\(4, 3, 2\).*\(4, 2\)"):
        O.cross_entropy(to.tensor(np.zeros((4, 3, 2))), np.zeros(4, np.int64))


# ---- cross-entropy against class probabilities ---------------------------------------------------
def np_prob_cross_entropy(x, p, weight=None, reduction="mean", eps=0.0):
    """torch's cross_entropy with a float target of the input's shape, in numpy: the class dim
    is 1 (0 unbatched); 'mean' divides by the number of rows, whatever the weights."""
    dim = 1 if x.ndim > 1 else 0
    C = x.shape[dim]
    w = np.ones(C) if weight is None else weight
    q = p * (1 - eps) + eps / C
    loss = -(np_log_softmax(x, dim) * q * w.reshape((C,) + (1,) * (x.ndim - dim - 1))).sum(dim)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / loss.size if loss.size else np.nan


PROB_SHAPES = [(5, 4), (2, 4, 2, 3), (4,), (0, 4)]
PROB_OPTIONS = [dict(), dict(weight=True), dict(label_smoothing=0.3),
                dict(weight=True, label_smoothing=0.1)]


@pytest.mark.parametrize("shape", PROB_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_with_class_probabilities_matches_numpy_and_torch(shape, dtype):
    """Values, and the gradients of both the logits and the target (torch differentiates the
    target too), for every reduction, with weights and label smoothing."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    p = np.exp(np_log_softmax(rng.standard_normal(shape), 1 if len(shape) > 1 else 0))
    p = p.astype(dtype)
    w = rng.uniform(0.2, 2.0, size=4).astype(dtype)
    for i, (opts, reduction) in enumerate(itertools.product(PROB_OPTIONS, REDUCTIONS)):
        kw = dict(opts, weight=w) if opts.get("weight") else opts
        want = np_prob_cross_entropy(x.astype(np.float64), p, kw.get("weight"), reduction,
                                     kw.get("label_smoothing", 0.0))
        ours_x, ours_p = to.Parameter(x), to.Parameter(p)
        ours = O.cross_entropy(ours_x, ours_p, reduction=reduction, **kw)
        assert ours.shape == np.shape(want) and ours.dtype == dtype
        np.testing.assert_allclose(ours.numpy(), want, **tol(dtype), err_msg=f"{kw} {reduction}")
        tx, tp = (torch.tensor(a, requires_grad=True) for a in (x, p))
        tkw = {k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()}
        theirs = torch.nn.functional.cross_entropy(tx, tp, reduction=reduction, **tkw)
        g = rng.standard_normal(ours.shape).astype(dtype)
        (ours * to.tensor(g)).sum().backward()
        (theirs * torch.tensor(g)).sum().backward()
        for a, b in ((ours_x, tx), (ours_p, tp)):
            np.testing.assert_allclose(a.grad, b.grad.numpy(), **tol(dtype),
                                       err_msg=f"{kw} {reduction}")
        if dtype == np.float64 and i % 4 == len(shape) % 4 and x.size:
            gradcheck(lambda a, b: O.cross_entropy(a, b, reduction=reduction, **kw), x, p)


def test_cross_entropy_with_class_probabilities_follows_torchs_promotion_and_module():
    torch = pytest.importorskip("torch")
    x, p = np.zeros((2, 3), np.float32), np.full((2, 3), 1 / 3)
    # the product's dtype, as torch's composite promotes (a float64 target: a float64 loss)
    assert O.cross_entropy(x, p).dtype == np.float64
    assert O.cross_entropy(x, p.astype(np.float32), weight=np.ones(3)).dtype == np.float64
    w = np.array([1.0, 2.0, 0.5])
    ours = to.nn.CrossEntropyLoss(weight=w, label_smoothing=0.2)(x.astype(np.float64), p)
    theirs = torch.nn.CrossEntropyLoss(weight=torch.tensor(w), label_smoothing=0.2)(
        torch.tensor(x, dtype=torch.float64), torch.tensor(p))
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)


def test_cross_entropy_with_class_probabilities_errors_are_torchs():
    x, p = np.zeros((4, 3)), np.full((4, 3), 1 / 3)
    with pytest.raises(RuntimeError, match="^ignore_index is not supported for floating point "
                                           "target$"):
        O.cross_entropy(x, p, ignore_index=1)
    assert O.cross_entropy(x, p, ignore_index=-1).item() == pytest.approx(np.log(3))
    with pytest.raises(RuntimeError, match=r"^cross_entropy: weight tensor should be defined "
                       r"either for all 3 classes or no classes but got weight tensor of "
                       r"shape: \[4\]$"):
        O.cross_entropy(x, p, weight=np.ones(4))
    with pytest.raises(RuntimeError, match="^Expected floating point type for target with "
                       "class probabilities, got Int$"):
        O.cross_entropy(x, np.zeros((4, 3), np.int32))
    # a float target of another shape is read as class indices, as torch reads it (and refused)
    with pytest.raises((TypeError, ValueError)):
        O.cross_entropy(x, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        O.cross_entropy(x, p, reduction="avg")


# ---- elementwise losses ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 4), max_size=3).map(tuple), seed=st.integers(0, 100))
def test_mse_l1(name, reduction, shape, seed):
    a, b = rand(shape, seed), rand(shape, seed + 1)
    d = a - b
    per = d * d if name == "mse_loss" else np.abs(d)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    fn = getattr(O, name)
    for dtype in DTYPES:
        out = fn(to.tensor(a.astype(dtype)), to.tensor(b.astype(dtype)), reduction=reduction)
        assert out.shape == np.shape(want) and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda x, y: fn(x, y, reduction=reduction), a, b)


def np_bce_with_logits(x, y, weight=None, pos_weight=None, reduction="mean"):
    pw = 1.0 if pos_weight is None else pos_weight
    log_sig = -np.logaddexp(0, -x)
    log_one_minus = -np.logaddexp(0, x)
    loss = -(pw * y * log_sig + (1 - y) * log_one_minus)
    if weight is not None:
        loss = loss * weight
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
       seed=st.integers(0, 100), use_w=st.booleans(), use_pw=st.booleans())
def test_bce_with_logits(reduction, shape, seed, use_w, use_pw):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    y = rng.uniform(0, 1, size=shape)
    w = rng.uniform(0.5, 2, size=shape[-1:]) if use_w else None
    pw = rng.uniform(0.5, 3, size=shape[-1:]) if use_pw else None
    want = np_bce_with_logits(x, y, w, pw, reduction)
    for dtype in DTYPES:
        cast = lambda a: None if a is None else a.astype(dtype)  # noqa: E731
        out = O.binary_cross_entropy_with_logits(to.tensor(cast(x)), to.tensor(cast(y)),
                                                 weight=cast(w), pos_weight=cast(pw),
                                                 reduction=reduction)
        assert out.shape == np.shape(want) and out.dtype == dtype
        np.testing.assert_allclose(out.numpy(), want, **tol(dtype))
    gradcheck(lambda a, b: O.binary_cross_entropy_with_logits(a, b, w, reduction, pw), x, y)


def test_bce_with_logits_is_stable_and_matches_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    x = np.array([[-200.0, -30.0, -1.0, 0.0, 1.0, 30.0, 200.0]] * 2)
    y = np.array([[0.0, 1.0, 0.3, 1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.7, 0.0, 1.0, 1.0, 0.0]])
    w = np.linspace(0.5, 2.0, 7)
    pw = np.linspace(3.0, 0.5, 7)
    for kw in [dict(), dict(weight=w), dict(pos_weight=pw), dict(weight=w, pos_weight=pw)]:
        for reduction in REDUCTIONS:
            p = to.Parameter(x)
            ours = O.binary_cross_entropy_with_logits(p, y, reduction=reduction, **kw)
            tx = torch.tensor(x, requires_grad=True)
            theirs = TF.binary_cross_entropy_with_logits(
                tx, torch.tensor(y), reduction=reduction,
                **{k: torch.tensor(v) for k, v in kw.items()})
            assert np.isfinite(ours.numpy()).all()
            np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-10,
                                       atol=1e-12)
            ours.sum().backward()
            theirs.sum().backward()
            np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_l1_match_torch(reduction):
    torch = pytest.importorskip("torch")
    a, b = rand((3, 4), 1), rand((3, 4), 2)
    for ours, theirs in [(O.mse_loss, torch.nn.functional.mse_loss),
                         (O.l1_loss, torch.nn.functional.l1_loss)]:
        np.testing.assert_allclose(ours(to.tensor(a), b, reduction=reduction).numpy(),
                                   theirs(torch.tensor(a), torch.tensor(b),
                                          reduction=reduction).numpy(), rtol=1e-12)


def test_elementwise_loss_errors():
    a, b = to.tensor(np.zeros((2, 3))), to.tensor(np.zeros((3, 2)))
    for fn in (O.mse_loss, O.l1_loss, O.binary_cross_entropy_with_logits):
        with pytest.raises(ValueError, match=rf"{fn.__name__}.*\(3, 2\).*\(2, 3\)"):
            fn(a, b)
        with pytest.raises(ValueError, match="not a valid value for reduction"):
            fn(a, a, reduction="all")
    with pytest.raises(NotImplementedError, match="\"mse_cpu\" not implemented for 'Long'"):
        O.mse_loss(to.tensor([1, 2]), to.tensor([1, 2]))  # (torch's error)


# ---- one_hot -------------------------------------------------------------------------------------
def test_one_hot():
    y = np.array([[0, 2], [1, 0]])
    out = O.one_hot(to.tensor(y), 4)
    assert out.shape == (2, 2, 4) and out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(4, dtype=np.int64)[y])
    np.testing.assert_array_equal(O.one_hot(to.tensor([2, 0])).numpy(), [[0, 0, 1], [1, 0, 0]])
    assert O.one_hot(to.tensor(1), 3).tolist() == [0, 1, 0]
    # usable as float targets after a cast
    p = to.Parameter(np.zeros((2, 3)))
    O.mse_loss(p, O.one_hot(to.tensor([2, 0]), 3).double(), reduction="sum").backward()
    np.testing.assert_array_equal(p.grad, -2 * np.eye(3)[[2, 0]])


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        O.one_hot(to.tensor([0, 3]), 3).numpy()
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        O.one_hot(to.tensor([-1]), 3).numpy()
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        O.one_hot(to.tensor([-1]))
    with pytest.raises(RuntimeError, match="Can not infer total number of classes"):
        O.one_hot(to.tensor(np.zeros(0, np.int64)))
    with pytest.raises(TypeError, match=r"one_hot.*int64.*float"):
        O.one_hot(to.tensor([0.0, 1.0]), 3)


# ---- class-index range checks (issue 9.1): inside the kernels, wherever the targets come from --
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss", "cross_entropy_smoothed"])
@pytest.mark.parametrize("bad", [10, -1, -5])
def test_out_of_range_targets_raise_wherever_they_come_from(loss, reduction, bad):
    fn = {"cross_entropy": O.cross_entropy, "nll_loss": O.nll_loss,
          "cross_entropy_smoothed": lambda x, t, **kw: O.cross_entropy(x, t, label_smoothing=0.1,
                                                                       **kw)}[loss]
    y = np.random.default_rng(0).integers(0, 10, 64)
    y[5] = bad
    msg = rf"^Target {bad} is out of bounds\.$"
    targets = [to.cat([to.tensor(y[:32]), to.tensor(y[32:])]),  # computed targets
               to.tensor(y) + 0,
               y]                                                # a leaf array
    for t in targets:
        p = to.Parameter(np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32))
        out = fn(p, t, reduction=reduction)
        with pytest.raises(IndexError, match=msg):
            out.numpy()
        with pytest.raises(IndexError, match=msg):
            out.sum().backward()
        assert p.grad is None
    # a leaf array refilled between building the graph and backward()
    y[5] = 3
    p = to.Parameter(np.zeros((64, 10), np.float32))
    out = fn(p, y, reduction=reduction).sum()
    y[7] = bad
    with pytest.raises(IndexError, match=msg):
        out.backward()
    y[7] = 3
    out = fn(p, y, reduction=reduction).sum()
    out.backward()  # the same plan, now in range
    assert np.isfinite(p.grad).all()


def test_ignored_targets_are_not_range_checked():
    x = to.Parameter(np.zeros((3, 4)))
    y = to.tensor(np.array([0, -100, 3])) + 0
    loss = O.cross_entropy(x, y)
    loss.backward()
    assert abs(loss.item() - np.log(4)) < 1e-12 and (x.grad[1] == 0).all()
    with pytest.raises(IndexError, match="Target -100 is out of bounds"):
        O.cross_entropy(x, y, ignore_index=0).item()


def test_the_gradient_kernels_check_targets_too():
    # a gradient graph realized on its own (no forward loss kernel in the plan) still checks
    from tinyopt.engine.graph import backward_graph, toposort
    x = to.Parameter(np.zeros((2, 3)))
    for reduction in ("mean", "sum"):
        for fn in (O.cross_entropy, O.nll_loss):
            loss = fn(x, to.tensor(np.array([0, 7])) + 0, reduction=reduction)
            with to.enable_grad():
                g = backward_graph(loss, toposort([loss]), [x])[id(x)]
            with pytest.raises(IndexError, match="Target 7 is out of bounds"):
                g.numpy()


def test_one_hot_checks_computed_indices():
    y = to.tensor(np.array([0, 2])) + 1
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        O.one_hot(y, 3).numpy()
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        O.one_hot(y - 2, 3).numpy()
    np.testing.assert_array_equal(O.one_hot(y - 1, 3).numpy(), np.eye(3, dtype=np.int64)[[0, 2]])


def test_huge_target_is_an_index_error_not_a_crash():
    # issue 9.1's reproducer: on the old code a SIGSEGV, so it runs in a child process
    import subprocess
    import sys
    code = """if True:
        import numpy as np, tinyopt as to
        from tinyopt import nn
        m = nn.Linear(20, 10); x = np.random.rand(64, 20).astype(np.float32)
        y = np.random.randint(0, 10, 64); y[5] = 10**11
        t = to.cat([to.tensor(y[:32]), to.tensor(y[32:])])
        try:
            nn.functional.cross_entropy(m(x), t).backward()
        except IndexError as e:
            print(e)
        """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Target 100000000000 is out of bounds."


def test_an_ignored_row_with_nan_or_inf_gets_pytorchs_nan_gradient():
    # found by tests/test_fuzz_api.py: torch's cross_entropy is nll(log_softmax(x)), whose
    # backward gives an ignored row 0 - p 0: NaN where p is NaN (a NaN or +inf in the row)
    rows = np.array([[0, 0, 0, 0], [np.nan, 0, 0, 0], [np.inf, 0, 1, 2], [-np.inf, 0, 1, 2],
                     [-np.inf] * 4, [1, 2, 3, 4]], np.float32)
    want_nan = np.zeros(rows.shape, bool)
    want_nan[[1, 2, 4]] = True
    for reduction in ("sum", "none"):
        for smoothing in (0.0, 0.1):
            x = to.tensor(rows, requires_grad=True)
            y = np.array([2, 2, 2, 2, 2, 0])
            to.nn.functional.cross_entropy(x, y, ignore_index=2, reduction=reduction,
                                           label_smoothing=smoothing).sum().backward()
            g = x.grad.numpy()
            np.testing.assert_array_equal(np.isnan(g), want_nan)
            np.testing.assert_array_equal(g[[0, 3]], 0.0)
            assert np.isfinite(g[5]).all() and g[5].any()


def test_cross_entropy_and_its_gradient_run_one_kernel_of_one_signature(monkeypatch):
    """The loss and its gradient are one numba kernel, called with the same argument types both
    ways: one cold compile serves a training step (each kernel costs its own)."""
    import numba
    from tinyopt.engine import cache_clear
    from tinyopt.kernels import jit, loss as K
    kernel = K.ce_rows[False, False]
    build = kernel._serial
    calls = []

    def serial(*args):
        calls.append((args[0], tuple(numba.typeof(a) for a in args[1:])))
        return build(*args)
    monkeypatch.setattr(kernel, "_serial", serial)
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", 1 << 62)
    cache_clear()
    rng = np.random.default_rng(5)
    for reduction in REDUCTIONS:
        p = to.Parameter(rng.standard_normal((6, 4)))
        loss = O.cross_entropy(p, rng.integers(0, 4, 6), reduction=reduction)
        (loss if reduction != "none" else loss.sum()).backward()
    assert {grad for grad, _ in calls} == {False, True}
    assert len({types for _, types in calls}) == 1



def test_cross_entropys_rows_kernel_inlines_no_function_but_the_exponential():
    """numba inlines a kernel's ``inline`` callees at its IR level, each with passes of its own
    and deep copies of its IR, in every cold compile: inlining ``_exp_row``, the target check
    and the mean took ~0.15-0.2 s of ``ce_rows``'s ~0.9-1 s, which every first step using
    ``F.cross_entropy`` compiles.  The kernel writes their steps out (the same bits: the tests
    above and below compare it with ``ce_exp``'s exponentials, torch and numpy) and inlines
    only the vectorizable exponential of float32."""
    from tinyopt.kernels import jit, loss as K
    for from_exp, single in itertools.product((False, True), (False, True)):
        made = K.ce_rows[from_exp, single]
        fn = (made if from_exp else made.serial_build).py_func
        inlined = {c.cell_contents.py_func.__name__ for c in fn.__closure__ or ()
                   if isinstance(c.cell_contents, jit._Inline)}
        inlined |= {name for name in fn.__code__.co_names
                    if isinstance(getattr(K, name, None), jit._Inline)}
        assert inlined <= {"exp_fast"}, (from_exp, single, inlined)


def test_cross_entropys_rows_kernel_reads_c_arrays_through_pointers(monkeypatch):
    """``ce_rows`` reads its arrays through typed pointers (numba lowers an array access to
    ~15 times the IR of a pointer's) in ``while`` loops (a ``for`` loop over a range is ~130
    lines of IR more): its serial build's LLVM IR before optimisation, 6100 lines with arrays
    and ranges, stays under 3500 (~2300), and it refuses an array of another layout than C (a
    pointer would read it as C)."""
    import numba
    from numba.core import codegen
    from tinyopt.kernels import jit, loss as K
    lines = []
    add_ir_module = codegen.CPUCodeLibrary.add_ir_module

    def counted(library, module):
        lines.append(str(module).count("\n"))
        return add_ir_module(library, module)
    monkeypatch.setattr(codegen.CPUCodeLibrary, "add_ir_module", counted)
    fresh = numba.njit(**{**jit._OPTIONS, "cache": False})(
        K.ce_rows[False, True].serial_build.py_func)  # (compiled here, not loaded)
    N, C = 5, 3
    x, w = np.zeros((N, C), np.float32), np.ones(C, np.float32)
    y, err = np.zeros(N, np.int64), np.empty(1, np.int64)
    rows, mean = np.empty(N, np.float32), np.empty(0, np.float32)
    rest = (np.empty((0, 0), np.float32), err, np.empty((0, 0), np.float32),
            np.empty((0, 2)), *K.ce_scratch(N, C, np.float32, False))
    fresh(False, mean, x, y, w, -100, 0.0, mean, rows, *rest)
    np.testing.assert_allclose(rows, np.log(3.0), rtol=1e-6)
    assert max(lines) < 3500, lines
    with pytest.raises(numba.TypingError):
        fresh(False, mean, np.zeros((N, 2 * C), np.float32)[:, ::2], y, w, -100, 0.0, mean,
              rows, *rest)


def test_cross_entropys_gradient_over_its_logits_is_the_gradient_into_another_array():
    """A planned step writes the gradient over the logits (out is x): the kernel copies a row
    and computes its exponentials in place (which LLVM vectorizes: reading x and writing out
    over it had failed LLVM's overlap check, 2.8 times the time; ``benchmarks/bench_seq.py``'s
    GPT step measures it), and the result is the same bits as into another array."""
    from tinyopt.kernels import loss as K
    rng = np.random.default_rng(9)
    N, C = 67, 65
    x0 = rng.standard_normal((N, C)).astype(np.float32)
    x0[3, 7], x0[5, :] = np.inf, np.nan
    y, w, g = rng.integers(0, C, N), rng.random(C).astype(np.float32), np.ones(1, np.float32)
    y[4] = -100
    kernel = K.ce_rows[False, True].serial_build
    rest = (np.empty(1, np.int64), np.empty((0, 0), np.float32), np.empty((0, 2)),
            *K.ce_scratch(N, C, np.float32, False))
    for eps in (0.0, 0.1):
        x, other = x0.copy(), np.empty_like(x0)
        kernel(True, g, x, y, w, -100, eps, np.empty(1, np.float32), np.empty(0, np.float32),
               other, *rest)
        np.testing.assert_array_equal(x, x0)
        kernel(True, g, x, y, w, -100, eps, np.empty(1, np.float32), np.empty(0, np.float32),
               x, *rest)
        assert x.tobytes() == other.tobytes()


# ---- rows in parallel (kernels/loss.py's parallel build): the same bits as the serial build -----
def _force_parallel(monkeypatch, on: bool):
    from tinyopt.engine import cache_clear
    from tinyopt.kernels import jit
    monkeypatch.setattr(jit, "PARALLEL_MIN_ELEMENTS", 1 if on else 1 << 62)
    cache_clear()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_rows_in_parallel_give_the_same_bits(monkeypatch, dtype, reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 50)).astype(dtype) * 4
    x[4, 7] = np.inf
    y = rng.integers(0, 50, 37)
    y[[2, 30]] = -100
    w = rng.random(50).astype(dtype) + 0.5

    def run(parallel):
        _force_parallel(monkeypatch, parallel)
        out = []
        for kw in ({}, {"weight": w, "label_smoothing": 0.2}):
            p = to.Parameter(x.copy())
            loss = O.cross_entropy(p, y, reduction=reduction, **kw)
            (loss if reduction != "none" else loss.sum()).backward()
            out += [loss.numpy().tobytes(), p._grad.tobytes()]
        return out

    assert run(True) == run(False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_from_its_exponentials_node_gives_the_same_bits(monkeypatch, dtype,
                                                                       reduction):
    """The exponentials node (its rows in chunks on the shared threads, or as one chunk on this
    thread) gives the bits of the loss and gradient kernels that compute them themselves."""
    from tinyopt.engine import cache_clear
    from tinyopt.kernels import loss as K
    rng = np.random.default_rng(4)
    x = rng.standard_normal((29, 40)).astype(dtype) * 5
    x[3, 9] = np.inf
    x[5, 1] = np.nan
    y = rng.integers(0, 40, 29)
    y[[2, 20]] = -100
    w = rng.random(40).astype(dtype) + 0.5

    def run(least):
        monkeypatch.setattr(K, "PARALLEL_ROWS_MIN", least)
        cache_clear()
        out, ops = [], set()
        for kw in ({}, {"weight": w, "label_smoothing": 0.3}):
            p = to.Parameter(x.copy())
            loss = O.cross_entropy(p, y, reduction=reduction, **kw)
            stack = [loss]
            while stack:
                n = stack.pop()
                ops.add(n.op)
                stack += n.srcs
            (loss if reduction != "none" else loss.sum()).backward()
            out += [loss.numpy().tobytes(), p._grad.tobytes()]
        return out, "ce_exp" in ops

    (whole, used), (plain, unused) = run(1), run(1 << 62)
    assert used and not unused and whole == plain
    from tinyopt.kernels.native import shared_threads  # the exponentials' rows as one serial chunk
    monkeypatch.setattr(shared_threads, "chunk_runner", lambda: shared_threads._SERIAL)
    assert run(1) == (whole, True)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("C", [1000, 1])
def test_cross_entropy_gradient_is_written_in_place_in_a_plan(monkeypatch, compile_at_once,
                                                               reduction, C):
    """A planned training step writes the logits' gradient over the exponentials' buffer (their
    last reader; the logits die with the forward loss: the peak holds one (N, C) array less
    than logits + exponentials + gradient), or over the logits without the exponentials node;
    the bits are those of an eager run (no plan, nothing in place).  C = 1: the row gradient's
    source (the per-row g) is never what it overwrites."""
    from tinyopt.engine import get_plan
    from tinyopt.kernels import loss as K
    rng = np.random.default_rng(5)
    N = 64
    x0, w0 = rng.standard_normal((N, 8)).astype(np.float32), \
        rng.standard_normal((C, 8)).astype(np.float32)
    y = rng.integers(0, C, N)
    y[3] = -100
    scale = to.tensor(rng.uniform(0.5, 1.5, N).astype(np.float32))

    def step(least, planned=True):
        monkeypatch.setattr(K, "PARALLEL_ROWS_MIN", least)
        compile_at_once.clear()
        compile_at_once.compile_after = 1 if planned else 1 << 30
        w = to.Parameter(w0.copy())
        loss = O.cross_entropy(O.linear(to.tensor(x0), w), y, reduction=reduction)
        loss = loss if reduction == "mean" else (loss * scale).sum()
        plan = get_plan(loss=loss) if planned else None
        loss.backward()
        return plan, loss.numpy().tobytes(), w.grad.numpy().tobytes()

    reference = step(1, planned=False)[1:]
    for least in (1, 1 << 62):
        plan, *bits = step(least)
        assert tuple(bits) == reference
        k = {t.op: i for i, t in enumerate(plan.nodes)}
        grad = k["ce_mean_grad" if reduction == "mean" else "ce_rows_grad"]
        m = plan.memory
        if least == 1:
            assert m.root[grad] == m.root[k["ce_exp"]]  # over the exponentials
            assert m.blocks[m.root[k["linear"]]].last < grad  # the logits died before it
            assert C == 1 or plan.peak_bytes < 2.2 * N * C * 4  # exponentials (+ stats), logits
        else:
            assert "ce_exp" not in k and m.root[grad] == m.root[k["linear"]]  # over the logits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_from_its_exponentials_node_matches_torch_with_nan_and_inf(monkeypatch,
                                                                                 dtype):
    """The row max and sum in lanes (kernels/loss.py ``_exp_row``), with class counts below,
    at and past the lane count: PyTorch's values to rounding, NaN rows where PyTorch has them
    (a NaN or +inf logit, or a row of -inf), and a -inf logit a probability of 0."""
    torch = pytest.importorskip("torch")
    from tinyopt.engine import cache_clear
    from tinyopt.kernels import loss as K
    monkeypatch.setattr(K, "PARALLEL_ROWS_MIN", 1)
    cache_clear()
    rng = np.random.default_rng(8)
    for C in (3, 16, 37, 517):
        x = (rng.standard_normal((9, C)) * 6).astype(dtype)
        x[1, C - 1] = np.nan
        x[2, C // 2] = np.inf
        x[3] = -np.inf
        x[4, 0] = -np.inf
        x[5, :] = 0.0
        y = rng.integers(0, C, 9)
        y[6] = -100
        for reduction in ("none", "sum"):
            p = to.Parameter(x.copy())
            loss = O.cross_entropy(p, y, reduction=reduction)
            (loss if reduction == "sum" else loss.sum()).backward()
            tx = torch.tensor(x, requires_grad=True)
            ref = torch.nn.functional.cross_entropy(tx, torch.tensor(y), reduction=reduction)
            (ref if reduction == "sum" else ref.sum()).backward()
            np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), **tol(dtype))
            np.testing.assert_allclose(p.grad.numpy(), tx.grad.numpy(), **tol(dtype))


@pytest.mark.parametrize("parallel", [False, True])
def test_cross_entropy_reports_the_first_bad_target(monkeypatch, parallel):
    _force_parallel(monkeypatch, parallel)
    y = np.zeros(40, np.int64)
    y[[33, 25]] = 11, 12
    for reduction in REDUCTIONS:
        p = to.Parameter(np.zeros((40, 10), np.float32))
        loss = O.cross_entropy(p, y, reduction=reduction)
        with pytest.raises(IndexError, match=r"^Target 12 is out of bounds\.$"):
            loss.sum().backward()
        assert p.grad is None


def test_a_large_cross_entropy_differentiates_on_its_first_eager_run_and_when_planned():
    """A cross-entropy large enough for its exponentials node, run eagerly first (its sources
    are values by the time autodiff builds the gradient: the gradient's form was chosen by the
    node's op name and raised "too many values to unpack"), then planned: same gradient bits."""
    from tinyopt.kernels import loss as kloss
    rows = kloss.PARALLEL_ROWS_MIN // 64
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((rows, 64)).astype(np.float32)
    y = rng.integers(0, 64, rows)
    grads = []
    for _ in range(3):
        x = to.tensor(logits, requires_grad=True)
        to.nn.functional.cross_entropy(x, to.tensor(y)).backward()
        grads.append(x.grad.numpy().copy())
    assert grads[0].tobytes() == grads[1].tobytes() == grads[2].tobytes()
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    p[np.arange(rows), y] -= 1
    np.testing.assert_allclose(grads[0], p / rows, rtol=1e-4, atol=1e-8)


# ---- float32 cross-entropy to the bit: the kernel's order of operations written out in Python ----
def _ce32_transcribed(x, y, w, ignore, eps, g):
    """Row losses and, with row gradients ``g`` (float32), the logits' gradient of a float32
    cross-entropy, in the order ``kernels/loss.py`` fixes (lanes of 16, float64 sums in order,
    float32 roundings where the kernel stores), one Python float operation at a time."""
    import math
    from tinyopt.kernels.vecmath import exp_fast  # (a plain Python function too)
    N, C = x.shape
    f32 = np.float32
    rows, grad = np.zeros(N, f32), np.zeros((N, C), f32)
    wsum = 0.0
    for c in range(C):
        wsum += float(w[c])
    for i in range(N):
        lanes_max, lanes_sum = [-np.inf] * 16, [0.0] * 16
        for c in range(C):
            v, k = float(x[i, c]), c % 16
            lanes_max[k] = v if v > lanes_max[k] or v != v else lanes_max[k]
        m = lanes_max[0]
        for v in lanes_max[1:max(1, min(C, 16))]:
            m = v if v > m or v != v else m
        e = [float(f32(exp_fast(float(f32(float(x[i, c]) - m))))) for c in range(C)]
        for c in range(C):
            lanes_sum[c % 16] += e[c]
        s = 0.0
        for k in range(max(1, min(C, 16))):
            s += lanes_sum[k]
        t = int(y[i])
        if t != ignore:
            lse = m + math.log(s)
            loss = (1.0 - eps) * float(w[t]) * (lse - float(x[i, t]))
            if eps != 0.0:
                smooth = 0.0
                for c in range(C):
                    smooth += float(w[c]) * (lse - float(x[i, c]))
                loss += eps / C * smooth
            rows[i] = f32(loss)
        inv = 1.0 / s
        gi = float(g[i])
        a, b = gi * (1.0 - eps) * float(w[t]) if t != ignore else 0.0, gi * eps / C
        for c in range(C):
            p = e[c] * inv
            grad[i, c] = f32(0.0 * p if t == ignore else a * p + b * (p * wsum - float(w[c])))
        if t != ignore:
            grad[i, t] = f32(float(grad[i, t]) - a)
    return rows, grad


@pytest.mark.parametrize("C", [1, 10, 37])
def test_float32_cross_entropy_is_its_written_out_order_to_the_bit(C):
    """Losses and gradients of a float32 cross-entropy, with label smoothing, weights,
    ignore_index, NaN and inf logits, both reductions that read rows, equal to the bit the
    kernel's order of operations written out in Python: a change to the kernels that moves a
    float32 rounding (where a value is stored, the mean's share of the gradient) fails here,
    not in a tolerance (float64 reorderings mostly vanish in the final rounding)."""
    rng = np.random.default_rng(C)
    N = 9
    x = (rng.standard_normal((N, C)) * 4).astype(np.float32)
    x[2, 0], x[5, C - 1], x[7] = np.inf, np.nan, -np.inf
    y = rng.integers(0, C, N)
    y[[1, 5]] = -100
    for w, eps in ((None, 0.0), ((rng.random(C) + 0.5).astype(np.float32), 0.3)):
        wv = np.ones(C, np.float32) if w is None else w
        for reduction in ("none", "mean"):
            p = to.Parameter(x.copy())
            loss = O.cross_entropy(p, y, weight=w, reduction=reduction, label_smoothing=eps)
            (loss.sum() if reduction == "none" else loss).backward()
            ws = 0.0
            for t in y[y != -100]:
                ws += float(wv[t])
            g = np.full(N, 1.0 if reduction == "none" else np.float32(1.0 / ws), np.float32)
            rows, grad = _ce32_transcribed(x, y, wv, -100, eps, g)
            if reduction == "mean":
                acc = 0.0
                for r in rows:
                    acc += float(r)
                rows = np.float32(acc / ws)
            assert loss.numpy().tobytes() == np.asarray(rows, np.float32).tobytes()
            assert p._grad.tobytes() == grad.tobytes()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_of_strided_views_is_that_of_their_copies(reduction):
    # (the rows kernel reads C-contiguous arrays through pointers: the op copies strided views of
    # the logits, targets and weights first, and writes a strided gradient back)
    import tinyopt as to
    F = to.nn.functional
    rng = np.random.default_rng(4)
    big = rng.standard_normal((9, 12)).astype(np.float32)
    ys = rng.integers(0, 9, 16)
    ws = rng.random(18).astype(np.float32) + 0.5

    def run(strided: bool):
        leaf = to.tensor(big if strided else np.ascontiguousarray(big.T[:8, :]),
                         requires_grad=True)
        y = to.tensor(ys)[::2] if strided else to.tensor(np.ascontiguousarray(ys[::2]))
        w = to.tensor(ws)[::2] if strided else to.tensor(np.ascontiguousarray(ws[::2]))
        out = []
        for _ in range(2):  # (eager, then the plan)
            leaf.grad = None
            x = leaf.T[:8, :] if strided else leaf
            loss = F.cross_entropy(x, y, weight=w, reduction=reduction, label_smoothing=0.1)
            loss.sum().backward()
            g = leaf.grad.numpy().T[:8, :] if strided else leaf.grad.numpy()
            out.append((loss.numpy().tobytes(), np.ascontiguousarray(g).tobytes()))
        return out

    assert run(True) == run(False)
