"""Compare-and-swap for a whole-file rewrite: a file's version, the edit lock, the last check.

``notebook_edit`` rewrites a whole notebook that JupyterLab may save at any moment, and an edit of
a multi-MB notebook takes most of a second (parse, edit, validate, serialise). Comparing the file
with what the agent read only at the start would let a save made meanwhile be overwritten. So:

* the rewrite runs under an exclusive ``flock`` on the file's directory (:func:`lock_directory`),
  which serialises soba's own writers (two agents, two kernels): the second one finds the first
  one's edit when it reads under the lock. A directory needs no lock file in the user's project
  and is never replaced, unlike the notebook itself, which each write renames over;
* a writer that takes no lock (JupyterLab writes a notebook in place; editors rename a file over
  it) is caught by :func:`swap_in`, once the new file is written: the name must still hold the
  version read (device, inode, size, mtime and the SHA-256 of its bytes, read again). The check
  cannot be followed by a plain ``rename`` without a gap in which a save is lost, so the new file
  is *exchanged* with the old one in one system call (``renameat2(RENAME_EXCHANGE)``) and the file
  it displaced is checked afterwards: a save that landed before the exchange is found there and
  exchanged back, nothing lost. Where the file system cannot exchange, a plain rename follows the
  check and the one-system-call gap remains (docs/SECURITY.md, "Notebook edits and concurrent
  saves").
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ..errors import ToolError
from ..locking import lock_exclusive

__all__ = ["LOCK_WAIT_SEC", "FileVersion", "SetAside", "check_unchanged", "lock_directory", "swap_in"]

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


class SetAside(ToolError):
    """A save that landed during an edit could not be given its name back: it is kept under the
    temporary name the message gives, which must therefore not be removed."""


_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


@cache
def _renameat2_call() -> Callable[..., int] | None:
    """glibc's ``renameat2`` (2.28 and later), or ``None`` where the C library has none."""
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    call: Callable[..., int] = func
    return call


def _renameat2(dir_fd: int, src: str, dst: str, flags: int) -> bool:
    """``renameat2`` within ``dir_fd``: True when done, False when this kernel, C library or file
    system cannot do it with ``flags`` (the caller falls back); other failures raise OSError."""
    func = _renameat2_call()
    if func is None:
        return False
    if func(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), dst)


def _holds(dir_fd: int, name: str, expected: FileVersion) -> bool:
    """Whether ``name`` is exactly ``expected``: same file, same status, same bytes."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and expected.same_file(st) and _hash_of(fd) == expected.sha256
    finally:
        os.close(fd)


def swap_in(dir_fd: int, tmp: str, name: str, expected: FileVersion | None, changed: str) -> None:
    """Put the complete file ``tmp`` at ``name`` only over ``expected`` (``None``: only where no
    file is), else ``ToolError(changed)`` with ``name`` as it was and ``tmp`` still there for the
    caller to remove. The exchange closes the gap a check followed by a rename leaves: whatever
    ``name`` held at the instant of the swap is checked after it, and put back if it was not the
    version read."""
    check_unchanged(dir_fd, name, expected, changed)  # the usual refusal, before touching anything
    if expected is None:
        try:
            if _renameat2(dir_fd, tmp, name, _RENAME_NOREPLACE):
                return
        except FileExistsError:
            raise ToolError(changed) from None
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    if not _renameat2(dir_fd, tmp, name, _RENAME_EXCHANGE):
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    if _holds(dir_fd, tmp, expected):  # ``tmp`` now names the version read: the swap was clean
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        return
    try:  # a save landed between the check and the exchange: it gets its name back
        _renameat2(dir_fd, tmp, name, _RENAME_EXCHANGE)
    except OSError as exc:
        raise SetAside(f"{changed}; a version saved while the edit worked could not be put back "
                       f"({exc.strerror}) and is kept as {tmp} next to it") from None
    raise ToolError(changed)
