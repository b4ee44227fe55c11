"""The repository tree after a test run has no file it lacked before: tests never write into the checkout.

Every test runs in its own temporary directory (conftest's autouse ``own_working_directory``), but a
test can still write through an absolute path, a subprocess started with ``cwd=REPO`` or a
module-scoped fixture. A ``report.txt`` written that way was once committed by accident. So the run
lists the untracked files (``git status --porcelain --untracked-files=all``, ignored files left
out) when it starts and again when it finishes: a file that appeared was written by the run, and
the run fails naming it.

Comparing with the start, rather than asking for a clean tree, keeps a contributor's own
uncommitted work out of it; changes to tracked files are left out too, since a contributor edits
those while a long run goes on. Outside a git checkout (or without git) the check is off.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["new_files", "untracked_files"]


def untracked_files(root: Path) -> frozenset[str] | None:
    """The untracked, not ignored files under ``root`` (paths as git prints them), or ``None`` when
    ``root`` is not a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return frozenset(line[3:] for line in done.stdout.splitlines() if line.startswith("?? "))


def new_files(before: frozenset[str] | None, after: frozenset[str] | None) -> list[str]:
    """The files in ``after`` that were not in ``before``, sorted; none when either is unknown."""
    if before is None or after is None:
        return []
    return sorted(after - before)
