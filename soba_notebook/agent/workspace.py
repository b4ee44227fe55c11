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

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ToolError, WorkspaceError

__all__ = [
    "NOISE_DIRS",
    "PROTECTED_PATHS",
    "FileResult",
    "display_path",
    "edit_file",
    "glob_files",
    "glob_regex",
    "grep_files",
    "list_files",
    "read_file",
    "resolve_in_workspace",
    "write_file",
]

#: Directories that ``glob`` and ``grep`` do not descend into unless the pattern or path names them:
#: version control, virtual environments, caches and soba's own state.
NOISE_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache", ".tox", ".ipynb_checkpoints", ".soba"})

#: Workspace-relative paths the write tools refuse: soba's append-only transcripts and flight log.
PROTECTED_PATHS = (".soba/sessions", ".soba/flight.jsonl")

_BINARY_SNIFF_BYTES = 8192
_MAX_LISTED = 1000
_MAX_GREP_MATCHES = 500
_MAX_GREP_LINE_CHARS = 400
_MAX_GREP_FILE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileResult:
    """What a file operation produced: the text for the model and structured extras for the UI."""

    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


# -- confinement -------------------------------------------------------------------------------

def resolve_in_workspace(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """The real path ``path`` names, provided it lies inside ``root``.

    Relative paths resolve against ``root``; absolute paths must already be inside it. Symbolic
    links are followed (for every component that exists), so a link pointing outside is refused
    just like ``../``. Raises :class:`WorkspaceError` naming the path and the root.
    """
    base = Path(root).resolve()
    text = os.fspath(path)
    if "\x00" in text:
        raise WorkspaceError(f"refused: {text!r} contains a NUL character")
    raw = Path(text).expanduser() if text.startswith("~") else Path(text)
    candidate = raw if raw.is_absolute() else base / raw
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise WorkspaceError(f"refused: {text} cannot be resolved inside the workspace {base} ({exc})") from None
    if resolved == base or resolved.is_relative_to(base):
        return resolved
    lexical = Path(os.path.normpath(candidate))
    if lexical == base or lexical.is_relative_to(base):
        raise WorkspaceError(f"refused: {text} is outside the workspace {base} "
                             f"(it resolves to {resolved} through a symbolic link)")
    raise WorkspaceError(f"refused: {text} is outside the workspace {base}")


def display_path(root: str | os.PathLike[str], path: Path) -> str:
    """``path`` relative to the workspace root in POSIX form (``"."`` for the root itself)."""
    base = Path(root).resolve()
    try:
        rel = path.relative_to(base)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."


def _check_writable(root: Path, target: Path, shown: str) -> None:
    rel = display_path(root, target)
    for protected in PROTECTED_PATHS:
        if rel == protected or rel.startswith(protected + "/"):
            raise WorkspaceError(f"refused: {shown} is part of soba's append-only history ({protected}); "
                                 f"tools may not write there")


# -- reading -----------------------------------------------------------------------------------

def _looks_binary(head: bytes) -> bool:
    return b"\x00" in head


def _read_text(root: Path, path: str, *, strict: bool = False) -> tuple[Path, str, str]:
    """(resolved path, shown path, text) of an existing text file, or a clear ToolError."""
    target = resolve_in_workspace(root, path)
    shown = display_path(root, target)
    if not target.exists():
        raise ToolError(f"no such file: {shown}")
    if target.is_dir():
        raise ToolError(f"{shown} is a directory, not a file; use list_files to see what it contains")
    if not target.is_file():
        raise ToolError(f"{shown} is not a regular file")
    raw = target.read_bytes()
    if _looks_binary(raw[:_BINARY_SNIFF_BYTES]):
        raise ToolError(f"{shown} looks like a binary file ({len(raw):,} bytes); the file tools only handle text")
    if strict:
        try:
            return target, shown, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{shown} is not valid UTF-8 (byte {exc.start}); edit_file only edits UTF-8 text, "
                            f"so the file was left unchanged") from None
    return target, shown, raw.decode("utf-8", errors="replace")


def read_file(root: Path, path: str, start_line: int | None = None, end_line: int | None = None) -> FileResult:
    """The file's lines, numbered from 1 (``cat -n`` style), optionally only ``start_line..end_line``."""
    _, shown, text = _read_text(root, path)
    lines = text.splitlines()
    total = len(lines)
    first = 1 if start_line is None else start_line
    last = total if end_line is None else min(end_line, total)
    if first < 1:
        raise ToolError(f"start_line must be 1 or more, got {first}")
    if end_line is not None and end_line < first:
        raise ToolError(f"end_line {end_line} is before start_line {first}")
    data = {"path": shown, "lines": total}
    if total == 0:
        return FileResult(f"({shown} is empty)", data)
    if first > total:
        raise ToolError(f"start_line {first} is past the end of {shown} ({total} lines)")
    width = max(6, len(str(last)))
    body = "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(first, last + 1))
    if first != 1 or last != total:
        span = f"line {first}" if first == last else f"lines {first}-{last}"
        body += f"\n[{span} of {total} in {shown}]"
    return FileResult(body, {**data, "start_line": first, "end_line": last})


# -- writing -----------------------------------------------------------------------------------

def _count_lines(text: str) -> int:
    return len(text.splitlines())


