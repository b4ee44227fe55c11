"""The budget state model shared by every front end, and the plain-terminal budget display.

Owns:

* :class:`BudgetState` — a UI-free reducer over :class:`~soba_notebook.events.Event` values
  (``budget``, ``compaction_*``, ``turn_*``, ``retry``, ``response_start``, ``error``, ``cost``) whose
  :meth:`~BudgetState.snapshot` is the JSON document the widget renders;
* the lines both front ends show (:func:`budget_line`, :attr:`CompactionSummary.text`; the
  smaller words, :func:`progress_text`, :func:`retry_text` and the rest, live in
  :mod:`~soba_notebook.notebook.words` and are re-exported here), so the browser, the cell and
  the terminal say exactly the same thing and the JS stays a dumb renderer;
* :class:`TerminalBudgetDisplay` — for IPython without a widget frontend: one progress line
  rewritten in place during a compaction, one persistent line when it ends;
* :func:`detect_frontend` — widget-capable kernel or plain terminal.

Nothing here imports a widget framework; IPython is imported lazily and only by
:func:`detect_frontend`.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TextIO, get_args

from ..compaction.snapshot import REQUEST_WORDS
from ..events import Event, EventBus
from ..pricing import spend_text, summary_cost_text
from ..session.payloads import Outcome
from .words import as_float as _as_float
from .words import as_int as _as_int
from .words import as_str as _as_str
from .words import elapsed_text, format_tokens, progress_text, reclaimed_phrase, retry_text, signed_percent
from .words import isatty as _isatty

__all__ = [
    "HISTORY_LIMIT",
    "OUTCOMES",
    "PHASES",
    "QUALITY_NOTES",
    "STRIP_LIMIT",
    "BudgetPoint",
    "BudgetState",
    "CompactionSummary",
    "Frontend",
    "TerminalBudgetDisplay",
    "budget_line",
    "detect_frontend",
    "elapsed_text",
    "format_tokens",
    "progress_text",
    "reclaimed_phrase",
    "retry_text",
    "signed_percent",
    "skip_text",
]

#: Terminal outcomes of a compaction (DESIGN.md, "Compaction pipeline").
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: What the display is doing: idle, a compaction running, or the outcome of the last one.
PHASES: tuple[str, ...] = ("idle", "compacting", *OUTCOMES)
#: How many per-inference budget points the sparkline keeps.
HISTORY_LIMIT = 50
#: How many completed compactions the history strip shows.
STRIP_LIMIT = 6

Frontend = Literal["widget", "terminal"]

#: What the completion line says of a capsule that is not ``ok`` (session/payloads.py ``Quality``).
QUALITY_NOTES = {"partial": "partial (the model's summary lacked a usable goal or next steps, or held junk)",
                 "degraded": "degraded (local fallback capsule)"}


@dataclass(frozen=True, slots=True)
class BudgetPoint:
    """Effective input tokens measured for one inference (one sparkline point)."""

    inference: int | None
    effective: int
    source: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class CompactionSummary:
    """The most recent compaction's outcome: the persistent line and the numbers behind it."""

    outcome: str
    trigger: str | None = None
    operation_id: str | None = None
    reason: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    reclaimed_tokens: int | None = None
    reclaimed_percent: float | None = None
    checkpoint_id: str | None = None
    duration_ms: int | None = None
    quality: str | None = None
    source: str | None = None
    hard_limit: int | None = None
    #: what its summary requests cost, in words (``summary cost $0.0004``; ``None``: none requested)
    summary_cost: str | None = None

    @classmethod
    def from_event(cls, data: Mapping[str, Any], *, hard_limit: int | None = None) -> CompactionSummary:
        """Build from a ``compaction_end`` payload; missing reclaimed numbers are derived.

        ``hard_limit`` (else the payload's ``hard_limit``) lets :attr:`text` say honestly when the
        history before compaction was larger than any request ever sent."""
        before = _as_int(data.get("tokens_before"))
        after = _as_int(data.get("tokens_after"))
        reclaimed = _as_int(data.get("reclaimed_tokens"))
        if reclaimed is None and before is not None and after is not None:
            reclaimed = before - after
        percent = _as_float(data.get("reclaimed_percent"))
        if percent is None and reclaimed is not None and before:
            percent = 100.0 * reclaimed / before
        outcome = _as_str(data.get("outcome")) or "completed"
        return cls(
            outcome=outcome,
            trigger=_as_str(data.get("trigger")),
            operation_id=_as_str(data.get("operation_id")),
            reason=_as_str(data.get("reason")),
            tokens_before=before,
            tokens_after=after,
            reclaimed_tokens=reclaimed,
            reclaimed_percent=percent,
            checkpoint_id=_as_str(data.get("checkpoint_id")),
            duration_ms=_as_int(data.get("duration_ms")),
            quality=_as_str(data.get("quality")),
            source=_as_str(data.get("source")),
            hard_limit=_as_int(data.get("hard_limit")) if data.get("hard_limit") is not None else hard_limit,
            summary_cost=summary_cost_text(cost) if isinstance(cost := data.get("summary_cost"), Mapping) else None,
        )

    @property
    def status(self) -> str:
        """The outcome, except a completed compact whose capsule is not ``ok`` has its quality
        (``partial``: incomplete model summary; ``degraded``: fallback capsule)."""
        quality = self.quality or ""
        return quality if self.outcome == "completed" and quality in QUALITY_NOTES else self.outcome

    @property
    def over_limit(self) -> bool:
        """The history before compaction was above the hard limit (so it was never sent as is)."""
        return (self.tokens_before is not None and self.hard_limit is not None
                and self.tokens_before > self.hard_limit)

    @property
    def text(self) -> str:
        """One line, e.g. ``auto_threshold · 41,230 → 12,877 tokens · reclaimed 68.8% · ck_ab12cd``.

        When the history before compaction was over the hard limit the line says it was history that
        was never sent, and that the request sent is under the limit: ``hard_limit · history 15,709
        tokens (never sent; over the 14,000 limit) → 9,120 sent · …``. Partial, degraded, skipped,
        cancelled, stale and failed compacts say so in words (the last four with the reason).
        """
        parts = [self.trigger or "compaction"]
        if self.outcome == "completed":
            if self.over_limit:
                parts.append(f"history {format_tokens(self.tokens_before)} tokens (never sent; over the "
                             f"{format_tokens(self.hard_limit)} limit) → {format_tokens(self.tokens_after)} sent")
            else:
                parts.append(f"{format_tokens(self.tokens_before)} → {format_tokens(self.tokens_after)} tokens")
            if self.reclaimed_percent is not None:
                parts.append(reclaimed_phrase(self.reclaimed_percent))
            if self.checkpoint_id:
                parts.append(self.checkpoint_id)
            if self.quality in QUALITY_NOTES:
                parts.append(QUALITY_NOTES[self.quality or ""])
            if self.reason and (self.quality == "partial" or "ungrounded" in self.reason or "rejected" in self.reason):
                parts.append(self.reason)  # why it is partial, what was dropped (by field)
        else:
            parts.append(f"{self.outcome}: {self.reason}" if self.reason else self.outcome)
            if self.tokens_before is not None:
                parts.append(f"{format_tokens(self.tokens_before)} tokens kept")
            parts.append("no capsule appended")
        if self.summary_cost:
            parts.append(self.summary_cost)
        return " · ".join(parts)

    @property
    def chip(self) -> str:
        """The history strip's short form, e.g. ``auto_threshold −68.8%``."""
        pct = f" {signed_percent(-self.reclaimed_percent)}" if self.reclaimed_percent is not None else ""
        return f"{self.trigger or 'compaction'}{pct}" + (f" ({self.quality})" if self.quality in QUALITY_NOTES else "")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status, "text": self.text, "chip": self.chip,
                "over_limit": self.over_limit}


