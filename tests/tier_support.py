"""The test tiers are folders: a test's tier is where it is written (``tests/unit``, ``tests/kernel``,
``tests/faults``, ``tests/realmodel``, ``tests/browser``), and each folder's ``conftest.py`` marks
every test collected under it with the folder's marker through :func:`mark_tier`, so
``pytest tests/unit`` and ``pytest -m "not kernel"`` select the same tests. A file carries no tier
marker of its own. ``slow`` is set per test: the few fast-tier tests that take seconds.

Each tier folder is a package (an ``__init__.py``), so its ``conftest.py`` is imported as
``<tier>.conftest`` and never replaces the root ``conftest`` module the tests import their paths
from; a test that reuses another test module's fixture imports it as ``<tier>.test_x``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["mark_tier"]


def mark_tier(items: list[pytest.Item], folder: Path, marker: str) -> None:
    """Add ``marker`` to every item whose file is under ``folder``. pytest calls every conftest's
    collection hook with the whole session's items, so each tier marks only its own."""
    mark = getattr(pytest.mark, marker)
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(mark)
