"""What a local server renders: a chat template that drops the tool list is learned before the
first request, said once (cell and ``%soba status``) with what to do, and not counted.

Loopback tests on the fake server, which serves llama-server's ``/props`` and ``/apply-template``
shapes; ``tests/realmodel/test_realmodel_llama_server.py`` checks the same against the real llama-server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.interactiveshell import InteractiveShell

from soba_notebook.providers import OpenAIChatProvider
from soba_notebook.providers.openai_compat import PROBE_TOOL_NAME, tools_support_from_props
from unit.test_magics import _soba_outputs, _use_fake_server, shell  # noqa: F401

#: llama-server's /props for SmolLM2 with its own template (the fields this code reads, as the real
#: server 11434 sends them)
NO_TOOLS_PROPS = {"default_generation_settings": {"n_ctx": 128000},
                  "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}


def _chatml(body: Mapping[str, Any], *, with_tools: bool) -> dict[str, str]:
    """A stand-in for ``/apply-template``: the messages in ChatML, the tools only if ``with_tools``."""
    tools = json.dumps(body.get("tools", [])) if with_tools else ""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body.get("messages", []))
    return {"prompt": f"{tools}{turns}<|im_start|>assistant\n"}


def _probe(server: FakeServer) -> OpenAIChatProvider:
    provider = OpenAIChatProvider("m", base_url=server.openai_base_url)

    async def go() -> None:
        try:
            await provider.prepare()
        finally:
            await provider.aclose()

    asyncio.run(go())
    return provider


def _tool_notes(provider: Any) -> list[str]:
    return [w for w in getattr(provider, "warnings", ()) if "does not show tools" in w]


def test_a_server_whose_template_renders_no_tools_is_named_once_with_the_fix(fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    fake_server.post_routes["/apply-template"] = lambda body: _chatml(body, with_tools=False)
    provider = _probe(fake_server)
    assert provider.renders_tools is False
    [note] = _tool_notes(provider)
    assert "--jinja" in note and "--chat-template-file" in note and "/apply-template renders no tool" in note
    [(path, body)] = fake_server.other_posts
    assert path == "/apply-template" and body["tools"][0]["function"]["name"] == PROBE_TOOL_NAME
    assert fake_server.requests == [], "learning what the server renders generates nothing"


def test_props_saying_no_tools_yields_to_a_rendered_prompt_that_holds_them(fake_server: FakeServer) -> None:
    # a server that describes tools in the system message itself although the template has no syntax
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    fake_server.post_routes["/apply-template"] = lambda body: _chatml(body, with_tools=True)
    provider = _probe(fake_server)
    assert provider.renders_tools is True and _tool_notes(provider) == []


def test_props_saying_no_tools_is_believed_when_the_server_cannot_render_a_prompt(
        fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS  # no /apply-template: 404
    provider = _probe(fake_server)
    assert provider.renders_tools is False
    [note] = _tool_notes(provider)
    assert "chat_template_caps.supports_tools is false" in note


def test_a_tool_capable_template_or_a_silent_server_keeps_the_tools_counted(fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = {"chat_template_caps": {"supports_tools": True}}
    assert _probe(fake_server).renders_tools is True
    del fake_server.get_routes["/props"]  # a server without /props (vLLM, Ollama, hosted APIs)
    assert _probe(fake_server).renders_tools is True
    assert fake_server.other_posts == [], "a prompt is rendered only to check a 'no'"


def test_the_template_capability_is_read_only_from_a_boolean() -> None:
    assert tools_support_from_props({"chat_template_caps": {"supports_tools": False}}) is False
    assert tools_support_from_props({"chat_template_caps": {"supports_tools": True}}) is True
    assert tools_support_from_props({"chat_template_caps": {"supports_tools": "no"}}) is None
    assert tools_support_from_props({"n_ctx": 4096}) is None
    assert tools_support_from_props(None) is None


def _first_estimate(tmp: Path, server: FakeServer, protocol: str = "auto") -> tuple[int, int, dict[str, Any]]:
    """(the first request's estimate, the tool definitions' count, the body sent) for one turn."""
    agent, _, _ = make_agent(tmp, "openai", server.openai_base_url, model={"toolProtocol": protocol})
    server.openai.enqueue(text="ok")
    asyncio.run(agent.run_turn("hello"))
    [reply] = [e for e in agent.store.path() if e.role == "assistant"]
    return reply.message["estimatedInput"], agent.counter.count_tools(agent.tools.specs()), server.requests[-1].body


def test_tools_the_server_does_not_render_are_sent_but_left_out_of_the_first_estimate(
        tmp_path: Path, fake_server: FakeServer) -> None:
    counted, tool_tokens, body = _first_estimate(tmp_path / "a", fake_server, "native")
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    uncounted, _, body_without = _first_estimate(tmp_path / "b", fake_server, "native")
    assert tool_tokens > 1000, "the default tools are most of a first request"
    assert counted - uncounted == tool_tokens
    assert body["tools"] == body_without["tools"], "still sent: a restarted server with a tool template needs them"


def test_a_server_that_renders_no_tools_is_said_once_in_the_cell_and_listed_in_status(
        shell: InteractiveShell, tmp_path: Path, fake_server: FakeServer,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    _use_fake_server(tmp_path, fake_server)
    fake_server.get_routes["/props"] = NO_TOOLS_PROPS
    fake_server.openai.enqueue(text="one")
    fake_server.openai.enqueue(text="two")
    first, second, status = _soba_outputs(shell, capsys, "first", "second", "status")
    assert "does not show tools to the model" in first and "--chat-template-file" in first
    assert "does not show tools" not in second, "said once"
    assert "does not show tools to the model" in status and "--jinja" in status
    assert fake_server.gets.count("/props") == 1, "asked once per session"


def test_a_llama_server_counts_the_first_request_exactly_and_the_estimate_starts_from_its_count(
        tmp_path: Path, fake_server: FakeServer) -> None:
    fake_server.get_routes["/props"] = {"chat_template_caps": {"supports_tools": True}}
    fake_server.post_routes["/apply-template"] = lambda body: _chatml(body, with_tools=True)
    fake_server.post_routes["/tokenize"] = lambda body: {"tokens": list(range(1777))}
    estimate, _, body = _first_estimate(tmp_path, fake_server)
    assert estimate == 1777, "the first budget check is the server's own count"
    rendered = [b for path, b in fake_server.other_posts if path == "/apply-template"]
    counted = [b for path, b in fake_server.other_posts if path == "/tokenize"]
    assert len(rendered) == len(counted) == 1, "asked once, for the first request only"
    assert rendered[0]["messages"] == body["messages"] and rendered[0]["tools"] == body["tools"], \
        "the count is of the very request that was sent"
