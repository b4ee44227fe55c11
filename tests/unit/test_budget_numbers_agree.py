"""Every place that shows the context's size shows the same figure and says which request it measures.

The places: the completion line of a compaction, the cell's end-of-turn line, the widget's state,
``%soba status`` and ``views.budget_history`` (its last row). The figure is the snapshot the engine
published last (compaction/snapshot.py): the request the running inference sent, or the next one
SOBA would send. Each test stops the agent's thread right after one kind of event (a turn's end, a
compaction's end, a tool result, a rewind, a resume) and reads all of them from the kernel thread
while it waits, as a user's cell would.

The issue this proves fixed: a turn's end said "After this turn: context 2,798" (the last request
sent, measured before the reply) while the widget under it said 2,862 (the next request, measured
when the next cell asked).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from soba_notebook import views
from soba_notebook.demo.scenario import DEMO_PROMPTS
from soba_notebook.events import Event
from soba_notebook.notebook import cellview, soba_commands
from soba_notebook.notebook.controller import NotebookSession
from soba_notebook.notebook.display import CompactionSummary
from unit.test_one_budget_truth import SMALL, terminal_session

WAIT = 60.0


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotebookSession]:
    yield from terminal_session(tmp_path, monkeypatch)
WORDS = {"sent": "last request sent", "next": "next request"}
_FIGURE = re.compile(r"context ([\d,]+) / [\d,]+ tokens(?: \([\d.]+%\))?, (last request sent|next request)")
_STATUS = re.compile(r"^context\s+([\d,]+) / [\d,]+ tokens, (last request sent|next request) ")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def figures(s: NotebookSession, ends: list[dict[str, Any]] | None = None) -> dict[str, tuple[int, str]]:
    """What each place shows now: ``{place: (tokens, which request)}``. ``ends``: the
    ``compaction_end`` payloads whose completion line was shown (the last one counts)."""
    handle = s.ensure()
    shown = dict(s.show_budget(show=False).state.snapshot())
    line = cellview.cell_summary(shown, ends or []).text.splitlines()[0]  # what end_cell shows
    turn = _FIGURE.search(line)
    assert turn is not None, line
    status_line = next(x for x in cellview.status_lines(s.status()) if x.startswith("context "))
    status = _STATUS.match(status_line)
    assert status is not None, status_line
    history = views.budget_history(handle.store.file)
    last = history.iloc[-1]
    out = {
        "end-of-turn line": (_number(turn.group(1)), turn.group(2)),
        "widget": (shown["effective"], shown["request_words"]),
        "%soba status": (_number(status.group(1)), status.group(2)),
        "views.budget_history": (int(last["tokens_after"]),
                                 WORDS["sent"] if last["event"] == "inference" else WORDS["next"]),
    }
    if ends and ends[-1].get("outcome") == "completed":
        summary = CompactionSummary.from_event(ends[-1], hard_limit=shown["hard_limit"])
        after = re.search(r"→ ([\d,]+) (?:tokens|sent)", summary.text)
        assert after is not None, summary.text
        out["completion line"] = (_number(after.group(1)), WORDS["next"])
    return out


def assert_agree(found: dict[str, tuple[int, str]], request: str) -> None:
    assert len(set(found.values())) == 1, found
    assert next(iter(found.values()))[1] == WORDS[request], found


class Hold:
    """Stops the agent's thread at the first event ``when`` accepts, until :meth:`release`."""

    def __init__(self, s: NotebookSession, when: Callable[[Event, list[Event]], bool]) -> None:
        self.seen: list[Event] = []
        self.reached, self._release = threading.Event(), threading.Event()
        self._when = when
        assert s.bus is not None
        self._unsubscribe = s.bus.subscribe(self)  # after the display's: it has the event when this stops

    def __call__(self, event: Event) -> None:
        self.seen.append(event)
        if not self.reached.is_set() and self._when(event, self.seen):
            self.reached.set()
            self._release.wait(WAIT)

    @property
    def ends(self) -> list[dict[str, Any]]:
        return [dict(e.data) for e in self.seen if e.type == "compaction_end"]

    def release(self) -> None:
        self._release.set()
        self._unsubscribe()


def _turns(s: NotebookSession, count: int = 2) -> None:
    s.set_override("tools", "approval", "never")  # the demo's shell calls run without a question
    for prompt in DEMO_PROMPTS[:count]:
        result = s.run(prompt)
        assert result is not None and result.outcome == "completed", result


