"""The public functions and the Tensor methods take torch's parameter names (issue 26 point 2):
the positional parameters of each ``tinyopt.<op>`` and ``Tensor.<method>`` read as torch's
Python signature of the same name where torch writes one in Python (``torch.split``,
``Tensor.norm``), else as one of torch's schemas for ``aten::<name>`` (its ``self`` is the
functions' ``input`` and the methods' ``self``), so a call written with keywords for torch
works here."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import ops

# Functions whose positional parameters still differ from torch's: shrink this list, never grow
# it.  (``tensor_split``: torch's keyword depends on the overload, ``sections=``, ``indices=`` or
# ``tensor_indices_or_sections=``; tinyopt has one parameter, ``indices_or_sections``, as torch
# documents it.)
KNOWN = {"tensor_split"}
# (and ``cuda``: torch's Python method takes ``(device, non_blocking)``, as tinyopt's does, but
# its aten schema, which this test reads, has neither)
KNOWN_METHODS = {"tensor_split", "cuda"}


def _positional(sig: inspect.Signature, skip: int) -> list[str]:
    """The names of the positional parameters after the first ``skip``; torch's ``from`` (a
    Python keyword) is ``from_``."""
    return ["from_" if p.name == "from" else p.name for p in list(sig.parameters.values())[skip:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _torch_names(torch, name: str, method: bool) -> list[list[str]] | None:
    """The positional parameter names torch accepts for ``name`` (without the tensor for a
    method), one list per signature; None when torch has no such function or method."""
    owner = torch.Tensor if method else torch
    obj = getattr(owner, name, None)
    if obj is None:
        return None
    if inspect.isfunction(obj):  # written in Python: its signature is what callers use (unless
        sig = inspect.signature(obj)  # it only passes ``*args`` on)
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
            return [_positional(sig, 1 if method else 0)]
    try:
        schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
    except RuntimeError:
        return None
    out = []
    for s in schemas:
        args = ["from_" if a.name == "from" else a.name for a in s.arguments if not a.kwarg_only]
        if method:
            if args and args[0] == "self":
                out.append(args[1:])
        else:
            out.append(["input" if a == "self" else a for a in args])
    return out or None


def _differs(obj, theirs: list[list[str]] | None, skip: int) -> bool:
    """Whether ``obj``'s positional parameters (after ``skip``) are a prefix of none of
    ``theirs``; False when there is nothing to compare."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    if theirs is None:
        return False
    ours = _positional(sig, skip)
    return not any(t[:len(ours)] == ours for t in theirs)


def test_public_functions_name_their_parameters_as_torch_does():
    torch = pytest.importorskip("torch")
    ops.load_all()
    differ = {name for name in ops.__all__
              if _differs(getattr(ops, name), _torch_names(torch, name, False), 0)}
    assert not differ - KNOWN, f"new names unlike torch's: {sorted(differ - KNOWN)}"
    assert not KNOWN - differ, f"now as torch's, remove from KNOWN: {sorted(KNOWN - differ)}"


def _public_methods() -> list[str]:
    return [name for name in dir(to.Tensor) if not name.startswith("_")
            and inspect.isfunction(inspect.getattr_static(to.Tensor, name))]


def test_tensor_methods_name_their_parameters_as_torch_does():
    torch = pytest.importorskip("torch")
    names = _public_methods()
    assert len(names) > 300  # (the generated op methods and the hand-written ones)
    differ = {name for name in names
              if _differs(getattr(to.Tensor, name), _torch_names(torch, name, True), 1)}
    assert not differ - KNOWN_METHODS, f"unlike torch's: {sorted(differ - KNOWN_METHODS)}"
    assert not KNOWN_METHODS - differ, f"remove from KNOWN_METHODS: {KNOWN_METHODS - differ}"


