"""The public functions take torch's parameter names (issue 26 point 2, begun): the positional
parameters of each ``tinyopt.<op>`` read as one of torch's schemas for ``aten::<op>`` (its
``self`` is Python's ``input``), so a call written with keywords for torch works here."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import ops

# Functions whose positional parameters still differ from torch's (torch's own Python signatures
# differ from its schemas for some: ``split``'s ``split_size_or_sections``, ``sort``'s
# ``stable``): shrink this list, never grow it.
KNOWN = set("""
    argsort as_tensor dot inverse matmul neg norm searchsorted sort split swapdims tensor
    tensor_split
""".split())


def _differs(name: str, torch) -> bool | None:
    """Whether tinyopt's ``name`` names its positional parameters unlike every torch schema of
    ``aten::name`` (None: torch has no such operator, or the function no signature)."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
        sig = inspect.signature(getattr(ops, name))
    except (RuntimeError, TypeError, ValueError):
        return None
    if not schemas:
        return None
    ours = [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    theirs = [["input" if a.name == "self" else a.name for a in s.arguments if not a.kwarg_only]
              for s in schemas]
    return not any(t[:len(ours)] == ours for t in theirs)


def test_public_functions_name_their_parameters_as_torch_does():
    torch = pytest.importorskip("torch")
    ops.load_all()
    differ = {name for name in ops.__all__ if _differs(name, torch)}
    assert not differ - KNOWN, f"new names unlike torch's: {sorted(differ - KNOWN)}"
    assert not KNOWN - differ, f"now as torch's, remove from KNOWN: {sorted(KNOWN - differ)}"


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
