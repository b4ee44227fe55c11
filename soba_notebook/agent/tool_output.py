"""Bounding a tool's output for the model: head and tail around a pointer line, the whole text spilled.

A tool may print megabytes; the model sees about ``tools.maxOutputChars`` of it. The rest is not
lost: it is written to ``.soba/outputs/<tool>-<id>.txt`` (garbage-collected, oldest first) and the
pointer line names that file, so the agent can read the part it needs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..session.entries import new_id
from ..statefiles import open_state_file, state_dir
from . import workspace as ws

__all__ = ["SPILL_DIR_MAX_BYTES", "SPILL_DIR_MAX_FILES", "bound_output", "collect_spills"]

#: ``.soba/outputs`` is garbage-collected, oldest first, down to these bounds after every spill.
SPILL_DIR_MAX_BYTES = 256 * 1024 * 1024
SPILL_DIR_MAX_FILES = 500


def collect_spills(spill_dir: Path, keep: Path, max_bytes: int | None = None, max_files: int | None = None) -> int:
    """Delete the oldest spill files until the directory is within its bounds; never ``keep``.

    Returns how many files were removed. Only soba's own ``<tool>-<id>.txt`` files are touched.
    """
    max_bytes = SPILL_DIR_MAX_BYTES if max_bytes is None else max_bytes
    max_files = SPILL_DIR_MAX_FILES if max_files is None else max_files
    files: list[tuple[float, int, str]] = []
    with state_dir(spill_dir) as dir_fd:  # never through a link: the directory is listed by descriptor
        for entry in os.scandir(dir_fd):
            if entry.is_file(follow_symlinks=False) and entry.name.endswith(".txt") and entry.name != keep.name:
                st = entry.stat(follow_symlinks=False)
                files.append((st.st_mtime, st.st_size, entry.name))
        files.sort()
        total = sum(size for _, size, _ in files) + os.stat(keep.name, dir_fd=dir_fd, follow_symlinks=False).st_size
        count = len(files) + 1
        removed = 0
        for _, size, name in files:
            if total <= max_bytes and count <= max_files:
                break
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
                removed += 1
            total -= size
            count -= 1
    return removed

def _cut_head(text: str, size: int) -> str:
    head = text[:size]
    newline = head.rfind("\n")
    return head[:newline] if newline >= size * 0.8 else head


def _cut_tail(text: str, size: int) -> str:
    tail = text[len(text) - size:] if size > 0 else ""
    newline = tail.find("\n")
    return tail[newline + 1:] if 0 <= newline <= size * 0.2 else tail


def bound_output(text: str, limit: int, spill_dir: Path | None, workspace: Path, label: str = "output",
                 footer: str = "") -> tuple[str, int | None, str | None]:
    """``(content, full_chars, spill_path)``: ``text + footer`` bounded to about ``limit`` characters.

    Short text passes unchanged (``full_chars`` and ``spill_path`` are ``None``). Long text keeps
    its head and tail around a pointer line and is written whole to ``spill_dir/<label>-<id>.txt``
    (the directory is then garbage-collected, oldest first: :func:`collect_spills`); the pointer
    names that file relative to ``workspace`` when it is inside. The caller scrubs ``text`` first. ``footer`` (a line
    such as ``[exit code 1]``) always stays at the very end.
    """
    full = text + footer
    if len(full) <= limit:
        return full, None, None
    spill_path: str | None = None
    where = "the full text could not be saved"
    if spill_dir is not None:
        try:
            file = spill_dir / f"{label}-{new_id()}.txt"
            fd = open_state_file(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, create_dirs=True)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(full)
            spill_path = ws.display_path(workspace, file.resolve())
            collect_spills(spill_dir, file)
            where = f"full text in {spill_path}"
        except OSError as exc:
            where = f"the full text could not be saved ({exc.strerror or exc})"
    pointer = f"\n[output truncated: {len(full):,} characters; {where}]\n"
    room = max(limit - len(pointer) - len(footer), 0)
    head = _cut_head(text, room - room // 3)
    tail = _cut_tail(text, room // 3)
    return head + pointer + tail + footer, len(full), spill_path
