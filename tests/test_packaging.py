"""The source distribution: its metadata (PEP 639 license, classifiers) and that it carries what
its own test suite needs.

Building the sdist takes a few seconds; running all of the unpacked copy's tests would recompile
every numba kernel (the on-disk cache is keyed by source path) and double the suite's time.  So
the unpacked sdist *collects* every test module (each imports, and finds conftest.py,
gradcheck.py, torch_parity.py, docs/ and examples/ — what was missing before) and *runs* a few
modules that compile no kernel: the API reference and docs checks, data sets, samplers.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

build_meta = pytest.importorskip("setuptools.build_meta")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    if not (ROOT / "pyproject.toml").exists():  # running from an installed copy
        pytest.skip("needs the source tree")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    code = (f"import setuptools.build_meta as b, sys; "
            f"sys.stdout.write(b.build_sdist({str(out)!r}))")
    name = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    archive = out / name
    with tarfile.open(archive) as tf:
        tf.extractall(out, filter="data")
    return out / name[:-len(".tar.gz")]


def test_metadata(sdist):
    meta = email.parser.Parser().parsestr((sdist / "PKG-INFO").read_text())
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in meta.get_all("License-File")
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert not any(c.startswith("License ::") for c in meta.get_all("Classifier"))
    assert "numba" in " ".join(meta.get_all("Requires-Dist"))
    assert "Programming Language :: Python :: 3.13" in meta.get_all("Classifier")


def test_the_version_is_written_once(sdist):
    """pyproject.toml reads tinyopt.__version__; the changelog's newest release is that one."""
    meta = email.parser.Parser().parsestr((sdist / "PKG-INFO").read_text())
    written = re.search(r'^__version__ = "([^"]+)"$',
                        (ROOT / "src" / "tinyopt" / "__init__.py").read_text(), re.M).group(1)
    assert meta["Version"] == written
    assert not re.search(r'^version\s*=\s*"', (ROOT / "pyproject.toml").read_text(), re.M)
    releases = re.findall(r"^## (\d[\w.]*)$", (sdist / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == written


def test_contents(sdist):
    for rel in ("LICENSE", "README.md", "CHANGELOG.md", "tests/conftest.py", "tests/gradcheck.py",
                "tests/torch_parity.py", "docs/api.md", "docs/gen_api.py", "docs/porting.md",
                "examples/mnist_fc.py", "src/tinyopt/py.typed",
                "src/tinyopt/data/fashion_mnist_10k.npz"):
        assert (sdist / rel).exists(), f"the sdist lacks {rel}"
    assert not list(sdist.rglob("__pycache__"))
    ours = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("*.py")}
    theirs = {p.relative_to(sdist).as_posix() for p in (sdist / "tests").glob("*.py")}
    assert ours <= theirs


def _pytest(sdist: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(sdist / "src"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=sdist, env=env, capture_output=True, text=True, timeout=600)


def test_every_test_module_imports_from_the_sdist(sdist):
    # (-q comes from the sdist's pyproject.toml; -rs lists the modules that skip as a whole,
    # e.g. those that compare against PyTorch when it is not installed)
    done = _pytest(sdist, "--collect-only", "-rs")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.lower().splitlines()[-1]
    lines = done.stdout.splitlines()
    collected = {line.split("::")[0] for line in lines if "::" in line}
    skipped = {m.group(1) for m in map(re.compile(r"SKIPPED \[\d+\] (tests/test_\w+\.py):").match,
                                       lines) if m}
    assert collected | skipped == {f"tests/{p.name}" for p in (sdist / "tests").glob("test_*.py")}


def test_some_modules_pass_from_the_sdist(sdist):
    done = _pytest(sdist, "-rA", "tests/test_docs.py", "tests/test_dataset.py",
                   "tests/test_sampler.py", "-k", "api_reference or covered or test_dataset.py "
                   "or test_sampler.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED tests/test_sampler.py" in done.stdout and "FAILED" not in done.stdout
