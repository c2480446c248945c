"""Test-suite configuration.

Under CI (``CI`` set) hypothesis runs derandomized: the same examples every run, so a red CI is a
real regression and never a new random draw.  Locally it explores fresh examples each run.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def compile_at_once():
    """Plans compiled at a structure's first realization (``TINYOPT_COMPILE_AFTER=1``), for
    tests of the plan cache itself; the usual threshold (``engine/eager.py``) afterwards."""
    from tinyopt.engine.plan import CACHE
    before = CACHE.compile_after
    CACHE.compile_after = 1
    CACHE.clear()
    yield CACHE
    CACHE.compile_after = before
    CACHE.clear()
