"""Byte-level file work for the file tools: atomic replacement and bounded, streamed reading.

* :func:`atomic_replace` writes a temporary file in the target's own directory (opened
  relative to that directory's descriptor, never through a link), fsyncs it, gives it the old
  file's mode (and owner, when allowed), renames it over the target and fsyncs the directory.
  On any failure (a full disk, an I/O error) the temporary file is removed and the old file is
  left byte-identical; the error names the path and the cause. ``install``, when given, puts the
  complete temporary file in place instead of the plain rename: a compare-and-swap writer
  (:mod:`.file_version`) swaps it in only over the version it read, and an exception from it
  leaves the target as it was (a :class:`~.file_version.SetAside` error keeps the temporary name,
  which then holds somebody else's save).
* :func:`read_window` streams a file once, keeping only the lines of the requested window up to
  a character budget and counting the rest, so a 200 MB file costs one window of memory.
"""

from __future__ import annotations

import contextlib
import os
import secrets as _random
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from ..errors import ToolError
from .file_version import SetAside

if TYPE_CHECKING:
    from .confine import Located

__all__ = ["Window", "atomic_replace", "read_window"]

_CHUNK = 1 << 20


def atomic_replace(loc: Located, payload: bytes, verb: str, *,
                   install: Callable[[str], None] | None = None) -> os.stat_result:
    """Replace (or create) ``loc`` with ``payload`` so that a failure leaves the old file untouched;
    the written file's status (its inode and mtime are the target's from the rename on)."""
    tmp = f".{loc.name}.soba-tmp-{_random.token_hex(4)}"
    old_mode = None if loc.st is None else loc.st.st_mode & 0o7777
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=loc.dir_fd)
    except OSError as exc:
        raise ToolError(_failure(loc, verb, exc)) from None
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            if old_mode is not None and loc.st is not None:
                os.fchmod(fd, old_mode)
                with contextlib.suppress(OSError):
                    os.fchown(fd, loc.st.st_uid, loc.st.st_gid)
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        if install is not None:
            install(tmp)
        else:
            os.rename(tmp, loc.name, src_dir_fd=loc.dir_fd, dst_dir_fd=loc.dir_fd)
    except BaseException as exc:
        if not isinstance(exc, SetAside):
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=loc.dir_fd)
        if isinstance(exc, OSError):
            raise ToolError(_failure(loc, verb, exc)) from None
        raise
    with contextlib.suppress(OSError):
        os.fsync(loc.dir_fd)
    return written


def _failure(loc: Located, verb: str, exc: OSError) -> str:
    state = "was not created" if loc.st is None else "was left unchanged"
    return f"{verb} could not write {loc.shown}: {exc.strerror or exc}; the file {state}"


@dataclass(frozen=True, slots=True)
class Window:
    """The numbered lines kept (``rows``), the last line number kept, and the file's line count."""

    rows: tuple[tuple[int, str], ...]
    last: int
    total: int


def read_window(fh: IO[bytes], first: int, end: int | None, budget: int) -> Window:
    """Lines ``first..end`` of ``fh`` (1-based, inclusive) within ``budget`` characters, plus the total.

    A single line longer than the budget is cut with a marker naming its length.
    """
    rows: list[tuple[int, str]] = []
    used = 0
    line_no = 0
    full = False
    partial = b""
    partial_len = 0
    last_byte = b""
    keep = budget * 4 + 8  # bytes of one line worth keeping (UTF-8: up to 4 bytes a character)

    def take(raw: bytes, raw_len: int) -> None:
        nonlocal used, full
        if full or line_no < first or (end is not None and line_no > end):
            return
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if raw_len > len(raw) or len(text) > budget:
            text = text[:budget] + f" … [line cut: {raw_len:,} bytes in all]"
        if rows and used + len(text) + 10 > budget:
            full = True
            return
        rows.append((line_no, text))
        used += len(text) + 10

    while True:
        data = fh.read(_CHUNK)
        if not data:
            break
        last_byte = data[-1:]
        if full or (end is not None and line_no >= end):
            line_no += data.count(b"\n")
            continue
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                piece = data[start:]
                partial_len += len(piece)
                if len(partial) < keep:
                    partial += piece[:keep - len(partial)]
                break
            piece = data[start:nl]
            line_no += 1
            if len(partial) < keep:
                partial += piece[:keep - len(partial)]
            take(partial, partial_len + len(piece))
            partial, partial_len = b"", 0
            start = nl + 1
            if full or (end is not None and line_no >= end):
                line_no += data.count(b"\n", start)
                break
    if last_byte and last_byte != b"\n":
        line_no += 1  # a last line without a newline
        if partial_len:
            take(partial, partial_len)
    last = rows[-1][0] if rows else min(first, line_no)
    return Window(tuple(rows), last, line_no)
