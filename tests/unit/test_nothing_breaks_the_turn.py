"""Issue 21, "Nothing breaks the turn": hostile model output, tool arguments, patterns, config and
disks end as a clear result or error, never as an exception that loses the reply.

Each test is named after the rule it proves; each failed on the code before its fix (except the
985-level case of the nesting test: there json.loads itself gave up under pytest's stack, which
already made it a parse error; at a shallower stack it parsed and crashed like the 500 case).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import trust_project_config

from soba_notebook.agent.project import open_agent
from soba_notebook.agent.tools import Tool, ToolContext, ToolOutcome, ToolRegistry, ToolResult, default_tools
from soba_notebook.cancel import CancelToken
from soba_notebook.config import load_config
from soba_notebook.errors import ConfigError, SessionError
from soba_notebook.providers import ModelRequest, StreamEvent, ToolSpec
from soba_notebook.providers.anthropic import AnthropicProvider
from soba_notebook.providers.base import ModelResponse, Provider
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session.context import pair_problems
from soba_notebook.session.entries import Entry, ToolCall, assistant_message, user_message
from soba_notebook.session.store import SessionStore

WIRES = ["openai", "anthropic"]


def _base(server: FakeServer, wire: str) -> str:
    return server.openai_base_url if wire == "openai" else server.anthropic_base_url


def _provider(server: FakeServer, wire: str) -> Provider:
    if wire == "openai":
        return OpenAIChatProvider("gpt-test", base_url=server.openai_base_url, api_key="test-key-not-secret")
    return AnthropicProvider("claude-test", base_url=server.anthropic_base_url, api_key="test-key-not-secret")


def _complete(provider: Provider, events: list[StreamEvent]) -> ModelResponse:
    async def go() -> ModelResponse:
        try:
            return await provider.complete(ModelRequest("m", "be brief", ({"role": "user", "content": "hi"},)),
                                           on_event=events.append)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _session_lines(store: SessionStore) -> list[dict[str, Any]]:
    """Every line of the session file, decoded as strict UTF-8 (a lone surrogate cannot be)."""
    return [json.loads(line) for line in store.file.read_bytes().decode("utf-8").splitlines()]


# -- 3. lone and split surrogates --------------------------------------------------------------------

@pytest.mark.parametrize("wire", WIRES)
def test_a_surrogate_pair_split_across_stream_chunks_is_joined_and_a_lone_one_replaced(
        fake_server: FakeServer, wire: str) -> None:
    # one emoji's UTF-16 pair as two JSON escapes in two consecutive deltas, then a lone low half
    getattr(fake_server, wire).enqueue(text=["Smile \ud83d", "\ude00 and a lone \udc00 half"])
    events: list[StreamEvent] = []
    response = _complete(_provider(fake_server, wire), events)
    assert response.text == "Smile \U0001f600 and a lone \ufffd half"
    streamed = "".join(str(e.data["text"]) for e in events if e.kind == "text")
    assert streamed == response.text  # every delta the screen gets is encodable, and they add up


@pytest.mark.parametrize("wire", WIRES)
def test_lone_surrogate_in_tool_arguments_is_replaced_and_the_reply_kept(
        tmp_path: Path, fake_server: FakeServer, wire: str) -> None:
    agent, _, _ = make_agent(tmp_path, wire, _base(fake_server, wire))
    queue = getattr(fake_server, wire)
    # the arguments text holds the escape \ud83d with no low half after it
    queue.enqueue(tool_calls=[{"id": "c1", "name": "write_file",
                               "arguments": '{"path": "a.txt", "content": "x\\ud83d y"}'}])
    queue.enqueue(text=["Wrote it \ud83d", "\ude00"])
    result = asyncio.run(agent.run_turn("write a.txt"))
    assert result.outcome == "completed", result.error
    assert result.text == "Wrote it \U0001f600"
    assert (agent.workspace / "a.txt").read_text(encoding="utf-8") == "x\ufffd y"
    lines = _session_lines(agent.store)
    calls = [c for line in lines for c in (line.get("message") or {}).get("toolCalls") or []]
    assert calls[0]["arguments"] == {"path": "a.txt", "content": "x\ufffd y"}
    assert [line["message"]["content"] for line in lines if (line.get("message") or {}).get("role") == "assistant"
            and line["message"].get("content")] == ["Wrote it \U0001f600"]


def test_store_append_joins_split_pairs_and_replaces_lone_surrogates(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    kept = store.append(user_message("pair \ud83d\ude00, lone \ud83d and \ude00"))
    call = store.append(assistant_message("", [ToolCall("c1", "write_file", {"content": "x\udfff"})]))
    assert kept.text == "pair \U0001f600, lone \ufffd and \ufffd"
    assert call.tool_calls[0].arguments == {"content": "x\ufffd"}
    reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.path()][:1] == [kept.text]
    assert reopened.get(call.id or "").tool_calls == call.tool_calls
    assert len(_session_lines(store)) == 3


# -- 5. a catastrophic grep pattern ------------------------------------------------------------------

class _StopAfter(CancelToken):
    """A stop button pressed at the ``n``-th look: the count says when, not the clock."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.looks, self.n = 0, n

    @property
    def cancelled(self) -> bool:
        self.looks += 1
        return self.looks >= self.n


