"""Explicit compactions and capsule summaries are serialized with turns and cancelled like turns
(seed sections 3 and 7), driven through the real magics and the real runtime."""

from __future__ import annotations

import _thread
import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import is_summary_request, make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell

from soba_notebook.agent import AgentRuntime
from soba_notebook.compaction import Trigger
from soba_notebook.events import Event
from unit.test_magics import _magics, _use_fake_server, shell  # noqa: F401

SUMMARY = '{"goal": "write the files", "done": ["wrote them"]}'


def _write_calls(n: int) -> list[dict[str, Any]]:
    return [{"id": f"w{n}", "name": "write_file", "arguments": {"path": f"f{n}.txt", "content": "x " * 400}}]


class _Scripted:
    """Agent replies that write files, then text; summary requests answered (or held) on demand."""

    def __init__(self) -> None:
        self.n = 0
        self.order: list[str] = []
        self.hold_agent = threading.Event()   # set: the next agent request waits for ``release``
        self.release = threading.Event()
        self.agent_waiting = threading.Event()
        self.summary_started = threading.Event()
        self.slow_summary = False

    def __call__(self, path: str, body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            self.order.append("summary")
            self.summary_started.set()
            if self.slow_summary:
                return {"text": [SUMMARY[i:i + 4] for i in range(0, len(SUMMARY), 4)], "delay": 0.5}
            return {"text": SUMMARY}
        self.n += 1
        if self.hold_agent.is_set():
            self.hold_agent.clear()
            self.order.append("agent-held")
            self.agent_waiting.set()
            self.release.wait(30)
            self.order.append("agent-released")
            return {"text": "slow reply"}
        if self.n <= 4:
            return {"tool_calls": _write_calls(self.n)}
        return {"text": "files written"}


@pytest.fixture
def scripted(shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Iterator[_Scripted]:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200, timeoutMs=10000, compactOnTurnComplete=False)
    script = _Scripted()
    fake_server.handler = script
    shell.run_line_magic("soba", "write four files")  # history worth compacting
    yield script
    script.release.set()


def _events(sh: InteractiveShell) -> list[Event]:
    events: list[Event] = []
    session = _magics(sh).session
    assert session.bus is not None
    session.bus.subscribe(events.append)
    return events


def test_compact_during_a_background_turn_is_queued_behind_it_and_never_overlaps_its_request(
        shell: InteractiveShell, scripted: _Scripted, fake_server: FakeServer,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    session = _magics(shell).session
    events = _events(shell)
    turn_ended = threading.Event()
    assert session.bus is not None
    session.bus.subscribe(lambda e: turn_ended.set() if e.type == "turn_end" else None)
    scripted.hold_agent.set()
    shell.run_cell_magic("soba", "--background", "one more thing")
    assert scripted.agent_waiting.wait(30), "the background turn's request is in flight"
    assert session.runtime is not None

    def release_once_the_compaction_is_queued() -> None:
        while not scripted.release.is_set():
            if session.runtime is not None and session.runtime.queued >= 1:
                scripted.release.set()
            scripted.release.wait(0.01)

    helper = threading.Thread(target=release_once_the_compaction_is_queued, daemon=True)
    helper.start()
    capsys.readouterr()
    shell.run_line_magic("compact", "")
    scripted.release.set()  # the old code ran the compaction at once: let the held turn finish
    assert turn_ended.wait(30)
    out = capsys.readouterr().out
    assert "queued: 1 job(s) ahead of this %compact" in out
    kinds = [(e.type, e.get("trigger")) for e in events]
    assert kinds.index(("compaction_start", "user")) > kinds.index(("turn_end", None)), "the summary waited"
    assert scripted.order.index("summary") > scripted.order.index("agent-released")
    store = session.handle.store  # type: ignore[union-attr]
    path = store.path()
    reply = next(e for e in path if e.role == "assistant" and e.text == "slow reply")
    (capsule,) = [e for e in path if e.type == "capsule"]
    assert path.index(capsule) > path.index(reply), "no capsule was appended mid-turn"
    assert reply.message.get("contextKey") == "root"


def test_reply_usage_is_filed_under_the_context_its_request_measured(tmp_path: Path,
                                                                     fake_server: FakeServer) -> None:
    """A capsule appended while a request is in flight (another kernel, or the old race) must
    not receive that request's provider usage: the budget then reads the real next request."""
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    script = _Scripted()
    fake_server.handler = script
    asyncio.run(agent.run_turn("write four files"))
    script.hold_agent.set()

    async def race() -> None:
        turn = asyncio.ensure_future(agent.run_turn("one more thing"))
        while not script.agent_waiting.is_set():
            await asyncio.sleep(0.01)
        outcome = await agent.compact()
        assert outcome.outcome == "completed"
        script.release.set()
        assert (await turn).outcome == "completed"

    asyncio.run(race())
    reply = agent.store.path()[-1]
    assert reply.text == "slow reply" and reply.message.get("contextKey") == "root"
    check = agent.engine.measure()
    assert check.source == "estimated", "usage measured before the capsule is not the new context's"
    assert check.effective == agent.engine.tracker.counter.calibrated(agent.engine.tracker.estimate_raw())


def _interrupt_main_when(event: threading.Event) -> threading.Thread:
    def fire() -> None:
        if event.wait(30):
            _thread.interrupt_main()

    helper = threading.Thread(target=fire, daemon=True)
    helper.start()
    return helper


def test_stop_button_during_compact_summarization_cancels_it_and_appends_nothing(
        shell: InteractiveShell, scripted: _Scripted, fake_server: FakeServer,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    session = _magics(shell).session
    events = _events(shell)
    store = session.handle.store  # type: ignore[union-attr]
    size = store.file.stat().st_size
    scripted.slow_summary = True
    helper = _interrupt_main_when(scripted.summary_started)
    capsys.readouterr()
    shell.run_line_magic("compact", "")
    helper.join(5)
    assert scripted.summary_started.is_set(), "summarization had started when the stop button was pressed"
    out = capsys.readouterr().out
    assert "cancelled" in out and "no capsule appended" in out
    assert [e["outcome"] for e in events if e.type == "compaction_end"] == ["cancelled"]
    assert fake_server.wait_for_disconnect(), "the summary request was aborted"
    # the runtime is idle again: a later job runs, and still nothing was appended
    assert session.run_job(lambda _c: asyncio.sleep(0), "probe") is None
    assert store.file.stat().st_size == size
    assert [e for e in store.entries() if e.type == "capsule"] == []


def test_soba_stop_cancels_a_running_explicit_compaction(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                  compaction={"keepRecentTokens": 200, "timeoutMs": 10000})
    script = _Scripted()
    fake_server.handler = script
    asyncio.run(agent.run_turn("write four files"))
    script.slow_summary = True
    runtime = AgentRuntime(agent)
    try:
        job = runtime.submit_job(lambda cancel: agent.compact(cancel=cancel), "%compact")
        assert script.summary_started.wait(30)
        runtime.cancel_all()  # what %soba stop does
        outcome = job.future.result(30)
    finally:
        runtime.close()
    assert outcome.outcome == "cancelled" and outcome.trigger == Trigger.USER
    assert [e for e in agent.store.entries() if e.type == "capsule"] == []
    assert fake_server.wait_for_disconnect(), "the summary request was aborted"
    assert [e["outcome"] for e in events if e.type == "compaction_end"] == ["cancelled"]


def test_stop_button_during_capsule_create_writes_no_portable_capsule(
        shell: InteractiveShell, scripted: _Scripted, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    scripted.slow_summary = True
    helper = _interrupt_main_when(scripted.summary_started)
    capsys.readouterr()
    shell.run_line_magic("capsule", 'create "handoff"')
    helper.join(5)
    assert scripted.summary_started.is_set()
    assert "%capsule create cancelled" in capsys.readouterr().out
    assert not list((tmp_path / ".soba").rglob("*.capsule.md"))
    assert fake_server.wait_for_disconnect(), "the summary request was aborted"
