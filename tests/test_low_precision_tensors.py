"""float16/bfloat16 tensors in the engine and ``Module.half()/.bfloat16()/.to(dtype)``.

16-bit floats are storage types: an op over them computes in float32 over the widened values and
rounds its result (``engine/op.py``), which is how torch's CPU kernels compute them; gradients of
16-bit tensors are float32 (a documented deviation: torch keeps them 16-bit).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
LOW = [pytest.param(F16, id="float16"), pytest.param(BF16, id="bfloat16")]


def _torch_dtype(torch, d):
    return torch.float16 if d == F16 else torch.bfloat16


def _values(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 3).astype(np.float32)


@pytest.mark.parametrize("d", LOW)
def test_casts_round_to_nearest_even_and_widen_exactly(d):
    x = np.concatenate([_values(), [65504.0, 65520.0, 1e6, -1e-8, np.inf, np.nan, 0.0, -0.0]]
                       ).astype(np.float32)
    t = to.tensor(x)
    low = t.half() if d == F16 else t.bfloat16()
    assert low.dtype == d and low.is_floating_point()
    with np.errstate(over="ignore"):
        expect = x.astype(d)
    np.testing.assert_array_equal(low.numpy().view(np.uint16), expect.view(np.uint16))
    np.testing.assert_array_equal(low.float().numpy(), expect.astype(np.float32))
    assert to.tensor(x, dtype=d).dtype == d


@pytest.mark.parametrize("d", LOW)
def test_ops_compute_in_float32_and_round_as_torch_does(d):
    torch = pytest.importorskip("torch")
    a, b = _values(seed=1).astype(d), _values(seed=2).astype(d)
    ta, tb = to.tensor(a), to.tensor(b)
    pa = torch.from_numpy(a.astype(np.float32)).to(_torch_dtype(torch, d))
    pb = torch.from_numpy(b.astype(np.float32)).to(_torch_dtype(torch, d))
    wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
    cases = [  # (ours, torch's, float32 value before rounding)
        (ta + tb, pa + pb, wide_a + wide_b), (ta * tb, pa * pb, wide_a * wide_b),
        (ta * 1.5, pa * 1.5, wide_a * np.float32(1.5)),
        (ta.relu(), pa.relu(), np.maximum(wide_a, 0)),
        (ta.exp(), pa.exp(), np.exp(wide_a)), (ta.sum(), pa.sum(), wide_a.sum()),
    ]
    for ours, theirs, wide in cases:
        assert ours.dtype == d and str(ours.dtype) == str(theirs.dtype).split(".")[1]
        got = ours.numpy().astype(np.float32)
        rounded = np.asarray(wide, np.float32).astype(d).astype(np.float32)
        np.testing.assert_array_equal(got, rounded)
        ulp = np.float32(2.0 ** (-10 if d == F16 else -7))  # one 16-bit ulp (relative)
        np.testing.assert_allclose(got, theirs.float().numpy(), rtol=ulp, atol=1e-6)


def test_promotion_is_torchs():
    torch = pytest.importorskip("torch")
    names = {F16: torch.float16, BF16: torch.bfloat16, np.dtype(np.float32): torch.float32,
             np.dtype(np.float64): torch.float64, np.dtype(np.int64): torch.int64}
    for a in names:
        for b in names:
            ours = (to.zeros(2, dtype=a) + to.zeros(2, dtype=b)).dtype
            assert str(names[ours]) == str(torch.promote_types(names[a], names[b])), (a, b)
    assert (to.zeros(2, dtype=BF16) + 0.5).dtype == BF16  # Python numbers do not widen
    assert (to.zeros(2, dtype=BF16) + to.tensor(0.5)).dtype == BF16  # nor 0-d tensors


@pytest.mark.parametrize("d", LOW)
def test_gradients_of_16_bit_tensors_are_float32_and_exact(d):
    x = to.tensor(_values(8).astype(d), requires_grad=True)
    w = to.tensor(_values(8, seed=3))
    (x.exp() * w).sum().backward()
    assert x.grad.dtype == np.float32
    # the derivative of the float32 computation; the rounding of the result passes it through
    expect = np.exp(x.detach().float().numpy()) * w.numpy()
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-6)


def test_printing_is_torchs():
    torch = pytest.importorskip("torch")
    x = np.array([1.0, 2.5, -3.0, 1e-3], dtype=np.float32)
    for ours, theirs in ((to.tensor(x).bfloat16(), torch.tensor(x).bfloat16()),
                         (to.tensor(x).half(), torch.tensor(x).half())):
        assert repr(ours) == repr(theirs)


def _model():
    to.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.parametrize("method", ["half", "bfloat16", "to"])
def test_module_casts_floating_parameters_and_buffers_in_place(method):
    torch = pytest.importorskip("torch")
    m = _model()
    params = list(m.parameters())
    weights = [p.detach().numpy().copy() for p in params]
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                             torch.nn.Linear(4, 2))
    tm.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in m.state_dict().items()})
    m[0].weight.grad = to.ones(4, 3)
    d = BF16 if method == "bfloat16" else F16
    if method == "to":
        assert m.to(to.float16) is m
        tm.to(torch.float16)
    else:
        assert getattr(m, method)() is m
        getattr(tm, method)()
    assert [p is q for p, q in zip(m.parameters(), params)] == [True] * len(params)
    for (name, ours), (_, theirs) in zip(m.state_dict().items(), tm.state_dict().items()):
        expect = theirs.float().numpy() if theirs.is_floating_point() else theirs.numpy()
        assert (ours.dtype == d) == theirs.is_floating_point(), name
        np.testing.assert_array_equal(ours.float().numpy() if ours.is_floating_point()
                                      else ours.numpy(), expect)
    rounded = weights[0].astype(d).astype(np.float32)
    np.testing.assert_array_equal(m[0].weight.float().numpy(), rounded)
    assert m[0].weight.grad.dtype == np.float32  # (torch: float16; see docs/low_precision.md)
    m.float()  # and back: widening is exact
    np.testing.assert_array_equal(m[0].weight.numpy(), weights[0].astype(d).astype(np.float32))


def test_module_to_refuses_integer_dtypes_as_torch_does():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError) as theirs:
        torch.nn.Linear(2, 2).to(torch.int64)
    with pytest.raises(TypeError) as ours:
        nn.Linear(2, 2).to(to.int64)
    assert str(ours.value) == str(theirs.value)


def test_bfloat16_without_ml_dtypes_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(TypeError, match="pip install ml_dtypes"):
        to.zeros(2).to("bfloat16")
    with pytest.raises(TypeError, match="pip install ml_dtypes"):
        nn.Linear(2, 2).bfloat16()
    assert nn.Linear(2, 2).half().weight.dtype == F16  # float16 needs nothing


_WITHOUT_ML_DTYPES = """
import sys
sys.modules["ml_dtypes"] = None  # as if it were not installed
import numpy as np
import tinyopt as to
from tinyopt import nn
ptdtype = {"float32": to.float32, "bfloat16": to.bfloat16, "float16": to.float16}["float32"]
assert repr(to.bfloat16) == "torch.bfloat16" and to.bfloat16 is to.bfloat16
assert to.bfloat16 != to.float32 and to.float32 != to.bfloat16 and to.bfloat16 != to.float16
m = nn.Linear(3, 2).to(ptdtype)
opt = to.optim.SGD(m.parameters(), lr=0.1)
m(to.ones(4, 3, dtype=ptdtype)).sum().backward()
opt.step()
uses = [lambda: to.zeros(2, dtype=to.bfloat16), lambda: to.zeros(2).to(to.bfloat16),
        lambda: m.to(to.bfloat16), lambda: to.tensor([1.0], dtype=to.bfloat16),
        lambda: nn.Linear(2, 2, dtype=to.bfloat16), lambda: np.zeros(2, to.bfloat16),
        lambda: to.autocast("cpu", dtype=to.bfloat16).__enter__(), lambda: m.bfloat16()]
