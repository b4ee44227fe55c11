"""The notebook's approver: a card in the turn's cell, or a prompt on the terminal's standard input.

:class:`NotebookApprover` is the :class:`~soba_notebook.agent.approval.Approver` the controller
gives the agent. Asked on the agent's thread, it puts an :data:`APPROVAL_EVENT` into the queue of
the job that asks (the same queue that job's cell renders from), so the question appears where
the turn is shown: the foreground cell (the kernel thread renders it), or a background turn's own
cell (its render thread puts the card in the :class:`ApprovalSlot` box the cell showed while it
ran: output added to a finished cell is dropped by JupyterLab, a widget's state change is not).

In a notebook the question is an :class:`~.approval_card.ApprovalCard` (anywidget, ``js/approval_card.js``): the
tool, the full command or code (scrollable, never cut), a diff for writes, and **Allow once**,
**Allow for this session** (naming the rule it adds) and **Deny** with an optional reason. Its comm
is pinned to SOBA's subshell (:mod:`.busy_comms`), so a click is handled while the kernel is busy
running the foreground ``%soba`` cell. Once answered, timed out or cancelled, the card shows the
outcome and its buttons are gone. While a question waits, the cell's live line says so
(:data:`APPROVAL_SETTLED_EVENT` tells the cell when it no longer waits).

A run with no person to click (nbclient, papermill, ``scripts/run_notebook.py``) shows the card to
no one: a card's view reports ``shown`` when a front end renders it, and a question whose card no
front end rendered within :data:`SHOWN_WITHIN_S` is denied then, saying how to set the mode, rather
than after ``tools.approvalTimeoutMs``. Once a card is shown, the timeout is the only bound.

In terminal IPython the kernel thread prints the question and reads one line: ``y`` (once), ``a``
(for this session), ``n`` (deny; a reason may follow on the same line). It stops reading when the
question is settled otherwise (timeout, stop), so nothing waits forever. A background turn in a
terminal cannot ask (the prompt owns standard input): its calls are denied, saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import select
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ..agent.approval import ApprovalRequest, Decision
from ..agent.approval_gate import mode_hint
from ..cancel import CancelToken
from ..events import Event
from ..trusted_import import trusted_import
from ..visible import controls_note, visible_controls

if TYPE_CHECKING:
    from .board import CellBoard

__all__ = ["APPROVAL_EVENT", "APPROVAL_SETTLED_EVENT", "SHOWN_WITHIN_ENV", "SHOWN_WITHIN_S", "ApprovalSlot",
           "NotebookApprover", "PendingApproval", "decision_text", "headless_reason", "parse_answer",
           "shown_request", "shown_within_s"]

#: The queue item (never a bus event: it carries a live object) that asks the cell to show a question.
APPROVAL_EVENT = "approval_request"
#: The queue item that says the question of a call (``name``) was settled (``verdict``).
APPROVAL_SETTLED_EVENT = "approval_settled"

#: How long a card may go without a front end reporting it rendered before the question is denied
#: as unanswerable (a headless run). Rendering takes well under a second in a live JupyterLab;
#: the margin is for a loaded machine. Applies only when ``tools.approvalTimeoutMs`` is longer.
SHOWN_WITHIN_S = 30.0
#: The environment variable that replaces :data:`SHOWN_WITHIN_S` for a kernel (seconds, a positive
#: number), read at each question: a test of the headless path in a real kernel, which cannot be
#: patched from outside, sets it short instead of waiting the real bound.
SHOWN_WITHIN_ENV = "SOBA_APPROVAL_SHOWN_WITHIN_S"


def shown_within_s() -> float:
    """The bound in force: :data:`SHOWN_WITHIN_ENV` when set to a positive number, else
    :data:`SHOWN_WITHIN_S`. Any other value is named in a warning and the default is used."""
    raw = os.environ.get(SHOWN_WITHIN_ENV, "").strip()
    if not raw:
        return SHOWN_WITHIN_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if value > 0 and math.isfinite(value):
        return value
    warnings.warn(f"{SHOWN_WITHIN_ENV}={raw!r} is not a positive number of seconds; the approval card "
                  f"bound stays {SHOWN_WITHIN_S:g} s", stacklevel=2)
    return SHOWN_WITHIN_S


def headless_reason(seconds: float = SHOWN_WITHIN_S) -> str:
    """Why a question no front end showed was denied (the gate adds how to set the mode)."""
    return (f"no front end showed the approval card within {seconds:g} s, so no one could answer (a run "
            f"without a person at a notebook: nbclient, papermill, scripts/run_notebook.py, or a front end "
            f"without Jupyter widgets)")

_VERDICT_WORDS = {"once": "Allowed once", "session": "Allowed for this session", "deny": "Denied",
                  "timeout": "Denied: no answer in time", "cancelled": "Cancelled: the turn was stopped"}


def shown_request(request: ApprovalRequest) -> dict[str, Any]:
    """What the card and the terminal prompt show of ``request``: every text with its control
    characters made visible (:func:`~soba_notebook.visible.visible_controls`: a command that erases
    its own line on a terminal must not read as another), a one-line warning when the command, code
    or diff holds any, why no session rule is offered when none is, the title: what it asks
    (``asks``: "run", then the tool, or the request's own question), and why it asks at all when the
    mode lets such calls run (``why``)."""
    note = controls_note(request.body + (request.diff or ""))
    tool = visible_controls(request.tool)
    asks = request.asks or f"run {tool}"
    return {"tool": tool, "asks": request.asks or "run", "title": f"SOBA asks to {asks}",
            "body": visible_controls(request.body), "why": visible_controls(request.why),
            "diff": visible_controls(request.diff or ""), "rule": visible_controls(request.rule_text),
            "no_rule": visible_controls(request.no_rule), "controls": f"Careful: {note}." if note else "",
            "timeout_s": request.timeout_s, "call_id": request.call_id}


def decision_text(decision: Decision) -> str:
    """How a settled question reads on the card and in the terminal."""
    words = _VERDICT_WORDS.get(decision.verdict, decision.verdict)
    if decision.verdict == "session" and decision.rules:
        words += " (" + ", ".join(rule.describe() for rule in decision.rules) + ")"
    if decision.by == "rule":
        words = "Allowed by a session rule"
    reason = decision.reason.strip() if decision.verdict == "deny" else ""
    return visible_controls(f"{words}: {reason}" if reason else words)


def parse_answer(line: str, request: ApprovalRequest) -> Decision | None:
    """A terminal answer: ``y`` once, ``a`` for this session, ``n [reason]`` deny; None: not understood."""
    word, _, rest = line.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes"):
        return Decision("once")
    if word in ("a", "always") and request.rules:
        return Decision("session", rules=request.rules)
    if word in ("n", "no"):
        return Decision("deny", rest.strip())
    return None


@dataclass(eq=False)
class PendingApproval:
    """One question between the agent's thread and the cell that shows it."""

    request: ApprovalRequest
    frontend: str
    future: concurrent.futures.Future[Decision] = field(default_factory=concurrent.futures.Future)
    #: done once a front end rendered the card (its view's ``shown`` report)
    shown: concurrent.futures.Future[bool] = field(default_factory=concurrent.futures.Future)
    events: Any = None  # the queue of the job's cell (told when the question is settled)
    card: Any = None  # its ApprovalCard, once shown
    settled: Decision | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, decision: Decision) -> None:
        """The user's answer (first one wins; later clicks change nothing)."""
        try:
            self.future.set_result(decision)
        except concurrent.futures.InvalidStateError:
            return

    def mark_shown(self) -> None:
        """A front end rendered the card: a person can answer (later reports change nothing)."""
        try:
            self.shown.set_result(True)
        except concurrent.futures.InvalidStateError:
            return

    def settle(self, decision: Decision) -> None:
        """How the question ended (answered, timed out, cancelled): shown, buttons gone."""
        with self._lock:
            self.settled = decision
            card = self.card
        if not self.future.done():
            self.future.cancel()
        if card is not None:
            card.decision = {"verdict": decision.verdict, "text": decision_text(decision)}
        if self.events is not None:
            self.events.put(Event(APPROVAL_SETTLED_EVENT, {"name": self.request.tool, "verdict": decision.verdict}))

    def show(self, slot: ApprovalSlot | None = None, *, stdin: TextIO | None = None) -> None:
        """Show the question: a card (in ``slot``, or appended to the running cell), or the
        terminal prompt (this thread reads the answer)."""
        if self.frontend == "terminal":
            self._prompt(stdin or sys.stdin)
            return
        from .approval_card import ApprovalCard

        card = ApprovalCard(self)  # its comm pinned to SOBA's subshell: a click lands while the cell is busy
        with self._lock:
            self.card = card
            settled = self.settled
        if settled is not None:
            card.decision = {"verdict": settled.verdict, "text": decision_text(settled)}
        if slot is not None:
            slot.show(card)
        else:
            from IPython.display import display

            display(card)

    def _prompt(self, stdin: TextIO) -> None:
        r, shown = self.request, shown_request(self.request)
        print(f"\n{shown['title']}:")
        if shown["why"]:
            print(shown["why"])
        body = shown["body"]
        print(body if r.tool != "python" else "\n".join("    " + line for line in body.splitlines()))
        if shown["diff"]:
            print(shown["diff"].rstrip("\n"))
        for line in (shown["controls"], shown["no_rule"]):
            if line:
                print(line)
        choices = "[y] allow once, " + (f"[a] allow for this session ({shown['rule']}), " if r.rules else "") \
            + "[n] deny (a reason may follow: n REASON)"
        while not self.future.done():
            print(f"{choices}? ", end="", flush=True)
            line = _read_line(stdin, self.future)
            if line is None:  # settled meanwhile (timeout, stop) or the input ended
                if not self.future.done():
                    self.answer(Decision("deny", f"no answer could be read from standard input; {mode_hint()}"))
                break
            decision = parse_answer(line, r)
            if decision is not None:
                self.answer(decision)
        decision = self._wait_settled()
        print(f"→ {decision_text(decision)}" if decision is not None else "")

    def _wait_settled(self) -> Decision | None:
        for _ in range(100):  # the agent's thread settles right after the answer lands
            with self._lock:
                if self.settled is not None:
                    return self.settled
            threading.Event().wait(0.02)
        return self.future.result() if self.future.done() and not self.future.cancelled() else None


