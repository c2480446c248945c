"""Write what the API table (``src/tinyopt/engine/ops/api_table.py``) declares: each op is declared
once, and the lists and methods that name it are written from that declaration.

    python tools/gen_ops.py            # rewrite the files below
    python tools/gen_ops.py --check    # exit 1 if they are not what the table gives now

- ``engine/ops/__init__.py``, between the two marker lines: the ``TYPE_CHECKING`` imports
  (what type checkers read), the lazy loader's table and ``__all__``;
- ``engine/op_methods.py``: the ``Tensor`` methods of the ``method``/``method_`` names, each
  with its function's signature (``self`` for the first parameter; an annotation the function
  lacks is ``Any``) calling the function, the in-place ones through ``Tensor._unary_inplace``.

The signatures are read from the functions themselves (imported from their families), so a
change of a listed function's parameters is a change of its method: rerun this, and
``tests/test_ops_api_table.py`` checks that the files are current.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ENGINE = SRC / "tinyopt" / "engine"
INIT = ENGINE / "ops" / "__init__.py"
METHODS = ENGINE / "op_methods.py"
HAND_WRITTEN = (ENGINE / "tensor_api.py", ENGINE / "tensor.py")  # their classes' own methods
BEGIN = "# ---- written by tools/gen_ops.py from ops/api_table.py (edit the table, not this) ----"
END = "# ---- end of what tools/gen_ops.py writes ----"
WIDTH = 99

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


def _table() -> types.ModuleType:
    """``engine/ops/api_table.py``, read as a file (data: the package need not import)."""
    spec = importlib.util.spec_from_file_location("api_table", ENGINE / "ops" / "api_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wrap(head: str, items: list[str], tail: str, indent: int) -> list[str]:
    """``head + ", ".join(items) + tail`` in lines of at most WIDTH characters, continued lines
    indented by ``indent`` spaces."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(line + piece.rstrip()) > WIDTH and line.strip():
            lines.append(line.rstrip())
            line = " " * indent
        line += piece
    lines.append(line.rstrip())
    return lines


def _strings(words: list[str], indent: int) -> list[str]:
    """``words`` as adjacent string literals (one space-separated string), one per line."""
    lines, line = [], ""
    for word in words:
        if line and indent + len(line) + len(word) + 4 > WIDTH:
            lines.append(line + " ")
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return [" " * indent + f'"{text}"' for text in lines]


