"""Observing which workspace files a ``shell`` or ``python`` run created, modified or deleted.

Parsing a command line cannot see a file written by ``open(p, "w")`` in Python, by a script the
agent runs (``python fix.py``), by a here-doc'd program or restored with ``cp backup file``. So
around each such run the agent takes a cheap snapshot of the workspace (path → size, mtime,
ctime, inode; no file is read) and compares the two: the difference is a fact, recorded in the
tool result entry as ``filesChanged`` (:class:`~soba_notebook.compaction.file_changes.FileChanges`).

Skipped: ``.git/``, ``.soba/`` (SOBA's own files, and tool output spills), virtual environments
(a directory holding ``pyvenv.cfg``, or named ``.venv``/``venv``), ``node_modules/``, caches
(``__pycache__``, ``.pytest_cache``, ``.mypy_cache``, ``.ruff_cache``, ``.ipynb_checkpoints``,
``.tox``, ``.nox``). Bounded: at most :data:`MAX_FILES` files and :data:`MAX_SECONDS` per
snapshot; when either bound is hit the result says so (``truncated``), and the extractor then
also keeps what shell parsing suggests. Symbolic links are not followed. Measured: about 27 µs a
file (166 files: 5 ms; 10,000 files: about 0.3 s per snapshot, two per run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..compaction.file_changes import FileChanges

__all__ = ["MAX_FILES", "MAX_SECONDS", "SKIPPED_DIRS", "Snapshot", "diff", "snapshot"]

MAX_FILES = 10_000
MAX_SECONDS = 1.0
#: Directory names never descended into.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".soba", ".venv", "venv", "node_modules", "__pycache__",
                          ".pytest_cache", ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints", ".tox", ".nox",
                          ".hypothesis"})
#: Changes listed per kind in one entry (the rest are counted).
MAX_LISTED = 200

Stamp = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


@dataclass(frozen=True, slots=True)
class Snapshot:
    """``files``: workspace-relative path → stamp; ``truncated``: the bound that was hit, if any."""

    files: dict[str, Stamp]
    truncated: str | None = None


def _walk(root: Path, deadline: float, clock: Callable[[], float]) -> Iterator[tuple[str, os.stat_result] | str]:
    """(relative path, stat) of every regular file; a string when a bound stops the walk."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                items = list(it)
        except OSError:
            continue
        if any(i.name == "pyvenv.cfg" for i in items) and directory != root:
            continue  # a virtual environment
        for item in items:
            if clock() > deadline:
                yield f"snapshot stopped after {MAX_SECONDS:g} s; changes in files not reached are not listed"
                return
            try:
                if item.is_dir(follow_symlinks=False):
                    if item.name not in SKIPPED_DIRS:
                        stack.append(Path(item.path))
                elif item.is_file(follow_symlinks=False):
                    rel = Path(item.path).relative_to(root).as_posix()
                    yield rel, item.stat(follow_symlinks=False)
            except (OSError, ValueError):
                continue


def snapshot(root: str | os.PathLike[str], *, max_files: int = MAX_FILES, max_seconds: float = MAX_SECONDS,
             clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """The stamps of the workspace's files (bounded; see the module docstring)."""
    files: dict[str, Stamp] = {}
    truncated: str | None = None
    for item in _walk(Path(root), clock() + max_seconds, clock):
        if isinstance(item, str):
            truncated = item
            break
        if len(files) >= max_files:
            truncated = f"more than {max_files:,} files in the workspace; changes beyond them are not listed"
            break
        rel, st = item
        files[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return Snapshot(files, truncated)


def _bounded(paths: list[str]) -> tuple[tuple[str, ...], int]:
    paths.sort()
    return tuple(paths[:MAX_LISTED]), max(0, len(paths) - MAX_LISTED)


def diff(before: Snapshot, after: Snapshot) -> FileChanges:
    """What changed between two snapshots of one workspace."""
    created = [p for p in after.files if p not in before.files]
    deleted = [p for p in before.files if p not in after.files]
    modified = [p for p, stamp in after.files.items() if p in before.files and before.files[p] != stamp]
    notes = [n for n in (before.truncated, after.truncated) if n]
    if before.truncated or after.truncated:
        # a file beyond the bound in one snapshot only is not a real creation or deletion
        created = [p for p in created if not before.truncated]
        deleted = [p for p in deleted if not after.truncated]
    lists = [_bounded(created), _bounded(modified), _bounded(deleted)]
    hidden = sum(n for _, n in lists)
    if hidden:
        notes.append(f"{hidden:,} more changed files not listed")
    return FileChanges(lists[0][0], lists[1][0], lists[2][0], "; ".join(dict.fromkeys(notes)) or None)
