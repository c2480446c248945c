"""The API table (``engine/ops/api_table.py``) is each op's one declaration: the files
``tools/gen_ops.py`` writes from it are current, every name it declares resolves, and the
methods it declares are the functions (issue 26 point 2)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

import tinyopt as to
from tinyopt.engine import op_methods, ops
from tinyopt.engine.ops import api_table

TOOLS = Path(__file__).resolve().parents[1] / "tools"


_spec = importlib.util.spec_from_file_location("gen_ops", TOOLS / "gen_ops.py")
gen_ops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_ops)


def test_the_generated_files_are_current():
    stale = [path.name for path, make in gen_ops.outputs().items() if path.read_text() != make()]
    assert not stale, f"{stale} out of date: run python tools/gen_ops.py"


def test_every_declared_name_resolves_with_its_faces():
    for module, name, attr, faces in api_table.entries():
        fn = getattr(ops, name)
        assert fn is getattr(importlib.import_module(module), attr), name
        assert ("function" in faces) == (name in ops.__all__) == (name in to.__all__), name
        if "function" in faces:
            assert getattr(to, name) is fn
        if "method" in faces:
            assert name in op_methods.OpMethods.__dict__, name
        if "method_" in faces:
            assert f"{name}_" in op_methods.OpMethods.__dict__, name


def test_a_method_has_its_functions_signature_and_result():
    for name in ("sum", "clamp", "scatter", "topk", "histogram"):
        fn, method = inspect.signature(getattr(ops, name)), inspect.signature(getattr(to.Tensor,
                                                                                     name))
        assert list(fn.parameters)[1:] == list(method.parameters)[1:], name
        assert [p.default for p in fn.parameters.values()][1:] == \
            [p.default for p in method.parameters.values()][1:], name
    x = to.tensor(np.array([[1.0, -2.0], [3.0, 0.5]], np.float32))
    np.testing.assert_array_equal(x.sum(1, keepdim=True).numpy(), to.sum(x, 1, True).numpy())
    y = x.clone()
    assert y.clamp_(min=-1.0, max=2.0) is y
    np.testing.assert_array_equal(y.numpy(), np.clip(x.numpy(), -1.0, 2.0))


def test_every_in_place_method_of_one_tensor_writes_its_function_in_place():
    """``x.f_()`` is ``x`` holding ``f(x)`` for every declared ``method_`` whose function takes
    only the tensor (``exp_``, ``asin_``, ``absolute_``...)."""
    x = to.tensor(np.array([0.25, 0.5, -0.75], np.float64))
    checked = 0
    for module, name, attr, faces in api_table.entries():
        fn = getattr(ops, name)
        if "method_" not in faces or len(inspect.signature(fn).parameters) != 1:
            continue
        y = x.clone()
        assert getattr(y, f"{name}_")() is y, name
        np.testing.assert_allclose(y.numpy(), fn(x).numpy().astype(np.float64), err_msg=name)
        checked += 1
    assert checked > 30


def test_the_generator_writes_a_method_from_a_signature():
    from tinyopt.engine.tensor import Tensor

    def pick(input, index: int, count=2, *, largest: bool = True, label: str = "a") -> Tensor:
        """(an example function)"""
        raise AssertionError

    names = gen_ops._Names()
    assert gen_ops._method("pick", pick, names, False, "tinyopt") == [
        '    def pick(self, index: int, count: Any = 2, *, largest: bool = True,',
        '             label: str = "a") -> Tensor:',
        '        """See ``tinyopt.pick``."""',
        '        return ops.pick(self, index, count, largest=largest, label=label)', '']
    assert gen_ops._method("pick", pick, names, True, "tinyopt")[-2] == \
        '        return self._unary_inplace(ops.pick, index, count, largest=largest, label=label)'

    def bad(input, dims=object()) -> Tensor:
        raise AssertionError

    with pytest.raises(ValueError, match="not a literal"):
        gen_ops._method("bad", bad, names, False, "tinyopt")

    def only(input, n, /, k=1) -> Tensor:
        raise AssertionError

    assert gen_ops._method("only", only, names, False, "tinyopt")[0] == \
        "    def only(self, n: Any, /, k: Any = 1) -> Tensor:"


def test_a_method_written_by_hand_is_not_also_declared():
    generated = {n for n in op_methods.OpMethods.__dict__ if not n.startswith("_")}
    assert generated and not gen_ops.hand_written() & generated
    lines = [("tinyopt.engine.ops.elementwise", "where", "where", frozenset({"method"}))]
    with pytest.raises(ValueError, match="written by hand"):
        gen_ops.methods_text(lines)
