"""llama-cpp-python's "Automatic streaming tool choice is not supported", on a loopback server that
answers as it does: a streamed request with ``tools`` and ``tool_choice: "auto"`` gets HTTP 200, an
empty stream, and a connection the server has closed (the client learns that only when it sends
the next request on it). Its streams carry no usage; its plain replies do.

The provider learns that once per server: each later tool step costs exactly one request, and no
request is ever sent on the closed connection (which cost a retry on every tool step before).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_support import make_agent, tool_results_in
from fakeserver import FakeServer, Reply
from fakeserver import fake_server_fixture as fake_server_fixture  # the fixture

from soba_notebook.providers.base import ModelRequest
from soba_notebook.providers.openai import OpenAIChatProvider

EMPTY_STREAM = Reply(status=200, headers=(("content-type", "text/event-stream; charset=utf-8"),), frames=(),
                     stream=True, close_after=True)


def llama_cpp_python(server: FakeServer, *, steps: int) -> None:
    """Answer as llama-cpp-python does: tool calls for the first ``steps`` steps of each turn (a
    turn's step counts its tool results), then text; streams without usage."""

    def handle(path: str, body: Mapping[str, Any]) -> Any:
        if body.get("stream") and body.get("tools") and body.get("tool_choice") == "auto":
            return EMPTY_STREAM
        messages = list(body.get("messages", []))
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        done = tool_results_in({"messages": messages[last_user:]})
        usage: Any = False if body.get("stream") else {"prompt_tokens": 900 + 40 * done, "completion_tokens": 9}
        if body.get("tools") and done < steps:
            call = {"id": f"call_{len(messages)}", "name": "list_files", "arguments": {"path": str(done)}}
            return {"tool_calls": [call], "usage": usage}
        return {"text": "done", "usage": usage}

    server.handler = handle


def test_a_server_that_cannot_stream_automatic_tool_choice_costs_one_request_per_step_after_the_first_and_no_retry(
        tmp_path: Path, fake_server: FakeServer) -> None:
    llama_cpp_python(fake_server, steps=2)
    agent, _, events = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    first = asyncio.run(agent.run_turn("list the files twice"))
    assert first.outcome == "completed" and first.inferences == 3, first
    first_requests = len(fake_server.requests)
    second = asyncio.run(agent.run_turn("and again"))
    assert second.outcome == "completed" and second.inferences == 3, second

    retries = [e for e in events if e.type == "retry"]
    assert retries == [], [e["reason"] for e in retries]
    assert fake_server.dead_connection_requests == 0, "no request is sent on the connection the server closed"
    # the first step: the empty stream, then the same request plain; every step after: one plain request
    assert first_requests == first.inferences + 1
    assert len(fake_server.requests) - first_requests == second.inferences
    streamed = [r.body.get("stream") for r in fake_server.requests]
    assert streamed == [True] + [False] * (len(streamed) - 1), streamed


def test_stream_auto_decides_from_streamed_replies_only(tmp_path: Path, fake_server: FakeServer) -> None:
    llama_cpp_python(fake_server, steps=1)
    provider = OpenAIChatProvider("m", base_url=fake_server.openai_base_url, probe=False)

    async def ask(tools: bool) -> None:
        specs = tuple(make_agent(tmp_path, "openai", fake_server.openai_base_url)[0].tools.specs()) if tools else ()
        await provider.complete(ModelRequest(model="m", system="s", messages=({"role": "user", "content": "hi"},),
                                             tools=specs, max_output_tokens=16))

    async def scenario() -> None:
        await ask(tools=True)  # empty stream, answered plainly with usage: says nothing about streams
        assert provider.quirks.streams_usage is None
        await ask(tools=False)  # streamed, no usage in the stream: from now on plain
        await ask(tools=False)
        await provider.aclose()

    asyncio.run(scenario())
    assert [r.body.get("stream") for r in fake_server.requests] == [True, False, True, False]
    assert provider.quirks.streams_usage is False
    assert fake_server.dead_connection_requests == 0
