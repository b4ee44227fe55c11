"""Finding sessions on disk: the ``*.jsonl`` files of a sessions folder, listed from their header
lines alone, and the one safe way to open a session file (a regular file only: a FIFO named
``x.jsonl`` would hang the kernel). :mod:`.store` opens what this module finds."""

from __future__ import annotations

import json
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SessionError, SessionWarning

__all__ = ["SessionInfo", "list_sessions", "open_regular"]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What :func:`list_sessions` knows about a session without parsing all of it."""

    id: str
    path: Path
    created: str | None
    cwd: str | None
    size_bytes: int
    modified: float


def open_regular(file: Path) -> Any:
    """``file`` opened for reading, refused unless it is a regular file: a FIFO would hang the kernel."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SessionError(f"{file}: not a regular file (a FIFO, socket or device); a session is a .jsonl file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


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
            with open_regular(file) as fh:
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
