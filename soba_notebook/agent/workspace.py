"""The workspace: the one directory tree the agent's file tools may touch, and those file operations.

This module owns two things:

* **Confinement.** :func:`resolve_in_workspace` turns a path the model wrote into a real path and
  refuses anything that ends up outside the workspace root: absolute paths elsewhere, ``..``
  escapes, and symbolic links whose target lies outside. Every file operation below goes through
  it, so there is exactly one place where the rule lives. Shell commands are *not* confined (a
  shell can ``cd`` anywhere); ``tools.allowShell: false`` is the switch that disables them.
* **The file operations** behind ``read_file``, ``write_file``, ``edit_file``, ``list_files``,
  ``glob`` and ``grep``. They are plain synchronous functions that return a :class:`FileResult`
  or raise :class:`~soba_notebook.errors.ToolError` with a message written for the model; the tool
  layer (:mod:`.tools`) validates arguments, runs them off the event loop and bounds the output.

Paths in messages are shown relative to the workspace root (``src/x.py``), the form the model
should use in its next call.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from ..errors import ToolError, WorkspaceError
from .confine import STATE_DIR_NAME, Located, locate, open_located, protected_identities
from .file_version import FileVersion, lock_directory, swap_in
from .fileio import atomic_replace, read_window

__all__ = [
    "NOISE_DIRS",
    "FileResult",
    "HeldFile",
    "display_path",
    "edit_file",
    "glob_files",
    "glob_regex",
    "grep_files",
    "held_whole",
    "list_files",
    "read_file",
    "read_whole",
    "resolve_in_workspace",
    "write_file",
]

#: Directories that ``glob`` and ``grep`` do not descend into unless the pattern or path names them:
#: version control, virtual environments, caches and soba's own state.
NOISE_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache", ".tox", ".ipynb_checkpoints", ".soba"})

_BINARY_SNIFF_BYTES = 8192
_MAX_LISTED = 1000
_MAX_GREP_MATCHES = 500
_MAX_GREP_LINE_CHARS = 400
_MAX_GREP_FILE_BYTES = 20 * 1024 * 1024
#: Seconds one line's search may take. A model's pattern with nested repetition ("(a|aa)+$") can
#: backtrack for hours; the ``regex`` engine gives up after this long (measured: about 2-3x it on
#: a loaded machine) and releases the GIL meanwhile, so the kernel and the stop button stay live.
GREP_MATCH_TIMEOUT_SEC = 0.25


@dataclass(frozen=True, slots=True)
class FileResult:
    """What a file operation produced: the text for the model and structured extras for the UI."""

    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


# -- confinement -------------------------------------------------------------------------------

def _protected(root: Path) -> frozenset[tuple[int, int]]:
    """Identities of the state directories a walk from ``root`` must refuse: its and the user's ``.soba``."""
    return protected_identities((Path(root) / STATE_DIR_NAME, Path.home() / STATE_DIR_NAME))


def _locate(root: Path, path: str, *, spill_read: bool = False) -> Located:
    return locate(root, path, protected=_protected(root), allow_spill_read=spill_read)


