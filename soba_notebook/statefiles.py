"""Opening the files SOBA writes under ``.soba/`` without ever following a symbolic link.

A project's files are data: a cloned repository may carry a ``.soba`` of its own, and in it a
``sessions/<id>.lock`` that is a link to ``~/.bashrc``. Taking the session's lease would then
truncate the link's target, an append to a transcript or ``flight.jsonl`` would land in whatever
the link names. So every file SOBA writes under a ``.soba`` directory is reached here:

* the path is walked from the directory that holds ``.soba`` (opened as given: a project may
  itself live behind a link) one component at a time, each directory opened with ``O_NOFOLLOW``
  relative to the descriptor of its parent (``dir_fd``), missing ones created the same way;
* the file itself is opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK`` until it is known to be a
  regular file, so a planted FIFO cannot hang the kernel);
* a link anywhere on the way (``.soba`` itself included) is a :class:`StateFileError` naming it
  and where it points; nothing is written. A path without a ``.soba`` component (a session
  store in a directory of the caller's choosing) gets the ``O_NOFOLLOW`` on its last component.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import StateFileError

__all__ = ["STATE_DIR_NAME", "open_state_dir", "open_state_file", "state_dir"]

#: The name of SOBA's state directory in a project (and in the user's home).
STATE_DIR_NAME = ".soba"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _link_error(path: Path, dir_fd: int, name: str) -> StateFileError:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        target = "?"
    if name == STATE_DIR_NAME:
        return StateFileError(f"{path}: is a symbolic link (to {target}); SOBA keeps its state only in a real "
                              f"directory and writes nothing through a link. Replace the link with a directory "
                              f"(or remove it) and try again")
    return StateFileError(f"{path}: is a symbolic link (to {target}); SOBA does not write through links under "
                          f"{STATE_DIR_NAME} (it would change {target}). Remove the link and try again")


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_state_dir(directory: str | os.PathLike[str], *, create: bool = False) -> int:
    """A descriptor (the caller closes it) of ``directory``, every component from its ``.soba``
    down opened without following a link; ``create`` makes missing ones (``.soba`` included)."""
    path = Path(directory)
    parts = path.parts
    anchor = parts.index(STATE_DIR_NAME) if STATE_DIR_NAME in parts else len(parts)
    base = Path(*parts[:anchor]) if anchor else Path(".")
    if create:
        base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = base
    try:
        for name in parts[anchor:]:
            walked = walked / name
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, name):
                    raise _link_error(walked, fd, name) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def state_dir(directory: str | os.PathLike[str], *, create: bool = False) -> Iterator[int]:
    """:func:`open_state_dir` as a context manager: the descriptor, closed afterwards."""
    fd = open_state_dir(directory, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def open_state_file(path: str | os.PathLike[str], flags: int, mode: int = 0o644, *,
                    create_dirs: bool = False) -> int:
    """``os.open(path, flags, mode)`` with no link followed on the way (see the module's docstring);
    the file must be a regular one. ``create_dirs`` makes the missing directories."""
    file = Path(path)
    with state_dir(file.parent, create=create_dirs) as dir_fd:
        try:
            fd = os.open(file.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EEXIST, errno.ENXIO) and _is_link(dir_fd, file.name):
                raise _link_error(file, dir_fd, file.name) from None
            raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateFileError(f"{file}: is not a regular file (a FIFO, socket or device); SOBA writes its state "
                             f"only to regular files. Remove it and try again")
    if not flags & os.O_NONBLOCK:
        os.set_blocking(fd, True)
    return fd
