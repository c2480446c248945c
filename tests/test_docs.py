"""The docs stay in step with the code: every public name and signature is in docs/api.md, and
every ```python block of the user guide runs."""

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _gen_api():
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_api"] = module
    spec.loader.exec_module(module)
    return module


gen_api = _gen_api()
API = (DOCS / "api.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("modname", [m for m, _ in gen_api.MODULES])
def test_every_public_name_and_signature_is_in_the_api_reference(modname):
    module = importlib.import_module(modname)
    missing, stale = [], []
    for name in gen_api.public_names(module):
        qualname = f"{modname}.{name}"
        if f"### `{qualname}`" not in API:
            missing.append(qualname)
            continue
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type(sys)):
            sig = gen_api.signature(obj)
            if sig is not None and f"{qualname}{sig}" not in API:
                stale.append(qualname)
    assert not missing and not stale, (
        f"docs/api.md is out of date (run python docs/gen_api.py): missing {missing}, "
        f"signature changed {stale}")


@pytest.mark.parametrize("modname", [m for m, _ in gen_api.MODULES])
def test_every_public_name_has_a_docstring(modname):
    """Each public function and class has its own docstring, and each of a class's public
    methods and properties one (its own, or that of the method it overrides)."""
    import inspect
    import types
    module = importlib.import_module(modname)
    empty = []
    for name in gen_api.public_names(module):
        obj = getattr(module, name)
        if isinstance(obj, types.ModuleType) or not (inspect.isclass(obj) or callable(obj)) or \
                not getattr(obj, "__module__", "tinyopt").startswith("tinyopt"):
            continue
        if not (obj.__doc__ or "").strip():
            empty.append(f"{modname}.{name}")
        if inspect.isclass(obj):
            empty += [f"{modname}.{name}.{m}" for m, member in gen_api._own_members(obj)
                      if not (inspect.getdoc(member) or "").strip()]
    assert not empty, f"public names without a docstring: {empty}"


def test_the_site_reference_pages_are_current():
    """docs/reference/ (the mkdocs site's API pages) is what docs/gen_api.py writes now."""
    pages = gen_api.reference_pages()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md")}
    assert on_disk == pages, "docs/reference/ is out of date: run python docs/gen_api.py"


def test_main_packages_are_covered():
    covered = {m for m, _ in gen_api.MODULES}
    assert {"tinyopt", "tinyopt.nn", "tinyopt.optim", "tinyopt.data", "tinyopt.train"} <= covered


GUIDES = sorted(p.name for p in DOCS.glob("*.md") if p.name != "api.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", GUIDES)
def test_guide_examples_run(page, tmp_path, monkeypatch):
    text = (DOCS / page).read_text(encoding="utf-8")
    for link in re.findall(r"\]\(([^)#]+\.md)", text):
        assert (DOCS / link).exists(), f"{page} links to a missing page {link}"
    blocks = _BLOCK.findall(text)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"docs_{page[:-3]}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"docs/{page} block {i + 1}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message is the point
            raise AssertionError(f"docs/{page}, python block {i + 1} failed: {e!r}") from e
