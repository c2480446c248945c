"""Write the API reference from the code's docstrings and signatures: ``docs/api.md`` (one page,
readable on GitHub) and ``docs/reference/`` (the pages of the browsable site, one per module,
which mkdocs + mkdocstrings render: ``pip install -e ".[docs]" && mkdocs serve``).

    python docs/gen_api.py            # rewrite docs/api.md and docs/reference/
    python docs/gen_api.py --check    # exit 1 if they are not what the code gives now

One section per public module; in each, every public name (``__all__`` when the module has one,
else every non-underscore name that is not a module) with its signature and docstring, and for
classes their public methods and properties.  ``tests/test_docs.py`` checks that every public
name and signature appears in ``docs/api.md``, that the reference pages are current and that
every public name has a docstring, so run this after changing an API.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import types
from pathlib import Path

OUT = Path(__file__).with_name("api.md")
REFERENCE = Path(__file__).with_name("reference")

# (module, what it is); the order of the reference
MODULES = [
    ("tinyopt", "the top-level namespace: tensors, their functions, grad mode, RNG, checkpoints"),
    ("tinyopt.nn", "modules, layers, losses, containers"),
    ("tinyopt.nn.functional", "the ops as functions"),
    ("tinyopt.nn.init", "parameter initialisation"),
    ("tinyopt.nn.utils", "gradient clipping"),
    ("tinyopt.nn.utils.rnn", "packed sequences for the recurrent layers"),
    ("tinyopt.nn.parallel", "DistributedDataParallel"),
    ("tinyopt.optim", "optimizers"),
    ("tinyopt.optim.lr_scheduler", "learning-rate schedulers"),
    ("tinyopt.optim.swa_utils", "weight averaging: AveragedModel (SWA, EMA), SWALR, update_bn"),
    ("tinyopt.optim.torch_compat", "PyTorch optimizer state-dict conversion"),
    ("tinyopt.amp", "mixed precision: GradScaler (and autocast)"),
    ("tinyopt.data", "data sets and loading"),
    ("tinyopt.distributions", "Categorical, Normal, Bernoulli and kl_divergence"),
    ("tinyopt.distributions.constraints", "the supports and parameter constraints"),
    ("tinyopt.serialization", "save(obj, f) and load(f), as torch.save and torch.load"),
    ("tinyopt.torch_format", "state dicts written in PyTorch's own file format"),
    ("tinyopt.safetensors", "state dicts as safetensors files (Hugging Face's format)"),
    ("tinyopt.train", "fit, evaluate, results, callbacks"),
    ("tinyopt.distributed", "the process group over MPI (mpi4py): ranks and collectives"),
    ("tinyopt.distributed.optim", "ZeroRedundancyOptimizer (ZeRO-1)"),
    ("tinyopt.engine", "the engine: plans, the plan cache, graph export"),
    ("tinyopt.utils", "torch.utils's paths: utils.data, collect_env"),
]


def public_names(module: types.ModuleType) -> list[str]:
    """The names a module exports: ``__all__``, else non-underscore non-module attributes
    (``from __future__ import annotations`` leaves an ``annotations`` feature object out too)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    out = []
    for name in dir(module):
        obj = getattr(module, name)
        if name.startswith("_") or isinstance(obj, types.ModuleType) or name == "annotations":
            continue
        out.append(name)
    return out


class _Text:
    """An annotation shown as written (string annotations come from ``from __future__ import
    annotations``; without this they would print quoted)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _annotation(a: object) -> object:
    if a is inspect.Parameter.empty:
        return a
    if isinstance(a, str):
        return _Text(a)
    forward = getattr(a, "__forward_arg__", None)
    return _Text(forward) if isinstance(forward, str) else a


def _no_address(text: str) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def signature(obj: object) -> str | None:
    """``(a: int, b=1) -> str``-style signature text with memory addresses removed, or None."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    sig = sig.replace(parameters=[p.replace(annotation=_annotation(p.annotation))
                                  for p in sig.parameters.values()],
                      return_annotation=_annotation(sig.return_annotation))
    return _no_address(str(sig))


def doc(obj: object) -> str:
    text = inspect.getdoc(obj) or ""
    return text.strip()


def _own_members(cls: type) -> list[tuple[str, object]]:
    """Public methods and properties that ``cls`` defines or overrides, in definition order."""
    members = []
    for name, value in cls.__dict__.items():
        if name.startswith("_") and name not in ("__call__", "__init__"):
            continue
        if name == "__init__":
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property) or inspect.isfunction(value):
            members.append((name, value))
    return members


