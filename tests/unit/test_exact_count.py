"""The server's exact count after a compaction (issue 22, "counts the server agrees with"): on a
llama.cpp server the first request on a capsule is rendered and tokenized by the server
(``/apply-template`` + ``/tokenize``) and SOBA's figure for it is that count; a count that fails
or does not come keeps the estimate and the turn goes on.

Loopback tests on the fake server, which serves llama-server's ``/props``, ``/apply-template`` and
``/tokenize`` shapes, and the failure shapes the real server here cannot be made to produce (an
answer without tokens, an endpoint that never answers). ``tests/realmodel/test_realmodel.py`` checks the
count against the real llama-server's ``usage.prompt_tokens``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent_support import is_summary_request, make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.loop import Agent
from soba_notebook.flight import read_flight_records
from unit.test_server_renders import _chatml

LONG = "The parser reads tokens from the lexer and builds a tree of nodes; each keeps its source span. " * 20
PROPS = {"default_generation_settings": {"n_ctx": 128000}, "chat_template_caps": {"supports_tools": True}}


def _tokens(body: Mapping[str, Any]) -> dict[str, Any]:
    """A stand-in for ``/tokenize``: one token per four characters of the rendered prompt."""
    return {"tokens": list(range(len(str(body.get("content", ""))) // 4))}


def _compacted_then_asked(tmp_path: Path, server: FakeServer,
                          tokenize: Callable[[Mapping[str, Any]], Any] = _tokens) -> tuple[Agent, Any]:
    """An agent on a llama.cpp-like server: two long turns, ``%compact``, then one more turn with
    ``tokenize`` as the server's ``/tokenize`` from the compaction on; that turn's result."""
    server.get_routes["/props"] = PROPS
    server.post_routes["/apply-template"] = lambda body: _chatml(body, with_tools=True)
    server.post_routes["/tokenize"] = _tokens
    server.handler = lambda path, body: ({"text": "not a capsule"} if is_summary_request(body)
                                         else {"text": "ok", "usage": {"prompt_tokens": 700, "completion_tokens": 1}})
    agent, _, _ = make_agent(tmp_path, "openai", server.openai_base_url,
                             compaction={"auto": False, "keepRecentTokens": 60})

    async def scenario() -> Any:
        try:
            await agent.run_turn("Remember this. " + LONG)
            await agent.run_turn("And this. " + LONG)
            outcome = await agent.compact()
            assert outcome.outcome == "completed", outcome
            server.post_routes["/tokenize"] = tokenize
            return await agent.run_turn("Say hello")
        finally:
            await agent.provider.aclose()

    return agent, asyncio.run(scenario())


def _counts(agent: Agent) -> list[dict[str, Any]]:
    return [r for r in read_flight_records(agent.workspace.parent / ".soba" / "flight.jsonl")
            if r.get("kind") == "exact_count"]


def _last_estimate(agent: Agent) -> int:
    return [e for e in agent.store.path() if e.role == "assistant"][-1].message["estimatedInput"]


def test_the_first_request_after_a_compaction_is_counted_by_the_server_and_its_figure_is_that_count(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, result = _compacted_then_asked(tmp_path, fake_server)
    assert result.outcome == "completed", result
    rendered = [body for path, body in fake_server.other_posts if path == "/apply-template"]
    assert rendered[-1]["messages"] == fake_server.requests[-1].body["messages"], "the very request sent"
    exact = len(_chatml(rendered[-1], with_tools=True)["prompt"]) // 4
    assert _last_estimate(agent) == exact
    assert [(r["when"], r["outcome"]) for r in _counts(agent)] == [
        ("first_request", "counted"), ("after_compaction", "counted")], "once for the session, once per capsule"


def test_a_count_the_server_cannot_give_keeps_the_estimate_and_the_turn_goes_on(
        tmp_path: Path, fake_server: FakeServer) -> None:
    agent, result = _compacted_then_asked(tmp_path, fake_server, tokenize=lambda body: {"error": "busy"})
    assert result.outcome == "completed", result
    [after] = [r for r in _counts(agent) if r["when"] == "after_compaction"]
    assert after["outcome"] == "unavailable" and after["server_tokens"] is None
    assert _last_estimate(agent) == after["estimate"] > 0, "the estimate is the request's figure"


def test_a_count_that_never_comes_is_given_up_after_its_timeout_and_the_turn_goes_on(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: Any) -> None:
    monkeypatch.setattr("soba_notebook.agent.exact_count.COUNT_TIMEOUT", 0.2)
    release = threading.Event()

    def hang(body: Mapping[str, Any]) -> Any:
        release.wait(600)  # until the test has seen the turn end
        return _tokens(body)

    try:
        agent, result = _compacted_then_asked(tmp_path, fake_server, tokenize=hang)
    finally:
        release.set()
    assert result.outcome == "completed", result
    [after] = [r for r in _counts(agent) if r["when"] == "after_compaction"]
    assert after["outcome"] == "timeout" and _last_estimate(agent) == after["estimate"]
