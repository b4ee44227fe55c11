"""What a test does when something it needs is not on this machine: fail under CI, skip elsewhere.

CI (``CI=true``) runs the README's test command, which installs everything the suite needs, runs
as root; there a missing requirement is a broken set-up, and a skip would hide it behind a green
run. A contributor's machine may lack some of it (root for a tmpfs, the local model): there the test
skips and says why (pyproject's ``-rs`` prints every skip reason in the summary). Every such test goes through
:func:`unavailable`, so the rule is written once.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["in_ci", "unavailable"]

_FALSE = ("", "0", "false", "no", "off")


def in_ci() -> bool:
    """Whether the suite runs under CI: ``CI`` is set to anything but an empty or false value."""
    return os.environ.get("CI", "").strip().lower() not in _FALSE


def unavailable(reason: str) -> NoReturn:
    """Fail under CI, skip with ``reason`` elsewhere. ``reason`` names what is missing and how to get it."""
    if in_ci():
        pytest.fail(f"{reason} (CI={os.environ['CI']}: a missing requirement fails the run, it is never skipped)",
                    pytrace=False)
    pytest.skip(reason)
