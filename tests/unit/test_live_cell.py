"""What the running cell and the widget show while a real model works (issue 20, items 9 and 10):
a live line from the moment the request is out until the reply begins, a retry as a transient
plain-words note that never becomes the widget's error, and %compact's progress in the cell."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_support import make_agent
from fakeserver import FakeServer, Reply, fake_server_fixture  # noqa: F401

from soba_notebook.events import Event
from soba_notebook.notebook.cellview import CellOutput
from soba_notebook.notebook.display import BudgetState, elapsed_text, retry_text
from soba_notebook.notebook.live import Activity, CellRenderer
from soba_notebook.providers.failures import error_message_from_body

RETRY = {"provider": "openai", "attempt": 1, "max_retries": 4, "delay": 0.2711328577473997, "status": None,
         "reason": "connection to the server failed (ReadError)",
         "detail": "openai: could not reach http://127.0.0.1:18080/v1/chat/completions: ReadError"}


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Handle:
    """A display handle that records what it was updated with."""

    def __init__(self, screen: Screen, obj: Any) -> None:
        self.screen, self.shown = screen, [obj]

    def update(self, obj: Any, **_kwargs: Any) -> None:
        self.shown.append(obj)
        self.screen.updates += 1


class Screen:
    """IPython's display, recorded: every output the cell got, each with its history of updates."""

    def __init__(self) -> None:
        self.outputs: list[Handle] = []
        self.updates = 0

    def __call__(self, obj: Any, **_kwargs: Any) -> Handle:
        handle = Handle(self, obj)
        self.outputs.append(handle)
        return handle

    def texts(self) -> list[str]:
        """What each output shows now, as text."""
        return [_text(h.shown[-1]) for h in self.outputs]


def _text(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("text/plain", ""))
    return str(getattr(obj, "data", obj))


def ev(type: str, ts: float = 1000.0, **data: Any) -> Event:
    return Event(type, data, ts)


def notebook(clock: Clock) -> tuple[CellRenderer, Screen]:
    screen = Screen()
    return CellRenderer("notebook", display=screen, clock=clock), screen


# -- formatters and the reducer ------------------------------------------------------------------
def terminal_after_five_seconds_waiting(ansi: bool) -> tuple[Clock, list[str], CellRenderer]:
    """A terminal's renderer that has waited 5 s for model ``m`` (80 ticks of 1/16 s), and what it wrote."""
    clock, written = Clock(), list[str]()
    renderer = CellRenderer("terminal", written.append, clock=clock, ansi=ansi)
    renderer.handle(ev("request_start", model="m", provider="p", inference=1))
    for _ in range(80):
        clock.now += 0.0625
        renderer.tick()
    return clock, written, renderer


def test_a_retry_reads_as_plain_words_with_its_wait_and_attempt() -> None:
    assert retry_text(RETRY) == ("connection to the server failed (ReadError); retrying in 0.3 s "
                                 "(attempt 1 of 4)")
    assert "{" not in retry_text(RETRY) and "provider" not in retry_text(RETRY)
    assert retry_text({"reason": "the server is busy or rate limiting (HTTP 429: slow down)", "delay": 12.0,
                       "attempt": 2, "max_retries": 4}).endswith("retrying in 12 s (attempt 2 of 4)")


def test_waited_seconds_read_as_seconds_then_minutes() -> None:
    assert [elapsed_text(s) for s in (0.4, 12.9, 60, 125)] == ["0 s", "12 s", "1 min 00 s", "2 min 05 s"]


def test_a_retry_is_a_transient_notice_never_the_widget_error_and_clears_when_the_reply_begins() -> None:
    state = BudgetState()
    state.apply(ev("turn_start", session_id="s", prompt="p", provider="x"))
    state.apply(ev("retry", **RETRY))
    snap = state.snapshot()
    assert snap["last_error"] is None
    assert snap["notice"] == retry_text(RETRY)
    state.apply(ev("response_start", kind="text", name=None))
    assert state.snapshot()["notice"] is None and state.snapshot()["last_error"] is None


def test_an_old_style_retry_error_event_is_a_notice_not_an_error() -> None:
    state = BudgetState()
    state.apply(ev("error", source="provider", message="retrying: {'attempt': 1}", retry=True))
    assert state.snapshot()["last_error"] is None and state.snapshot()["notice"]


