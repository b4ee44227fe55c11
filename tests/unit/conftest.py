"""The unit tier: every test written in this folder needs nothing beyond this checkout and its Python
packages (loopback HTTP servers and real files, real bwrap where installed): no kernel, no browser,
no local model, no fault injection. Each is marked ``unit``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tier_support import mark_tier


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "unit")