for use in uses:
    try:
        use()
    except TypeError as e:
        assert "ml_dtypes" in str(e) and "lowp" in str(e), e
    else:
        raise AssertionError("no error")
assert m.weight.dtype == to.float32
print("ok")
"""


def test_naming_bfloat16_without_ml_dtypes_works_and_using_it_names_the_extra():
    """Issue 25.13: merely naming ``to.bfloat16`` without ml_dtypes raised TypeError, so a
    script building a dtype table at start-up (nanoGPT) failed even in float32."""
    import subprocess
    out = subprocess.run([sys.executable, "-c", _WITHOUT_ML_DTYPES], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("d", LOW)
def test_layers_made_in_16_bits_and_initialised_there(d):
    for layer in (nn.Linear(4, 3, dtype=d), nn.Conv2d(1, 2, 3, dtype=d),
                  nn.Embedding(5, 3, dtype=d), nn.LayerNorm(4, dtype=d)):
        assert {p.dtype for p in layer.parameters()} == {d}
    p = nn.Parameter(to.zeros(64, 8, dtype=d))
    nn.init.normal_(p, 0.0, 0.02)
    values = p.detach().float().numpy()
    assert 0.01 < values.std() < 0.03
    np.testing.assert_array_equal(values.astype(d).astype(np.float32), values)  # 16-bit values


def test_checkpoints_of_a_bfloat16_model_round_trip_and_resume_exactly(tmp_path):
    def make():
        to.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).bfloat16()
        return model, to.optim.Adam(model.parameters(), lr=1e-2)

    def step(model, opt):
        opt.zero_grad()
        with to.autocast("cpu"):
            loss = model(to.ones(5, 3)).float().square().mean()
        loss.backward()
        opt.step()

    model, opt = make()
    step(model, opt)
    to.save(model.state_dict(), tmp_path / "weights.pt")
    loaded = to.load(tmp_path / "weights.pt")
    for name, value in model.state_dict().items():
        assert loaded[name].dtype == BF16
        np.testing.assert_array_equal(loaded[name].numpy(), value.numpy())
    to.save(tmp_path / "run.tinyopt", model=model, optimizer=opt)
    model2, opt2 = make()
    to.load_into(tmp_path / "run.tinyopt", model=model2, optimizer=opt2)
    for _ in range(2):
        step(model, opt)
        step(model2, opt2)
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        np.testing.assert_array_equal(opt.state[p]["master_param"].numpy(),
                                      opt2.state[q]["master_param"].numpy())


# each: (name, tinyopt-or-torch expression, the float32 computation rounded once); torch's CPU
# kernels compute these in float32 and round the result once
_ONE_ROUNDING = [
    ("div", lambda m, a, b: a / b, lambda a, b: a / b),
    ("rdiv", lambda m, a, b: 2.0 / a, lambda a, b: np.float32(2.0) / a),
    ("pow", lambda m, a, b: a.abs() ** b, lambda a, b: np.abs(a) ** b),
    ("negative_pow", lambda m, a, b: a.abs() ** -0.75,
     lambda a, b: np.abs(a) ** np.float32(-0.75)),
    # (``** -0.5`` too, which torch computes as an approximate rsqrt: last bits differ)
    ("exp2", lambda m, a, b: 2 ** a, lambda a, b: np.float32(2) ** a),
    ("div_trunc", lambda m, a, b: m.div(a, b, rounding_mode="trunc"),
     lambda a, b: np.trunc(a / b)),
    ("clamp", lambda m, a, b: m.clamp(a, -0.5, 0.5), lambda a, b: np.clip(a, -0.5, 0.5)),
    ("addcmul", lambda m, a, b: m.addcmul(a, a, b, value=0.5),
     lambda a, b: a + np.float32(0.5) * a * b),
    ("addcdiv", lambda m, a, b: m.addcdiv(a, a, b), lambda a, b: a + a / b),
    ("lerp", lambda m, a, b: m.lerp(a, b, 0.3), lambda a, b: a + np.float32(0.3) * (b - a)),
    ("hypot", lambda m, a, b: m.hypot(a, b), lambda a, b: np.hypot(a, b)),
    ("logaddexp", lambda m, a, b: m.logaddexp(a, b), lambda a, b: np.logaddexp(a, b)),
    ("mean", lambda m, a, b: a.mean(), lambda a, b: a.mean(dtype=np.float32)),
    ("var", lambda m, a, b: a.var(), lambda a, b: a.var(ddof=1, dtype=np.float32)),
    ("std", lambda m, a, b: a.std(), lambda a, b: a.std(ddof=1, dtype=np.float32)),
    ("norm", lambda m, a, b: m.linalg.vector_norm(a), lambda a, b: np.sqrt((a * a).sum())),
    ("logcumsumexp", lambda m, a, b: m.logcumsumexp(a, 0),
     lambda a, b: np.log(np.cumsum(np.exp(a.astype(np.float64)))).astype(np.float32)),
]


@pytest.mark.parametrize("case", _ONE_ROUNDING, ids=[c[0] for c in _ONE_ROUNDING])
@pytest.mark.parametrize("d", LOW)
def test_binary_ops_and_reductions_keep_16_bits_and_round_once(d, case):
    """Issue 25.8: ``/`` of 16-bit tensors was float32, ``x ** -0.5`` raised, and composites
    (addcmul, mean, var...) rounded every step."""
    _, expr, wide_fn = case
    a, b = _values(16, seed=1).astype(d), _values(16, seed=2).astype(d)
    ours = expr(to, to.tensor(a), to.tensor(b))
    assert ours.dtype == d
    with np.errstate(all="ignore"):
        wide = np.asarray(wide_fn(a.astype(np.float32), b.astype(np.float32)), np.float32)
    got = ours.numpy().astype(np.float32)
    close = np.isclose(got, wide.astype(d).astype(np.float32), rtol=2e-3 if d == F16 else 1.6e-2,
                       equal_nan=True)
    assert close.all(), (got, wide)
    torch = pytest.importorskip("torch")
    theirs = expr(torch, torch.from_numpy(a.astype(np.float32)).to(_torch_dtype(torch, d)),
                  torch.from_numpy(b.astype(np.float32)).to(_torch_dtype(torch, d)))
    assert theirs.dtype == _torch_dtype(torch, d)
    np.testing.assert_array_equal(got, theirs.float().numpy())
