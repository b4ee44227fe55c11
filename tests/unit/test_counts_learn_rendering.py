"""SOBA's figure for each request against the server's prompt count, on loopback servers whose
chat template renders the conversation as llama-cpp-python's ``chatml-function-calling`` does
(tool results' content dropped, each ``"`` of a call's arguments HTML-escaped) or as sent.

The server counts with the same tokenizer as SOBA, so every difference is the rendering: SOBA
learns it from the replies (``agent/rendering.py``) and from the fourth reply on its figure is
within 2% of the server's (issue 22); on a server that renders everything, nothing changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_support import make_agent
from fakeserver import FakeServer
from fakeserver import fake_server_fixture as fake_server_fixture  # the fixture

from soba_notebook.agent.loop import Agent
from soba_notebook.agent.rendering import Span, decide
from soba_notebook.session.store import SessionStore
from soba_notebook.tokens import MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD, TokenCounter

COUNTER = TokenCounter("gpt-4o-mini")
#: what each ``&#34;`` costs beyond the ``"`` it replaces
ESCAPED_QUOTE = 4


def rendered_tokens(body: Mapping[str, Any], *, drops_tool_results: bool) -> int:
    """The server's count of a chat request, rendered by its template."""
    total = COUNTER.count_tools([t["function"] for t in body.get("tools", [])])
    for message in body["messages"]:
        total += MESSAGE_OVERHEAD
        if message["role"] == "tool":
            if not drops_tool_results:
                total += COUNTER.count_text(message["content"]) + 2
            continue
        total += COUNTER.count_text(message.get("content") or "")
        for call in message.get("tool_calls", []):
            arguments = call["function"]["arguments"]
            total += TOOL_CALL_OVERHEAD + COUNTER.count_text(call["function"]["name"]) + COUNTER.count_text(arguments)
            total += ESCAPED_QUOTE * arguments.count('"') if drops_tool_results else 0
    return total + 3


def serve(server: FakeServer, *, drops_tool_results: bool) -> None:
    """A model that reads a file, then lists it, a few times per turn; usage as rendered."""

    def handle(path: str, body: Mapping[str, Any]) -> Any:
        usage = {"prompt_tokens": rendered_tokens(body, drops_tool_results=drops_tool_results),
                 "completion_tokens": 9}
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        steps = sum(1 for m in messages[last_user:] if m["role"] == "tool")
        if steps == 4:
            return {"text": "done", "usage": usage}
        name, arguments = (("read_file", {"path": f"notes{steps % 3}.txt"}) if steps % 2 == 0
                           else ("list_files", {"path": ".", "pattern": "*.txt"}))
        return {"tool_calls": [{"id": f"call_{steps}", "name": name, "arguments": arguments}], "usage": usage}

    server.handler = handle


def figures(tmp_path: Path, server: FakeServer, *, drops_tool_results: bool) -> tuple[list[float], Any]:
    serve(server, drops_tool_results=drops_tool_results)
    agent, _, _ = make_agent(tmp_path, "openai", server.openai_base_url, model={"model": "gpt-4o-mini"})
    for n in range(3):
        (agent.workspace / f"notes{n}.txt").write_text(" ".join(f"fact {n}.{i} about the parser" for i in range(60)))
    for prompt in ("read the notes", "read them again"):
        assert asyncio.run(agent.run_turn(prompt)).outcome == "completed"
    replies = [e for e in agent.store.path() if e.role == "assistant"]
    errors = [(e.message["estimatedInput"] - e.usage.prompt_tokens) / e.usage.prompt_tokens for e in replies]
    return errors, agent.counter


def test_a_server_that_drops_tool_results_and_escapes_quotes_is_counted_as_it_renders_after_three_replies(
        tmp_path: Path, fake_server: FakeServer) -> None:
    errors, counter = figures(tmp_path, fake_server, drops_tool_results=True)
    assert len(errors) >= 8
    assert max(abs(e) for e in errors[4:]) <= 0.02, [f"{e:+.1%}" for e in errors]
    assert counter.tool_results_rendered is False and counter.quote_tokens >= 3.0


def test_a_server_that_renders_every_message_as_sent_keeps_the_plain_count(tmp_path: Path,
                                                                           fake_server: FakeServer) -> None:
    errors, counter = figures(tmp_path, fake_server, drops_tool_results=False)
    assert counter.tool_results_rendered is True and counter.quote_tokens == 0.0
    assert max(abs(e) for e in errors[1:]) <= 0.02, [f"{e:+.1%}" for e in errors]


def test_tool_content_that_always_comes_with_quoted_arguments_is_not_explained_as_escaped_quotes() -> None:
    """The same read_file step repeated: every span with a tool result also has the call's four
    quotes, so "tool results dropped, each quote 192 tokens" fits as well as "rendered as sent".
    No template's escape of a ``"`` costs that much: the server renders everything, as sent."""
    spans = [Span(660, 638, 4, 809), Span(14, 0, 0, 26), Span(660, 638, 4, 809), Span(14, 0, 0, 25),
             Span(660, 638, 4, 810)]
    assert decide(spans) == (True, 0.0)


def test_a_reopened_session_counts_as_the_server_renders_as_the_agent_that_wrote_it_did(
        tmp_path: Path, fake_server: FakeServer) -> None:
    _, counter = figures(tmp_path, fake_server, drops_tool_results=True)
    old = next(iter((tmp_path / "project" / ".soba" / "sessions").iterdir()))
    agent, _, _ = make_agent(tmp_path / "again", "openai", fake_server.openai_base_url, model={"model": "gpt-4o-mini"})
    fresh = Agent(SessionStore.open(old), agent.config, agent.provider, workspace=agent.workspace)
    assert counter.tool_results_rendered is False and counter.quote_tokens >= 3.0
    assert (fresh.counter.tool_results_rendered, fresh.counter.quote_tokens) == (False, counter.quote_tokens)