def test_a_catastrophic_grep_pattern_times_out_naming_the_pattern_and_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ok.txt").write_text("nothing to see\n")
    # (a|aa)+$ backtracks through every way of splitting 34 a's before it meets the b
    (ws / "slow.txt").write_text("a" * 34 + "b\n")
    ctx = ToolContext(ws)
    out = asyncio.run(default_tools(ctx.config).run("grep", {"pattern": "(a|aa)+$"}, ctx))
    assert out.is_error and "timed out" in out.content, out.content
    assert "(a|aa)+$" in out.content and "slow.txt:1" in out.content


def test_grep_stops_between_lines_when_the_user_stops_the_turn(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "many.txt").write_text("".join(f"hit {i}\n" for i in range(100)))
    ctx = ToolContext(ws, cancel=_StopAfter(10))
    out = asyncio.run(default_tools(ctx.config).run("grep", {"pattern": "hit"}, ctx))
    assert out.cancelled and "stopped" in out.content
    assert 0 < out.content.count("many.txt:") < 100


# -- 6. arguments nested hundreds of levels deep -----------------------------------------------------

@pytest.mark.parametrize("depth", [500, 985])
def test_deeply_nested_tool_arguments_become_a_tool_error_the_model_sees(
        tmp_path: Path, fake_server: FakeServer, depth: int) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    nested = '{"path": "a.txt", "extra": ' + "[" * depth + "]" * depth + "}"
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "read_file", "arguments": nested}], split_args=4000)
    fake_server.openai.enqueue(text="I will call it flat next time.")
    result = asyncio.run(agent.run_turn("read a.txt"))
    assert result.outcome == "completed", result.error
    answer = next(e for e in agent.store.path() if e.role == "tool")
    assert answer.message.get("isError") and "nested" in answer.text and "nothing was run" in answer.text
    # the model saw that error in its next request, paired with its call
    sent = fake_server.requests[-1].body["messages"]
    assert any(m.get("role") == "tool" and "nested" in m.get("content", "") for m in sent)


def test_an_entry_nested_past_the_recursion_limit_is_a_session_error_not_a_crash(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    size = store.file.stat().st_size
    with pytest.raises(SessionError, match="nested too deeply"):
        store.append(Entry("note", {"value": deep}))
    assert store.file.stat().st_size == size and len(store) == 0
    assert store.append(user_message("still writable")).text == "still writable"


# -- 8. tools.workspace: "~" and "$VARIABLE" ------------------------------------------------------

def _project_with_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: str) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "home" / "proj"
    (project / ".soba").mkdir(parents=True)
    (home / "code").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SOBA_TEST_CODE", str(home / "code"))
    (project / ".soba" / "config.json").write_text(json.dumps({"tools": {"workspace": workspace}}))
    trust_project_config(project, home)
    return home, project


@pytest.mark.parametrize("workspace", ["~/code", "$HOME/code", "${SOBA_TEST_CODE}"])
def test_a_workspace_with_tilde_or_environment_variables_is_expanded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: str) -> None:
    home, project = _project_with_workspace(tmp_path, monkeypatch, workspace)
    config = load_config(project_dir=project, home=home)
    assert config.tools.workspace == str(home / "code")
    handle = open_agent(project, config=config, new=True)
    assert handle.agent.workspace == (home / "code").resolve()


