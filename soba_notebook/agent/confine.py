"""Confinement that holds against links and races: every path is walked one component at a time.

The file tools must stay inside the workspace and never touch soba's own state. Checking a path
and then opening it by name is not enough: between the check and the open a component can be
swapped for a symbolic link that points outside, and a read then returns outside content. So
this module never lets the kernel follow a link for us:

* the walk starts from a descriptor of the workspace root and opens each directory with
  ``O_NOFOLLOW`` relative to the descriptor of its parent (``dir_fd``); the final file is opened
  the same way, so a link swapped in after the walk makes the open fail instead of escaping;
* a symbolic link met on the way is read (``readlink`` relative to its directory) and its target
  spliced into the rest of the path, resolved by the same walk: a link that stays inside the
  workspace works, one that leaves it (or ``..`` above the root) is refused, and a loop is
  refused after :data:`MAX_LINKS` links, never raised as a raw error;
* every path under a directory called ``.soba`` (project state: config, sessions, memory, skills,
  outputs, flight records) and under the user's ``~/.soba`` is refused, by name and by the
  directory's identity (device and inode), whatever the workspace is; the one exception is
  *reading* the tool output spill files soba itself wrote (``.soba/outputs/<tool>-<id>.txt``);
* :func:`check_workspace_root` refuses a workspace of ``/``, ``$HOME`` or a top-level directory
  holding it (``/home``) unless ``tools.allowBroadWorkspace`` is true (honoured only from
  ``~/.soba/config.json`` or arguments), and any workspace inside a ``.soba`` directory.

A :class:`Located` holds the open descriptor of the final directory, so the caller's ``open``
/ ``rename`` happen against exactly the directory that was checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, WorkspaceError

__all__ = [
    "MAX_LINKS",
    "STATE_DIR_NAME",
    "Located",
    "check_workspace_root",
    "is_spill_name",
    "locate",
    "protected_identities",
]

#: Symbolic links followed in one walk at most; more means a loop (the kernel's own limit is 40).
MAX_LINKS = 40
#: The name of soba's state directory; no file tool may reach into one.
STATE_DIR_NAME = ".soba"
_SPILL_NAME = re.compile(r"[a-z_]+-[0-9a-f]{8,32}\.txt")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def is_spill_name(parts: tuple[str, ...]) -> bool:
    """``.soba/outputs/<tool>-<id>.txt``: a spill file the read tools may read (nothing else there)."""
    return (len(parts) >= 3 and parts[-3] == STATE_DIR_NAME and parts[-2] == "outputs"
            and _SPILL_NAME.fullmatch(parts[-1]) is not None)


def protected_identities(paths: Iterable[Path]) -> frozenset[tuple[int, int]]:
    """(device, inode) of those of ``paths`` that exist: the state directories to refuse by identity."""
    out: set[tuple[int, int]] = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return frozenset(out)


def check_workspace_root(workspace: Path, *, allow_broad: bool = False, home: Path | None = None,
                         source: str = "tools.workspace") -> None:
    """Refuse a workspace that would hand the agent the whole disk or home, or soba's own state."""
    root = workspace.resolve()
    home_dir = (home or Path.home()).resolve()
    if STATE_DIR_NAME in root.parts:
        raise ConfigError(f"{source}: workspace {root} lies inside a {STATE_DIR_NAME} directory, which the file "
                          f"tools may never touch; choose the project directory instead",
                          source=source, key="tools.workspace", value=str(root))
    # "/", $HOME, and a top-level directory holding homes (/home, /Users)
    broad = root == Path(root.anchor) or root == home_dir or (home_dir.is_relative_to(root) and len(root.parts) <= 2)
    if broad and not allow_broad:
        raise ConfigError(f"{source}: workspace {root} is the filesystem root or your home directory (or the "
                          f"directory of homes); the agent's file tools would reach all of it. Choose the project "
                          f"directory, or set tools.allowBroadWorkspace to true in ~/.soba/config.json to allow it "
                          f"explicitly",
                          source=source, key="tools.workspace", value=str(root))


@dataclass(slots=True)
class Located:
    """The outcome of a walk: ``dir_fd`` (open, owned) and the final ``name`` inside it.

    ``parts`` is the path inside the workspace (``("src", "x.py")``; empty for the root itself,
    where ``name`` is ``"."``); ``missing`` lists directories below ``dir_fd`` that do not exist
    yet (``write_file`` creates them); ``st`` is the final entry's ``lstat`` (None when absent).
    """

    dir_fd: int
    name: str
    parts: tuple[str, ...]
    st: os.stat_result | None
    missing: tuple[str, ...] = ()
    _closed: bool = field(default=False, repr=False)

    @property
    def shown(self) -> str:
        return "/".join(self.parts) or "."

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.dir_fd)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split(text: str) -> list[str]:
    return [p for p in text.split("/") if p not in ("", ".")]


def _relative_parts(base: Path, text: str) -> list[str]:
    """The model's path as components relative to the workspace root, or a refusal."""
    if "\x00" in text:
        raise WorkspaceError(f"refused: {text!r} contains a NUL character")
    raw = os.path.expanduser(text) if text.startswith("~") else text
    if not os.path.isabs(raw):
        return _split(raw)
    lexical = Path(os.path.normpath(raw))
    if lexical == base or lexical.is_relative_to(base):
        return list(lexical.relative_to(base).parts)
    real = Path(os.path.realpath(raw))  # e.g. /tmp/ws given for a workspace that really is /private/tmp/ws
    if real == base or real.is_relative_to(base):
        return list(real.relative_to(base).parts)
    raise WorkspaceError(f"refused: {text} is outside the workspace {base}")


