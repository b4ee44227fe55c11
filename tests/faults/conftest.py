"""The faults tier: every test written in this folder fault injection: kill -9 mid-write, a full disk
on a small tmpfs, hostile workspaces. Each is marked ``faults``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tier_support import mark_tier


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "faults")
