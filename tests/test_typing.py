"""What a type checker sees is what users see: a typical training script (``tests/typing/``)
type-checks with no errors under mypy and pyright, with tinyopt as an installed library would be
seen (its own internals not checked), and it runs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCRIPT = HERE / "typing" / "train_script.py"
SRC = Path(__file__).resolve().parents[1] / "src"


def _env() -> dict:
    env = dict(os.environ)
    env["MYPYPATH"] = str(SRC)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_training_script_type_checks_under_mypy(tmp_path):
    # --strict: no re-export is implicit, so every name the script uses must be in a literal
    # __all__; and Tensor.item() is a number, as torch's stub says, not Any
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--cache-dir", str(tmp_path / "cache"), "--no-color-output",
                        str(SCRIPT)], capture_output=True, text=True, env=_env(), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout, r.stdout
    item = [line for line in r.stdout.splitlines() if "Revealed type" in line]
    # (mypy folds bool into int: int | float | bool is shown as int | float)
    assert len(item) == 1 and item[0].endswith(('"int | float"', '"int | float | bool"')), r.stdout


@pytest.mark.skipif(importlib.util.find_spec("pyright") is None,
                    reason="pyright is not installed (pip install pyright)")
def test_training_script_type_checks_under_pyright(tmp_path):
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"extraPaths": [str(SRC)]}))
    r = subprocess.run([sys.executable, "-m", "pyright", "--outputjson", str(SCRIPT)],
                       capture_output=True, text=True, env=_env(), timeout=600, cwd=tmp_path)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        pytest.skip(f"pyright did not run (no node.js?): {r.stdout[-300:]} {r.stderr[-300:]}")
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert not errors, errors
    assert report["summary"]["filesAnalyzed"] == 1


def test_the_training_script_runs(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("train_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.cnn_step(str(tmp_path)) >= 0
    # main(): a DataLoader of Tensor batches, .to(device), SGD + StepLR, eval under no_grad
    assert module.main() > 0.8  # a linearly separable task: it learns (0.96 with seed 0)
    epochs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(epochs) == 3
