"""How many of the torch names public training code uses most exist in tinyopt, and accept
PyTorch's arguments.

    python benchmarks/torch_names.py REPO_DIR... [--top 1297] [--list names.txt] [--missing]

Each REPO_DIR is a checkout (or a git directory, read with ``git show``) of public PyTorch code;
its ``.py`` files and the code cells of its notebooks are parsed (``ast``).  A *use* is:

- a dotted name rooted at an import of torch: ``torch.cat``, ``nn.Linear`` after ``import
  torch.nn as nn``, ``F.relu`` after ``import torch.nn.functional as F``, ``DataLoader`` after
  ``from torch.utils.data import DataLoader`` (counted as ``torch.utils.data.DataLoader``);
- a method call ``x.name(...)`` on any other object when ``torch.Tensor`` has that method
  (counted as ``Tensor.name``; the noise of same-named methods of lists and strings is small).

The names are ranked by how many files use them (ties by total uses), and the top ``--top`` are
checked against tinyopt (``torch`` replaced by ``tinyopt``; ``Tensor.x`` against
``tinyopt.Tensor``):

- *exists*: the name resolves;
- *accepts torch's arguments*: it exists, and when both are Python callables with signatures,
  every parameter PyTorch's has is a parameter of tinyopt's (or tinyopt's takes ``*args``/
  ``**kwargs``); modules, classes without a readable signature and constants count when they
  exist.  This is the measure reported as "exist and behave like torch": behaviour proper is
  what the idiom and parity tests check, name by name.
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib
import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any


def _sources(root: str) -> list[tuple[str, str]]:
    """(path, Python source) of the .py files and notebooks of a checkout or git directory."""
    out: list[tuple[str, str]] = []
    if os.path.isdir(os.path.join(root, "objects")) and not os.path.isdir(
            os.path.join(root, ".git")):  # a bare git directory
        # one ``git cat-file --batch`` for every blob (a process per file took minutes)
        listing = subprocess.run(["git", "-C", root, "ls-tree", "-r", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout
        wanted = [(ln.split()[2], ln.split("\t", 1)[1]) for ln in listing.splitlines()
                  if ln.split("\t", 1)[-1].endswith((".py", ".ipynb"))]
        batch = subprocess.run(["git", "-C", root, "cat-file", "--batch"], capture_output=True,
                               input="".join(f"{sha}\n" for sha, _ in wanted).encode()).stdout
        pos = 0
        for _, n in wanted:
            end = batch.index(b"\n", pos)
            head = batch[pos:end].split()
            pos = end + 1
            if len(head) < 3 or head[1] != b"blob":  # "<sha> missing": a blob the mirror left out
                continue
            size = int(head[2])
            out.append((f"{root}:{n}", batch[pos:pos + size].decode("utf-8", "replace")))
            pos += size + 1
    else:
        for p in Path(root).rglob("*"):
            if p.suffix in (".py", ".ipynb") and p.is_file():
                out.append((str(p), p.read_text("utf-8", "replace")))
    return [(p, _notebook_code(t) if p.endswith(".ipynb") else t) for p, t in out]


def _notebook_code(text: str) -> str:
    try:
        cells = json.loads(text).get("cells", [])
    except ValueError:
        return ""
    lines = []
    for c in cells:
        if c.get("cell_type") == "code":
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            lines += [ln for ln in src.split("\n") if not ln.lstrip().startswith(("!", "%"))]
    return "\n".join(lines)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def uses(source: str, tensor_methods: set[str]) -> collections.Counter:
    """The torch names one file uses (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return collections.Counter()
    alias: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
    found: collections.Counter = collections.Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None),
                                                              ast.Attribute):
            name = _dotted(node)
            head = name.split(".")[0] if name else None
            if name and head in alias:
                found[alias[head] + name[len(head):]] += 1
            elif node.attr in tensor_methods and not (name and head in alias):
                found[f"Tensor.{node.attr}"] += 1
        elif isinstance(node, ast.Name) and node.id in alias and not isinstance(
                getattr(node, "_parent", None), ast.Attribute):
            found[alias[node.id]] += 1  # (``DataLoader`` after ``from torch.utils.data import``)
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]
    return found


def _resolve(root: Any, dotted: str) -> Any:
    obj = root
    path = root.__name__
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(f"{path}.{part}")
            except ImportError:
                raise AttributeError(dotted) from None
        except Exception as e:  # noqa: BLE001 - a refusal (NotImplementedError...) is a miss
            raise AttributeError(f"{dotted}: {e}") from None
        path = f"{path}.{part}"
    return obj


def _accepts(ours: Any, theirs: Any) -> bool:
    try:
        a, b = inspect.signature(ours), inspect.signature(theirs)
    except (TypeError, ValueError):
        return True
    mine = a.parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in mine):
        return True
    names = {p.name for p in mine}
    return all(p.name in names for p in b.parameters.values()
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self")


def check(names: list[str]) -> list[tuple[str, bool, bool]]:
    """(name, exists in tinyopt, accepts torch's arguments) for each torch name."""
    import torch

    import tinyopt
    out = []
    for name in names:
        if name.startswith("Tensor."):
            ours_root, theirs_root, rest = tinyopt.Tensor, torch.Tensor, name[len("Tensor."):]
            try:
                ours, theirs = getattr(ours_root, rest), getattr(theirs_root, rest)
                out.append((name, True, _accepts(ours, theirs)))
            except Exception:  # noqa: BLE001
                out.append((name, False, False))
            continue
        rest = name[len("torch."):] if name.startswith("torch.") else name
        try:
            theirs = _resolve(torch, rest) if rest != "torch" else torch
        except AttributeError:
            continue  # not a torch name (a local attribute on an alias)
        try:
            ours = _resolve(tinyopt, rest) if rest != "torch" else tinyopt
        except AttributeError:
            out.append((name, False, False))
            continue
        out.append((name, True, _accepts(ours, theirs)))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repos", nargs="+")
    ap.add_argument("--top", type=int, default=1297)
    ap.add_argument("--list", help="write the ranked names here")
    ap.add_argument("--missing", action="store_true", help="print the names that fail")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch
    methods = {n for n in dir(torch.Tensor) if not n.startswith("_")}
    files: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    n_files = 0
    for repo in args.repos:
        for _, src in _sources(repo):
            found = uses(src, methods)
            n_files += bool(found)
            files.update(found.keys())
            total.update(found)
    ranked = sorted(files, key=lambda k: (-files[k], -total[k], k))
    results = check(ranked)[:args.top]
    if args.list:
        Path(args.list).write_text("\n".join(f"{n}\t{files[n]}\t{total[n]}" for n, _, _ in
                                             results) + "\n")
    exists = sum(e for _, e, _ in results)
    accepts = sum(a for _, _, a in results)
    report = {"files": n_files, "names": len(results), "exist": exists, "accept_args": accepts}
    print(json.dumps(report))
    if args.missing:
        for n, e, a in results:
            if not (e and a):
                print(("missing  " if not e else "args     ") + n, files[n])
    return report


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()
