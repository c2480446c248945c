"""The house's coupling, counted: a static scan (``ast``) of a tinyopt source tree.

    python tests/house_metrics.py                    # this checkout's src/, with import time
    python tests/house_metrics.py /tmp/old/src       # another tree (e.g. an older commit's)
    python tests/house_metrics.py --no-time --json   # the numbers as JSON, no processes started

``tests/test_house_metrics.py`` keeps the counts from growing past recorded ceilings.  What is
counted, exactly (so that another session gets the same numbers from the same tree):

Modules are the ``.py`` files under ``<src>/tinyopt`` (``a/b/__init__.py`` is ``tinyopt.a.b``).
Each has a **layer**: ``tinyopt.kernels.*`` 0, ``tinyopt.engine.*`` 1, the driver 3
(``tinyopt`` itself, ``__main__``, ``train``, ``checkpoint``, ``distributed``, ``serialization``,
``safetensors``, ``torch_format``, ``diagnostics``), everything else 2 (``nn``, ``optim``,
``data``, ``amp``, ``autograd``, ``distributions``, ``utils``, ...).

An import names its target module: ``import a.b`` names ``a.b``; ``from a import b`` names
``a.b`` when that is a module of the tree, else ``a``; relative imports are resolved first.

- **private imports**: each name ``_x`` (one leading underscore, not a dunder) imported with
  ``from tinyopt... import _x`` anywhere in a file (module level or inside a function); one per
  name.  *Across layers* when the importing and the imported module have different layers.
- **private attribute uses**: each ``obj._x`` (load, store or delete; and ``getattr``/``hasattr``/
  ``setattr``/``delattr`` with the constant ``"_x"``) in a file that does not define ``_x`` while
  another file does.  A file *defines* ``_x`` by: ``def``/``class _x`` (any depth); ``_x = ...``
  at module or class level; ``self._x = ...`` or ``cls._x = ...`` (also augmented and annotated
  assignments, ``setattr(self, "_x", v)``, ``object.__setattr__(self, "_x", v)`` and
  ``self.__dict__["_x"] = v``); ``"_x"`` in a ``__slots__``.  *Across layers* when no file that
  defines ``_x`` has the using file's layer.
- **import circles**: the strongly connected components (Tarjan) with two or more modules of
  the graph whose edges are the module-level imports between modules of the tree (imports that
  run at import time: not those inside a function, nor under ``if TYPE_CHECKING:``).  An import
  is an edge to the module it names only (not to the packages above it).  The same again with
  the function-local imports as edges too: the circles those imports dodge.
- **function-local imports**: each ``import``/``from ... import`` statement inside a function
  (any depth), of any module.  *Needed at import time* when a module it names is not loaded by
  importing the module it stands in (a fresh ``import <that module>``): moved to the top, it
  would load more (mpi4py, torch, matplotlib, a driver module, a lazily loaded op family).  *In a
  circle* when it names a module of the same circle (counting function-local imports) as the
  module it stands in: moved to the top, it would close that circle.  Without processes
  (``--no-time``) the first split is not made.
- **largest functions**: lines from ``def`` to the function's last line (decorators not
  counted), and the same without the docstring's lines; the ten largest.
- **import time**: ``import tinyopt`` (numpy included) in fresh processes, wall and CPU time,
  the median of 7; the numba cache is not involved (import compiles nothing).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DRIVER = {"__main__", "train", "checkpoint", "distributed", "serialization", "safetensors",
          "torch_format", "diagnostics"}
ACCESSORS = {"getattr", "hasattr", "setattr", "delattr"}


def layer(module: str) -> int:
    """0 kernels, 1 engine, 2 front end (nn, optim, data, ...), 3 driver (see the docstring)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    if top == "kernels":
        return 0
    if top == "engine":
        return 1
    return 3 if top in DRIVER or len(parts) == 1 else 2


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    defines: set[str] = field(default_factory=set)


def load_tree(src: Path) -> dict[str, Module]:
    root = src / "tinyopt"
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)), package)
    return modules


def resolve(mod: Module, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from`` import."""
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if not mod.is_package:
        base.pop()
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def targets(mod: Module, node: ast.Import | ast.ImportFrom, modules: dict) -> list[str]:
    """The modules an import statement names (see the docstring)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = resolve(mod, node)
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if sub in modules else base)
    return list(dict.fromkeys(out))