def resolve_in_workspace(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """The real path ``path`` names, provided it lies inside ``root`` and outside any ``.soba``.

    The walk is the one the file tools use (:func:`.confine.locate`): links are followed only
    while they stay inside the workspace. Raises :class:`WorkspaceError` naming the path and root.
    """
    base = Path(root).resolve()
    with _locate(base, os.fspath(path)) as loc:
        return base.joinpath(*loc.parts)


def display_path(root: str | os.PathLike[str], path: Path) -> str:
    """``path`` relative to the workspace root in POSIX form (``"."`` for the root itself)."""
    base = Path(root).resolve()
    try:
        rel = path.relative_to(base)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."


# -- reading -----------------------------------------------------------------------------------

def _looks_binary(head: bytes) -> bool:
    return b"\x00" in head


def _open_regular(loc: Located, verb: str) -> int:
    """A read descriptor of the located regular file (FIFOs and devices are never opened)."""
    shown = loc.shown
    if loc.st is None:
        raise ToolError(f"no such file: {shown}")
    if stat.S_ISDIR(loc.st.st_mode):
        raise ToolError(f"{shown} is a directory, not a file; use list_files to see what it contains")
    if not stat.S_ISREG(loc.st.st_mode):
        raise ToolError(f"{shown} is not a regular file (a FIFO, socket or device); {verb} only handles files")
    return open_located(loc, os.O_RDONLY | os.O_NONBLOCK)


def _read_text(root: Path, path: str) -> tuple[Located, str]:
    """(location, text) of an existing UTF-8 text file for editing, or a clear ToolError."""
    loc = _locate(root, path)
    try:
        fd = _open_regular(loc, "edit_file")
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
        if _looks_binary(raw[:_BINARY_SNIFF_BYTES]):
            raise ToolError(f"{loc.shown} looks like a binary file ({len(raw):,} bytes); the file tools only "
                            f"handle text")
        try:
            return loc, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{loc.shown} is not valid UTF-8 (byte {exc.start}); edit_file only edits UTF-8 "
                            f"text, so the file was left unchanged") from None
    except BaseException:
        loc.close()
        raise


def read_whole(root: Path, path: str, verb: str, *, missing_ok: bool = False
               ) -> tuple[str, bytes | None, os.stat_result | None]:
    """The workspace-relative name, bytes and status of a regular file, confined like every file
    tool (never under ``.soba``); for tools that parse a whole file (notebooks). A missing file
    is an error, or with ``missing_ok`` ``(name, None, None)``."""
    with _locate(root, path) as loc:
        if loc.st is None and missing_ok:
            return loc.shown, None, None
        fd = _open_regular(loc, verb)
    with os.fdopen(fd, "rb") as fh:
        return loc.shown, fh.read(), os.fstat(fh.fileno())


@dataclass(slots=True)
class HeldFile:
    """A file read whole under the edit lock of its directory (:func:`held_whole`): its
    workspace-relative name, bytes and version (``None``, ``None`` while it does not exist)."""

    shown: str
    raw: bytes | None
    version: FileVersion | None
    _loc: Located

    def replace(self, content: str, verb: str, changed: str) -> FileVersion:
        """Write ``content`` in its place atomically, provided the file is still the version read
        when the new one is ready to be renamed over it (else ``ToolError(changed)``, nothing
        written); the version written."""
        loc, payload = self._loc, content.encode("utf-8")
        _make_dirs(loc)
        written = atomic_replace(loc, payload, verb, install=lambda tmp: swap_in(
            loc.dir_fd, tmp, loc.name, self.version, changed))
        return FileVersion.of(written, hashlib.sha256(payload).hexdigest())


@contextlib.contextmanager
def held_whole(root: Path, path: str, verb: str, *, missing_ok: bool = False) -> Iterator[HeldFile]:
    """:func:`read_whole` under an exclusive lock on the file's directory, held for the ``with``
    block, whose :meth:`HeldFile.replace` writes back only over the version read (compare and
    swap, :mod:`.file_version`). Confined like every file tool."""
    with _locate(root, path) as loc:
        lock = lock_directory(loc.dir_fd, loc.shown)
        try:
            with contextlib.suppress(FileNotFoundError):  # what the name holds now that the lock is ours
                loc.st = None
                loc.st = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
            if loc.st is None and not missing_ok:
                raise ToolError(f"no such file: {loc.shown}")
            _check_target(loc, verb)
            raw = version = None
            if loc.st is not None:
                with os.fdopen(_open_regular(loc, verb), "rb") as fh:
                    raw = fh.read()
                    version = FileVersion.of(os.fstat(fh.fileno()), hashlib.sha256(raw).hexdigest())
            yield HeldFile(loc.shown, raw, version, loc)
        finally:
            os.close(lock)


