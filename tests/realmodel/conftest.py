"""The realmodel tier: every test written in this folder a real model on a real local server
(scripts/install-local-model.sh). Each is marked ``realmodel``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tier_support import mark_tier


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "realmodel")
