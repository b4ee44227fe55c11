"""Finding sessions on disk: the ``*.jsonl`` files of a sessions folder, listed from their header
lines alone (opened the one safe way, :func:`.jsonl.open_session_file`). :mod:`.store` opens what
this module finds."""

from __future__ import annotations

import json
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import SessionError, SessionWarning
from .jsonl import open_session_file

__all__ = ["SessionInfo", "list_sessions"]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What :func:`list_sessions` knows about a session without parsing all of it."""

    id: str
    path: Path
    created: str | None
    cwd: str | None
    size_bytes: int
    modified: float


def list_sessions(directory: str | os.PathLike[str]) -> list[SessionInfo]:
    """Sessions in ``directory``, newest first, reading only each file's header line."""
    directory = Path(directory)
    out: list[SessionInfo] = []
    if not directory.is_dir():
        return out
    for file in directory.glob("*.jsonl"):
        try:
            if not stat.S_ISREG(file.lstat().st_mode):
                warnings.warn(f"{file}: not a regular file; not listed as a session", SessionWarning, stacklevel=2)
                continue
            with open_session_file(file) as fh:
                header = json.loads(fh.readline() or b"null")
            st = file.stat()
        except (OSError, ValueError, RecursionError, SessionError):
            continue
        if not isinstance(header, dict) or header.get("type") != "session":
            continue
        out.append(SessionInfo(str(header.get("id", file.stem)), file, header.get("created"),
                               header.get("cwd"), st.st_size, st.st_mtime))
    out.sort(key=lambda s: s.modified, reverse=True)
    return out
