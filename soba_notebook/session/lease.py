"""A session's writer lease: which live process may append to a session, and how to take it over.

The store's per-append lock keeps two writers from tearing each other's *lines*; it cannot keep
them from interleaving their *turns* (a tool call followed by the other kernel's user message, its
result after a different call). So a session has one writer at a time. The lease is an advisory
lock file beside the transcript, ``<id>.lock``, held with an exclusive lock (:mod:`..locking`)
for as long as the writer keeps the session open. It holds a small JSON record of the holder
(pid, host, start time, and what the caller adds: the kernel id, the notebook) so a refusal can
say who holds it.

* **Free leases are taken at once.** A process that ends releases its lock with it, so a crashed
  kernel's session is free again; nobody has to delete anything.
* **A held lease is refused**, with :class:`~soba_notebook.errors.SessionHeldError` naming the
  holder, unless the caller takes it over. A take-over writes a fresh lock file and renames it over
  ``<id>.lock``; the previous holder still holds a lock, but on a file that is no longer the
  session's lease.
* **Every append checks the lease first** (:meth:`WriterLease.verify`, called by the store under
  the session file's exclusive lock, the same lock a take-over renames under): a writer whose lease
  file was replaced fails with :class:`~soba_notebook.errors.SessionTakenOverError` and writes
  nothing, so two writers can never interleave turns on one path.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import SessionError, SessionHeldError, SessionTakenOverError, StateFileError
from ..locking import lock_exclusive, unlock
from ..statefiles import open_state_file, state_dir

__all__ = ["Holder", "WriterLease", "current_holder", "lease_path"]

#: How long a lock that is not free must stay taken before it counts as held (another process may
#: be probing it for ``%soba sessions`` at the very moment).
_HELD_AFTER_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a session's writer lease."""

    pid: int | None
    host: str | None
    started: str | None
    kernel: str | None = None  # the Jupyter kernel id, when a kernel holds it
    notebook: str | None = None  # the notebook path the front end reported, when known

    def describe(self) -> str:
        """``pid 4242 on box, kernel 1f2e…, notebook analysis.ipynb, since 2025-01-01T10:00:00Z``."""
        parts = [f"pid {self.pid}" + (f" on {self.host}" if self.host else "") if self.pid else "an unknown process"]
        if self.kernel:
            parts.append(f"kernel {self.kernel}")
        if self.notebook:
            parts.append(f"notebook {self.notebook}")
        if self.started:
            parts.append(f"since {self.started}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "started": self.started, "kernel": self.kernel,
                "notebook": self.notebook}

    @classmethod
    def from_json(cls, data: object) -> Holder:
        d = data if isinstance(data, Mapping) else {}

        def text(key: str) -> str | None:
            value = d.get(key)
            return value if isinstance(value, str) and value else None

        pid = d.get("pid")
        return cls(pid if isinstance(pid, int) else None, text("host"), text("started"), text("kernel"),
                   text("notebook"))


def lease_path(session_file: str | os.PathLike[str]) -> Path:
    """``<dir>/<id>.lock`` for ``<dir>/<id>.jsonl``."""
    return Path(session_file).with_suffix(".lock")


def _read_holder(fd: int) -> Holder:
    try:
        raw = os.pread(fd, 64 << 10, 0) if hasattr(os, "pread") else _read_from_start(fd)
        return Holder.from_json(json.loads(raw or b"null"))
    except (OSError, ValueError, RecursionError):
        return Holder(None, None, None)