def read_file(root: Path, path: str, start_line: int | None = None, end_line: int | None = None,
              max_chars: int = 20_000) -> FileResult:
    """The file's lines, numbered from 1 (``cat -n`` style), optionally only ``start_line..end_line``.

    At most about ``max_chars`` characters come back: a longer file (or range) is cut at a line
    boundary with a line saying how big the file is and which ``start_line`` continues it. The
    file is streamed, never loaded whole, so a 200 MB log costs one window of memory.
    """
    first = 1 if start_line is None else start_line
    if first < 1:
        raise ToolError(f"start_line must be 1 or more, got {first}")
    if end_line is not None and end_line < first:
        raise ToolError(f"end_line {end_line} is before start_line {first}")
    with _locate(root, path, spill_read=True) as loc:
        fd = _open_regular(loc, "read_file")
    shown = loc.shown
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(_BINARY_SNIFF_BYTES)
        if _looks_binary(head):
            raise ToolError(f"{shown} looks like a binary file ({size:,} bytes); the file tools only handle text")
        fh.seek(0)
        window = read_window(fh, first, end_line, max(max_chars - 300, 1_000))
    total = window.total
    data = {"path": shown, "lines": total, "bytes": size}
    if total == 0:
        return FileResult(f"({shown} is empty)", data)
    if first > total:
        raise ToolError(f"start_line {first} is past the end of {shown} ({total:,} lines)")
    last = window.last
    width = max(6, len(str(last)))
    body = "\n".join(f"{n:>{width}}\t{line}" for n, line in window.rows)
    wanted_last = total if end_line is None else min(end_line, total)
    if first != 1 or last != total:
        span = f"line {first:,}" if first == last else f"lines {first:,}-{last:,}"
        body += f"\n[{span} of {total:,} in {shown}"
        if last < wanted_last:
            body += f" ({size:,} bytes); output is bounded, continue with start_line={last + 1}"
        body += "]"
    return FileResult(body, {**data, "start_line": first, "end_line": last})


# -- writing -----------------------------------------------------------------------------------

def _count_lines(text: str) -> int:
    return len(text.splitlines())


def _make_dirs(loc: Located) -> None:
    """Create the missing directories of ``loc`` one by one, moving ``loc.dir_fd`` down (never via a link)."""
    for name in loc.missing:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=loc.dir_fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=loc.dir_fd)
        os.close(loc.dir_fd)
        loc.dir_fd = fd
    loc.missing = ()


def _check_target(loc: Located, verb: str) -> None:
    st = loc.st
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{loc.shown} is a directory; {verb} needs a file path")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{loc.shown} is not a regular file (a FIFO, socket or device); {verb} refuses it")
    if st.st_nlink > 1:
        raise WorkspaceError(f"refused: {loc.shown} has {st.st_nlink} hard links; another name for the same file may "
                             f"lie outside the workspace, so {verb} does not change it")


def write_file(root: Path, path: str, content: str) -> FileResult:
    """Create or replace a file (parent directories included) with ``content``, atomically."""
    payload = content.encode("utf-8")
    with _locate(root, path) as loc:
        _check_target(loc, "write_file")
        created = loc.st is None
        _make_dirs(loc)
        atomic_replace(loc, payload, "write_file")
        shown = loc.shown
    lines = _count_lines(content)
    verb = "created" if created else "replaced"
    return FileResult(f"{verb} {shown}: wrote {len(payload):,} bytes ({lines:,} lines)",
                      {"path": shown, "bytes": len(payload), "lines": lines, "created": created})


def edit_file(root: Path, path: str, old: str, new: str, replace_all: bool = False) -> FileResult:
    """Replace the exact text ``old`` with ``new``: once (it must be unique) or everywhere."""
    loc, text = _read_text(root, path)
    with loc:
        _check_target(loc, "edit_file")
        return _apply_edit(loc, text, old, new, replace_all)