@pytest.mark.parametrize("workspace", ["~", "$HOME"])
def test_a_workspace_of_tilde_or_home_is_home_and_refused_as_broad(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: str) -> None:
    home, project = _project_with_workspace(tmp_path, monkeypatch, workspace)
    with pytest.raises(ConfigError, match="allowBroadWorkspace") as info:
        open_agent(project, config=load_config(project_dir=project, home=home), new=True)
    assert info.value.key == "tools.workspace"


@pytest.mark.parametrize("workspace", ["~/nowhere", "$SOBA_TEST_UNSET_VARIABLE/code", "missing-dir"])
def test_a_workspace_that_does_not_exist_is_a_config_error_at_load_naming_key_and_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: str) -> None:
    home, project = _project_with_workspace(tmp_path, monkeypatch, workspace)
    monkeypatch.delenv("SOBA_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(ConfigError) as info:
        load_config(project_dir=project, home=home)
    message = str(info.value)
    assert info.value.key == "tools.workspace" and info.value.value == workspace
    assert "tools.workspace" in message and repr(workspace) in message and "does not exist" in message
    assert str(project / ".soba" / "config.json") in message


# -- 10. a secret set during a turn ------------------------------------------------------------------

def test_a_secret_the_python_tool_sets_is_scrubbed_from_that_same_result(
        tmp_path: Path, fake_server: FakeServer) -> None:
    secret = "late-secret-value-7f3a9c"  # no token shape: only knowing the variable can catch it
    # loaded from a file, as a real key is: a value the model writes into its own call is in that
    # call's entry, appended before the code runs
    key_file = tmp_path / "key.txt"
    key_file.write_text(secret + "\n")
    code = (f"import os\nos.environ['LATE_API_KEY'] = open({str(key_file)!r}).read().strip()\n"
            "print(os.environ['LATE_API_KEY'] + '\\n' + 'filler line\\n' * 3000)")  # long: spilled to a file
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "python", "arguments": {"code": code}}])
    fake_server.openai.enqueue(text="Set and printed.")
    try:
        result = asyncio.run(agent.run_turn("set LATE_API_KEY and print it"))
    finally:
        os.environ.pop("LATE_API_KEY", None)
    assert result.outcome == "completed", result.error
    answer = next(e for e in agent.store.path() if e.role == "tool")
    assert "[REDACTED:LATE_API_KEY]" in answer.text  # the python tool really ran and printed it
    assert secret.encode() not in agent.store.file.read_bytes()
    spilled = list((agent.workspace / ".soba" / "outputs").iterdir())
    assert spilled and all(secret not in f.read_text() for f in spilled)
    assert all(secret not in m.get("content", "") for m in fake_server.requests[-1].body["messages"])


# -- 13. an unexpected bug ---------------------------------------------------------------------------

class _BuggyTools(ToolRegistry):
    """A registry whose ``explode`` call hits a plain bug outside the tool layer's own net."""

    async def run(self, name: str, arguments: Any, ctx: ToolContext) -> ToolOutcome:
        if name == "explode":
            raise RuntimeError("a bug nobody caught")
        return await super().run(name, arguments, ctx)


def test_a_turn_that_meets_an_unexpected_bug_still_ends_with_its_calls_closed_and_the_error_named(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    agent.tools = _BuggyTools([Tool(ToolSpec("explode", "Explodes.", {"type": "object", "properties": {}}), _never)])
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "explode", "arguments": {}},
                                           {"id": "c2", "name": "explode", "arguments": {"again": True}}])
    result = asyncio.run(agent.run_turn("explode"))
    assert result.outcome == "failed"
    assert "RuntimeError: a bug nobody caught" in (result.error or "")
    kinds = [e.type for e in events]
    assert kinds[-1] == "turn_end" and events[-1].data["outcome"] == "failed" and "error" in kinds
    path = [e for e in agent.store.path() if e.is_model_input]
    assert pair_problems(path) == []  # both calls have a recorded result
    answers = {e.tool_call_id: e.text for e in path if e.role == "tool"}
    assert set(answers) == {"c1", "c2"} and all("RuntimeError" in text for text in answers.values())
    # the session goes on: the next turn is an ordinary one
    fake_server.openai.enqueue(text="fine now")
    assert asyncio.run(agent.run_turn("again")).outcome == "completed"


async def _never(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    raise AssertionError("the registry raises before this handler runs")