def write_file(root: Path, path: str, content: str) -> FileResult:
    """Create or replace a file (parent directories included) with ``content``."""
    target = resolve_in_workspace(root, path)
    shown = display_path(root, target)
    _check_writable(root, target, shown)
    if target.is_dir():
        raise ToolError(f"{shown} is a directory; write_file needs a file path")
    created = not target.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = content.encode("utf-8")
    target.write_bytes(payload)
    lines = _count_lines(content)
    verb = "created" if created else "replaced"
    return FileResult(f"{verb} {shown}: wrote {len(payload):,} bytes ({lines:,} lines)",
                      {"path": shown, "bytes": len(payload), "lines": lines, "created": created})


def edit_file(root: Path, path: str, old: str, new: str, replace_all: bool = False) -> FileResult:
    """Replace the exact text ``old`` with ``new``: once (it must be unique) or everywhere."""
    target, shown, text = _read_text(root, path, strict=True)
    _check_writable(root, target, shown)
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
    target.write_bytes(updated.encode("utf-8"))
    start = text.count("\n", 0, first_at) + 1
    end = start + max(new.count("\n") - (1 if new.endswith("\n") else 0), 0)
    where = f"line {start}" if start == end else f"lines {start}-{end}"
    replaced = f"{count} occurrences" if replace_all and count > 1 else "1 occurrence"
    return FileResult(f"edited {shown}: replaced {replaced} (first at {where})",
                      {"path": shown, "replacements": count if replace_all else 1, "line": start})


# -- listing and searching ---------------------------------------------------------------------

def list_files(root: Path, path: str = ".") -> FileResult:
    """One directory level: subdirectories first (with a trailing ``/``), then files with sizes."""
    target = resolve_in_workspace(root, path or ".")
    shown = display_path(root, target)
    if not target.exists():
        raise ToolError(f"no such directory: {shown}")
    if not target.is_dir():
        size = target.stat().st_size
        return FileResult(f"{shown}  ({size:,} bytes)", {"path": shown, "entries": 1})
    dirs: list[str] = []
    files: list[str] = []
    for child in sorted(target.iterdir(), key=lambda p: p.name):
        rel = child.name if shown == "." else f"{shown}/{child.name}"
        if child.is_symlink():
            files.append(f"{rel} -> {os.readlink(child)}")
        elif child.is_dir():
            dirs.append(rel + "/")
        else:
            try:
                files.append(f"{rel}  ({child.stat().st_size:,} bytes)")
            except OSError:
                files.append(rel)
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


def _walk_files(start: Path, keep: frozenset[str]) -> Iterator[Path]:
    """Files under ``start`` in sorted order, not descending into noise dirs unless named in ``keep``."""
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in NOISE_DIRS or d in keep)
        for name in sorted(filenames):
            yield Path(dirpath) / name


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
    start = resolve_in_workspace(root, "/".join(literal_parts) or ".")
    base = root.resolve()
    matcher = glob_regex(text)
    matches: list[str] = []
    if start.is_dir():
        for file in _walk_files(start, _named(text)):
            rel = display_path(base, file)
            if matcher.match(rel):
                matches.append(rel)
    elif start.is_file() and matcher.match(display_path(base, start)):
        matches.append(display_path(base, start))
    if not matches:
        return FileResult(f"no files match {pattern}", {"pattern": pattern, "matches": 0})
    body = "\n".join(matches[:_MAX_LISTED])
    if len(matches) > _MAX_LISTED:
        body += f"\n[{len(matches) - _MAX_LISTED:,} more matches not shown; narrow the pattern]"
    return FileResult(body, {"pattern": pattern, "matches": len(matches)})


def grep_files(root: Path, pattern: str, path: str = ".", glob: str | None = None) -> FileResult:
    """Lines matching the regex ``pattern`` as ``file:line: text``, in text files under ``path``."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    start = resolve_in_workspace(root, path or ".")
    base = root.resolve()
    shown = display_path(base, start)
    if not start.exists():
        raise ToolError(f"no such file or directory: {shown}")
    name_filter = glob_regex(glob) if glob else None
    filter_on_name = bool(glob) and "/" not in (glob or "")
    files = [start] if start.is_file() else _walk_files(start, _named(path or "") | _named(glob or ""))
    hits: list[str] = []
    searched = 0
    capped = False
    for file in files:
        rel = display_path(base, file)
        if name_filter is not None and not name_filter.match(file.name if filter_on_name else rel):
            continue
        try:
            if file.is_symlink() and not file.resolve().is_relative_to(base):
                continue  # a link pointing outside the workspace is never read
            if not file.is_file() or file.stat().st_size > _MAX_GREP_FILE_BYTES:
                continue
            raw = file.read_bytes()
        except OSError:
            continue
        if _looks_binary(raw[:_BINARY_SNIFF_BYTES]):
            continue
        searched += 1
        for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                if len(line) > _MAX_GREP_LINE_CHARS:
                    line = line[:_MAX_GREP_LINE_CHARS] + " …"
                hits.append(f"{rel}:{number}: {line}")
                if len(hits) >= _MAX_GREP_MATCHES:
                    capped = True
                    break
        if capped:
            break
    data = {"pattern": pattern, "path": shown, "matches": len(hits), "files_searched": searched}
    if not hits:
        where = shown + (f" (files matching {glob})" if glob else "")
        return FileResult(f"no matches for /{pattern}/ in {where} ({searched:,} files searched)", data)
    body = "\n".join(hits)
    if capped:
        body += f"\n[stopped after {_MAX_GREP_MATCHES} matches; narrow the pattern, path or glob]"
    return FileResult(body, {**data, "capped": capped})