def _apply_edit(loc: Located, text: str, old: str, new: str, replace_all: bool) -> FileResult:
    shown = loc.shown
    if not old:
        raise ToolError("old must not be empty; to create or overwrite a whole file use write_file")
    if old == new:
        raise ToolError(f"old and new are identical; nothing to change in {shown}")
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old:
        # A file with Windows line ends, edited with text the model wrote with "\n": match in kind.
        crlf_old = old.replace("\r\n", "\n").replace("\n", "\r\n")
        if crlf_old in text:
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
    if count == 0:
        hint = ""
        if old.strip() and old.strip() in text:
            hint = " (the text matches only with different leading or trailing whitespace)"
        raise ToolError(f"no match for the given text in {shown}{hint}; read_file shows the current text, "
                        f"and old must match it exactly, including indentation")
    if count > 1 and not replace_all:
        raise ToolError(f"the given text matches {count} places in {shown}; add surrounding lines to make it "
                        f"unique or pass replace_all")
    first_at = text.index(old)
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    atomic_replace(loc, updated.encode("utf-8"), "edit_file")
    start = text.count("\n", 0, first_at) + 1
    end = start + max(new.count("\n") - (1 if new.endswith("\n") else 0), 0)
    where = f"line {start}" if start == end else f"lines {start}-{end}"
    replaced = f"{count} occurrences" if replace_all and count > 1 else "1 occurrence"
    return FileResult(f"edited {shown}: replaced {replaced} (first at {where})",
                      {"path": shown, "replacements": count if replace_all else 1, "line": start})


# -- listing and searching ---------------------------------------------------------------------

def _is_state_dir(name: str) -> bool:
    return name.lower() == STATE_DIR_NAME


def list_files(root: Path, path: str = ".") -> FileResult:
    """One directory level: subdirectories first (with a trailing ``/``), then files with sizes."""
    with _locate(root, path or ".") as loc:
        shown = loc.shown
        if loc.st is None:
            raise ToolError(f"no such directory: {shown}")
        if not stat.S_ISDIR(loc.st.st_mode):
            return FileResult(f"{shown}  ({loc.st.st_size:,} bytes)", {"path": shown, "entries": 1})
        fd = open_located(loc, os.O_RDONLY | os.O_DIRECTORY)
    dirs: list[str] = []
    files: list[str] = []
    try:
        for child in sorted(os.scandir(fd), key=lambda e: e.name):
            if _is_state_dir(child.name):
                continue  # soba's own state is not the agent's to see
            rel = child.name if shown == "." else f"{shown}/{child.name}"
            if child.is_symlink():
                files.append(f"{rel} -> {os.readlink(child.name, dir_fd=fd)}")
            elif child.is_dir(follow_symlinks=False):
                dirs.append(rel + "/")
            else:
                try:
                    files.append(f"{rel}  ({child.stat(follow_symlinks=False).st_size:,} bytes)")
                except OSError:
                    files.append(rel)
    finally:
        os.close(fd)
    entries = dirs + files
    if not entries:
        return FileResult(f"({shown} is an empty directory)", {"path": shown, "entries": 0})
    text = "\n".join(entries[:_MAX_LISTED])
    if len(entries) > _MAX_LISTED:
        text += f"\n[{len(entries) - _MAX_LISTED:,} more entries not shown]"
    return FileResult(text, {"path": shown, "entries": len(entries)})


