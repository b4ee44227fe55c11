"""Shared fixtures: where the real transcripts live, a working directory of its own for every test,
and a check that the run leaves the repository tree as it found it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: Real transcripts of other agents, committed with their licences (tests/data/transcripts/README.md):
#: a clone alone runs every test that reads them.
TRANSCRIPTS = TESTS / "data" / "transcripts"
PI_SESSION = TRANSCRIPTS / "pi-mono" / "large-session.jsonl"

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from tree_guard import new_files, untracked_files  # noqa: E402  (tests/ is on sys.path from here on)

_TREE_BEFORE = pytest.StashKey[frozenset[str] | None]()


def repo_python_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python that must import this checkout's package, whatever its
    working directory (``python -c`` would otherwise import whichever copy is installed)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


@pytest.fixture
def pi_session() -> Path:
    return PI_SESSION


@pytest.fixture(scope="session", autouse=True)
def _session_working_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module- and session-scoped fixtures are set up before the per-test directory: they get one too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("session-cwd"))
        yield


@pytest.fixture(autouse=True)
def own_working_directory(_session_working_directory: None, tmp_path_factory: pytest.TempPathFactory,
                          monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty directory of its own, never the checkout: a relative path a test
    (or the code under test, or a ``python`` tool call) writes lands there. Tests that need a file
    of the repository use ``REPO / ...``. It is not the test's ``tmp_path``, whose contents some
    tests count."""
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    return cwd


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # xdist workers leave the check to the controller
        session.config.stash[_TREE_BEFORE] = untracked_files(REPO)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_TREE_BEFORE, None)
    if before is None:
        return
    created = new_files(before, untracked_files(REPO))
    if not created:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (f"the test run left new files in the repository at {REPO} (tests must write only into "
               f"temporary directories; a file you created yourself during the run counts too):\n"
               + "\n".join(f"  {path}" for path in created))
    if reporter is not None:
        reporter.write_line(message, red=True, bold=True)
    else:
        print(message, file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
