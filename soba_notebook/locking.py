"""Advisory file locks, the one place that knows how a platform locks a file.

The session store and the flight recorder lock the file they append to, so two kernels writing to
one session never interleave and a reader never sees a half-written line. POSIX has ``flock``
(:mod:`fcntl`); Windows has no :mod:`fcntl`, and importing it at a module's top made
``import soba_notebook`` fail there. Every lock goes through this module instead:

* :func:`lock_exclusive` — block until the lock is held; with ``blocking=False`` return ``False``
  at once when another holder has it;
* :func:`lock_shared` — a shared (reader) lock; on Windows it is an exclusive one, which is
  correct, only less concurrent;
* :func:`unlock` — release (closing the descriptor releases too).

The POSIX implementation is ``flock`` on the whole file. The Windows one (:mod:`msvcrt`) locks one
byte far past any real data, because Windows byte-range locks are mandatory: locking the data
itself would stop other processes from reading it. Which one is used is decided once, by whether
:mod:`fcntl` can be imported; :data:`IMPLEMENTATION` names it.
"""

from __future__ import annotations

import os
import time
from typing import Literal

__all__ = ["IMPLEMENTATION", "lock_exclusive", "lock_shared", "unlock"]

#: Where the Windows lock byte sits (1 TiB): past any session file, so reads are never blocked by it.
_WINDOWS_LOCK_OFFSET = 2**40

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]  # msvcrt below; the name stays for the checks

IMPLEMENTATION: Literal["fcntl", "msvcrt"] = "fcntl" if fcntl is not None else "msvcrt"


def lock_exclusive(fd: int, *, blocking: bool = True) -> bool:
    """Hold an exclusive lock on the open file ``fd``; ``False`` when ``blocking=False`` and taken."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True
    return _msvcrt_lock(fd, blocking)


def lock_shared(fd: int) -> None:
    """Hold a shared lock on ``fd`` (blocks while a writer holds the exclusive one)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_SH)
    else:
        _msvcrt_lock(fd, True)


def unlock(fd: int) -> None:
    """Release this descriptor's lock."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return
    import msvcrt

    here = os.lseek(fd, 0, os.SEEK_CUR)
    os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    try:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.lseek(fd, here, os.SEEK_SET)


def _msvcrt_lock(fd: int, blocking: bool) -> bool:
    """Lock the one byte at :data:`_WINDOWS_LOCK_OFFSET`; the file position is left where it was.

    ``LK_LOCK`` itself gives up after ten one-second retries; a blocking lock keeps asking, so it
    waits as long as ``flock`` would.
    """
    import msvcrt

    here = os.lseek(fd, 0, os.SEEK_CUR)
    os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    try:
        while True:
            try:
                # the stubs declare msvcrt's functions for Windows only; this runs only there
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined,unused-ignore]
                return True
            except OSError:
                if not blocking:
                    return False
                time.sleep(0.01)
    finally:
        os.lseek(fd, here, os.SEEK_SET)