def _soba_refusal(text: str) -> WorkspaceError:
    return WorkspaceError(f"refused: {text} is inside soba's own state ({STATE_DIR_NAME}/: config, sessions, "
                          f"memory, skills, outputs, flight records); the file tools may not touch it")


def locate(root: Path, path: str, *, protected: frozenset[tuple[int, int]] = frozenset(),
           allow_spill_read: bool = False) -> Located:
    """Walk ``path`` inside ``root`` without ever following a link outside it; see the module text.

    Raises :class:`WorkspaceError` (outside, ``.soba``, loop) or ``NotADirectoryError``.
    """
    base = Path(root).resolve()
    text = os.fspath(path)
    walk = _Walk(base, text, _relative_parts(base, text), protected, [os.open(base, _DIR_FLAGS)])
    try:
        while walk.pending:
            part = walk.pending.pop(0)
            if part == "..":
                walk.up()
                continue
            if part.lower() == STATE_DIR_NAME:
                rest = (*walk.names, part, *walk.pending)
                if not (allow_spill_read and is_spill_name(tuple(rest))):
                    raise _soba_refusal(text)
                walk.spill = True  # reading a spill file: the one way into .soba, and never through a link
            try:
                st = os.stat(part, dir_fd=walk.fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                return walk.absent(part)
            if stat.S_ISLNK(st.st_mode):
                walk.follow_link(part)
            elif stat.S_ISDIR(st.st_mode) and walk.pending:
                walk.enter(part, st)
            else:
                return walk.last(part, st)
        return walk.whole_path_walked()
    finally:
        for fd in walk.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(slots=True)
class _Walk:
    """One :func:`locate` walk: the directories held open (the root first), the names entered
    below the root, the components still to walk, and how many links were followed."""

    base: Path
    text: str
    pending: list[str]
    protected: frozenset[tuple[int, int]]
    fds: list[int]
    names: list[str] = field(default_factory=list)
    links: int = 0
    spill: bool = False

    def up(self) -> None:
        """``..``: back to the directory entered before, never above the root."""
        if not self.names:
            lexical = Path(os.path.normpath(self.base / self.text))
            how = " (through a symbolic link)" if lexical == self.base or lexical.is_relative_to(self.base) else ""
            raise WorkspaceError(f"refused: {self.text} is outside the workspace {self.base}{how}")
        os.close(self.fds.pop())
        self.names.pop()

    def absent(self, part: str) -> Located:
        """``part`` does not exist: the entry to create, below directories that may not exist yet."""
        missing = [part, *self.pending]
        if ".." in missing:
            raise WorkspaceError(f"refused: {self.text} goes through {'/'.join((*self.names, part))}, "
                                 f"which does not exist") from None
        if any(m.lower() == STATE_DIR_NAME for m in missing):
            raise _soba_refusal(self.text) from None
        return Located(self.fds.pop(), missing[-1], (*self.names, *missing), None, tuple(missing[:-1]))

    def follow_link(self, part: str) -> None:
        """Put a link's target in front of what is left to walk; an absolute one must lie inside
        the root and restarts the walk there."""
        if self.spill:
            raise _soba_refusal(self.text)
        self.links += 1
        if self.links > MAX_LINKS:
            raise WorkspaceError(f"refused: {self.text} cannot be resolved inside the workspace {self.base} "
                                 f"(a loop of symbolic links)")
        target = os.readlink(part, dir_fd=self.fds[-1])
        if os.path.isabs(target):
            target_path = Path(os.path.normpath(target))
            if not (target_path == self.base or target_path.is_relative_to(self.base)):
                raise WorkspaceError(f"refused: {self.text} is outside the workspace {self.base} "
                                     f"(it resolves to {target_path} through a symbolic link)")
            while len(self.fds) > 1:
                os.close(self.fds.pop())
            self.names.clear()
            self.pending[:0] = list(target_path.relative_to(self.base).parts)
        else:
            self.pending[:0] = _split(target)

    def enter(self, part: str, st: os.stat_result) -> None:
        """Open the directory ``part`` and check it is the one just looked at, and not protected."""
        fd = os.open(part, _DIR_FLAGS, dir_fd=self.fds[-1])
        got = os.fstat(fd)
        self.fds.append(fd)
        self.names.append(part)
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
            raise WorkspaceError(f"refused: {self.text} changed while it was being opened; try again")
        if (got.st_dev, got.st_ino) in self.protected and not self.spill:
            raise _soba_refusal(self.text)

    def last(self, part: str, st: os.stat_result) -> Located:
        """``part`` is not a link, and not a directory to walk on through: the end of the path."""
        if self.pending:
            shown = "/".join((*self.names, part))
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), shown)
        if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) in self.protected:
            raise _soba_refusal(self.text)
        return Located(self.fds.pop(), part, (*self.names, part), st)

    def whole_path_walked(self) -> Located:
        """Nothing left to walk (the path named the root or a directory, ending in ``/`` or ``..``)."""
        if len(self.fds) == 1:
            root_st = os.fstat(self.fds[0])
            return Located(os.dup(self.fds[0]), ".", (), root_st)
        # the path named a directory: hand back its parent and its name
        os.close(self.fds.pop())
        name = self.names[-1]
        st = os.stat(name, dir_fd=self.fds[-1], follow_symlinks=False)
        return Located(self.fds.pop(), name, tuple(self.names), st)


def open_located(loc: Located, flags: int) -> int:
    """Open the located entry (never following a link); refuse it if it changed since the walk."""
    fd = os.open(loc.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=loc.dir_fd)
    if loc.st is not None:
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (loc.st.st_dev, loc.st.st_ino):
            os.close(fd)
            raise WorkspaceError(f"refused: {loc.shown} changed while it was being opened; try again")
    return fd