def test_methods_of_sizes_take_torchs_keyword_too():
    """``x.view(2, 3)`` is also ``x.view(size=(2, 3))`` in torch (``permute(dims=...)``,
    ``new_zeros(size=...)``...): a method whose parameters are ``*sizes`` takes torch's keyword."""
    torch = pytest.importorskip("torch")
    missing = []
    for name in _public_methods():
        params = list(inspect.signature(getattr(to.Tensor, name)).parameters.values())[1:]
        if not params or params[0].kind is not params[0].VAR_POSITIONAL or \
                any(p.kind is p.VAR_KEYWORD for p in params):
            continue
        theirs = _torch_names(torch, name, True) or []
        keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
        if theirs and not any(t and t[0] in keywords for t in theirs):
            missing.append(name)
    assert not missing, missing
    x = to.arange(6.0)
    assert x.view(size=(2, 3)).permute(dims=(1, 0)).shape == (3, 2)
    assert x.reshape(shape=(3, 2)).shape == x.new_zeros(size=(3, 2)).shape == (3, 2)
    np.testing.assert_array_equal(x.flip(dims=(0,)).numpy(), x.numpy()[::-1])
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        x.view(2, size=(3,))


def test_torch_keywords_reach_the_elementwise_functions():
    """``to.mul(x, other=y)`` raised "build() got an unexpected keyword argument 'other'"."""
    x = to.tensor(np.array([1.0, 2.0], np.float32))
    y = to.tensor(np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(to.mul(x, other=y).numpy(), [3.0, 8.0])
    np.testing.assert_array_equal(to.add(input=x, other=y, alpha=2).numpy(), [7.0, 10.0])
    np.testing.assert_array_equal(to.eq(input=x, other=y).numpy(), [False, False])
    np.testing.assert_array_equal(to.exp(input=x).numpy(), to.exp(x).numpy())
    np.testing.assert_array_equal(to.hypot(x, other=y).numpy(), np.hypot(x.numpy(), y.numpy()))
    assert to.isnan(input=x).numpy().tolist() == [False, False]


def test_torch_keyword_calls_work():
    """Calls written with torch's keywords (which raised TypeError before) give what the
    positional calls give; torch's positional-only extras are refused as torch refuses them."""
    x = to.tensor(np.array([3.0, 1.0, 2.0], np.float32))
    m = to.tensor(np.array([[2.0, 1.0], [1.0, 3.0]], np.float32))
    np.testing.assert_array_equal(to.matmul(input=m, other=m).numpy(), (m @ m).numpy())
    assert to.dot(x, tensor=x).item() == 14.0
    np.testing.assert_allclose(to.inverse(input=m).numpy(), np.linalg.inv(m.numpy()), rtol=1e-6)
    np.testing.assert_array_equal(to.neg(input=x).numpy(), -x.numpy())
    np.testing.assert_array_equal(
        to.searchsorted(to.tensor([1.0, 2.0, 3.0]), input=to.tensor([2.5])).numpy(), [2])
    assert to.swapdims(m, dim0=0, dim1=1).shape == (2, 2)
    assert to.norm(input=x).item() == pytest.approx(np.sqrt(14.0))
    np.testing.assert_array_equal(to.sort(x, stable=True).values.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.sort(descending=True, stable=True)[1].numpy(), [0, 2, 1])
    np.testing.assert_array_equal(x.argsort(dim=0, stable=True).numpy(), [1, 2, 0])
    assert [t.shape for t in to.split(tensor=x, split_size_or_sections=2)] == [(2,), (1,)]
    assert [t.shape for t in x.split(split_size=2)] == [(2,), (1,)]
    assert to.as_tensor(data=[1, 2], dtype=to.float64).dtype == to.float64
    assert m.swapaxes_(axis0=0, axis1=1) is m and m.swapdims_(dim0=0, dim1=1) is m
    y = to.zeros(4).uniform_(to=2.0)
    assert 0.0 <= y.min().item() and y.max().item() < 2.0
    with pytest.raises(TypeError):
        to.exp(x, 3.0)  # (reached numpy before: torch's exp takes one tensor)
    with pytest.raises(TypeError):
        to.tensor([1.0], to.float64)  # (dtype is keyword-only in torch)
    with pytest.raises(TypeError):
        to.sort(x, 0, False, True)  # (so is stable)
