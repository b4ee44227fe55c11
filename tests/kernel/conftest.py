"""The kernel tier: every test written in this folder starts a real Jupyter kernel (jupyter_client,
nbclient). Each is marked ``kernel``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tier_support import mark_tier


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "kernel")
