"""Reading the lines of a session file: the header, one JSON value per line, a torn tail's copy.

:class:`~.store.SessionStore` owns the file, its lock and its entry tree; this module owns only
how the bytes of a JSONL session read: the header's checks (:data:`FORMAT_VERSION`), the fast
line-by-line JSON scan with a per-line fallback that reports what it skips, the copy of a torn
last line beside the session, and opening a session file for reading (never a FIFO).
"""

from __future__ import annotations

import contextlib
import json
import json.scanner
import os
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import SessionError, SessionWarning
from ..statefiles import open_state_file, state_dir

__all__ = ["FORMAT_VERSION", "line_starts", "open_session_file", "parse_header", "parse_lines", "quarantine"]

#: Version of the on-disk format written in every header. Readers accept older and newer files
#: (newer ones read-only, with unknown entry types kept and ignored).
FORMAT_VERSION = 1

_SCANNER = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: it takes the decoder
_BAD = object()


def parse_header(file: Path, line: bytes) -> dict[str, Any]:
    """The header (first line) of ``file``; a missing or invalid one is a SessionError, a newer format a warning."""
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("type") != "session":
        raise SessionError(f"{file}:1: missing session header: the first line must be a "
                           f'{{"type": "session", "version": ...}} object')
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SessionError(f"{file}:1: session header has an invalid format version {version!r} "
                           f"(expected an integer from 1 to {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        warnings.warn(f"{file}:1: session format version {version} is newer than this soba_notebook "
                      f"understands ({FORMAT_VERSION}); opening read-only, unknown entries are kept "
                      f"and ignored", SessionWarning, stacklevel=4)
    if not isinstance(header.get("id"), str):
        header["id"] = file.stem
    return header


def quarantine(file: Path, tail: bytes, offset: int) -> str:
    """Copy a torn tail beside the session (``<id>.jsonl.torn-<offset>``) so the user can see it.

    Returns the end of the warning: where the copy is, or that nothing could be copied and why.
    A copy is complete or absent: one cut short (a full disk) is removed, and a copy that an
    earlier open left without the bytes is made again, so the warning never points at a file
    that lacks them."""
    copy = file.with_name(f"{file.name}.torn-{offset}")
    if _holds(copy, tail):
        return f"; a copy of its bytes is in {copy}"
    written = False
    try:
        with state_dir(copy.parent) as dir_fd, contextlib.suppress(FileNotFoundError):
            os.unlink(copy.name, dir_fd=dir_fd)  # an incomplete copy from an earlier open (a link: the link)
        fd = open_state_file(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(tail)
            while view:
                view = view[os.write(fd, view):]
            written = True
        finally:
            os.close(fd)
            if not written:
                with contextlib.suppress(OSError):
                    os.unlink(copy)
    except OSError as exc:  # a StateFileError (a planted link) says so in its message
        return (f"; its bytes could not be copied to {copy.name} beside it ({exc.strerror or exc}), nothing "
                f"was copied and the next open tries again")
    return f"; a copy of its bytes is in {copy}"


def _holds(copy: Path, tail: bytes) -> bool:
    """Whether ``copy`` is a regular file holding exactly ``tail``."""
    try:
        fd = open_state_file(copy, os.O_RDONLY)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        return os.fstat(fd).st_size == len(tail) and fh.read(len(tail) + 1) == tail


def parse_lines(file: Path, region: bytes, first_line: int,
                problem: Callable[[str], None]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; bad lines are reported to ``problem`` and skipped.

    The fast path decodes the batch once and runs the C scanner line by line over one string,
    which avoids ``json.loads``' per-call overhead (about a third of the cost of opening a
    large session); any line it cannot take is re-parsed on its own to report the error.
    """
    values = _parse_as_one_array(region)
    if values is not None:
        yield from enumerate(values, first_line)
        return
    try:
        text = region.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        scan = _SCANNER
        pos, line_no, size = 0, first_line, len(text)
        while pos < size:
            nl = text.find("\n", pos)
            if nl < 0:
                nl = size
            if nl > pos:
                try:
                    obj, end = scan(text, pos)
                except (StopIteration, ValueError, RecursionError):
                    obj, end = _BAD, pos
                if obj is _BAD or (end != nl and text[end:nl].strip()):
                    yield from _parse_slow(file, [text[pos:nl].encode()], line_no, problem)
                else:
                    yield line_no, obj
            pos, line_no = nl + 1, line_no + 1
        return
    yield from _parse_slow(file, region.split(b"\n")[:-1], first_line, problem)

def _parse_as_one_array(region: bytes) -> list[Any] | None:
    """Every line of ``region`` parsed in one call of the C scanner, as the items of one JSON
    array, or None when that is not certainly what the line-by-line scan would read.

    One call shares one object per distinct key across the batch (the scanner memoizes keys
    within a call): a long session's entries repeat a few dozen keys (``role``, ``content``,
    ``usage``…), and a copy of each per line was a quarter of the memory an entry takes.
    A JSON string holds no raw newline, so in a file of one value per line every newline lies
    between two values and reads as the array's comma. Anything else (a blank line, a value that
    is not an object, a line that is not exactly one value: the count differs) falls back to the
    line-by-line scan, which reports what it skips. The commas go in before decoding: on bytes
    it is a memchr, on a string with one emoji in it a copy at four bytes a character.
    """
    lines = region.count(b"\n")
    if lines < 2 or region[-1] != 0x0A or region[0] == 0x0A or b"\n\n" in region:
        return None
    try:
        values, _ = _SCANNER((b"[" + region[:-1].replace(b"\n", b",") + b"]").decode("utf-8"), 0)
    except (StopIteration, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if values.__class__ is not list or len(values) != lines or not all(v.__class__ is dict for v in values):
        return None
    return values


def _parse_slow(file: Path, chunks: list[bytes], first_line: int,
                problem: Callable[[str], None]) -> Iterator[tuple[int, Any]]:
    for i, chunk in enumerate(chunks):
        if not chunk.strip():
            continue
        try:
            yield first_line + i, json.loads(chunk)
        except ValueError as exc:
            problem(f"{file}:{first_line + i}: not valid JSON ({exc}); line skipped, file unchanged")
        except RecursionError:
            problem(f"{file}:{first_line + i}: JSON nested too deeply to be an entry; line skipped, "
                          f"file unchanged")


def open_session_file(file: Path) -> Any:
    """``file`` opened for reading, refused unless it is a regular file: a FIFO would hang the kernel."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SessionError(f"{file}: not a regular file (a FIFO, socket or device); a session is a .jsonl file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def line_starts(region: bytes) -> list[int]:
    """Where each line of ``region`` starts, and one past its last newline: line ``k`` is
    ``region[starts[k]:starts[k + 1] - 1]``."""
    starts = [0]
    find = region.find
    nl = find(b"\n")
    while nl >= 0:
        starts.append(nl + 1)
        nl = find(b"\n", nl + 1)
    return starts
