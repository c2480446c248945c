"""The browsable documentation builds: ``mkdocs build --strict`` (the ``docs`` extra: mkdocs and
mkdocstrings) renders the guide and the API reference with no warning, and the reference pages
show every public name of every documented module."""

from __future__ import annotations

import html
import importlib
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings", reason="the docs extra is not installed "
                                           "(pip install -e '.[docs]')")
from test_docs import gen_api  # noqa: E402


def test_the_site_builds_without_warnings_and_shows_every_public_name(tmp_path):
    if not (ROOT / "mkdocs.yml").exists():
        pytest.skip("needs the source tree's mkdocs.yml")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-5000:]
    site = tmp_path / "site"
    assert (site / "index.html").exists() and (site / "fit" / "index.html").exists()
    missing = []
    for modname, _ in gen_api.MODULES:
        page = html.unescape((site / "reference" / modname / "index.html").read_text())
        ids = set(re.findall(r'id="([^"]+)"', page))
        module = importlib.import_module(modname)
        for name in gen_api.public_names(module):
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType) or \
                    not getattr(obj, "__module__", "tinyopt").startswith("tinyopt"):
                continue
            if f"{modname}.{name}" not in ids:
                missing.append(f"{modname}.{name}")
    assert not missing, missing
