"""What a running cell shows while the agent works: the reply as it streams, tool results, and
one live line for the moments in which nothing else would move.

Why it exists: a real model can take 40 s before its first token, a tool a minute, a compaction
its summary request; a cell that stays empty meanwhile looks hung. So the cell always shows what
is happening now, in one line updated in place (:func:`~soba_notebook.notebook.cellview.activity`):

* ``waiting for gpt-4o-mini · 12 s`` from ``request_start`` until the reply begins, with the
  last retry's plain-words note after it while the request is retried;
* ``gpt-4o-mini is thinking · 14 s`` / ``gpt-4o-mini is writing a call to write_file · 20 s``
  while the reply streams something the cell does not print;
* ``running shell · 3 s`` between ``tool_start`` and ``tool_end``, and
  ``waiting for your approval · shell · 8 s`` while that call's approval card waits, on a line
  below the card (``approval_wait`` until ``approval_settled``; the controller sends both after
  showing the card, :mod:`.approvals`); a terminal's prompt says it itself;
* ``Compacting context · 42% · 8 s`` during a compaction (in a notebook; in a terminal the
  budget display already prints it).

Owns :class:`Activity` (the line's state and words, pure) and :class:`CellRenderer` (events to
cell output). In a notebook the line is a display handle, a *slot*: whatever the cell shows next
(the streamed text, the tool's result, the cell's summary) takes the slot's place, so no empty
output is left behind. The seconds advance through :meth:`CellRenderer.tick`, which the kernel
thread calls while it waits for events; a display update happens only when the words change (once
a second for the clock, at most every :data:`MIN_INTERVAL` seconds otherwise). In a terminal the
line is rewritten in place with ``\\r`` and erased before other output, and only on an ANSI
terminal; elsewhere (a pipe, a log) it is not printed at all, and a retry is one plain line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..events import Event
from . import cellview
from .cellview import CellOutput
from .words import elapsed_text, isatty, progress_text, retry_text

__all__ = ["MIN_INTERVAL", "Activity", "ActivityKind", "CellRenderer"]

#: The fewest seconds between two updates of the live line that were not forced by a new activity.
MIN_INTERVAL = 0.25

ActivityKind = Literal["waiting", "thinking", "tool_call", "running", "approval", "compacting"]

_CLEAR_LINE = "\r\x1b[2K"


@dataclass(frozen=True, slots=True)
class Activity:
    """What the live line says: the activity, when its clock started (epoch seconds, the events'
    ``ts``), and its details. ``note``: the last retry of the request, in plain words."""

    kind: ActivityKind
    since: float
    model: str = ""
    name: str | None = None
    percent: float = 0.0
    trigger: str | None = None
    note: str | None = None

    def text(self, now: float) -> str:
        waited = elapsed_text(now - self.since)
        model = self.model or "the model"
        if self.kind == "compacting":  # the seconds too: a summary request can take a minute at one percent
            return f"{progress_text(self.percent, self.trigger, self.model or None)} · {waited}"
        if self.kind == "running":
            return f"running {self.name or 'a tool'} · {waited}"
        if self.kind == "approval":
            return f"waiting for your approval · {self.name or 'a tool'} · {waited}"
        if self.kind == "thinking":
            line = f"{model} is thinking · {waited}"
        elif self.kind == "tool_call":
            line = f"{model} is writing a call to {self.name or 'a tool'} · {waited}"
        else:
            line = f"waiting for {model} · {waited}"
        return f"{line} · {self.note}" if self.note else line


class CellRenderer:
    """Renders agent events into the running cell (module docstring). Kernel thread only.

    ``display`` defaults to IPython's ``display``; ``out`` (terminal) to printing on stdout;
    ``ansi`` (terminal) to whether stdout is a terminal; ``clock`` to :func:`time.time`.
    """

    def __init__(self, frontend: str, out: Callable[[str], None] | None = None, *,
                 display: Callable[..., Any] | None = None, clock: Callable[[], float] = time.time,
                 ansi: bool | None = None) -> None:
        self.frontend = frontend
        self.text = ""
        self.compactions: list[dict[str, Any]] = []
        self.activity: Activity | None = None
        self._handle: Any = None       # the display the streamed text goes to
        self._slot: Any = None         # the live line's display, until something takes its place
        self._shown = ""               # what the live line shows now ("" when none)
        self._shown_at = -1e18
        self._last_text_update = 0.0
        self._model = ""
        self._request_since = 0.0
        self._display_fn = display
        self._out = out or (lambda s: print(s, end="", flush=True))
        self._ansi = ansi
        self._clock = clock

    @property
    def terminal(self) -> bool:
        return self.frontend == "terminal"

    # -- events ------------------------------------------------------------------------------
    def handle(self, event: Event) -> None:
        kind = event.type
        if kind == "request_start":
            self._flush_text()
            self._model, self._request_since = str(event.get("model") or ""), event.ts
            self._begin(Activity("waiting", event.ts, self._model))
        elif kind == "response_start":
            self._on_response_start(event)
        elif kind == "retry":
            self._on_retry(event)
        elif kind == "message_delta":
            self._on_text(str(event.get("text", "")))
        elif kind == "tool_start":
            self._flush_text()
            if self.terminal:
                self._erase()
                args = json.dumps(event.get("arguments", {}), ensure_ascii=False)
                self._out(f"\n→ {event['name']}({args[:200]})\n")
            self._begin(Activity("running", event.ts, name=str(event.get("name") or "")))
        elif kind == "approval_wait":
            self._on_approval_wait(event)
        elif kind == "approval_settled":
            if self.activity is not None and self.activity.kind == "approval":
                # answered (or timed out): the call runs now, or its denial ends it at once
                self._begin(Activity("running", event.ts, name=self.activity.name))
        elif kind == "tool_end":
            status = "cancelled" if event.get("cancelled") else ("error" if event.get("is_error") else "ok")
            changes = event.get("notebook") if status == "ok" else None
            block = (cellview.notebook_edit_block(changes) if isinstance(changes, list) and changes
                     else cellview.tool_block(str(event["name"]), status, str(event.get("content", ""))))
            if self.terminal:
                self.activity = None
                self._erase()
                self._out(f"  {block.text}\n")
            else:
                self.finish(block)
        elif kind in ("compaction_start", "compaction_progress"):
            self._on_compaction(event)
        elif kind == "compaction_end":
            self.compactions.append(dict(event.data))
            if self.activity is not None and self.activity.kind == "compacting":
                # the slot keeps its last words until the next output takes its place
                self.activity = None
        elif kind == "turn_end":
            self._flush_text()
            self.activity = None
            self._erase()

    def tick(self) -> None:
        """Advance the live line's clock (call it while waiting; it updates only on a change)."""
        if self.activity is not None:
            self._show(force=False)

    def finish(self, output: CellOutput | None = None) -> None:
        """End the live line: ``output`` takes its place (or is shown after it), or, with none,
        the line is emptied. The next activity starts a new line below."""
        self._flush_text()
        self.activity = None
        if self.terminal:
            self._erase()
            if output is not None:
                self._out(f"{output.text}\n")
            return
        bundle = {"text/html": output.html, "text/plain": output.text} if output is not None else None
        if self._slot is not None:
            self._slot.update(bundle if bundle is not None else {"text/plain": ""}, raw=True)
        elif bundle is not None:
            self._display(bundle, raw=True)
        self._slot, self._shown = None, ""

    # -- pieces ------------------------------------------------------------------------------
    def _on_response_start(self, event: Event) -> None:
        what = event.get("kind")
        if what == "text":
            self.activity = None  # the first delta takes the slot
        elif what == "thinking":
            self._begin(Activity("thinking", self._request_since, self._model))
        elif what == "tool_call":
            self._flush_text()  # a call after text: the line goes below the text
            self._begin(Activity("tool_call", self._request_since, self._model, name=event.get("name")))

    def _on_retry(self, event: Event) -> None:
        note = retry_text(event.data)
        if self.terminal and not self._ansi_out():
            self._out(f"{note}\n")  # no line to rewrite: one plain line per retry
        if self.activity is not None and self.activity.kind == "waiting":
            self.activity = replace(self.activity, note=note)
            self._show(force=True)
        elif self.activity is None:
            self._begin(Activity("waiting", self._request_since or event.ts, self._model, note=note))

    def _on_approval_wait(self, event: Event) -> None:
        name = str(event.get("name") or "")
        if self.terminal:  # the prompt itself says what waits; a line rewritten under it would garble it
            self.activity = None
            self._erase()
            return
        self.make_room_for_card()
        self._begin(Activity("approval", event.ts, name=name))

    def make_room_for_card(self) -> None:
        """Send the streamed text and empty the live line before a question's card is shown below
        them: the line goes on below the card (and the call's result takes its place there, under
        the card that asked). Done before the card is displayed, nothing above a shown card changes
        height, so it never moves under a person's pointer."""
        if self.terminal:
            return
        self._flush_text()
        if self._slot is not None:
            self._slot.update({"text/plain": ""}, raw=True)
            self._slot, self._shown = None, ""

    def _on_text(self, text: str) -> None:
        self.text += text
        self.activity = None
        if self.terminal:
            self._erase()
            self._out(text)
        else:
            self._update_text(force=False)

    def _on_compaction(self, event: Event) -> None:
        if self.terminal:
            return  # the terminal budget display prints compaction progress on its own line
        current = self.activity if self.activity is not None and self.activity.kind == "compacting" else None
        if event.type == "compaction_start" or current is None:
            self._flush_text()
            self._begin(Activity("compacting", event.ts, trigger=event.get("trigger")))
            return
        percent = event.get("percent")
        if isinstance(percent, int | float) and not isinstance(percent, bool):
            # ``model``: the one whose summary has not begun to arrive (each event says whether it still waits)
            self.activity = replace(current, percent=max(current.percent, float(percent)),
                                    model=str(event.get("waiting_for") or ""))
            self._show(force=False)

    def _begin(self, activity: Activity) -> None:
        self.activity = activity
        self._show(force=True)

    def _show(self, *, force: bool) -> None:
        activity = self.activity
        if activity is None:
            return
        now = self._clock()
        text = activity.text(now)
        if text == self._shown or (not force and now - self._shown_at < MIN_INTERVAL):
            return
        self._shown, self._shown_at = text, now
        if self.terminal:
            if self._ansi_out():
                self._out(f"{_CLEAR_LINE}{text}")
            return
        output = cellview.activity(text)
        bundle = {"text/html": output.html, "text/plain": output.text}
        if self._slot is None:
            self._slot = self._display(bundle, raw=True, display_id=True)
        else:
            self._slot.update(bundle, raw=True)

    def _erase(self) -> None:
        """Terminal: take the live line off the screen before other output."""
        if self.terminal and self._shown and self._ansi_out():
            self._out(_CLEAR_LINE)
        if self.terminal:
            self._shown = ""

    def _update_text(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and self._handle is not None and now - self._last_text_update < 0.1:
            return
        self._last_text_update = now
        bundle = {"text/markdown": self.text, "text/plain": self.text}  # plain: the words, not a repr
        if self._handle is None and self._slot is not None:
            self._handle, self._slot, self._shown = self._slot, None, ""  # the text takes the line's place
            self._handle.update(bundle, raw=True)
        elif self._handle is None:
            self._handle = self._display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)

    def _flush_text(self) -> None:
        if self.text and not self.terminal:
            self._update_text(force=True)
        elif self.text and self.terminal:
            self._out("\n")
        self.text = ""
        self._handle = None

    def _display(self, obj: Any, **kwargs: Any) -> Any:
        if self._display_fn is not None:
            return self._display_fn(obj, **kwargs)
        from IPython.display import display

        return display(obj, **kwargs)

    def _ansi_out(self) -> bool:
        if self._ansi is not None:
            return self._ansi
        return isatty(sys.stdout)