def test_a_final_error_replaces_the_notice_and_the_next_turn_starts_without_it() -> None:
    state = BudgetState()
    state.apply(ev("retry", **RETRY))
    state.apply(ev("error", source="agent", message="openai: HTTP 500 server exploded (gave up after 4 retries)"))
    snap = state.snapshot()
    assert snap["notice"] is None and "server exploded" in snap["last_error"]
    state.apply(ev("turn_end", session_id="s", outcome="failed", error="x"))
    assert state.snapshot()["last_error"], "the failed turn's error stays while nothing else happened"
    state.apply(ev("turn_start", session_id="s", prompt="again", provider="x"))
    assert state.snapshot()["last_error"] is None


def test_an_error_body_names_the_servers_reason_in_each_shape() -> None:
    assert error_message_from_body('{"error": {"message": "Automatic streaming tool choice is not supported", '
                                   '"type": "internal_server_error"}}') == (
        "internal_server_error: Automatic streaming tool choice is not supported")
    assert error_message_from_body("Internal Server Error") == "Internal Server Error"
    assert error_message_from_body("<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway"
                                   "</h1><hr><center>nginx</center></body></html>") == "502 Bad Gateway"


# -- the cell ------------------------------------------------------------------------------------
def test_the_waiting_line_appears_at_once_counts_in_place_and_the_first_token_takes_its_place() -> None:
    clock = Clock()
    renderer, screen = notebook(clock)
    renderer.handle(ev("request_start", model="qwen2.5-7b", provider="local", inference=1))
    assert screen.texts() == ["waiting for qwen2.5-7b · 0 s"], "shown as soon as the request is out"
    for _ in range(320):  # the kernel thread ticks about every 60 ms (1/16 s: exact in binary) for 20 s
        clock.now += 0.0625
        renderer.tick()
    assert len(screen.outputs) == 1, "one line, updated in place"
    assert screen.texts() == ["waiting for qwen2.5-7b · 20 s"]
    assert screen.updates == 20, "one update per second shown, not one per tick"
    renderer.handle(ev("response_start", clock.now, kind="text", name=None))
    renderer.handle(ev("message_delta", clock.now, text="Hello"))
    renderer.handle(ev("message_delta", clock.now, text=" there"))
    renderer.handle(ev("turn_end", clock.now, session_id="s", outcome="completed", error=None))
    assert len(screen.outputs) == 1, "the reply took the waiting line's place"
    assert screen.texts() == ["Hello there"]


def test_a_retry_note_joins_the_waiting_line_and_leaves_with_it() -> None:
    clock = Clock()
    renderer, screen = notebook(clock)
    renderer.handle(ev("request_start", model="m", provider="p", inference=1))
    clock.now += 3
    renderer.handle(ev("retry", clock.now, **RETRY))
    assert screen.texts() == ["waiting for m · 3 s · connection to the server failed (ReadError); retrying in "
                              "0.3 s (attempt 1 of 4)"]
    renderer.handle(ev("response_start", clock.now, kind="tool_call", name="write_file"))
    assert screen.texts() == ["m is writing a call to write_file · 3 s"], "the request succeeded: no note"


def test_a_running_tool_is_shown_and_its_result_takes_the_line_place() -> None:
    clock = Clock()
    renderer, screen = notebook(clock)
    renderer.handle(ev("tool_start", call_id="c", name="shell", arguments={"command": "pytest"}))
    clock.now += 4
    renderer.tick()
    assert screen.texts() == ["running shell · 4 s"]
    renderer.handle(ev("tool_end", clock.now, call_id="c", name="shell", is_error=False, cancelled=False,
                       content="3 passed\n[exit code 0]"))
    assert len(screen.outputs) == 1 and screen.texts()[0].startswith("[ok] shell")
    renderer.handle(ev("request_start", clock.now, model="m", provider="p", inference=2))
    assert len(screen.outputs) == 2, "the next request gets its own line below the result"


def test_compact_progress_updates_in_place_and_the_summary_takes_its_place() -> None:
    clock = Clock()
    renderer, screen = notebook(clock)
    renderer.handle(ev("compaction_start", operation_id="op", trigger="user", tokens_before=9000,
                       hard_limit=10000, soft_limit=8000, source="estimated"))
    for percent in range(0, 101):  # a flood of progress events within a tenth of a second
        clock.now += 0.001
        renderer.handle(ev("compaction_progress", clock.now, operation_id="op", phase="summarize", percent=percent))
    assert screen.updates <= 1, "progress updates are rate limited"
    clock.now += 1
    renderer.tick()
    assert screen.texts() == ["Compacting context · 100% · 1 s"]
    renderer.handle(ev("compaction_end", clock.now, operation_id="op", outcome="completed"))
    renderer.finish(CellOutput("<div>summary</div>", "After this %compact: context 1,707 / 7,064 tokens"))
    assert len(screen.outputs) == 1
    assert screen.texts() == ["After this %compact: context 1,707 / 7,064 tokens"]
    assert renderer.compactions == [{"operation_id": "op", "outcome": "completed"}]


