"""Advisory file locks, the one place that knows how a file is locked.

The session store, its writer lease and the flight recorder lock the file they append to, so two
kernels writing to one session never interleave and a reader never sees a half-written line.
Every lock goes through this module (``flock`` on the whole file, :mod:`fcntl`):

* :func:`lock_exclusive` — block until the lock is held; with ``blocking=False`` return ``False``
  at once when another holder has it;
* :func:`lock_shared` — a shared (reader) lock;
* :func:`unlock` — release (closing the descriptor releases too).

soba_notebook runs on POSIX systems (Linux, tested; macOS, untested): Windows is not supported
(README, "Platforms"; use WSL), since other modules also rely on POSIX calls (``O_NOFOLLOW`` and
``dir_fd`` in :mod:`soba_notebook.agent.confine`, process groups in the ``shell`` tool).
"""

from __future__ import annotations

import fcntl

__all__ = ["lock_exclusive", "lock_shared", "unlock"]


def lock_exclusive(fd: int, *, blocking: bool = True) -> bool:
    """Hold an exclusive lock on the open file ``fd``; ``False`` when ``blocking=False`` and taken."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def lock_shared(fd: int) -> None:
    """Hold a shared lock on ``fd`` (blocks while a writer holds the exclusive one)."""
    fcntl.flock(fd, fcntl.LOCK_SH)


def unlock(fd: int) -> None:
    """Release this descriptor's lock."""
    fcntl.flock(fd, fcntl.LOCK_UN)
