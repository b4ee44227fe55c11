"""Files a sandboxed ``shell`` command leaves where Python would import them in this kernel.

The sandbox keeps a command inside the workspace, but the workspace is (by default) the kernel's
working directory, and ``''`` (that directory) comes first on an IPython kernel's ``sys.path``. A
command that writes ``mistune.py`` there plants code that the kernel itself runs, unsandboxed and
with the API key in reach, at the next ``import mistune`` anywhere in the process. So around every
sandboxed command the agent looks at what import would find first, and a new or changed one is not
accepted silently (the approval gate asks, keeps or rolls back: :mod:`.approval_gate`).

What is looked at, in every directory on the kernel's ``sys.path`` that lies inside the workspace
(``''`` meaning the kernel's current directory): its *top-level* entries only, which is where import
looks up a name —

* modules: any file or link named with an import suffix (``X.py``, ``X.pyc``, extension modules such
  as ``X.cpython-311-x86_64-linux-gnu.so`` or ``X.abi3.so``), and any link named as a module (it may
  point at a package);
* packages: ``X/__init__.*`` and ``X/__pycache__/__init__.*.pyc``;
* bytecode: ``__pycache__/*.pyc`` (a planted ``.pyc`` whose header matches an existing ``X.py`` runs
  instead of it); ``*.pth`` files (``site`` runs their ``import`` lines at the next start); and so
  ``sitecustomize`` / ``usercustomize`` modules, which are ordinary names here.

A package's other modules are the project's own code and not looked at: changing them is ordinary
work, run when someone imports them (docs/SECURITY.md says so). Only ``lstat`` is used to compare;
the contents of the few existing candidates are kept (up to :data:`KEEP_BYTES` each) so that a
changed one can be put back. Rolling back moves the command's version to
``.soba/quarantine/<call id>/`` (nothing is deleted) and restores the earlier content.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KEEP_BYTES", "PLANTED_KEY", "ImportSnapshot", "Planted", "import_reason", "import_roots", "planted",
           "roll_back", "take"]

#: The key of a tool result's ``data`` that holds the :class:`Planted` files the gate reviews.
PLANTED_KEY = "planted_imports"

#: The most bytes of one existing candidate kept to restore it (larger ones are only quarantined).
KEEP_BYTES = 8 * 1024 * 1024
_SUFFIXES = tuple(sorted(set(importlib.machinery.all_suffixes()) | {".pth", ".pyw"}, key=len, reverse=True))

Stamp = tuple[int, int, int, int, int]  # mode, size, mtime_ns, ctime_ns, inode (of lstat: links not followed)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def import_roots(workspace: Path, sys_path: Sequence[str] | None = None, cwd: str | None = None) -> tuple[Path, ...]:
    """The directories on ``sys_path`` (default: the kernel's) inside ``workspace``, resolved, each once."""
    here = cwd if cwd is not None else os.getcwd()
    root = workspace.resolve()
    found: dict[Path, None] = {}
    for entry in sys.path if sys_path is None else sys_path:
        if not isinstance(entry, str):
            continue
        try:
            path = Path(os.path.join(here, entry) if entry else here).resolve()
        except (OSError, RuntimeError):
            continue
        if _inside(path, root) and path.is_dir():
            found[path] = None
    return tuple(found)


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _module_named(name: str) -> bool:
    """A name import would load a module from: ``X`` + an import suffix, ``X.pth``."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)].isidentifier() or suffix == ".pth"
    return False


def import_reason(target: Path, roots: Sequence[Path], workspace: Path) -> str:
    """Why Python in this kernel would import the file ``target`` ("" when it would not): the same
    top-level names :func:`take` looks at, in ``roots`` (:func:`import_roots`), judged by the path
    alone, so a file not written yet counts too. The folder is resolved, the name is not (a write
    to ``mistune.py`` lands where ``import mistune`` looks, wherever a link there points)."""
    try:
        folder = Path(os.path.realpath(target.parent))
    except (OSError, ValueError):  # a NUL byte, a name too long: no file can be written there either
        return ""
    name, up = target.name, folder.parent
    if folder in roots and (_module_named(name) or (os.path.islink(target) and name.isidentifier())):
        kind = "a .pth file, whose import lines run at the next start" if name.endswith(".pth") \
            else "a top-level module"
        where = folder
    elif folder.name == "__pycache__" and up in roots and name.endswith(".pyc"):
        kind, where = "bytecode import prefers to a module's source", up
    elif up in roots and folder.name.isidentifier() and name.startswith("__init__.") and _module_named(name):
        kind, where = f"package {folder.name}'s __init__", up
    elif folder.name == "__pycache__" and up.parent in roots and up.name.isidentifier() \
            and name.startswith("__init__.") and name.endswith(".pyc"):
        kind, where = f"package {up.name}'s bytecode", up.parent
    else:
        return ""
    rel = os.path.relpath(folder / name, workspace.resolve())
    at = os.path.relpath(where, workspace.resolve())
    place = "the workspace's top folder" if at == "." else f"{at}/"
    return (f"Python in this kernel would import {rel}: {kind} in {place}, which is on this kernel's sys.path "
            f"(it would run in the kernel, unsandboxed)")


def _entries(root: Path) -> Iterable[str]:
    """The paths in ``root`` that import would find a top-level name at (module docstring)."""
    try:
        with os.scandir(root) as it:
            items = list(it)
    except OSError:
        return
    for item in items:
        name, is_dir = item.name, item.is_dir(follow_symlinks=False)
        if not is_dir:
            if _module_named(name) or (item.is_symlink() and name.isidentifier()):
                yield item.path
        elif name == "__pycache__":
            yield from _files(item.path, lambda n: n.endswith(".pyc"))
        elif name.isidentifier():
            yield from _files(item.path, lambda n: n.startswith("__init__.") and _module_named(n))
            yield from _files(os.path.join(item.path, "__pycache__"), lambda n: n.startswith("__init__."))


def _files(directory: str, wanted: Any) -> Iterable[str]:
    try:
        with os.scandir(directory) as it:
            yield from (i.path for i in it if wanted(i.name) and not i.is_dir(follow_symlinks=False))
    except OSError:
        return


@dataclass(frozen=True, slots=True)
class ImportSnapshot:
    """What import would find in ``roots``: path → stamp, the top-level directories that existed, and
    the content of each regular file (``None``: larger than :data:`KEEP_BYTES` or unreadable)."""

    workspace: Path
    roots: tuple[Path, ...]
    stamps: dict[str, Stamp]
    dirs: frozenset[str]
    saved: dict[str, bytes | None]


def take(workspace: Path, *, keep: bool = True, roots: tuple[Path, ...] | None = None) -> ImportSnapshot:
    """The snapshot of ``workspace``'s import roots (contents kept only with ``keep``: before a command)."""
    roots = import_roots(workspace) if roots is None else roots
    stamps: dict[str, Stamp] = {}
    dirs: set[str] = set()
    for root in roots:
        for path in _entries(root):
            stamp = _stamp(path)
            if stamp is not None:
                stamps[path] = stamp
        dirs.update(str(root / p.name) for p in _dir_items(root))
    saved = {path: _read(path) for path, stamp in stamps.items()} if keep else {}
    return ImportSnapshot(workspace.resolve(), roots, stamps, frozenset(dirs), saved)


def _dir_items(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _read(path: str) -> bytes | None:
    try:
        if os.path.islink(path) or os.path.getsize(path) > KEEP_BYTES:
            return None
        with open(path, "rb") as fh:
            return fh.read(KEEP_BYTES + 1)
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class Planted:
    """What a command created or changed that import would find: workspace-relative paths."""

    before: ImportSnapshot
    created: tuple[str, ...]
    changed: tuple[str, ...]

    def names(self) -> str:
        return ", ".join([f"{p} (new)" for p in self.created] + [f"{p} (changed)" for p in self.changed])

    def to_json(self) -> dict[str, Any]:
        return {"created": list(self.created), "changed": list(self.changed)}

    def diff(self, limit: int) -> str:
        """What the files now hold against before, as a unified diff (binary ones by size), at most ``limit``."""
        parts: list[str] = []
        for rel in (*self.created, *self.changed):
            path = self.before.workspace / rel
            old = self.before.saved.get(str(path)) or b""
            new = _read(str(path))
            if new is None or b"\0" in new or b"\0" in old:
                parts.append(f"{rel}: {'a link' if path.is_symlink() else 'binary or large'}, not shown\n")
                continue
            lines = difflib.unified_diff(old.decode(errors="replace").splitlines(keepends=True),
                                         new.decode(errors="replace").splitlines(keepends=True), f"a/{rel}", f"b/{rel}")
            parts.append("".join(line if line.endswith("\n") else line + "\n" for line in lines))
        text = "".join(parts)
        return text if len(text) <= limit else text[:limit] + f"\n… {len(text) - limit:,} more characters not shown\n"


def planted(before: ImportSnapshot, after: ImportSnapshot) -> Planted | None:
    """The candidates ``after`` has that ``before`` had not, or had with another stamp (None: none)."""
    ws = before.workspace
    created = sorted(os.path.relpath(p, ws) for p in after.stamps if p not in before.stamps)
    changed = sorted(os.path.relpath(p, ws) for p, s in after.stamps.items()
                     if p in before.stamps and before.stamps[p] != s)
    return Planted(before, tuple(created), tuple(changed)) if created or changed else None


def roll_back(found: Planted, quarantine: Path) -> list[str]:
    """Undo ``found``: each created file (a created package: its whole new directory) moved under
    ``quarantine``, each changed file's new version moved there and its earlier content put back.
    One line per path said what happened to it."""
    ws = found.before.workspace
    lines: list[str] = []
    moved: set[str] = set()
    for rel in found.created:
        path = ws / rel
        top = _new_package_dir(found.before, path)
        target = top if top is not None else path
        if str(target) in moved:
            continue
        moved.add(str(target))
        lines.append(_quarantine(ws, target, quarantine, "moved to"))
    for rel in found.changed:
        path = ws / rel
        lines.append(_quarantine(ws, path, quarantine, "its new version moved to"))
        saved = found.before.saved.get(str(path))
        if saved is None:
            lines[-1] += "; its earlier content was not kept (too large or unreadable), so it is now absent"
            continue
        try:
            _write_atomic(path, saved, found.before.stamps[str(path)][0])
            lines[-1] += "; its earlier content restored"
        except OSError as exc:
            lines[-1] += f"; restoring its earlier content failed: {exc.strerror or exc}"
    return lines


def _new_package_dir(before: ImportSnapshot, path: Path) -> Path | None:
    """The top-level directory ``path`` lies in when the command created that directory."""
    for root in before.roots:
        if root in path.parents and path.parent != root:
            top = root / path.relative_to(root).parts[0]
            return top if str(top) not in before.dirs and top.name != "__pycache__" else None
    return None


def _quarantine(ws: Path, path: Path, quarantine: Path, verb: str) -> str:
    rel = os.path.relpath(path, ws)
    target = quarantine / rel
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target) if not os.path.lexists(target) else f"{target}.again")
    except OSError as exc:
        return f"{rel}: could not be moved to {os.path.relpath(target, ws)}: {exc.strerror or exc}"
    return f"{rel}: {verb} {os.path.relpath(target, ws)}"


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".restore")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
