"""Rules checked end to end (issue 12, "Also"): the bus refuses an event type it does not know and a
turn plus a compaction emit the design's events, no background writes after a turn, what %soba
status reports about the last compaction, and the Project Memory rule of %capsule create --remember.
(A copy of the event names compared with ``EVENT_TYPES`` was dropped: issue 21 item 11.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_support import file_writer, make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell

from soba_notebook.agent import AgentRuntime
from soba_notebook.events import EventBus
from unit.test_magics import _magics, _use_fake_server, shell  # noqa: F401


def _writer(summary: str) -> Any:
    return file_writer(4, "x " * 400, {"text": summary}, "written")


def test_an_unknown_event_type_is_refused_and_a_turn_and_a_compaction_emit_the_design_events(
        tmp_path: Path, fake_server: FakeServer) -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        EventBus().emit("compaction_tick", percent=3)
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                  compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    fake_server.handler = _writer('{"goal": "g"}')
    asyncio.run(agent.run_turn("write files"))
    asyncio.run(agent.compact())
    assert {"turn_start", "tool_start", "tool_end", "budget", "compaction_start", "compaction_end",
            "turn_end", "request_start", "response_start"} <= {e.type for e in events}


def test_completed_turn_writes_nothing_in_the_background(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                                  compaction={"keepRecentTokens": 200, "minReclaimableTokens": 100,
                                              "timeoutMs": 5000})
    fake_server.handler = _writer('{"goal": "g"}')
    runtime = AgentRuntime(agent)
    try:
        assert runtime.submit("write files").future.result(30).outcome == "completed"
        size = agent.store.file.stat().st_size
        assert [i.trigger.value for i in agent.engine.intents.pending()] == ["turn_complete"]
        # everything the agent's loop had scheduled has run once a later job has run
        runtime.submit_job(lambda _token: asyncio.sleep(0), "probe").future.result(30)
        assert agent.store.file.stat().st_size == size, "nothing is appended between turns"
        assert not [e for e in events if e.type == "compaction_start"]
        assert runtime.submit("and now?").future.result(30).outcome == "completed"
    finally:
        runtime.close()
    path = agent.store.path()
    capsule = next(e for e in path if e.type == "capsule")
    second_user = [e for e in path if e.role == "user"][1]
    assert capsule.data["trigger"] == "turn_complete"
    assert path.index(capsule) > path.index(second_user), "it ran at the next preflight barrier"


def test_soba_status_reports_the_last_compaction_fields(shell: InteractiveShell, tmp_path: Path,  # noqa: F811
                                                       fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200, timeoutMs=5000)
    fake_server.handler = _writer('{"goal": "g"}')
    shell.run_line_magic("soba", "write files")
    shell.run_line_magic("compact", "")
    capsys.readouterr()
    shell.run_line_magic("soba", "status")
    out = capsys.readouterr().out
    store = _magics(shell).session.handle.store  # type: ignore[union-attr]
    capsule = [e for e in store.entries() if e.type == "capsule"][-1]
    line = next(x for x in out.splitlines() if x.startswith("last compaction"))
    for field, value in (("operation", capsule.data["operationId"]), ("trigger", "user"),
                         ("outcome", "completed"), ("tokens_before", f"{capsule.data['tokensBefore']:,}"),
                         ("tokens_after", f"{capsule.data['tokensAfter']:,}"),
                         ("checkpoint", capsule.data["checkpointId"])):
        assert value in line, field


@pytest.mark.parametrize(("summary", "mirrored"), [('{"goal": "ship the parser"}', True), ("not json", False)])
def test_capsule_create_remember_mirrors_only_a_validated_non_degraded_capsule(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], summary: str, mirrored: bool) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server, keepRecentTokens=200, timeoutMs=5000)
    fake_server.handler = _writer(summary)
    # the model's goal is grounded in this request, yet only the model's summary says "ship the parser"
    shell.run_line_magic("soba", "write files, then ship the new parser")
    capsys.readouterr()
    shell.run_line_magic("capsule", 'create "handoff" --remember')
    out = capsys.readouterr().out
    memory = list((tmp_path / ".soba" / "memory").glob("*.capsule.md"))
    if mirrored:
        assert "added to Project Memory" in out and len(memory) == 1
        assert "ship the parser" in memory[0].read_text()
    else:
        assert "(degraded" in out and "refused: degraded capsules are never mirrored" in out
        assert memory == []