# ---- engine/ops/__init__.py ---------------------------------------------------------------------
def exports_text(entries: list[tuple[str, str, str, frozenset[str]]]) -> str:
    """The marked region of ``engine/ops/__init__.py``."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for module, name, attr, _ in entries:
        groups.setdefault(module, []).append((name, attr))
    out = ["if _typing.TYPE_CHECKING:"]
    for module, names in groups.items():
        same = sorted(n for n, a in names if n == a)
        one_line = f"    from {module} import {', '.join(same)}"
        if same and len(one_line) <= WIDTH:
            out.append(one_line)
        elif same:
            head = f"    from {module} import ("
            out += _wrap(head, same, ")", len(head))
        out += [f"    from {module} import {a} as {n}" for n, a in sorted(names) if n != a]
    out.append("")
    out.append("_WHERE = _table({")
    for module, names in groups.items():
        by_attr: dict[str, list[str]] = {}
        for n, a in names:
            by_attr.setdefault("" if n == a else a, []).append(n)
        for attr, ns in by_attr.items():
            key = f'"{module}{":" + attr if attr else ""}": '
            text = " ".join(sorted(ns))
            if len(f'    {key}"{text}",') <= WIDTH:
                out.append(f'    {key}"{text}",')
            else:  # (adjacent string literals: one string of names)
                out.append(f"    {key}(")
                out += _strings(sorted(ns), 8)
                out[-1] += "),"
    out.append("})")
    out.append("")
    public = sorted(n for _, n, _, faces in entries if "function" in faces)
    out.append("__all__ = [  # the functions of the tensor API, re-exported as tinyopt.<name>")
    out += _wrap("    ", [f'"{n}"' for n in public], ",", 4)
    out.append("]")
    return "\n".join(out) + "\n"


def write_exports(text: str, current: str) -> str:
    """``current`` (the file) with its marked region replaced by ``text``."""
    start, end = current.index(BEGIN), current.index(END)
    return current[:start] + BEGIN + "\n" + text + current[end:]


# ---- engine/op_methods.py -----------------------------------------------------------------------
_HEADER = '''"""The ``Tensor`` methods that are op functions: ``x.exp()`` is ``ops.exp(x)`` and
``x.exp_()`` writes it into ``x`` (PyTorch's in-place rules, ``engine/inplace.py``).

Written by ``tools/gen_ops.py`` from ``engine/ops/api_table.py``, with each function's own
signature (``self`` for its first parameter): edit the table or the function, then run
``python tools/gen_ops.py`` (``tests/test_ops_api_table.py`` checks that this file is current).
Methods that are not just their function are written by hand in ``engine/tensor_api.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinyopt.engine import ops

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import Self

{imports}

class OpMethods:
    """The op methods of ``Tensor`` (a base class of ``tensor_api.TensorMethods``)."""

    __slots__ = ()

    if TYPE_CHECKING:
        def _unary_inplace(self, fn: Callable[..., Tensor], *args: Any,
                           **kwargs: Any) -> Self: ...
'''


def _literal(value: object) -> str:
    """Source text of a default value (a literal; anything else is refused)."""
    text = repr(value)
    if isinstance(value, str) and '"' not in value and "\\" not in value:
        text = f'"{value}"'
    try:
        if ast.literal_eval(text) != value:
            raise ValueError
    except (ValueError, SyntaxError):
        raise ValueError(f"default {text} is not a literal: write the method by hand") from None
    return text


class _Names:
    """The annotation names the methods use and where they are imported from."""

    def __init__(self) -> None:
        self.imports: dict[str, str] = {"Tensor": "from tinyopt.engine.tensor import Tensor"}
        self.used: set[str] = set()

    def annotation(self, text: object, fn: Callable) -> str:
        if text is inspect.Parameter.empty:
            return "Any"
        if not isinstance(text, str):
            raise ValueError(f"{fn.__module__}.{fn.__name__}: annotations must be strings "
                             f"(from __future__ import annotations)")
        for node in ast.walk(ast.parse(text, mode="eval")):
            if isinstance(node, ast.Name):
                self.used.add(node.id)
                self._resolve(node.id, fn)
        return text

    def _resolve(self, name: str, fn: Callable) -> None:
        if name in self.imports or name in ("Any", "None") or hasattr(builtins, name):
            return
        value = getattr(fn, "__globals__", {}).get(name)
        if isinstance(value, types.ModuleType):
            self.imports[name] = (f"import {value.__name__}" if value.__name__ == name else
                                  f"import {value.__name__} as {name}")
        elif value is not None and not name.startswith("_"):
            home = getattr(value, "__module__", fn.__module__)  # (where a class is defined)
            if getattr(sys.modules.get(home), name, None) is not value:
                home = fn.__module__
            self.imports[name] = f"from {home} import {name}"
        else:
            raise ValueError(f"{fn.__module__}.{fn.__name__}: annotation name {name!r} is not a "
                             f"public name of its module")

    def text(self) -> str:
        lines = sorted(self.imports.values(), key=lambda s: (s.startswith("from"), s))
        return "\n".join("    " + line for line in lines) + "\n"


def _method(name: str, fn: Callable, names: _Names, inplace: bool, where: str) -> list[str]:
    """The source lines of one method (``where``: the function's public module)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):
        raise ValueError(f"{name}: the function's first parameter is not the tensor")
    decl, args, star = ["self"], [], False
    for before, p in zip(params, params[1:]):
        if before.kind is p.POSITIONAL_ONLY and p.kind is not p.POSITIONAL_ONLY:
            decl.append("/")
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star = "*" + p.name, True
            args.append(text)
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
            args.append(text)
        elif p.kind is p.KEYWORD_ONLY:
            if not star:
                decl.append("*")
                star = True
            args.append(f"{p.name}={p.name}")
        else:
            args.append(p.name)
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            text += f": {names.annotation(p.annotation, fn)}"
            if p.default is not p.empty:
                text += f" = {_literal(p.default)}"
        decl.append(text)
    if params[-1].kind is params[-1].POSITIONAL_ONLY:
        decl.append("/")
    returns = "Self" if inplace else names.annotation(sig.return_annotation, fn)
    head = f"    def {name}{'_' if inplace else ''}("
    lines = _wrap(head, decl, f") -> {returns}:", len(head))
    func = f"ops.{name}"
    if inplace:
        call = f"self._unary_inplace({', '.join([func] + args)})"
    else:
        call = f"{func}({', '.join(['self'] + args)})"
    doc = f"        \"\"\"``{name}``, in place.\"\"\"" if inplace else \
        f"        \"\"\"See ``{where}.{name}``.\"\"\""
    body = _wrap(f"        return {call[:call.index('(') + 1]}",
                 call[call.index("(") + 1:-1].split(", "), ")",
                 len(f"        return {call[:call.index('(') + 1]}"))
    return lines + [doc] + body + [""]


def hand_written() -> set[str]:
    """The method names the hand-written classes define (``tensor_api``, ``Tensor``)."""
    out = set()
    for path in HAND_WRITTEN:
        for cls in ast.parse(path.read_text()).body:
            if not isinstance(cls, ast.ClassDef) or cls.name not in (
                    "TensorCasts", "TensorMethods", "Tensor"):
                continue
            for node in cls.body:
                if isinstance(node, ast.FunctionDef):
                    out.add(node.name)
                elif isinstance(node, ast.Assign):
                    out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def methods_text(entries: list[tuple[str, str, str, frozenset[str]]]) -> str:
    """``engine/op_methods.py``."""
    names, body, taken = _Names(), [], hand_written()
    family = ""
    for module, name, attr, faces in entries:
        wanted = [(name, False)] * ("method" in faces) + [(name, True)] * ("method_" in faces)
        if not wanted:
            continue
        fn = getattr(importlib.import_module(module), attr)
        if module != family:
            family = module
            title = f"    # ---- {module.removeprefix('tinyopt.engine.')} "
            body.append(title + "-" * (WIDTH - len(title)))
        for method, inplace in wanted:
            full = method + "_" * inplace
            if full in taken:
                raise ValueError(f"Tensor.{full} is written by hand (engine/tensor_api.py or "
                                 f"tensor.py) and declared in the API table: keep one")
            where = "tinyopt" if "function" in faces else "tinyopt.engine.ops"
            body += _method(method, fn, names, inplace, where)
    clash = names.used & {n for _, n, _, f in entries if "method" in f}
    if clash:  # (a method named like a type would hide the type in later annotations)
        raise ValueError(f"methods named like annotation types: {sorted(clash)}")
    return _HEADER.format(imports=names.text()) + "\n" + "\n".join(body).rstrip() + "\n"


def outputs() -> dict[Path, Callable[[], str]]:
    """What each generated file should hold now, in the order to write them (the methods are
    read from the package, which imports the first)."""
    entries = _table().entries()
    return {INIT: lambda: write_exports(exports_text(entries), INIT.read_text()),
            METHODS: lambda: methods_text(entries)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the files are not what the table gives")
    args = parser.parse_args()
    stale = []
    for path, make in outputs().items():
        text = make()
        current = path.read_text() if path.exists() else ""
        if current != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(f"out of date (run python tools/gen_ops.py): {', '.join(map(str, stale))}")
        return 1
    if not args.check:
        print(f"wrote {', '.join(map(str, stale))}" if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