def render_object(qualname: str, obj: object) -> list[str]:
    lines: list[str] = []
    if isinstance(obj, types.ModuleType):
        lines += [f"### `{qualname}` (module)", "", "```text", doc(obj), "```", ""]
        return lines
    if inspect.isclass(obj) or callable(obj):
        sig = signature(obj)
        kind = "class" if inspect.isclass(obj) else "function"
        lines += [f"### `{qualname}`", "", f"```python\n{kind} {qualname}{sig or '(...)'}\n```", ""]
        text = doc(obj)
        if text:
            lines += ["```text", text, "```", ""]
        if inspect.isclass(obj):
            bases = [b.__name__ for b in obj.__bases__ if b is not object]
            if bases:
                lines += [f"Bases: {', '.join(f'`{b}`' for b in bases)}", ""]
            for name, member in _own_members(obj):
                if isinstance(member, property):
                    head = f"- **`{name}`** (property)"
                    text = doc(member)
                else:
                    head = f"- **`{name}{signature(member) or '(...)'}`**"
                    text = doc(member)
                first = text.split("\n\n")[0].replace("\n", " ") if text else ""
                lines.append(f"{head}{': ' + first if first else ''}")
            if _own_members(obj):
                lines.append("")
        return lines
    lines += [f"### `{qualname}`", "", f"`{qualname} = {_no_address(repr(obj))}`", ""]
    return lines


def generate() -> str:
    out = ["# tinyopt API reference", "",
           "Generated by `python docs/gen_api.py` from the docstrings; do not edit by hand.", ""]
    toc = []
    body = []
    for modname, what in MODULES:
        module = importlib.import_module(modname)
        anchor = modname.replace(".", "")
        toc.append(f"- [`{modname}`](#{anchor}): {what}")
        body += [f"## {modname}", ""]
        text = doc(module)
        if text:
            body += ["```text", text, "```", ""]
        for name in public_names(module):
            body += render_object(f"{modname}.{name}", getattr(module, name))
    return "\n".join(out + toc + [""] + body).rstrip() + "\n"


def page_name(modname: str) -> str:
    return f"{modname}.md"


def reference_pages() -> dict[str, str]:
    """``docs/reference/``'s pages by file name: an index of the modules, and for each module
    its docstring and one mkdocstrings entry (``::: path``) per public name; a name that is a
    module links to that module's page."""
    pages = {}
    index = ["# API reference", "",
             "Generated by `python docs/gen_api.py` from the docstrings (the same text as",
             "[the one-page reference](../api.md)); do not edit by hand.", "",
             "| module | what is in it |", "|---|---|"]
    documented = {m for m, _ in MODULES}
    for modname, what in MODULES:
        index.append(f"| [`{modname}`]({page_name(modname)}) | {what} |")
        module = importlib.import_module(modname)
        lines = [f"# `{modname}`", "", f"{what[0].upper()}{what[1:]}.", "",
                 f"::: {modname}", "    options:", "      members: false",
                 "      show_root_heading: false", ""]
        for name in public_names(module):
            qualname = f"{modname}.{name}"
            if not getattr(getattr(module, name), "__module__", "tinyopt").startswith("tinyopt"):
                continue  # an import (typing.Any) of a module without __all__
            if isinstance(getattr(module, name), types.ModuleType):
                target = getattr(module, name).__name__
                if target in documented:
                    lines += [f"- `{qualname}`: see [`{target}`]({page_name(target)})", ""]
                continue
            lines += [f"::: {qualname}", ""]
        pages[page_name(modname)] = "\n".join(lines).rstrip() + "\n"
    pages["index.md"] = "\n".join(index) + "\n"
    return pages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with docs/api.md instead of writing it")
    args = parser.parse_args()
    wanted = {OUT: generate()}
    wanted.update({REFERENCE / name: text for name, text in reference_pages().items()})
    stale = [p for p in REFERENCE.glob("*.md") if p not in wanted] if REFERENCE.is_dir() else []
    if args.check:
        changed = [p for p, text in wanted.items()
                   if not p.exists() or p.read_text(encoding="utf-8") != text]
        if changed or stale:
            print(f"out of date: {', '.join(map(str, changed + stale))}: run python "
                  f"docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    REFERENCE.mkdir(exist_ok=True)
    for p in stale:
        p.unlink()
    for p, text in wanted.items():
        p.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(wanted[OUT].splitlines())} lines) and {len(wanted) - 1} pages "
          f"in {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