def _read_from_start(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 64 << 10)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)  # a link is never the file we locked
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _lock_soon(fd: int) -> bool:
    """The lock, unless it stays taken for :data:`_HELD_AFTER_SECONDS`."""
    deadline = time.monotonic() + _HELD_AFTER_SECONDS
    while not lock_exclusive(fd, blocking=False):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def current_holder(session_file: str | os.PathLike[str]) -> Holder | None:
    """The live holder of ``session_file``'s lease, or None when it is free (nobody, or a dead process)."""
    path = lease_path(session_file)
    try:
        fd = open_state_file(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if lock_exclusive(fd, blocking=False):
            unlock(fd)
            return None
        return _read_holder(fd)
    finally:
        os.close(fd)


class WriterLease:
    """This process's lease on one session: held until :meth:`release` (or the process ends)."""

    def __init__(self, session_file: Path, fd: int, holder: Holder, previous: Holder | None,
                 ended: Holder | None = None) -> None:
        self.session_file = session_file
        self.path = lease_path(session_file)
        self.holder = holder
        #: the live holder a take-over displaced (None: the lease was free)
        self.previous = previous
        #: a holder that ended (a crashed kernel) without releasing the lease, if one did
        self.ended = ended
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, session_file: str | os.PathLike[str], *, take_over: bool = False,
                meta: Mapping[str, str | None] | None = None, session_id: str | None = None) -> WriterLease:
        """Hold the lease of ``session_file``.

        A free lease (never taken, released, or held by a process that ended) is taken. A held one
        raises :class:`SessionHeldError` naming the holder, or with ``take_over`` is taken from it:
        the caller must hold the session file's exclusive append lock meanwhile, so the old holder's
        next append sees the change before it writes.
        """
        file = Path(session_file)
        sid = session_id or file.stem
        path = lease_path(file)
        me = Holder(os.getpid(), socket.gethostname(),
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    (meta or {}).get("kernel"), (meta or {}).get("notebook"))
        for _ in range(20):  # a take-over may replace the file between our open and our lock
            try:
                fd = open_state_file(path, os.O_RDWR | os.O_CREAT, 0o644)
            except StateFileError:
                raise
            except OSError as exc:
                raise SessionError(f"{path}: cannot open the session's lease file ({exc.strerror})") from None
            if _lock_soon(fd):
                if _same_file(fd, path):
                    left = _read_holder(fd)  # a record left behind: its writer ended without releasing
                    cls._write(fd, me)
                    return cls(file, fd, me, None, left if left.pid is not None else None)
                unlock(fd)
                os.close(fd)
                continue
            holder = _read_holder(fd)
            os.close(fd)
            if not take_over:
                raise SessionHeldError(
                    f"session {sid} is being written by another live kernel ({holder.describe()}); it was not "
                    f"joined, so the two cannot interleave their turns. Take it over with "
                    f"%soba resume {sid} --take-over (that kernel can then no longer write to it), or go on in "
                    f"a session of your own (%soba --new).", holder=holder)
            return cls(file, cls._replace(path, me), me, holder)
        raise SessionError(f"{path}: the lease file kept changing while it was being taken; try again")

    @staticmethod
    def _write(fd: int, holder: Holder) -> None:
        data = json.dumps(holder.to_json()).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    @classmethod
    def _replace(cls, path: Path, holder: Holder) -> int:
        """A fresh lock file, locked and filled, renamed over ``path``; its descriptor."""
        tmp = f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
        with state_dir(path.parent) as dir_fd:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
            try:
                lock_exclusive(fd)  # nobody else knows this file yet
                cls._write(fd, holder)
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces a link, never its target
            except OSError as exc:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise SessionError(f"{path}: cannot take the session's lease over ({exc.strerror or exc})") from None
        return fd

    @property
    def held(self) -> bool:
        """Still ours: not released, and ``<id>.lock`` is still the file we locked."""
        return self._fd is not None and _same_file(self._fd, self.path)

    def verify(self) -> None:
        """Raise :class:`SessionTakenOverError` unless this lease is still the session's."""
        if self._fd is None:
            raise SessionTakenOverError(f"{self.session_file}: this kernel released the session's writer lease; "
                                        f"nothing was appended")
        if _same_file(self._fd, self.path):
            return
        holder = current_holder(self.session_file)
        sid = self.session_file.stem
        who = f"by {holder.describe()}" if holder is not None else "(its lease file was replaced or removed)"
        raise SessionTakenOverError(
            f"session {sid} was taken over {who}; this kernel can no longer write to it and nothing was "
            f"appended. Go on in a new session (%soba --new), or take it back with "
            f"%soba resume {sid} --take-over.")

    def release(self) -> None:
        """Give the lease up: the record is emptied (a record under a free lock is a writer that
        ended without releasing) and the lock dropped; the lock file itself stays."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            unlock(fd)
        finally:
            os.close(fd)

    def __del__(self) -> None:  # an agent dropped without being closed still frees its session
        try:
            self.release()
        except Exception:  # nothing to report to at collection time
            pass
