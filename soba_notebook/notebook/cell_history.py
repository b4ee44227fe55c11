"""What the user did between turns: a compact note of the cells they ran since the last ``%soba``.

"Now plot it by month" only works if the agent knows the user just ran ``df = df[df.x > 1]``.
IPython reports every executed cell on its ``post_run_cell`` event (the raw input, the execution
count, and whether it raised); :class:`CellHistory` keeps those cells (bounded) until the next
turn takes them, and :func:`note_text` turns them into the note that starts that turn: newest
first, each cell's input (long ones elided in the middle), a one-line outcome (``ok``, or the
exception type and message) and a short summary of what it showed (:mod:`.user_outputs`: clipped
text, tables, figures as their one-line description, never attached). A cell that sets a
secret-looking variable (``OPENAI_API_KEY = "…"``, ``os.environ["DB_PASSWORD"] = …``) is
withheld, its output too, and every input and output passes the capsule redaction (environment
secrets, token shapes).

It also keeps, for the life of the kernel, every run in order (:meth:`CellHistory.runs`, the last
:data:`MAX_RUNS`): execution count, the notebook cell id the front end sent (IPython's
``ExecutionInfo.cell_id``), the outcome and a failure's traceback (the kernel's own frames left
out, redacted), so ``notebook_read`` of the kernel's notebook can say which cells ran and why one
failed, even when the file was not saved since.

Switchable with ``notebook.shareCellHistory`` (default: on in a notebook, off in terminal IPython).
SOBA's own magics (``%soba``, ``%compact``…) are not user work and are left out.
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..agent.kernel_state import is_secret_name
from ..agent.notebook_access import KernelRun
from ..memory.redact import redact_text

__all__ = ["CellHistory", "CellRecord", "note_text"]

MAX_CELLS = 50
#: Runs kept for ``notebook_read`` (the newest); one traceback is kept to TRACEBACK_CHARS.
MAX_RUNS = 200
TRACEBACK_CHARS = 6_000
_IPYTHON_FRAMES = f"{os.sep}IPython{os.sep}"
#: The whole note stays under about this many characters (~750 tokens).
NOTE_CHARS = 3_000
#: One cell's input is elided in the middle beyond this.
CELL_CHARS = 800
OUTCOME_CHARS = 200
_SOBA_MAGICS = re.compile(r"^\s*%{1,2}(?:soba|compact|capsule|budget|auto_compact)\b|^\s*%load_ext\s+soba_notebook\b")
_ASSIGNED = re.compile(r"^\s*(?:[\w.]+\s*,\s*)*([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
_ENVIRON = re.compile(r"""environ\s*\[\s*['"]([^'"]+)['"]\s*\]\s*=|(?:putenv|setdefault|%env|%set_env)\W+['"]?(\w+)""")


@dataclass(frozen=True, slots=True)
class CellRecord:
    """One executed cell: its execution count, raw input and one-line outcome."""

    number: int | None
    source: str
    outcome: str  # "ok" | "ExceptionType: message"


def _outcome(result: Any) -> str:
    error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
    if error is None:
        return "ok"
    message = " ".join(str(error).split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= OUTCOME_CHARS else text[: OUTCOME_CHARS - 1] + "…"


def _traceback(result: Any) -> str:
    """The failure's traceback as plain text, without IPython's own frames, redacted and bounded."""
    error = getattr(result, "error_in_exec", None)
    if isinstance(error, BaseException):
        tb = error.__traceback__
        while tb is not None and _IPYTHON_FRAMES in tb.tb_frame.f_code.co_filename:
            tb = tb.tb_next  # the shell's run_code frame is not the user's
        lines = traceback.format_exception(type(error), error, tb)
    else:
        error = getattr(result, "error_before_exec", None)
        if not isinstance(error, BaseException):
            return ""
        lines = traceback.format_exception_only(type(error), error)
    text = redact_text("".join(lines))
    return text if len(text) <= TRACEBACK_CHARS else text[:1_000] + "\n…\n" + text[-(TRACEBACK_CHARS - 1_000):]


class CellHistory:
    """The cells run since the last turn took them (at most :data:`MAX_CELLS`, the newest kept),
    and every run of the kernel's life for ``notebook_read`` (the last :data:`MAX_RUNS`)."""

    def __init__(self, max_cells: int = MAX_CELLS) -> None:
        self._cells: deque[CellRecord] = deque(maxlen=max_cells)
        self._runs: deque[KernelRun] = deque(maxlen=MAX_RUNS)
        self._dropped = 0
        self._lock = threading.Lock()

    def record(self, result: Any) -> None:
        """The ``post_run_cell`` callback: remember one cell (SOBA's own magics excluded)."""
        info = getattr(result, "info", None)
        source = getattr(info, "raw_cell", None)
        if not isinstance(source, str) or not source.strip() or _SOBA_MAGICS.match(source):
            return
        count = getattr(result, "execution_count", None)
        number = count if isinstance(count, int) else None
        cell_id = getattr(info, "cell_id", None)
        outcome = _outcome(result)
        secret = _secret_assignment(source)
        shown = (f"(input withheld: the cell sets {secret}, which looks like a secret)" if secret
                 else redact_text(source))
        trace = _traceback(result) if outcome != "ok" and not secret else ""  # its lines would show the secret
        run = KernelRun(number, cell_id if isinstance(cell_id, str) and cell_id else None, shown,
                        redact_text(outcome), trace)
        with self._lock:
            if len(self._cells) == self._cells.maxlen:
                self._dropped += 1
            self._cells.append(CellRecord(number, source, outcome))
            self._runs.append(run)

    def record_run(self, number: int, cell_id: str, source: str, outcome: str, traceback: str) -> None:
        """A cell the agent ran (``notebook_run``): it joins the kernel's runs, not the next turn's note."""
        secret = _secret_assignment(source)
        shown = (f"(input withheld: the cell sets {secret}, which looks like a secret)" if secret
                 else redact_text(source))
        run = KernelRun(number, cell_id, shown, redact_text(outcome), "" if secret else redact_text(traceback))
        with self._lock:
            self._runs.append(run)

    def runs(self) -> list[KernelRun]:
        """Every run kept, oldest first (never cleared by :meth:`take`)."""
        with self._lock:
            return list(self._runs)

    def take(self) -> tuple[list[CellRecord], int]:
        """The cells recorded since the last call (oldest first) and how many older ones were dropped."""
        with self._lock:
            cells, dropped = list(self._cells), self._dropped
            self._cells.clear()
            self._dropped = 0
        return cells, dropped


def _secret_assignment(source: str) -> str | None:
    for match in _ASSIGNED.finditer(source):
        if is_secret_name(match.group(1)):
            return match.group(1)
    for match in _ENVIRON.finditer(source):
        name = match.group(1) or match.group(2)
        if name and is_secret_name(name):
            return name
    return None


def _elide(source: str, limit: int) -> str:
    if len(source) <= limit:
        return source
    head, tail = source[: limit * 2 // 3], source[-(limit // 3):]
    hidden = source[len(head): len(source) - len(tail)]
    return f"{head}\n… [{hidden.count(chr(10)) + 1:,} lines, {len(hidden):,} characters elided] …\n{tail}"


def _cell_text(cell: CellRecord, shown: str | None) -> str:
    label = f"In [{cell.number}]" if cell.number is not None else "In [?]"
    secret = _secret_assignment(cell.source)
    body = (f"(input withheld: the cell sets {secret}, which looks like a secret)" if secret
            else _elide(redact_text(cell.source.strip("\n")), CELL_CHARS))
    out = f"\nOut:\n{redact_text(shown)}" if shown and not secret else ""
    return f"{label} → {redact_text(cell.outcome)}\n{body}{out}"


def note_text(cells: Sequence[CellRecord], dropped: int = 0, *, limit: int = NOTE_CHARS,
              outputs: Mapping[int, str] | None = None) -> str:
    """The note that starts the next turn, or ``""`` when there were no cells. Newest first, bounded.
    ``outputs``: each cell's output summary by execution count (already clipped, :mod:`.user_outputs`)."""
    outputs = outputs or {}
    if not cells:
        return ""
    parts: list[str] = []
    used = 0
    shown = 0
    for cell in reversed(cells):
        text = _cell_text(cell, outputs.get(cell.number) if cell.number is not None else None)
        if parts and used + len(text) > limit:
            break
        parts.append(text)
        used += len(text)
        shown += 1
    left = len(cells) - shown + dropped
    more = f"\n(+{left:,} older cells not shown)" if left else ""
    return ("<user_cells>\nSince your last turn the user ran these cells in the kernel themselves (newest first; "
            "each with its outcome and a short summary of its output, figures as one line):\n\n"
            + "\n\n".join(parts) + more + "\n</user_cells>")
