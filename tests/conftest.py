"""Test-suite configuration.

Under CI (``CI`` set) hypothesis runs derandomized: the same examples every run, so a red CI is a
real regression and never a new random draw.  Locally it explores fresh examples each run.

At the end of a run the skipped tests are counted by reason (a missing optional package, with the
command that installs it), so a run without PyTorch or the mpi extra says what it left out.
"""

import os
import re
from collections import Counter

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# how to install a package a skipped test imports (the README's "Set up and test" section)
INSTALL = {
    "torch": "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    "mpi4py": "pip install -e \".[mpi]\"",
    "ml_dtypes": "pip install -e \".[lowp]\"",
    "matplotlib": "pip install -e \".[plot]\"",
    "safetensors": "pip install -e \".[safetensors]\"",
}


def skip_reason(longrepr: object) -> str:
    """A skip's reason; pytest.importorskip's becomes ``X is not installed [how to install it]``."""
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    missing = re.match(r"could not import '([\w.]+)'|(torch|PyTorch) is not installed$", reason)
    if missing is None:
        return reason
    package = (missing.group(1) or "torch").split(".")[0]
    return f"{package} is not installed" + (f"  [{INSTALL[package]}]" if package in INSTALL else "")


def pytest_terminal_summary(terminalreporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts = Counter(skip_reason(r.longrepr) for r in skipped).most_common()
    terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason (pytest -rs lists each)")
    for reason, n in counts[:8]:
        terminalreporter.write_line(f"{n:6d}  {reason}")
    if counts[8:]:
        terminalreporter.write_line(f"{sum(n for _, n in counts[8:]):6d}  other reasons")


@pytest.fixture
def compile_at_once():
    """Plans compiled at a structure's first realization (``TINYOPT_COMPILE_AFTER=1``), for
    tests of the plan cache itself; the usual threshold (``engine/eager.py``) afterwards."""
    from tinyopt.engine.plan_cache import CACHE
    before = CACHE.compile_after
    CACHE.compile_after = 1
    CACHE.clear()
    yield CACHE
    CACHE.compile_after = before
    CACHE.clear()
