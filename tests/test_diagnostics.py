"""``python -m tinyopt`` and ``tinyopt.utils.collect_env()``: the environment report, and the
table of environment variables in docs/environment.md kept complete."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np

import tinyopt
from tinyopt import diagnostics

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(tinyopt.__file__).resolve().parent
NAME = re.compile(r"TINYOPT_[A-Z0-9_]*[A-Z0-9]")


def _names_in(folder: Path) -> set[str]:
    return {n for p in folder.rglob("*.py") for n in NAME.findall(p.read_text(encoding="utf-8"))}


def test_every_variable_the_library_reads_is_registered():
    assert _names_in(SRC) == set(diagnostics.VARIABLES)


def test_the_docs_table_lists_every_variable_of_library_tests_and_benchmarks():
    page = ROOT / "docs" / "environment.md"
    rows = re.findall(r"^\| `(\w+)`", page.read_text(encoding="utf-8"), flags=re.M)
    read = _names_in(SRC) | _names_in(ROOT / "tests") | _names_in(ROOT / "benchmarks")
    assert read <= set(rows), sorted(read - set(rows))
    assert {r for r in rows if r.startswith("TINYOPT_")} == read  # and no stale row


def test_report_shows_versions_threads_cache_cpu_and_variables(monkeypatch, capsys):
    monkeypatch.setenv("TINYOPT_PLAN_SHARING", "0")
    typo = "TINYOPT" + "_NUM_THREDS"  # (spelt so that the table check above does not see it)
    monkeypatch.setenv(typo, "3")
    tinyopt.utils.collect_env()
    text = capsys.readouterr().out
    assert text.startswith(f"tinyopt {tinyopt.__version__} ")
    for title in ("versions", "threads", "kernel cache", "CPU", "TINYOPT_* environment variables"):
        assert f"\n{title}\n" in text
    rows = dict(re.findall(r"^  (\S[^\n]*?)  +(\S[^\n]*)$", text, flags=re.M))
    assert rows["numba"] == numba.__version__ and rows["numpy"] == np.__version__
    assert rows["numba threads"] == str(numba.config.NUMBA_NUM_THREADS)
    assert rows["numba threading layer"].split()[0] in ("omp", "tbb", "workqueue")
    assert rows["TINYOPT_PLAN_SHARING"] == "0" and rows["TINYOPT_PARALLEL_MIN"] == "(unset)"
    assert "not a variable tinyopt reads" in rows[typo]
    assert re.fullmatch(r"\d+ \(\d+\.\d MiB\).*", rows["compiled kernels"])
    assert rows["bfloat16 GEMM (AVX512-BF16)"].startswith(("used", "not available"))


def test_kernel_cache_counts_kernels_and_bytes(tmp_path, monkeypatch):
    """numba writes one .nbi index per kernel and one .nbc per compiled signature."""
    folder = tmp_path / "cache" / "some_path"
    folder.mkdir(parents=True)
    (folder / "elementwise.relu-10.py311.nbi").write_bytes(b"x" * 100)
    (folder / "elementwise.relu-10.py311.1.nbc").write_bytes(b"x" * 1000)
    (folder / "elementwise.relu-10.py311.2.nbc").write_bytes(b"x" * 24)
    (folder / "notes.txt").write_bytes(b"x" * 7)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    assert diagnostics.cache_dirs() == [tmp_path / "cache"]
    assert diagnostics.cache_usage() == (1, 1124, [tmp_path / "cache"])


def test_python_m_tinyopt_runs_the_env_command_by_default_and_starts_no_threads():
    env = dict(os.environ, PYTHONPATH=str(SRC.parent))
    code = ("import sys, numba, runpy; sys.argv = ['tinyopt'] + sys.argv[1:]\n"
            "try: runpy.run_module('tinyopt', run_name='__main__')\n"
            "except SystemExit as e: assert not e.code, e.code\n"
            "try: numba.threading_layer(); print('STARTED')\n"
            "except ValueError: print('NOT STARTED')\n")
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120)
    named = subprocess.run([sys.executable, "-m", "tinyopt", "env"], capture_output=True,
                           text=True, env=env, timeout=120)
    assert plain.returncode == 0 and named.returncode == 0, plain.stderr + named.stderr
    assert plain.stdout.endswith("NOT STARTED\n")
    assert plain.stdout.splitlines()[:3] == named.stdout.splitlines()[:3]
    helped = subprocess.run([sys.executable, "-m", "tinyopt", "--help"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert "env" in helped.stdout and "environment report" in helped.stdout
    wrong = subprocess.run([sys.executable, "-m", "tinyopt", "warmpu"], capture_output=True,
                           text=True, env=env, timeout=120)
    assert wrong.returncode == 2 and "invalid choice: 'warmpu'" in wrong.stderr
