"""Robust reading of foreign transcript files, with the line every value came from.

This module owns the step from *bytes on disk* to *JSON values with line numbers*, for files this
project did not write and cannot fix:

* :func:`read_jsonl` reads JSON Lines and never gives up on a file. Two objects run together on
  one line (older pi sessions have them) are split with :meth:`json.JSONDecoder.raw_decode` and
  reported; a line that is not JSON is reported with its number and skipped, the rest of the file
  is still read; an unterminated last line that does not parse is reported as truncated. Lines are
  split on ``\\n`` only, because U+2028 and friends may legally appear inside JSON strings.
* :func:`array_element_lines` finds the line on which each element of a JSON document's message
  array starts, so problems in ``.traj`` / ``.traj.json`` files can name ``file:line`` too.

Nothing here knows any agent's format; the format modules interpret the values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["JsonRecord", "JsonlRead", "array_element_lines", "read_jsonl"]

_DECODER = json.JSONDecoder()
#: the C scanner under json.loads: one value at a position; typeshed leaves it out of JSONDecoder
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_WS = " \t\r\n"


class JsonRecord(NamedTuple):
    """One JSON value read from a JSONL file.

    ``line`` is 1-based. ``part`` is 0 for the first value on its line and 1, 2… for values that
    were run together after it on the same line. A named tuple, immutable like a frozen dataclass
    and built in a third of its time: there is one per line of every imported file.
    """

    line: int
    value: Any
    part: int = 0

    @property
    def where(self) -> str:
        return f"{self.line}" if self.part == 0 else f"{self.line} (object {self.part + 1} on the line)"


@dataclass(frozen=True, slots=True)
class JsonlRead:
    """Everything :func:`read_jsonl` found: the values, and what it had to skip or repair."""

    records: tuple[JsonRecord, ...]
    problems: tuple[str, ...]
    lines: int
    run_together_lines: int = 0
    bad_lines: int = 0
    truncated_tail: bool = False
    #: the read stopped after this many lines of a longer file (``max_lines``); None: all of it
    head_lines: int | None = None


def read_jsonl(data: bytes, name: str, *, max_lines: int | None = None, head: JsonlRead | None = None) -> JsonlRead:
    """Parse ``data`` as JSON Lines; ``name`` prefixes every problem (``name:line: what``).

    ``max_lines`` stops after that many lines (format detection reads only the head of a file);
    a cut-off last line is then not reported as truncated. ``head`` is such a read of the same
    ``data``: its lines are not parsed again (an import reads the whole file after detection read
    its head), and the result is the one a read of the whole file gives.
    """
    if head is not None and head.head_lines is None and max_lines is None:
        return head  # the head was the whole file
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    chunks = data.split(b"\n", max_lines) if max_lines is not None else data.split(b"\n")
    limited = max_lines is not None and len(chunks) > max_lines
    if limited:  # the head of a longer file: its last chunk is the unread rest
        chunks = chunks[:max_lines]
    ends_with_newline = limited or chunks[-1] == b""
    if not limited and ends_with_newline:
        chunks.pop()
    last_nonempty = len(chunks) - 1  # searched from the end: usually the last line itself
    while last_nonempty >= 0 and not chunks[last_nonempty].strip():
        last_nonempty -= 1

    records: list[JsonRecord] = []
    problems: list[str] = []
    run_together = bad = start = 0
    if head is not None and head.head_lines is not None and max_lines is None and last_nonempty >= head.head_lines:
        # the head's lines were read as a whole read reads them (none of them is the last one)
        start = head.head_lines
        records.extend(head.records)
        problems.extend(head.problems)
        run_together, bad = head.run_together_lines, head.bad_lines
    truncated = False
    loads = json.loads
    scan = _SCAN
    for index in range(start, len(chunks)):
        chunk = chunks[index]
        line_no = index + 1
        if not chunk.strip():
            continue
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = chunk.decode("utf-8", errors="replace")
            problems.append(f"{name}:{line_no}: not valid UTF-8 at byte {exc.start + 1}; undecodable bytes "
                            f"replaced with U+FFFD")
        try:  # fastest path: one value filling the line, scanned as json.loads would without its wrappers
            value, end = scan(text, 0)
            if end == len(text) or not text[end:].strip(_WS):
                records.append(JsonRecord(line_no, value))
                continue
        except (StopIteration, ValueError):  # leading space, or not one value: json.loads says what
            pass
        try:  # fast path: one object on the line
            records.append(JsonRecord(line_no, loads(text)))
            continue
        except ValueError:
            pass
        values, pos, error = _decode_run(text)
        for part, value in enumerate(values):
            records.append(JsonRecord(line_no, value, part))
        if len(values) > 1:
            run_together += 1
            problems.append(f"{name}:{line_no}: {len(values)} JSON objects run together on one line; split "
                            f"and imported separately")
        if error is None:
            continue
        is_tail = index == last_nonempty and not limited
        cut_short = not ends_with_newline or error.startswith("Unterminated") or pos >= len(text.rstrip(_WS))
        if not values and is_tail and cut_short:
            truncated = True
            problems.append(f"{name}:{line_no}: truncated last line ({len(chunk)} bytes, {error}); skipped, "
                            f"everything before it was read")
        elif values:
            bad += 1
            problems.append(f"{name}:{line_no}: unreadable data after {len(values)} JSON object(s), column "
                            f"{pos + 1}: {error}; the rest of this line skipped")
        else:
            bad += 1
            problems.append(f"{name}:{line_no}: not valid JSON, column {pos + 1}: {error}; line skipped, the "
                            f"rest of the file is still read")
    return JsonlRead(tuple(records), tuple(problems), len(chunks), run_together, bad, truncated,
                     max_lines if limited else None)


def _decode_run(text: str) -> tuple[list[Any], int, str | None]:
    """Decode consecutive JSON values in ``text``; stop at the first error.

    Returns the values, the position where decoding stopped, and the error message (None when
    the whole text was consumed).
    """
    values: list[Any] = []
    pos = 0
    end = len(text)
    while True:
        while pos < end and text[pos] in _WS:
            pos += 1
        if pos >= end:
            return values, pos, None
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            return values, exc.pos, exc.msg
        values.append(value)


def array_element_lines(text: str, key: str | None) -> list[int]:
    """1-based line on which each element of a JSON array starts.

    ``key`` names the array inside a top-level object (``"messages"``, ``"history"``); ``None``
    means the document itself is the array. Returns ``[]`` when the array cannot be located; the
    caller then names elements by index instead.
    """
    try:
        pos = _skip_ws(text, 0)
        if key is not None:
            pos = _find_member(text, pos, key)
            if pos < 0:
                return []
        starts = _element_starts(text, pos)
    except (ValueError, IndexError):
        return []
    lines: list[int] = []
    line, last = 1, 0
    for start in starts:  # increasing: count newlines incrementally, in C
        line += text.count("\n", last, start)
        last = start
        lines.append(line)
    return lines


def _skip_ws(text: str, pos: int) -> int:
    end = len(text)
    while pos < end and text[pos] in _WS:
        pos += 1
    return pos


def _find_member(text: str, pos: int, key: str) -> int:
    """Position of the value of top-level member ``key`` of the object starting at ``pos``."""
    if text[pos] != "{":
        return -1
    pos = _skip_ws(text, pos + 1)
    while pos < len(text) and text[pos] != "}":
        name, pos = _DECODER.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text[pos] != ":":
            raise ValueError("expected ':'")
        pos = _skip_ws(text, pos + 1)
        if name == key:
            return pos
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
    return -1


def _element_starts(text: str, pos: int) -> Sequence[int]:
    if text[pos] != "[":
        return []
    starts: list[int] = []
    pos = _skip_ws(text, pos + 1)
    while pos < len(text) and text[pos] != "]":
        starts.append(pos)
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
    return starts
