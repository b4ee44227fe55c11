"""The agent loop against a real loopback server speaking both wire formats."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from agent_support import is_summary_request, make_agent, tool_results_in
from fakeserver import OVERFLOW_BODIES, FakeServer, _json_reply, fake_server_fixture  # noqa: F401

from soba_notebook.agent import AgentRuntime
from soba_notebook.cancel import CancelToken
from soba_notebook.session.context import build_context, pair_problems

WIRES = ["openai", "anthropic"]


def _base(server: FakeServer, wire: str) -> str:
    return server.openai_base_url if wire == "openai" else server.anthropic_base_url


def _calls(*calls: tuple[str, str, dict]) -> list[dict]:
    return [{"id": cid, "name": name, "arguments": args} for cid, name, args in calls]


@pytest.mark.parametrize("wire", WIRES)
def test_multi_turn_session_with_tool_calls_over_the_wire(tmp_path: Path, fake_server: FakeServer,
                                                         wire: str) -> None:
    agent, _, _ = make_agent(tmp_path, wire, _base(fake_server, wire))
    wire_q = getattr(fake_server, wire)
    buggy = "def add(a, b):\n    return a - b\n"
    wire_q.enqueue(tool_calls=_calls(("c1", "write_file", {"path": "calc.py", "content": buggy})))
    wire_q.enqueue(tool_calls=_calls(("c2", "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}),
                                     ("c3", "read_file", {"path": "calc.py"})))
    wire_q.enqueue(text="Fixed: add now adds.")
    result = asyncio.run(agent.run_turn("write calc.py and fix it"))
    assert result.outcome == "completed" and result.inferences == 3 and "Fixed" in result.text
    assert (agent.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    wire_q.enqueue(tool_calls=_calls(("c4", "shell", {"command": "python -c 'import calc; print(calc.add(2, 3))'"})))
    wire_q.enqueue(text="It prints 5.")
    second = asyncio.run(agent.run_turn("check it"))
    assert second.outcome == "completed"
    roles = [e.role for e in agent.store.path() if e.is_model_input]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant",
                     "user", "assistant", "tool", "assistant"]
    shell_result = [e for e in agent.store.path() if e.role == "tool"][-1]
    assert "5" in shell_result.text and "[exit code 0]" in shell_result.text
    # the second request of turn one carried both parallel results in the provider's own shape
    assert tool_results_in(fake_server.requests[2].body) == 3
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []
    usage = [e.usage for e in agent.store.path() if e.role == "assistant"]
    assert all(u is not None for u in usage), "provider usage is stored on every assistant entry"


@pytest.mark.parametrize("wire", WIRES)
def test_compaction_runs_between_tool_calls_of_one_long_turn(tmp_path: Path, fake_server: FakeServer,
                                                            wire: str) -> None:
    agent, provider, _ = make_agent(
        tmp_path, wire, _base(fake_server, wire),
        model={"contextWindow": 16000, "maxOutputTokens": 1000},
        compaction={"safetyReserveTokens": 1000, "keepRecentTokens": 3000, "minTokensForAutoCompact": 4000,
                    "minReclaimableTokens": 1000, "timeoutMs": 5000})
    (agent.workspace / "big.txt").write_text("\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 8
                                                        for i in range(120)))
    count = {"n": 0}

    def handler(path: str, body: dict) -> dict:
        if is_summary_request(body):
            return {"text": '{"goal": "read big.txt repeatedly", "done": ["read it"], "filesRead": ["big.txt"]}'}
        count["n"] += 1
        # no usage: the fake server's default figures are not a real prompt size
        if count["n"] <= 14:
            args = {"path": "big.txt", "start_line": count["n"]}  # distinct reads: not a loop
            return {"tool_calls": _calls((f"r{count['n']}", "read_file", args)), "usage": False}
        return {"text": "done reading", "usage": False}

    fake_server.handler = handler
    result = asyncio.run(agent.run_turn("read big.txt many times"))
    assert result.outcome == "completed"
    path = agent.store.path()
    user_i = next(i for i, e in enumerate(path) if e.role == "user")
    capsule_positions = [i for i, e in enumerate(path) if e.type == "capsule"]
    assert capsule_positions and all(i > user_i for i in capsule_positions), "compacted inside the turn"
    hard = agent.config.hard_limit
    agent_requests = [r for r in provider.sent if r.purpose == "agent"]
    assert len(agent_requests) == 15
    for request in agent_requests:
        assert provider.request_tokens(request, agent.counter) <= hard, "no request over the hard limit is sent"
    assert pair_problems(build_context(agent.store.path()).messages) == []


@pytest.mark.parametrize("wire", WIRES)
def test_overflow_gets_one_recovery_compact_and_one_retry(tmp_path: Path, fake_server: FakeServer,
                                                         wire: str) -> None:
    agent, provider, _ = make_agent(tmp_path, wire, _base(fake_server, wire),
                                         compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    q = getattr(fake_server, wire)
    for i in range(6):
        q.enqueue(tool_calls=_calls((f"w{i}", "write_file", {"path": f"f{i}.txt", "content": "x " * 400})))
    q.enqueue(text="ok")
    asyncio.run(agent.run_turn("write files"))
    q.enqueue_overflow()
    fake_server.handler = lambda path, body: {"text": '{"goal": "g"}'} if is_summary_request(body) \
        else {"text": "answer after recovery"}
    result = asyncio.run(agent.run_turn("and now?"))
    assert result.outcome == "completed" and "after recovery" in result.text
    capsules = [e for e in agent.store.entries() if e.type == "capsule"]
    assert [c.data["trigger"] for c in capsules] == ["context_overflow"]
    agent_requests = [r for r in provider.sent if r.purpose == "agent"]
    assert len(agent_requests) == 7 + 2, "the overflowing request and exactly one retry"


@pytest.mark.parametrize("wire", WIRES)
def test_second_overflow_fails_the_turn_without_resending(tmp_path: Path, fake_server: FakeServer,
                                                          wire: str) -> None:
    agent, provider, _ = make_agent(tmp_path, wire, _base(fake_server, wire),
                                         compaction={"keepRecentTokens": 200, "timeoutMs": 5000})
    q = getattr(fake_server, wire)
    for i in range(4):
        q.enqueue(tool_calls=_calls((f"w{i}", "write_file", {"path": f"f{i}.txt", "content": "y " * 400})))
    q.enqueue(text="ok")
    asyncio.run(agent.run_turn("write files"))
    overflow = _json_reply(*OVERFLOW_BODIES[wire])
    fake_server.handler = lambda path, body: {"text": '{"goal": "g"}'} if is_summary_request(body) else overflow
    before = len([r for r in provider.sent if r.purpose == "agent"])
    result = asyncio.run(agent.run_turn("again"))
    assert result.outcome == "failed" and "not resent" in result.error
    assert len([r for r in provider.sent if r.purpose == "agent"]) - before == 2
    assert [c.data["trigger"] for c in agent.store.entries() if c.type == "capsule"] == ["context_overflow"]


def test_cancel_mid_stream_keeps_the_transcript_consistent_and_appends_no_capsule(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text=["partial ", "answer ", "that ", "never ", "ends"], delay=0.5)
    cancel = CancelToken()

    async def scenario():
        streaming = asyncio.Event()
        agent.bus.subscribe(lambda e: streaming.set() if e.type == "message_delta" else None)
        task = asyncio.ensure_future(agent.run_turn("talk slowly", cancel))
        await asyncio.wait_for(streaming.wait(), 30)
        cancel.cancel()
        return await task

    result = asyncio.run(scenario())
    assert result.outcome == "cancelled"
    assert [e for e in agent.store.entries() if e.type == "capsule"] == []
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []
    assert fake_server.wait_for_disconnect(), "the streaming request was aborted"


def test_cancel_mid_tool_records_a_cancelled_result(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(tool_calls=_calls(("s1", "shell", {"command": "touch running && sleep 30"}),
                                                 ("s2", "read_file", {"path": "x"})))
    cancel = CancelToken()
    running = agent.workspace / "running"

    async def scenario():
        tool_started = asyncio.Event()
        agent.bus.subscribe(lambda e: tool_started.set() if e.type == "tool_start" else None)
        task = asyncio.ensure_future(agent.run_turn("sleep", cancel))
        await asyncio.wait_for(tool_started.wait(), 30)
        while not running.exists():  # the shell command itself is running
            await asyncio.sleep(0.01)
        cancel.cancel()
        return await task

    result = asyncio.run(scenario())
    assert result.outcome == "cancelled"
    results = {e.tool_call_id: e for e in agent.store.path() if e.role == "tool"}
    assert set(results) == {"s1", "s2"}, "every call of the cancelled batch has a recorded result"
    assert all(r.message.get("cancelled") for r in results.values())
    assert pair_problems([e for e in agent.store.path() if e.is_model_input]) == []


def test_input_submitted_during_a_turn_is_queued_and_taken_after_it(tmp_path: Path,
                                                                    fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text=["first ", "reply"], delay=0.2)
    fake_server.openai.enqueue(text="second reply")
    runtime = AgentRuntime(agent)
    try:
        one = runtime.submit("first prompt")
        two = runtime.submit("second prompt")
        assert one.position == 0 and two.position == 1
        assert two.future.result(30).outcome == "completed"
        assert one.future.result(1).text == "first reply"
    finally:
        runtime.close()
    users = [e.text for e in agent.store.path() if e.role == "user"]
    assert users == ["first prompt", "second prompt"]
    assert [e.text for e in agent.store.path() if e.role == "assistant"] == ["first reply", "second reply"]


def test_workspace_confinement_refuses_dotdot_and_symlink_escapes(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    (agent.workspace.parent / "secret").write_text("top secret")
    (agent.workspace / "link").symlink_to(agent.workspace.parent / "secret")
    fake_server.openai.enqueue(tool_calls=_calls(("a", "read_file", {"path": "../secret"}),
                                                 ("b", "read_file", {"path": "link"})))
    fake_server.openai.enqueue(text="refused")
    asyncio.run(agent.run_turn("read the secret"))
    results = [e for e in agent.store.path() if e.role == "tool"]
    assert len(results) == 2
    for r in results:
        assert r.message.get("isError") and "outside the workspace" in r.text
        assert "top secret" not in r.text


def test_secret_in_the_environment_never_reaches_a_file_under_soba(tmp_path: Path, fake_server: FakeServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-" + "9f3b2c1d8e7a6b5c4d3e2f1a"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret + "-other")
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(tool_calls=_calls(
        ("a", "shell", {"command": "echo key=$OPENAI_API_KEY other=$MY_SERVICE_TOKEN"}),
        ("b", "python", {"code": "import os\nprint(os.environ['OPENAI_API_KEY'])"})))
    fake_server.openai.enqueue(text=f"I saw {secret}")
    asyncio.run(agent.run_turn(f"my key is {secret}, print it"))
    soba = tmp_path / "project" / ".soba"
    files = [p for p in soba.rglob("*") if p.is_file()]
    assert files
    for f in files:
        assert secret not in f.read_text(errors="replace"), f"secret leaked into {f}"
    assert "[REDACTED:OPENAI_API_KEY]" in agent.store.file.read_text()


@pytest.mark.live
def test_live_provider_runs_one_short_turn(tmp_path: Path) -> None:
    base = os.environ.get("SOBA_LIVE_BASE_URL")
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("ANTHROPIC_API_KEY") or base):
        pytest.skip("opt-in: set OPENAI_API_KEY, ANTHROPIC_API_KEY or SOBA_LIVE_BASE_URL to run against a "
                    "real provider")
    from soba_notebook.agent import open_agent

    provider = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") and not base else "openai"
    default = "claude-3-5-haiku-latest" if provider == "anthropic" else "gpt-4o-mini"
    model = os.environ.get("SOBA_LIVE_MODEL") or default
    handle = open_agent(tmp_path, overrides={"model": {"provider": provider, "model": model,
                                                       **({"baseUrl": base} if base else {})}})
    result = asyncio.run(handle.agent.run_turn("Reply with the single word: pong"))
    assert result.outcome == "completed" and result.text
