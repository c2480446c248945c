"""The README tells the truth: its set-up commands are the ones CI runs, and its links lead
somewhere.  (Its example command is run by tests/test_examples.py at a small size.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## ``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def shell_commands(text: str) -> list[str]:
    """The lines of the text's ```sh blocks, with ``&&`` chains split into commands."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


def test_the_set_up_commands_are_the_ones_ci_runs_in_their_order():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("needs the source tree's .ci/run")
    readme = shell_commands(section("Set up and test"))
    assert readme[-1] == "python -m pytest" and "pip install -e \".[test]\"" in readme
    assert subprocess.run(["bash", "-n", str(ci)]).returncode == 0  # it parses
    lines = [line.strip() for line in ci.read_text().splitlines()]
    at = 0
    for command in readme:
        assert command in lines[at:], f"CI does not run the README's {command!r} (in its order)"
        at = lines.index(command, at) + 1


def test_the_install_command_runs_an_example_that_exists():
    commands = shell_commands(section("Install and run"))
    assert "pip install -e ." in commands
    scripts = [c.split()[1] for c in commands if c.startswith("python examples/")]
    assert scripts and all((ROOT / s).exists() for s in scripts)


def test_links_lead_to_files():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#]+)", text) if "://" not in t]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
