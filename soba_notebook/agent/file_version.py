"""Compare-and-swap for a whole-file rewrite: a file's version, the edit lock, the last check.

``notebook_edit`` rewrites a whole notebook that JupyterLab may save at any moment, and an edit of
a multi-MB notebook takes most of a second (parse, edit, validate, serialise). Comparing the file
with what the agent read only at the start would let a save made meanwhile be overwritten. So:

* the rewrite runs under an exclusive ``flock`` on the file's directory (:func:`lock_directory`),
  which serialises soba's own writers (two agents, two kernels): the second one finds the first
  one's edit when it reads under the lock. A directory needs no lock file in the user's project
  and is never replaced, unlike the notebook itself, which each write renames over;
* a writer that takes no lock (JupyterLab writes a notebook in place) is caught by
  :func:`check_unchanged`, called right before the rename, after the new file is written: the
  file the name holds must still be the one read, by device, inode, size, mtime and the SHA-256
  of its bytes, read again there. What remains is the gap between that final ``stat`` and the
  ``rename`` (docs/SECURITY.md, "Notebook edits and concurrent saves").
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass

from ..errors import ToolError
from ..locking import lock_exclusive

__all__ = ["LOCK_WAIT_SEC", "FileVersion", "check_unchanged", "lock_directory"]

#: Seconds a rewrite waits for another soba writer's lock on the same directory before giving up.
#: A holder keeps it for one edit (about a second for a multi-MB notebook).
LOCK_WAIT_SEC = 30.0
_LOCK_POLL_SEC = 0.02


@dataclass(frozen=True, slots=True)
class FileVersion:
    """One version of a file: where it lives (device, inode), its size, mtime and content hash."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    sha256: str

    @staticmethod
    def of(st: os.stat_result, sha256: str) -> FileVersion:
        return FileVersion(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, sha256)

    def same_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` is this version's file, unchanged by its status (the hash aside)."""
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == (self.dev, self.ino, self.size, self.mtime_ns)


def lock_directory(dir_fd: int, shown: str, wait_sec: float = LOCK_WAIT_SEC) -> int:
    """An exclusive lock on the directory ``dir_fd``, held until the returned descriptor is closed
    (a duplicate, so moving ``dir_fd`` on does not release it); ToolError naming ``shown`` when
    another writer holds it past ``wait_sec``."""
    held = os.dup(dir_fd)
    give_up = time.monotonic() + wait_sec
    try:
        while not lock_exclusive(held, blocking=False):
            if time.monotonic() >= give_up:
                raise ToolError(f"another soba edit of a file next to {shown} has held its lock for over "
                                f"{wait_sec:g}s; nothing was written, try again")
            time.sleep(_LOCK_POLL_SEC)
    except BaseException:
        os.close(held)
        raise
    return held


def _hash_of(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def check_unchanged(dir_fd: int, name: str, expected: FileVersion | None, changed: str) -> None:
    """Raise ``ToolError(changed)`` unless ``name`` in ``dir_fd`` is still ``expected``
    (``None``: still absent). The bytes are hashed again, then the name is ``stat``-ed last, so
    the only gap left before the caller's rename is that of one system call."""
    if expected is None:
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise ToolError(changed)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            raise ToolError(changed) from None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode) or not expected.same_file(before) or _hash_of(fd) != expected.sha256:
            raise ToolError(changed)
    finally:
        os.close(fd)
    try:
        last = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise ToolError(changed) from None
    if not expected.same_file(last):
        raise ToolError(changed)