def _budget_after_end(*triggers: str) -> Callable[[Event, list[Event]], bool]:
    """The ``budget`` event a completed compaction with one of ``triggers`` publishes as it ends."""
    def when(event: Event, seen: list[Event]) -> bool:
        before = seen[-2] if len(seen) > 1 else None
        return (event.type == "budget" and before is not None and before.type == "compaction_end"
                and before["trigger"] in triggers and before["outcome"] == "completed")
    return when


def _held_turn(s: NotebookSession, prompt: str, hold: Hold) -> dict[str, tuple[int, str]]:
    s.run(prompt, background=True)
    assert hold.reached.wait(WAIT), f"the turn never reached the event; its compactions: {hold.ends}"
    try:
        return figures(s, hold.ends)
    finally:
        hold.release()
        _wait_idle(s)


def _wait_idle(s: NotebookSession) -> None:
    assert s.runtime is not None
    done = threading.Event()
    s.runtime.submit_job(lambda cancel: _set(done), "wait").future.result(WAIT)
    assert done.is_set()


async def _set(done: threading.Event) -> None:
    done.set()


def test_every_place_shows_the_next_request_after_a_turn_ends(session: NotebookSession) -> None:
    _turns(session, 1)
    shown = figures(session)
    assert_agree(shown, "next")
    engine = session.ensure().agent.engine
    snapshot = engine.snapshot()
    assert snapshot is not None and snapshot.request == "next"
    assert shown["widget"][0] == snapshot.effective == engine.measure().effective, "the reply is in the figure"


def test_every_place_shows_the_request_sent_while_a_tool_runs(session: NotebookSession) -> None:
    _turns(session, 1)
    session.show_budget(show=False)
    hold = Hold(session, lambda event, _seen: event.type == "tool_end")
    assert_agree(_held_turn(session, DEMO_PROMPTS[1], hold), "sent")


def test_every_place_shows_the_next_request_after_a_user_compact(session: NotebookSession) -> None:
    _turns(session)
    handle = session.ensure()
    ends: list[dict[str, Any]] = []
    assert session.bus is not None
    session.bus.subscribe(lambda e: ends.append(dict(e.data)) if e.type == "compaction_end" else None)
    done = session.run_job(lambda cancel: handle.agent.compact(None, cancel), "%compact", summary="%compact")
    assert done.outcome == "completed", done.reason
    shown = figures(session, ends)
    assert_agree(shown, "next")
    assert shown["completion line"][0] == done.tokens_after


def test_every_place_shows_the_next_request_after_a_soft_compaction(session: NotebookSession) -> None:
    _turns(session)
    session.set_override("compaction", "minTokensForAutoCompact", 0)
    session.set_override("compaction", "autoCompactThresholdRatio", 0.01)  # soft far below the context
    session.set_override("compaction", "minReclaimableTokens", 0)  # any saving passes the ROI
    hold = Hold(session, _budget_after_end("auto_threshold", "turn_complete", "milestone", "plan_pivot"))
    assert_agree(_held_turn(session, DEMO_PROMPTS[2], hold), "next")


def test_every_place_shows_the_next_request_after_a_hard_compaction(session: NotebookSession) -> None:
    _turns(session)
    effective = session.status()["effective"]
    config = session.ensure().agent.config
    # the hard limit just under the context: the next preflight must compact before sending
    reserve = config.model.context_window - config.model.max_output_tokens - (effective - 50)
    session.set_override("compaction", "safetyReserveTokens", reserve)
    hold = Hold(session, _budget_after_end("hard_limit"))
    assert_agree(_held_turn(session, DEMO_PROMPTS[2], hold), "next")


def test_every_place_shows_the_next_request_after_a_rewind(session: NotebookSession) -> None:
    _turns(session)
    handle = session.ensure()
    first_reply = next(e for e in handle.store.path() if e.role == "assistant" and not e.tool_calls)
    before = session.status()["effective"]
    soba_commands.COMMANDS.dispatch(session, ["rewind", first_reply.id or ""])
    shown = figures(session)
    assert_agree(shown, "next")
    assert shown["widget"][0] != before, "the rewound context, not the one before the rewind"


def test_a_resumed_session_shows_the_figure_its_last_turn_left(session: NotebookSession) -> None:
    _turns(session)
    left = figures(session)
    sid = session.ensure().store.id
    session.close()
    fresh = NotebookSession(session.project_dir, user_namespace={}, frontend="terminal", overrides=SMALL)
    try:
        fresh.ensure(session=sid)
        shown = figures(fresh)
        assert_agree(shown, "next")
        assert shown == left
    finally:
        fresh.close()
