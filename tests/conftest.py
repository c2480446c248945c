"""Test-suite configuration.

Under CI (``CI`` set) hypothesis runs derandomized: the same examples every run, so a red CI is a
real regression and never a new random draw.  Locally it explores fresh examples each run.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