_GLOB_CHARS = frozenset("*?[{")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over POSIX relative paths.

    ``*`` and ``?`` stay within one path segment, ``**`` spans segments (``**/`` also matches
    none), ``[abc]`` / ``[!abc]`` are classes and ``{a,b}`` alternatives (not nested).
    """
    return re.compile("(?s:" + _glob_body(pattern) + r")\Z")


def _glob_body(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (close := pattern.find("]", i + 2)) > 0:
            inner = pattern[i + 1:close]
            negate = inner.startswith("!")
            inner = inner[1:] if negate else inner
            out.append("[" + ("^" if negate else "") + inner.replace("\\", "\\\\") + "]")
            i = close
        elif c == "{" and (close := pattern.find("}", i)) > 0 and "," in pattern[i:close]:
            alternatives = pattern[i + 1:close].split(",")
            out.append("(?:" + "|".join(_glob_body(a) for a in alternatives) + ")")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Found:
    """A directory entry met by the walk: its path inside the workspace and where to open it."""

    rel: str
    name: str
    dir_fd: int
    st: os.stat_result


def _walk_files(root: Path, start: Located, keep: frozenset[str]) -> Iterator[_Found]:
    """Entries (not directories) under ``start`` in sorted order, never through a link, never into
    ``.soba``, and not into noise dirs unless named in ``keep``. ``dir_fd`` is valid while iterating."""
    fd = open_located(start, os.O_RDONLY | os.O_DIRECTORY)
    prefix = "" if start.shown == "." else start.shown + "/"
    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not _is_state_dir(d) and (d not in NOISE_DIRS or d in keep))
            rel_dir = prefix + dirpath[2:] + ("/" if len(dirpath) > 2 else "")
            for name in sorted(filenames):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                yield _Found(rel_dir + name, name, dir_fd, st)
    finally:
        os.close(fd)


def _named(text: str) -> frozenset[str]:
    """Noise-dir names the user spelled out in a pattern or path: those are searched after all."""
    parts = set(re.split(r"[/\\]", text))
    return frozenset(d for d in NOISE_DIRS if d in parts)


def glob_files(root: Path, pattern: str) -> FileResult:
    """Workspace files whose relative path matches ``pattern`` (``**/*.py``, ``src/*.{ts,tsx}``)."""
    if not pattern.strip():
        raise ToolError("pattern must not be empty; for example **/*.py")
    text = pattern
    if Path(text).is_absolute():
        resolved_root = root.resolve()
        literal = Path(text.split("*")[0].split("?")[0].split("[")[0].split("{")[0])
        resolve_in_workspace(resolved_root, literal)  # refuses an absolute pattern outside the root
        text = os.path.relpath(text, resolved_root).replace(os.sep, "/")
    while text.startswith("./"):
        text = text[2:]
    parts = text.split("/")
    literal_parts: list[str] = []
    for part in parts[:-1]:
        if _GLOB_CHARS & set(part):
            break
        literal_parts.append(part)
    matcher = glob_regex(text)
    matches: list[str] = []
    with _locate(root, "/".join(literal_parts) or ".") as start:
        if start.st is not None and stat.S_ISDIR(start.st.st_mode):
            matches = [f.rel for f in _walk_files(root, start, _named(text)) if matcher.match(f.rel)]
        elif start.st is not None and matcher.match(start.shown):
            matches.append(start.shown)
    if not matches:
        return FileResult(f"no files match {pattern}", {"pattern": pattern, "matches": 0})
    body = "\n".join(matches[:_MAX_LISTED])
    if len(matches) > _MAX_LISTED:
        body += f"\n[{len(matches) - _MAX_LISTED:,} more matches not shown; narrow the pattern]"
    return FileResult(body, {"pattern": pattern, "matches": len(matches)})


def grep_files(root: Path, pattern: str, path: str = ".", glob: str | None = None,
               stopped: Callable[[], bool] | None = None) -> FileResult:
    """Lines matching the regex ``pattern`` as ``file:line: text``, in text files under ``path``.

    A line whose search takes over :data:`GREP_MATCH_TIMEOUT_SEC` ends the grep with a
    :class:`ToolError` naming the pattern and the line; ``stopped()`` (the user's stop) is asked
    before every line, and a true answer ends it with what was found so far."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    name_filter = glob_regex(glob) if glob else None
    filter_on_name = bool(glob) and "/" not in (glob or "")
    hits: list[str] = []
    searched = 0
    capped = cancelled = False
    loops: list[str] = []
    with _locate(root, path or ".") as start:
        shown = start.shown
        if start.st is None:
            raise ToolError(f"no such file or directory: {shown}")
        if stat.S_ISDIR(start.st.st_mode):
            found: Iterator[_Found] = _walk_files(root, start, _named(path or "") | _named(glob or ""))
        else:
            found = iter([_Found(shown, start.name, start.dir_fd, start.st)])
        for entry in found:
            if name_filter is not None and not name_filter.match(entry.name if filter_on_name else entry.rel):
                continue
            raw = _grep_read(root, entry, loops)
            if raw is None or _looks_binary(raw[:_BINARY_SNIFF_BYTES]):
                continue
            searched += 1
            for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
                if stopped is not None and stopped():
                    cancelled = True
                    break
                try:
                    found_here = compiled.search(line, timeout=GREP_MATCH_TIMEOUT_SEC, concurrent=True)
                except TimeoutError:
                    raise ToolError(
                        f"the pattern /{pattern}/ timed out on {entry.rel}:{number} (over "
                        f"{GREP_MATCH_TIMEOUT_SEC:g}s on one line: nested or overlapping repetition such as "
                        f"(a+)+ or (a|aa)+ backtracks without end); grep stopped after {len(hits):,} matches. "
                        f"Simplify the pattern") from None
                if found_here:
                    if len(line) > _MAX_GREP_LINE_CHARS:
                        line = line[:_MAX_GREP_LINE_CHARS] + " …"
                    hits.append(f"{entry.rel}:{number}: {line}")
                    if len(hits) >= _MAX_GREP_MATCHES:
                        capped = True
                        break
            if capped or cancelled:
                break
    note = ""
    if loops:
        shown_loops = ", ".join(loops[:5]) + (f" and {len(loops) - 5:,} more" if len(loops) > 5 else "")
        note = f"\n[skipped {len(loops):,} symbolic link{'s' if len(loops) > 1 else ''} that loop: {shown_loops}]"
    data = {"pattern": pattern, "path": shown, "matches": len(hits), "files_searched": searched}
    if cancelled:
        note += f"\n[grep stopped by the user after {len(hits):,} matches in {searched:,} files]"
        data["cancelled"] = True
    if not hits:
        where = shown + (f" (files matching {glob})" if glob else "")
        return FileResult(f"no matches for /{pattern}/ in {where} ({searched:,} files searched){note}", data)
    body = "\n".join(hits)
    if capped:
        body += f"\n[stopped after {_MAX_GREP_MATCHES} matches; narrow the pattern, path or glob]"
    return FileResult(body + note, {**data, "capped": capped, "skipped_loops": len(loops)})


def _grep_read(root: Path, entry: _Found, loops: list[str]) -> bytes | None:
    """The bytes of a regular text file grep may search; links are walked inside the workspace only."""
    st = entry.st
    if stat.S_ISLNK(st.st_mode):
        try:
            with _locate(root, entry.rel) as loc:
                if loc.st is None or not stat.S_ISREG(loc.st.st_mode) or loc.st.st_size > _MAX_GREP_FILE_BYTES:
                    return None
                fd = open_located(loc, os.O_RDONLY | os.O_NONBLOCK)
        except WorkspaceError as exc:
            if "loop" in str(exc):
                loops.append(entry.rel)
            return None  # a link pointing outside the workspace (or into .soba) is never read
        except OSError:
            return None
    else:
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_GREP_FILE_BYTES:
            return None  # FIFOs, sockets and devices are never opened
        try:
            fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=entry.dir_fd)
        except OSError:
            return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(_MAX_GREP_FILE_BYTES + 1)