def walk_scoped(tree: ast.AST):
    """Yield ``(node, scopes)``: ``scopes`` are the enclosing def/class nodes, innermost last."""
    stack: list[tuple[ast.AST, tuple]] = [(tree, ())]
    while stack:
        node, scopes = stack.pop()
        yield node, scopes
        inner = scopes + (node,) if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) else scopes
        for child in reversed(list(ast.iter_child_nodes(node))):
            stack.append((child, inner))


def in_function(scopes: tuple) -> bool:
    return any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
               for s in scopes)


def type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the statements under ``if TYPE_CHECKING:`` (never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else \
                test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    out.update(id(n) for n in ast.walk(stmt))
    return out


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def find_definitions(mod: Module) -> None:
    d = mod.defines
    for node, scopes in walk_scoped(mod.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if private(node.name):
                d.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if private(node.id) and not in_function(scopes):
                d.add(node.id)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            if private(node.attr) and _is_self(node.value):
                d.add(node.attr)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            # self.__dict__["_x"] = v
            v, key = node.value, node.slice
            if (isinstance(v, ast.Attribute) and v.attr == "__dict__" and _is_self(v.value)
                    and isinstance(key, ast.Constant) and isinstance(key.value, str)
                    and private(key.value)):
                d.add(key.value)
        elif isinstance(node, ast.Call):
            f, args = node.func, node.args
            setter = (isinstance(f, ast.Name) and f.id == "setattr") or \
                (isinstance(f, ast.Attribute) and f.attr == "__setattr__")
            if setter and len(args) >= 2 and _is_self(args[0]) and \
                    isinstance(args[1], ast.Constant) and isinstance(args[1].value, str) and \
                    private(args[1].value):
                d.add(args[1].value)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            for c in ast.walk(node.value):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and private(c.value):
                    d.add(c.value)


def attribute_uses(mod: Module):
    """Yield ``(name, is_definition)`` for each ``obj._x`` and accessor call with ``"_x"``."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            yield node.attr, not isinstance(node.ctx, ast.Load) and _is_self(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ACCESSORS and len(node.args) >= 2:
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and \
                    private(key.value):
                yield key.value, node.func.id == "setattr" and _is_self(node.args[0])


def scc(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


LOADED = r"""
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by_import(src: Path, module: str) -> set[str] | None:
    """The modules a fresh ``import <module>`` loads (from ``src``); None if it fails."""
    env = dict(os.environ, PYTHONPATH=str(src))
    r = subprocess.run([sys.executable, "-c", LOADED, module], capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode:
        return None
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def import_time(src: Path, runs: int = 7) -> dict[str, float]:
    code = ("import time; t = time.perf_counter(); c = time.process_time(); import tinyopt; "
            "print(time.perf_counter() - t, time.process_time() - c)")
    env = dict(os.environ, PYTHONPATH=str(src))
    wall, cpu = [], []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=300, check=True)
        w, c = map(float, r.stdout.split())
        wall.append(w)
        cpu.append(c)
    return {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}


def measure(src: Path, processes: bool = True) -> dict:
    """Every count of the docstring for the tree at ``src`` (the folder holding ``tinyopt``)."""
    modules = load_tree(src)
    for m in modules.values():
        find_definitions(m)
    definers: dict[str, set[str]] = {}
    for m in modules.values():
        for name in m.defines:
            definers.setdefault(name, set()).add(m.name)

    private_imports, attr_uses, local_imports, functions = [], [], [], []
    graph: dict[str, set[str]] = {name: set() for name in modules}
    every: dict[str, set[str]] = {name: set() for name in modules}  # function-local ones too
    for m in modules.values():
        skip = type_checking_nodes(m.tree)
        for node, scopes in walk_scoped(m.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = targets(m, node, modules)
                if isinstance(node, ast.ImportFrom):
                    base = resolve(m, node)
                    if base.split(".")[0] == "tinyopt":
                        for a in node.names:
                            if private(a.name):
                                private_imports.append({
                                    "module": m.name, "from": base, "name": a.name,
                                    "across_layers": layer(m.name) != layer(base)})
                every[m.name].update(t for t in names if t in modules and t != m.name)
                if in_function(scopes):
                    local_imports.append({"module": m.name, "line": node.lineno,
                                          "imports": names})
                elif id(node) not in skip:
                    graph[m.name].update(t for t in names if t in modules and t != m.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                body = node.body
                doc = (body[0].end_lineno - body[0].lineno + 1
                       if body and isinstance(body[0], ast.Expr)
                       and isinstance(body[0].value, ast.Constant)
                       and isinstance(body[0].value.value, str) else 0)
                qual = ".".join([s.name for s in scopes if hasattr(s, "name")] + [node.name])
                functions.append({"function": f"{m.name}:{qual}", "lines": lines,
                                  "without_docstring": lines - doc})
        for name, is_def in attribute_uses(m):
            if is_def or name in m.defines or not definers.get(name):
                continue
            across = all(layer(o) != layer(m.name) for o in definers[name])
            attr_uses.append({"module": m.name, "name": name, "across_layers": across})

    circles = [c for c in scc(graph) if len(c) > 1]
    circles.sort(key=len, reverse=True)
    dodged = sorted((c for c in scc(every) if len(c) > 1), key=len, reverse=True)
    circle_of = {name: i for i, c in enumerate(dodged) for name in c}
    for i in local_imports:
        home = circle_of.get(i["module"])
        i["in_a_circle"] = home is not None and any(circle_of.get(t) == home
                                                    for t in i["imports"])
    functions.sort(key=lambda f: (-f["lines"], f["function"]))
    out = {
        "modules": len(modules),
        "private_imports": len(private_imports),
        "private_imports_across_layers": sum(p["across_layers"] for p in private_imports),
        "private_attribute_uses": len(attr_uses),
        "private_attribute_uses_across_layers": sum(u["across_layers"] for u in attr_uses),
        "import_circles": len(circles),
        "modules_in_circles": sum(map(len, circles)),
        "largest_circle": len(circles[0]) if circles else 0,
        "import_circles_with_local_imports": len(dodged),
        "largest_circle_with_local_imports": len(dodged[0]) if dodged else 0,
        "function_local_imports": len(local_imports),
        "function_local_imports_in_circles": sum(i["in_a_circle"] for i in local_imports),
        "largest_functions": functions[:10],
        "circles": circles,
        "circles_with_local_imports": dodged,
        "details": {"private_imports": private_imports, "private_attribute_uses": attr_uses,
                    "function_local_imports": local_imports},
    }
    if processes:
        needed = 0
        for name in sorted({i["module"] for i in local_imports}):
            loaded = loaded_by_import(src, name)
            for i in local_imports:
                if i["module"] == name:
                    i["defers_loading"] = loaded is None or any(t not in loaded
                                                                for t in i["imports"])
                    needed += i["defers_loading"]
        out["function_local_imports_needed_at_import_time"] = needed
        out["import_tinyopt"] = import_time(src)
    return out


def report(m: dict) -> str:
    rows = [
        ("modules", m["modules"]),
        ("private imports (across layers)",
         f"{m['private_imports']} ({m['private_imports_across_layers']})"),
        ("private attribute uses (across layers)",
         f"{m['private_attribute_uses']} ({m['private_attribute_uses_across_layers']})"),
        ("import circles (modules in them; largest)",
         f"{m['import_circles']} ({m['modules_in_circles']}; {m['largest_circle']})"),
        ("circles counting function-local imports (largest)",
         f"{m['import_circles_with_local_imports']} "
         f"({m['largest_circle_with_local_imports']})"),
        ("function-local imports (needed at import time; in a circle)",
         f"{m['function_local_imports']} "
         f"({m.get('function_local_imports_needed_at_import_time', '?')}; "
         f"{m['function_local_imports_in_circles']})"),
    ]
    if "import_tinyopt" in m:
        t = m["import_tinyopt"]
        rows.append(("import tinyopt, median of 7 (wall / CPU)",
                     f"{t['wall_s'] * 1e3:.0f} ms / {t['cpu_s'] * 1e3:.0f} ms"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("largest functions (lines; without docstring):")
    lines += [f"  {f['lines']:4d} {f['without_docstring']:4d}  {f['function']}"
              for f in m["largest_functions"]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src", nargs="?", default=str(Path(__file__).parents[1] / "src"))
    p.add_argument("--no-time", action="store_true", help="start no process")
    p.add_argument("--json", action="store_true", help="print every count and detail as JSON")
    a = p.parse_args()
    m = measure(Path(a.src), processes=not a.no_time)
    print(json.dumps(m, indent=1) if a.json else report(m))


if __name__ == "__main__":
    main()
