"""Shared fixtures: where ../shared lives, and a clean working directory per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED = REPO.parent / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts"
PI_SESSION = TRANSCRIPTS / "pi-mono" / "large-session.jsonl"

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def require_shared(path: Path = TRANSCRIPTS) -> Path:
    """Skip (with the reason) when the shared data folder is not beside the repository."""
    if not path.exists():
        pytest.skip(f"needs the shared test data at {path} (../shared beside the repository); it is absent")
    return path


@pytest.fixture
def pi_session() -> Path:
    return require_shared(PI_SESSION)
