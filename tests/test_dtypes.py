"""``engine/dtypes.py``: torch 2.13's unsigned dtypes uint16/uint32/uint64 (names, creation,
promotion, the few ops torch computes on them and torch's errors for the rest), and Python
integers too large for int64 (issue 25.7)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyopt as to

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

UNSIGNED = ["uint16", "uint32", "uint64"]

# expressions over a = [1, 2, 3] (uint32) and b = [2**64 - 1, 5, 7] (uint64), under either library
COMPUTED = ["a * a", "a * 2", "a * M.tensor(2)", "a * True", "a == a", "a != 1", "a & a",
            "a | a", "a ^ a", "a / 2", "a + 1.5", "a + M.tensor([1.0, 2.0, 3.0])", "a.sum()",
            "a.prod()", "a.cumsum(0)", "b.sum()", "b * 2", "b[0]", "a[M.tensor([0, 2])]",
            "a[a == 2]", "a.view(3, 1)", "a.reshape(1, 3).t()", "a.clone()", "M.cat([a, a])",
            "M.stack([a, a])", "a.expand(2, 3)", "a.float()", "a.double()", "a.long()",
            "a.to(M.uint64)", "a.to(M.uint8)", "b.to(M.float64)", "a.exp()", "a.sqrt()",
            "a.any()", "a.all()", "M.where(a == 2, a, 0)", "a.sort()[0]", "b.sort()[0]",
            "a.argsort()", "a.repeat(2)", "a.roll(1)", "a.floor()", "a.round()",
            "a.new_zeros(2)", "M.zeros_like(a)", "M.full_like(a, 3)",
            "M.zeros(2, dtype=M.uint16)", "M.ones(2, dtype=M.uint64)",
            "M.full((2,), 7, dtype=M.uint32)", "a.isnan()", "a.bool()"]
REFUSED = [("a + a", "add_stub"), ("a - 1", "add_stub"), ("-a", "neg_cpu"), ("a.abs()", "abs_cpu"),
           ("a < a", "lt_cpu"), ("a // a", "div_floor_cpu"), ("a % a", "remainder_cpu"),
           ("a ** 2", "pow"), ("a.max()", "max_all"), ("a.argmax()", "argmax_cpu"),
           ("a.clamp(0, 2)", "clamp_scalar_cpu"), ("a.relu()", "clamp_min_scalar_cpu"),
           ("M.maximum(a, a)", "maximum_cpu"), ("a.masked_fill(a == 1, 0)", "masked_fill"),
           ("a.index_select(0, M.tensor([0]))", "index_select"), ("a.nonzero()",
                                                                    "nonzero_count_cpu"),
           ("a.count_nonzero()", "nonzero_count_cpu"), ("a.topk(2)", "topk_cpu"),
           ("a.median()", "median_cpu"), ("a.take(M.tensor([0]))", "take_cpu"),
           ("a.gather(0, M.tensor([0]))", "scatter_gather_tensor_cpu"),
           ("a.bincount()", "bincount_cpu"), ("a.sign()", "sign_cpu")]


def _operands(lib):
    a = lib.tensor([1, 2, 3], dtype=lib.uint32)
    b = lib.tensor(np.array([2**64 - 1, 5, 7], np.uint64))
    return a, b


def _value(r):
    r = r[0] if isinstance(r, tuple) else r
    return np.asarray(r.numpy()).tolist(), str(r.dtype).removeprefix("torch.")


@pytest.mark.parametrize("name", UNSIGNED)
def test_the_names_and_their_limits(name):
    d = getattr(to, name)
    assert d == np.dtype(name) and to.tensor([1], dtype=d).dtype == d
    assert to.as_tensor(np.zeros(2, name)).dtype == d
    assert to.from_numpy(np.zeros(2, name)).dtype == d
    x = to.zeros(2, dtype=d)
    assert not x.is_signed() and x.element_size() == d.itemsize
    assert repr(x) == f"tensor([0, 0], dtype=torch.{name})"
    assert x.type() == f"torch.UInt{name[4:]}Tensor"
    assert to.iinfo(d).max == 2 ** (8 * d.itemsize) - 1 and to.iinfo(d).min == 0


def test_uint64_data_keeps_its_values_and_python_ints_past_int64_are_refused():
    """``2**64 - 1`` became -1 and ``tensor([2**63])`` wrapped to -2**63."""
    big = np.array([2**64 - 1, 2**63], np.uint64)
    t = to.tensor(big)
    assert t.dtype == to.uint64 and t.tolist() == [2**64 - 1, 2**63]
    assert to.tensor([2**64 - 1], dtype=to.uint64).tolist() == [2**64 - 1]
    assert to.tensor(t).tolist() == [2**64 - 1, 2**63] and t[0].item() == 2**64 - 1
    for data in ([2**63], 2**63, [[1, 2**64 - 1]], [2**70]):
        with pytest.raises(ValueError, match="^Overflow when unpacking long long$"):
            to.tensor(data)
    assert to.tensor([2**63 - 1]).dtype == to.int64


def test_promotion_is_refused_between_integer_dtypes_as_torch_does():
    with pytest.raises(RuntimeError, match=r"^Promotion for uint16, uint32, uint64 types is not "
                                           r"supported, attempted to promote UInt32 and Long$"):
        to.tensor([1], dtype=to.uint32) + to.tensor([1])
    for a, b in [("uint32", "int32"), ("uint64", "uint8"), ("uint16", "bool"),
                 ("uint16", "uint32")]:
        with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64"):
            to.promote_types(getattr(to, a), getattr(to, b))
    assert to.promote_types(to.uint32, to.float32) == to.float32
    assert to.promote_types(to.uint64, to.uint64) == to.uint64


@pytest.mark.parametrize("expr", COMPUTED)
def test_what_torch_computes_on_them(expr):
    a, b = _operands(to)
    ours = _value(eval(expr, {"M": to, "a": a, "b": b}))
    if torch is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta = torch.tensor([1, 2, 3], dtype=torch.uint32)
        tb = torch.tensor([2**64 - 1, 5, 7], dtype=torch.uint64)
        theirs = _value(eval(expr, {"M": torch, "a": ta, "b": tb}))
    assert ours[1] == theirs[1]
    np.testing.assert_allclose(np.asarray(ours[0], np.float64), np.asarray(theirs[0], np.float64),
                               rtol=1e-6)
    assert ours[0] == theirs[0] or ours[1].startswith("float")


@pytest.mark.parametrize("expr, kernel", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_torch_does_not_compute_raises_its_error(expr, kernel):
    a, _ = _operands(to)
    with pytest.raises(NotImplementedError, match=f"^\"{kernel}\" not implemented for 'UInt32'$"):
        eval(expr, {"M": to, "a": a})
    if torch is not None:
        ta = torch.tensor([1, 2, 3], dtype=torch.uint32)
        with pytest.raises(NotImplementedError, match=f"not implemented for 'UInt32'"):
            eval(expr, {"M": torch, "a": ta})


STORED = [("uint8", 300), ("uint8", -1), ("uint8", -255), ("uint8", -256), ("uint8", 255.0),
          ("uint8", 255.9), ("uint8", -0.5), ("uint8", float("nan")), ("uint8", float("inf")),
          ("int8", 127), ("int8", 128), ("int8", -129), ("int32", 2 ** 31), ("int64", 1e30),
          ("int16", 40000), ("float16", 65519.0), ("float16", 70000), ("float16", 1e300),
          ("float16", float("-inf")), ("float32", 1e300), ("float32", float("nan")),
          ("float64", 1e300), ("bool", 5), ("bool", 0.5), ("int64", True)]


@pytest.mark.parametrize("store", [
    lambda lib, x, v: x.fill_(v), lambda lib, x, v: x.__setitem__(0, v),
    lambda lib, x, v: x.masked_fill_(x == 0, v),
    lambda lib, x, v: x.index_fill_(0, lib.tensor([1]), v),
    lambda lib, x, v: lib.full((2,), v, dtype=x.dtype), lambda lib, x, v: lib.full_like(x, v),
], ids=["fill_", "setitem", "masked_fill_", "index_fill_", "full", "full_like"])
def test_storing_a_number_the_dtype_cannot_hold_raises_torchs_error(store):
    """Issue 25: ``uint8_tensor.fill_(300)`` wrapped to 44 where torch raises; arithmetic
    (``x + 300``) still wraps, as torch's."""
    torch = pytest.importorskip("torch")

    def run(lib, dtype, v):
        x = lib.zeros(3, dtype=getattr(lib, dtype))
        try:
            out = store(lib, x, v)
        except RuntimeError as e:
            return str(e)
        return (x if out is None else out).tolist()

    for dtype, v in STORED:
        assert str(run(to, dtype, v)) == str(run(torch, dtype, v)), (dtype, v)
    assert (to.zeros(2, dtype=to.uint8) + 300).tolist() == [44, 44]