def test_a_terminal_gets_one_line_rewritten_in_place_and_erased_before_the_reply() -> None:
    clock, written, renderer = terminal_after_five_seconds_waiting(ansi=True)
    renderer.handle(ev("message_delta", clock.now, text="hi"))
    renderer.handle(ev("turn_end", clock.now, session_id="s", outcome="completed", error=None))
    out = "".join(written)
    assert out.count("\n") == 1 and out.endswith("hi\n"), "no line of its own is left behind"
    assert out.count("waiting for m") == 6, "0 to 5 s, each once"
    assert out.rindex("\x1b[2K") < out.index("hi"), "erased before the reply"


def test_a_terminal_that_is_not_a_tty_gets_no_live_line_and_a_retry_as_one_plain_line() -> None:
    clock, written, renderer = terminal_after_five_seconds_waiting(ansi=False)
    renderer.handle(ev("retry", clock.now, **RETRY))
    renderer.handle(ev("message_delta", clock.now, text="hi"))
    renderer.handle(ev("turn_end", clock.now, session_id="s", outcome="completed", error=None))
    assert "".join(written) == f"{retry_text(RETRY)}\nhi\n"


def test_thinking_and_a_compaction_before_a_response_are_said_with_the_time_they_took() -> None:
    assert Activity("thinking", 0.0, "m").text(14.2) == "m is thinking · 14 s"
    assert Activity("compacting", 0.0, percent=82.9, trigger="hard_limit").text(1.0) == (
        "Compacting context before response · 82% · 1 s")


# -- a real loopback server ----------------------------------------------------------------------
def test_a_dropped_first_connection_is_retried_and_leaves_no_error_and_no_note(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.enqueue("openai", Reply(reset=True))  # the server resets the first connection
    fake_server.openai.enqueue(text="all good")
    state = BudgetState()
    agent.bus.subscribe(state.apply)
    result = asyncio.run(agent.run_turn("hello"))
    assert result.outcome == "completed" and result.text == "all good"
    assert len(fake_server.requests) == 2
    kinds = [e.type for e in events]
    assert "error" not in kinds
    (retry,) = [e for e in events if e.type == "retry"]
    assert retry["reason"] == "connection to the server failed (ReadError)"
    assert retry["attempt"] == 1 and retry["max_retries"] == 4
    assert kinds.index("request_start") < kinds.index("retry") < kinds.index("response_start") \
        < kinds.index("message_delta")
    snap = state.snapshot()
    assert snap["last_error"] is None and snap["notice"] is None


def test_a_final_failure_names_the_servers_reason(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue_error(400, message="Automatic streaming tool choice is not supported",
                                     type="internal_server_error")
    state = BudgetState()
    agent.bus.subscribe(state.apply)
    result = asyncio.run(agent.run_turn("hello"))
    assert result.outcome == "failed"
    assert "Automatic streaming tool choice is not supported" in state.snapshot()["last_error"]
    assert state.snapshot()["notice"] is None


def test_a_call_waiting_for_approval_says_so_on_the_live_line_and_runs_on_once_answered() -> None:
    clock = Clock()
    renderer, screen = notebook(clock)
    renderer.handle(ev("tool_start", call_id="c", name="shell", arguments={"command": "pytest"}))
    renderer.handle(ev("approval_wait", clock.now, name="shell"))
    clock.now += 8
    renderer.tick()
    # the card was shown after the call's first line: the line goes on below it, the first is emptied
    assert screen.texts() == ["", "waiting for your approval · shell · 8 s"]
    renderer.handle(ev("approval_settled", clock.now, name="shell", verdict="once"))
    clock.now += 2
    renderer.tick()
    assert screen.texts() == ["", "running shell · 2 s"], "the clock restarts when the call runs"
    renderer.handle(ev("tool_end", clock.now, call_id="c", name="shell", is_error=False, cancelled=False,
                       content="3 passed\n[exit code 0]"))
    assert screen.texts()[1].startswith("[ok] shell"), "the result is under the card that asked"


def test_a_terminal_prompt_is_not_overwritten_by_the_live_line() -> None:
    clock, written = Clock(), list[str]()
    renderer = CellRenderer("terminal", written.append, clock=clock, ansi=True)
    renderer.handle(ev("tool_start", call_id="c", name="shell", arguments={"command": "pytest"}))
    renderer.handle(ev("approval_wait", clock.now, name="shell"))
    written.clear()
    clock.now += 5
    renderer.tick()
    assert written == [], "the prompt on standard input is what waits; nothing is rewritten under it"
