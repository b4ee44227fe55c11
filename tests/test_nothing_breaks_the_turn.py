"""Issue 21, "Nothing breaks the turn": hostile model output, tool arguments, patterns, config and
disks end as a clear result or error, never as an exception that loses the reply.

Each test is named after the rule it proves; each failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.providers import ModelRequest, StreamEvent
from soba_notebook.providers.anthropic import AnthropicProvider
from soba_notebook.providers.base import ModelResponse, Provider
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session.entries import ToolCall, assistant_message, user_message
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