def skip_text(summary: CompactionSummary) -> str:
    """The quiet one-liner for a compaction that did nothing: its reason in plain words."""
    return summary.reason or "nothing to compact yet"


class BudgetState:
    """Reduce engine events into the budget display's state; thread-safe.

    ``apply`` takes every event type and ignores the ones it has no use for. The state it keeps:

    * the latest measurement — ``effective``, ``hard_limit``, ``soft_limit``, ``context_window`` (the
      names of :class:`~soba_notebook.compaction.snapshot.BudgetSnapshot`), source, inference, and which request
      it measures (``request``: ``sent`` or ``next``; ``request_words`` says it as every display does);
    * ``phase``: ``idle``, ``compacting``, or the outcome of the compaction that just ended (it
      returns to ``idle`` at the next ``turn_start``);
    * progress of the running compaction, in percent, never decreasing within one operation;
      progress for another operation id is ignored;
    * ``last_compaction``: the last compaction that did something (completed, or failed, cancelled,
      stale); it persists after the compaction ended. A *skipped* compaction (nothing safe to
      summarize yet) never replaces it: it only sets ``skip_note``, a quiet plain-words line. A
      ``budget`` event from the engine's snapshot carries both (``last_compaction``, ``skipped``),
      so a display opened on a reopened session shows its last compaction too;
    * ``compactions``: the last :data:`STRIP_LIMIT` completed compactions (the history strip);
    * the last :data:`HISTORY_LIMIT` effective-token points, one per inference (a later ``budget``
      for the same inference replaces its point);
    * ``notice``: a transient note in plain words (a retried request, :func:`retry_text`); the
      reply beginning (``response_start``), the turn's end or a final error clears it. A retry is
      never an error: ``last_error`` holds only a final one, and the next turn starts without it.
    """

    def __init__(self, *, history_limit: int = HISTORY_LIMIT) -> None:
        self._lock = threading.RLock()
        self._history: deque[BudgetPoint] = deque(maxlen=history_limit)
        self.session_id: str | None = None
        self.effective: int | None = None
        self.hard_limit: int | None = None
        self.soft_limit: int | None = None
        self.context_window: int | None = None
        self.source: str | None = None
        self.inference: int | None = None
        self.request: str | None = None
        self.phase: str = "idle"
        self.percent: float = 0.0
        self.step: str | None = None
        self.waiting_for: str | None = None
        self.trigger: str | None = None
        self.operation_id: str | None = None
        self.tokens_before: int | None = None
        self.last_compaction: CompactionSummary | None = None
        self.skip_note: str | None = None
        self._completed: deque[CompactionSummary] = deque(maxlen=STRIP_LIMIT)
        self.turn_active = False
        self.turn_outcome: str | None = None
        self.last_error: str | None = None
        self.notice: str | None = None
        #: the last ``cost`` event: the session's and the last turn's cost (:mod:`soba_notebook.pricing`)
        self.cost: dict[str, Any] | None = None
        self.version = 0
        self._handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "budget": self._on_budget,
            "compaction_start": self._on_compaction_start,
            "compaction_progress": self._on_compaction_progress,
            "compaction_end": self._on_compaction_end,
            "turn_start": self._on_turn_start,
            "turn_end": self._on_turn_end,
            "error": self._on_error,
            "retry": self._on_retry,
            "response_start": self._clear_notice,
            "cost": self._on_cost,
        }

    # -- reducer -----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one event into the state (unknown or irrelevant event types are ignored)."""
        handler = self._handlers.get(event.type)
        if handler is None:
            return
        with self._lock:
            handler(event.data)
            self.version += 1

    def _on_budget(self, data: Mapping[str, Any]) -> None:
        self.session_id = _as_str(data.get("session_id")) or self.session_id
        self._take_limits(data)
        window = _as_int(data.get("context_window"))
        if window is not None:
            self.context_window = window
        self.source = _as_str(data.get("source")) or self.source
        self.request = _as_str(data.get("request")) or self.request
        inference = _as_int(data.get("inference"))
        self.inference = inference if inference is not None else self.inference
        self._take_compaction_lines(data)
        effective = _as_int(data.get("effective"))
        if effective is None:
            return
        self.effective = effective
        point = BudgetPoint(inference, effective, self.source)
        if inference is not None and self._history and self._history[-1].inference == inference:
            self._history[-1] = point
        else:
            self._history.append(point)

    def _take_compaction_lines(self, data: Mapping[str, Any]) -> None:
        """The engine's snapshot says which compaction is the last one (a reopened session's comes
        from its capsule) and whether one was skipped since: the same lines ``%soba status`` reads."""
        if "last_compaction" in data:
            last = data["last_compaction"]
            self.last_compaction = CompactionSummary.from_event(last, hard_limit=self.hard_limit) \
                if isinstance(last, Mapping) else None
        if "skipped" in data:
            skipped = data["skipped"]
            self.skip_note = skip_text(CompactionSummary.from_event(skipped)) if isinstance(skipped, Mapping) else None

    def _on_compaction_start(self, data: Mapping[str, Any]) -> None:
        self.phase = "compacting"
        self.percent = 0.0
        self.step = None
        self.waiting_for = None
        self.operation_id = _as_str(data.get("operation_id"))
        self.trigger = _as_str(data.get("trigger"))
        self.tokens_before = _as_int(data.get("tokens_before"))
        self._take_limits(data)

    def _on_compaction_progress(self, data: Mapping[str, Any]) -> None:
        if self.phase != "compacting":
            return
        op = _as_str(data.get("operation_id"))
        if op is not None and self.operation_id is not None and op != self.operation_id:
            return  # a late event from an earlier operation
        percent = _as_float(data.get("percent"))
        if percent is not None:
            self.percent = max(self.percent, min(100.0, max(0.0, percent)))
        self.step = _as_str(data.get("phase")) or self.step
        self.waiting_for = _as_str(data.get("waiting_for"))  # each event says whether it still waits

    def _on_compaction_end(self, data: Mapping[str, Any]) -> None:
        summary = CompactionSummary.from_event(data, hard_limit=self.hard_limit)
        self.phase = summary.outcome if summary.outcome in OUTCOMES else "failed"
        if summary.outcome == "skipped":
            self.skip_note = skip_text(summary)
        else:
            self.last_compaction = summary
            self.skip_note = None
        if summary.outcome == "completed":
            self._completed.append(summary)
        self.trigger = summary.trigger or self.trigger
        self.operation_id = summary.operation_id or self.operation_id
        if summary.outcome == "completed":
            self.percent = 100.0
            if summary.tokens_after is not None:
                # What the next request will contain; a later ``budget`` event refines it.
                self.effective = summary.tokens_after
                self.source = summary.source or self.source
                self.request = "next"

    def _on_turn_start(self, data: Mapping[str, Any]) -> None:
        self.turn_active = True
        self.turn_outcome = None
        self.last_error = None  # the failed turn's cell keeps its error; the widget shows the present
        self.notice = None
        if self.phase != "compacting":
            self.phase = "idle"

    def _on_cost(self, data: Mapping[str, Any]) -> None:
        self.cost = dict(data)

    def _on_turn_end(self, data: Mapping[str, Any]) -> None:
        self.turn_active = False
        self.turn_outcome = _as_str(data.get("outcome"))
        self.notice = None
        if self.phase == "compacting":
            # The engine always ends a compaction, but a display must never spin forever.
            self.phase = "cancelled"

    def _on_error(self, data: Mapping[str, Any]) -> None:
        if data.get("retry"):  # an older emitter's retry: a note, never an error
            self.notice = _as_str(data.get("message")) or self.notice
            return
        self.last_error = _as_str(data.get("message")) or "error"
        self.notice = None

    def _on_retry(self, data: Mapping[str, Any]) -> None:
        self.notice = retry_text(data)

    def _clear_notice(self, data: Mapping[str, Any]) -> None:
        self.notice = None

    def _take_limits(self, data: Mapping[str, Any]) -> None:
        hard = _as_int(data.get("hard_limit"))
        soft = _as_int(data.get("soft_limit"))
        if hard is not None:
            self.hard_limit = hard
        if soft is not None:
            self.soft_limit = soft

    # -- readers -----------------------------------------------------------------------------

    @property
    def progress(self) -> int:
        """Progress of the running (or last) compaction, floored to a whole percent."""
        return int(self.percent)

    @property
    def progress_text(self) -> str:
        """The live line while compacting, ``""`` otherwise."""
        with self._lock:
            if self.phase != "compacting":
                return ""
            return progress_text(self.percent, self.trigger, self.waiting_for)

    @property
    def compactions(self) -> list[CompactionSummary]:
        """The last :data:`STRIP_LIMIT` completed compactions, oldest first."""
        with self._lock:
            return list(self._completed)

    @property
    def history(self) -> list[BudgetPoint]:
        with self._lock:
            return list(self._history)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serializable copy of the whole state (what the widget's ``state`` trait holds)."""
        with self._lock:
            usage = None
            if self.effective is not None and self.hard_limit:
                usage = round(100.0 * self.effective / self.hard_limit, 1)
            return {
                "version": self.version,
                "session_id": self.session_id,
                "effective": self.effective,
                "hard_limit": self.hard_limit,
                "soft_limit": self.soft_limit,
                "context_window": self.context_window,
                "source": self.source,
                "inference": self.inference,
                "request": self.request,
                "request_words": REQUEST_WORDS.get(self.request or ""),
                "usage_percent": usage,
                "zone": self._zone(),
                "phase": self.phase,
                "progress": self.progress,
                "step": self.step,
                "trigger": self.trigger,
                "operation_id": self.operation_id,
                "tokens_before": self.tokens_before,
                "progress_text": self.progress_text,
                "last_compaction": self.last_compaction.to_dict() if self.last_compaction else None,
                "skip_note": self.skip_note,
                "compactions": [c.to_dict() for c in self._completed],
                "history": [p.to_dict() for p in self._history],
                "turn_active": self.turn_active,
                "turn_outcome": self.turn_outcome,
                "last_error": self.last_error,
                "notice": self.notice,
                "cost": self.cost,
                "cost_text": spend_text(self.cost) if self.cost else None,
            }

    def _zone(self) -> str:
        """``over`` past the hard limit, ``soft`` at or past the soft limit, else ``ok``."""
        if self.effective is None:
            return "unknown"
        if self.hard_limit is not None and self.effective > self.hard_limit:
            return "over"
        if self.soft_limit is not None and self.effective >= self.soft_limit:
            return "soft"
        return "ok"


def budget_line(snapshot: Mapping[str, Any]) -> str:
    """One-line summary for ``%budget`` and text reprs.

    ``Context 41,230 / 48,808 tokens (84.5%) · next request · soft 39,046 · window 65,000 ·
    provider_usage`` followed by ``· last compaction: <line>`` when there was one.
    """
    effective = snapshot.get("effective")
    if effective is None:
        line = "Context budget: no measurement yet"
    else:
        line = f"Context {format_tokens(effective)} / {format_tokens(snapshot.get('hard_limit'))} tokens"
        if snapshot.get("usage_percent") is not None:
            line += f" ({snapshot['usage_percent']:.1f}%)"
        if snapshot.get("request_words"):
            line += f" · {snapshot['request_words']}"
        line += f" · soft {format_tokens(snapshot.get('soft_limit'))}"
        if snapshot.get("context_window") is not None:
            line += f" · window {format_tokens(snapshot.get('context_window'))}"
        if snapshot.get("source"):
            line += f" · {snapshot['source']}"
    if snapshot.get("phase") == "compacting" and snapshot.get("progress_text"):
        line += f" · {snapshot['progress_text']}"
    last = snapshot.get("last_compaction")
    if last:
        line += f" · last compaction: {last['text']}"
    if snapshot.get("skip_note"):
        line += f" · {snapshot['skip_note']}"
    return line


_CLEAR_LINE = "\x1b[2K"
_DIM, _RESET = "\x1b[2m", "\x1b[0m"
_GLYPHS = {"completed": "✓", "partial": "⚠", "degraded": "⚠", "failed": "✗"}


class TerminalBudgetDisplay:
    """Budget display for IPython with no widget frontend (a terminal, a plain script).

    During a compaction it keeps ONE line up to date in place: every update starts with ``\\r``
    and, on an ANSI terminal, the erase-line sequence (``ESC[2K``; elsewhere the line is padded
    with spaces instead), and never ends with a newline. A write happens only when the text
    changes, so a flood of progress events costs at most ~100 writes. When the compaction ends the
    progress line is replaced by the persistent completion line, ending in ``\\n``. Budget events
    themselves print nothing (``%budget`` uses :func:`budget_line`).

    ``stream`` defaults to whatever ``sys.stdout`` is at write time (so IPython's capture works);
    ``ansi`` defaults to ``stream.isatty()``.
    """

    def __init__(self, stream: TextIO | None = None, *, ansi: bool | None = None,
                 state: BudgetState | None = None) -> None:
        self._stream = stream
        self._ansi = ansi
        self._state = state or BudgetState()
        self._lock = threading.Lock()
        self._open_text: str | None = None  # the progress line currently on screen
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def state(self) -> BudgetState:
        return self._state

    def attach(self, bus: EventBus) -> TerminalBudgetDisplay:
        """Subscribe to ``bus`` (replacing an earlier subscription). Returns ``self``."""
        self.detach()
        self._unsubscribe = bus.subscribe(self.handle)
        return self

    def detach(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def __call__(self, event: Event) -> None:
        self.handle(event)

    def handle(self, event: Event) -> None:
        """Apply ``event`` to the state and update the terminal (a bus subscriber)."""
        with self._lock:
            self._state.apply(event)
            if event.type in ("compaction_start", "compaction_progress"):
                text = self._state.progress_text
                if text and text != self._open_text:
                    self._rewrite(text, end="")
                    self._open_text = text
            elif event.type == "compaction_end" and self._state.phase == "skipped":
                note = self._state.skip_note or "nothing to compact yet"
                ansi = self._ansi if self._ansi is not None else _isatty(self._out())
                self._rewrite(f"{_DIM}· {note}{_RESET}" if ansi else f"· {note}", end="\n")
                self._open_text = None
            elif event.type == "compaction_end":
                summary = self._state.last_compaction
                if summary is not None:
                    glyph = _GLYPHS.get(summary.status, "⚠")
                    self._rewrite(f"{glyph} Context compaction · {summary.text}", end="\n")
                    self._open_text = None
            elif event.type == "turn_end" and self._open_text is not None:
                self._write("\n")  # leave the interrupted progress line as it was
                self._open_text = None

    def _rewrite(self, text: str, *, end: str) -> None:
        out = self._out()
        ansi = self._ansi if self._ansi is not None else _isatty(out)
        if ansi:
            payload = f"\r{_CLEAR_LINE}{text}"
        else:
            width = len(self._open_text) if self._open_text is not None else 0
            payload = "\r" + text.ljust(width)
        self._write(payload + end)

    def _write(self, payload: str) -> None:
        out = self._out()
        out.write(payload)
        out.flush()

    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout


_LOOKUP: Any = object()


def detect_frontend(shell: Any = _LOOKUP) -> Frontend:
    """``"widget"`` inside a Jupyter kernel (widgets can render), else ``"terminal"``.

    ``shell`` defaults to ``IPython.get_ipython()``; pass one explicitly to test. A
    ``ZMQInteractiveShell`` is a kernel; a ``TerminalInteractiveShell`` or no IPython at all is a
    terminal; any other shell counts as a kernel only if ipykernel is loaded and the shell has one.
    """
    if shell is _LOOKUP:
        shell = _current_shell()
    if shell is None:
        return "terminal"
    name = type(shell).__name__
    if name == "ZMQInteractiveShell":
        return "widget"
    if name == "TerminalInteractiveShell":
        return "terminal"
    if "ipykernel" in sys.modules and getattr(shell, "kernel", None) is not None:
        return "widget"
    return "terminal"


def _current_shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
