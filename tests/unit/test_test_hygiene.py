"""Issue 21, item 17: tests run in directories of their own, a run that writes into the checkout fails,
and a missing requirement fails under CI instead of skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ci_support import in_ci, unavailable
from conftest import REPO, TESTS
from tree_guard import new_files, untracked_files


def test_every_test_runs_in_an_empty_directory_of_its_own_outside_the_checkout(
        own_working_directory: Path, tmp_path: Path) -> None:
    cwd = Path.cwd()
    assert cwd == own_working_directory and cwd != tmp_path
    assert REPO not in (cwd, *cwd.parents) and list(cwd.iterdir()) == []
    Path("report.txt").write_text("rows: 1")  # what the python-tool test once left in the repository
    assert (cwd / "report.txt").exists() and not (REPO / "report.txt").exists()


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("", False), ("false", False), ("0", False)])
def test_ci_is_any_value_of_the_variable_but_empty_or_false(monkeypatch: pytest.MonkeyPatch, value: str,
                                                            ci: bool) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_a_missing_requirement_fails_under_ci_and_skips_with_its_reason_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no tmpfs here .*CI=true.*never skipped"):
        unavailable("no tmpfs here")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=r"^no tmpfs here$"):
        unavailable("no tmpfs here")


def _git_repo(root: Path) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("__pycache__/\n.pytest_cache/\nignored/\n")
    return root


def test_the_tree_guard_reports_new_files_but_not_ignored_earlier_or_tracked_ones(tmp_path: Path) -> None:
    root = _git_repo(tmp_path / "repo")
    (root / "tracked.txt").write_text("v1")
    subprocess.run(["git", "-C", str(root), "add", "tracked.txt"], check=True)
    (root / "mine.txt").write_text("a contributor's own uncommitted work")
    before = untracked_files(root)
    (root / "tracked.txt").write_text("v2")  # edited while the run goes on: not the run's doing
    (root / "ignored").mkdir()
    (root / "ignored" / "cache.bin").write_text("x")
    (root / "sub").mkdir()
    (root / "sub" / "report.txt").write_text("rows: 1")
    assert new_files(before, untracked_files(root)) == ["sub/report.txt"]
    assert untracked_files(tmp_path / "not-a-repo") is None and new_files(None, frozenset({"x"})) == []


def _pytest_in_a_copy(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run one test file under a copy of this conftest whose repository is a fresh git checkout."""
    root = _git_repo(tmp_path / "repo")
    tests = root / "tests"
    tests.mkdir()
    for name in ("conftest.py", "ci_support.py", "tree_guard.py"):
        shutil.copy(TESTS / name, tests / name)
    (tests / "test_writes.py").write_text(f"from pathlib import Path\n\nfrom conftest import REPO\n\n\n"
                                          f"def test_writes() -> None:\n    {body}\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CI": ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_writes.py"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_a_run_whose_test_writes_into_the_checkout_fails_naming_the_file(tmp_path: Path) -> None:
    done = _pytest_in_a_copy(tmp_path, '(REPO / "report.txt").write_text("rows: 1")')
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "left new files in the repository" in done.stdout and "\n  report.txt" in done.stdout


@pytest.mark.slow
def test_a_run_whose_test_writes_a_relative_path_passes_and_leaves_the_checkout_alone(tmp_path: Path) -> None:
    done = _pytest_in_a_copy(tmp_path, 'Path("report.txt").write_text("rows: 1")')
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    assert not (tmp_path / "repo" / "report.txt").exists()
