"""The browser tier: every test written in this folder drives JupyterLab in Debian's Chromium through
Playwright. Each is marked ``browser``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tier_support import mark_tier


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "browser")
