"""``torch.compile`` (``tinyopt.compiler``): the module or function itself, with torch's checks."""

from __future__ import annotations

import inspect

import pytest

import tinyopt as to
from tinyopt import nn


def test_compile_returns_the_model_or_function_itself():
    m = nn.Linear(2, 2)
    assert to.compile(m) is m
    assert to.compile(m, mode="reduce-overhead", fullgraph=True, dynamic=False) is m

    def f(x):
        return x * 2

    assert to.compile(f) is f
    assert to.compile(mode="max-autotune")(f) is f
    assert to.compiler.disable(f) is f and not to.compiler.is_compiling()


def test_compile_checks_its_arguments_as_torch_does():
    with pytest.raises(RuntimeError, match="Unrecognized mode=fast, should be one of: default"):
        to.compile(lambda x: x, mode="fast")
    with pytest.raises(RuntimeError, match="Either mode or options"):
        to.compile(lambda x: x, mode="default", options={})
    with pytest.raises(RuntimeError, match="Invalid backend: 'nope'"):
        to.compile(lambda x: x, backend="nope")
    with pytest.raises(AssertionError, match="A callable function is expected"):
        to.compile(3)


def test_signature_matches_torch():
    torch = pytest.importorskip("torch")
    ours = inspect.signature(to.compile).parameters
    theirs = inspect.signature(torch.compile).parameters
    assert list(ours) == list(theirs)
    assert [p.kind for p in ours.values()] == [p.kind for p in theirs.values()]
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]
    assert to.compiler.list_backends() == torch._dynamo.list_backends()
