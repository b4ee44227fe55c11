"""Shortening text for display without ever hiding that (or where) it was shortened.

Owns :func:`head_tail`, the one rule for showing a long tool result on screen: the first lines and
the last lines, with ``… N lines omitted …`` between them, and the last line always kept whole.
The end of a tool result matters most (a test run's summary and traceback, the shell's
``[exit code N]`` line), so it is never the part that is cut. A single over-long line is cut with
``… N characters omitted …`` in it. Pure functions, no I/O: the agent loop uses it for the
``tool_end`` event, the notebook renders what it returns.
"""

from __future__ import annotations

__all__ = ["HEAD_LINES", "LINE_CHARS", "TAIL_LINES", "clip_line", "head_tail", "last_line"]

#: Lines kept from the start and from the end of a long tool output.
HEAD_LINES = 12
TAIL_LINES = 24
#: Characters kept of one over-long line (split between its start and its end).
LINE_CHARS = 300


def clip_line(line: str, limit: int = LINE_CHARS) -> str:
    """``line`` unchanged when it fits, else its start and end around ``… N characters omitted …``."""
    if len(line) <= limit:
        return line
    head = max(1, limit * 2 // 3)
    tail = max(1, limit - head)
    omitted = len(line) - head - tail
    return f"{line[:head]} … {omitted:,} characters omitted … {line[-tail:]}"


def head_tail(text: str, *, head_lines: int = HEAD_LINES, tail_lines: int = TAIL_LINES,
              line_chars: int = LINE_CHARS, last_whole: bool = True) -> str:
    """The first ``head_lines`` and last ``tail_lines`` lines of ``text`` with a marker between.

    Text that fits is returned with only over-long lines clipped. The marker line reads
    ``… 1,234 lines omitted …``; the last line (a shell result's ``[exit code N]``) is always
    present and, with ``last_whole``, never clipped, so the exit status is visible however long the
    output was. Without it the last line is clipped like the others (a notebook output, whose last
    line may be the whole of a 50 MB one-line result).
    """
    lines = text.splitlines()
    if not lines:
        return text
    tail_lines = max(1, tail_lines)
    head_lines = max(0, head_lines)
    if len(lines) > head_lines + tail_lines + 1:
        omitted = len(lines) - head_lines - tail_lines
        noun = "line" if omitted == 1 else "lines"
        kept = [*lines[:head_lines], f"… {omitted:,} {noun} omitted …", *lines[-tail_lines:]]
    else:
        kept = list(lines)
    return "\n".join([*(clip_line(line, line_chars) for line in kept[:-1]),
                      kept[-1] if last_whole else clip_line(kept[-1], line_chars)])


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (``""`` when there is none)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""