def _read_line(stdin: TextIO, future: concurrent.futures.Future[Decision]) -> str | None:
    """One line of ``stdin``, or None once ``future`` is done first or the input ended."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    while fd is not None and not future.done():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            break
    if future.done():
        return None
    try:
        line = stdin.readline()
    except (OSError, ValueError):  # no readable standard input (captured, closed): no one can answer
        return None
    return line if line else None


class ApprovalSlot:
    """A box a background cell shows while it runs; its cards are added to it later, each below the
    last (a settled card stays, showing its outcome, as in a foreground cell). Setting the box's
    children is a widget state change (a comm message), which reaches the cell in every front end;
    a display *update* with a widget in it is not rendered by JupyterLab in a finished cell.

    The box sits below the cell's board (``above``, :mod:`.board`), whose re-sends are throttled. The
    board is sent before a card is added, so it already shows all that came before the question: a
    late re-send taller than the last would move a card that is on screen, and a click whose press
    and release land on different elements is lost (a person's, and a browser test's)."""

    def __init__(self, above: CellBoard | None = None) -> None:
        ipywidgets = trusted_import("ipywidgets")
        from IPython.display import display

        self._above = above
        self._box = ipywidgets.VBox()
        display(self._box)

    def show(self, card: Any) -> None:
        if self._above is not None:
            self._above.flush()
        self._box.children = (*self._box.children, card)


class NotebookApprover:
    """The :class:`~soba_notebook.agent.approval.Approver` of one kernel (module docstring).

    ``job_queue()`` (called on the agent's thread) is the event queue of the job that asks, or
    ``None`` outside a job; ``background()`` says whether that job renders in a background cell.
    """

    def __init__(self, frontend: str, job_queue: Callable[[], Any],
                 background: Callable[[Any], bool] = lambda _queue: False) -> None:
        self.frontend = frontend
        self._job_queue = job_queue
        self._background = background
        self._pending: dict[str, PendingApproval] = {}
        self._lock = threading.Lock()

    async def ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision:
        events = self._job_queue()
        if events is None or not hasattr(events, "put"):
            return Decision("deny", "no cell shows this job, so no one can answer", by="headless")
        if self.frontend == "terminal" and self._background(events):
            return Decision("deny", "a background turn in terminal IPython cannot ask (the prompt owns standard "
                                    "input); run the turn in the foreground to be asked", by="headless")
        pending = PendingApproval(request, self.frontend, events=events)
        with self._lock:
            self._pending[request.call_id] = pending
        events.put(Event(APPROVAL_EVENT, {"pending": pending}))
        answer = asyncio.wrap_future(pending.future)
        bound = shown_within_s()
        if self.frontend != "terminal" and request.timeout_s > bound:
            shown = asyncio.wrap_future(pending.shown)
            either: set[asyncio.Future[Any]] = {answer, shown}
            await asyncio.wait(either, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done() and not shown.done():
                shown.cancel()
                return Decision("deny", headless_reason(bound), by="headless")
        return await answer

    def settle(self, request: ApprovalRequest, decision: Decision) -> None:
        with self._lock:
            pending = self._pending.pop(request.call_id, None)
        if pending is not None:
            pending.settle(decision)

    def pending(self) -> list[PendingApproval]:
        """The questions not settled yet (oldest first)."""
        with self._lock:
            return list(self._pending.values())
