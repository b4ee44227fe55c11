"""Fault injection, provider part (issue 13): a loopback server that stalls, resets mid-stream, sends
garbage, and overflows; the deadlines ``model.requestTimeoutMs`` / ``model.idleTimeoutMs``.

Run alone with ``pytest -m faults``. Every wait below is bounded by the provider's own deadline (a
second or two); the outer ``wait_for`` only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from fakeserver import FakeServer, Reply, fake_server_fixture  # noqa: F401

from soba_notebook.agent import open_agent
from soba_notebook.cancel import CancelToken
from soba_notebook.config import load_config
from soba_notebook.errors import ConfigError, ContextOverflowError, ProviderError
from soba_notebook.providers import AnthropicProvider, ModelRequest, ModelResponse, OpenAIChatProvider
from soba_notebook.session.entries import Entry

REQUEST = ModelRequest("m", "sys", ({"role": "user", "content": "hi"},))
HANG_GUARD = 60.0
SSE = (("content-type", "text/event-stream; charset=utf-8"),)


def _provider(wire: str, server: FakeServer, **options: Any) -> OpenAIChatProvider | AnthropicProvider:
    options.setdefault("api_key", "test-key")
    if wire == "openai":
        return OpenAIChatProvider("m", base_url=server.openai_base_url, **options)
    return AnthropicProvider("m", base_url=server.anthropic_base_url, **options)


def _complete(wire: str, server: FakeServer, **options: Any) -> ModelResponse:
    async def go() -> ModelResponse:
        provider = _provider(wire, server, **options)
        try:
            return await asyncio.wait_for(provider.complete(REQUEST), HANG_GUARD)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _text_frames(wire: str, pieces: list[str]) -> tuple[bytes, ...]:
    """The frames of a reply that streams ``pieces`` and never finishes."""
    if wire == "openai":
        return tuple(f'data: {{"choices":[{{"index":0,"delta":{{"content":"{p}"}}}}]}}\n\n'.encode()
                     for p in pieces)
    start = (b'event: message_start\ndata: {"type":"message_start","message":{"model":"m",'
             b'"usage":{"input_tokens":5,"output_tokens":0}}}\n\n'
             b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
             b'"content_block":{"type":"text","text":""}}\n\n')
    return (start, *(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":0,'
                     f'"delta":{{"type":"text_delta","text":"{p}"}}}}\n\n'.encode() for p in pieces))


# -- stalls ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_server_sending_only_keep_alives_hits_the_whole_request_deadline(fake_server: FakeServer,
                                                                         wire: str) -> None:
    fake_server.enqueue(wire, Reply(headers=SSE, frames=(b": keep-alive\n\n",), hold_open=True, delay=0.05))
    with pytest.raises(ProviderError, match=r"no complete reply within 1 s \(model\.requestTimeoutMs\)"):
        _complete(wire, fake_server, timeout=5.0, request_timeout=1.0)
    assert fake_server.wait_for_disconnect(), "the abandoned request's connection was closed"


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_stall_before_the_headers_is_not_retried_past_the_deadline(fake_server: FakeServer, wire: str) -> None:
    fake_server.handler = lambda path, body: Reply(headers=SSE, headers_delay=60)
    with pytest.raises(ProviderError, match=r"model\.requestTimeoutMs.*no response from") as info:
        _complete(wire, fake_server, timeout=0.3, request_timeout=1.5, max_retries=4, jitter=lambda: 1.0)
    assert info.value.retryable
    # idle 0.3 s, backoff 0.5 s, 1 s, ...: the third attempt would start after the deadline
    assert 1 <= len(fake_server.requests) < 5, "not the five attempts of the retry policy"


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_deadline_that_passes_during_an_attempt_names_what_the_attempt_waited_for(fake_server: FakeServer,
                                                                                  wire: str) -> None:
    # the idle timeout (5 s) outlasts the deadline (1 s): the deadline cuts the first attempt, on
    # any machine, and the error still says the server never answered
    fake_server.handler = lambda path, body: Reply(headers=SSE, headers_delay=60)
    with pytest.raises(ProviderError) as info:
        _complete(wire, fake_server, timeout=5.0, request_timeout=1.0, max_retries=4)
    url = fake_server.openai_base_url if wire == "openai" else fake_server.anthropic_base_url
    assert "no complete reply within 1 s (model.requestTimeoutMs); the request was abandoned; 1 attempt(s), " \
           f"the last: no response from {url.rstrip('/')}" in str(info.value), str(info.value)
    assert str(info.value).endswith(" yet"), str(info.value)


def test_model_request_timeout_ms_from_the_config_ends_a_turn_held_by_keep_alives(
        tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fake_server.enqueue("openai", Reply(headers=SSE, frames=(b": keep-alive\n\n",), hold_open=True, delay=0.05))
    handle = open_agent(tmp_path / "project", overrides={"model": {
        "provider": "openai", "model": "m", "baseUrl": fake_server.openai_base_url,
        "requestTimeoutMs": 1_000, "idleTimeoutMs": 5_000}})

    async def turn() -> Any:
        try:
            return await asyncio.wait_for(handle.agent.run_turn("hello"), HANG_GUARD)
        finally:
            await handle.agent.provider.aclose()

    result = asyncio.run(turn())
    assert result.outcome == "failed"
    assert "no complete reply within 1 s (model.requestTimeoutMs)" in (result.error or "")


@pytest.mark.parametrize(("key", "value", "rule"), [
    ("requestTimeoutMs", math.nan, "finite"),
    ("requestTimeoutMs", 0, "from 100"),
    ("requestTimeoutMs", 1e300, "to 86,400,000"),
    ("idleTimeoutMs", -5, "from 100"),
    ("idleTimeoutMs", "soon", "whole number"),
])
def test_provider_deadlines_are_model_config_keys_with_declared_bounds(tmp_path: Path, key: str, value: Any,
                                                                      rule: str) -> None:
    config = load_config(home=tmp_path / "home", project_dir=tmp_path,
                         overrides={"model": {"requestTimeoutMs": 30_000, "idleTimeoutMs": 2_000}})
    assert (config.model.request_timeout_ms, config.model.idle_timeout_ms) == (30_000, 2_000)
    with pytest.raises(ConfigError, match=rule) as info:
        load_config(home=tmp_path / "home", project_dir=tmp_path, overrides={"model": {key: value}})
    assert info.value.key == f"model.{key}"


# -- resets ---------------------------------------------------------------------------------------------

def _partial_entries(entries: list[Entry]) -> list[dict[str, Any]]:
    return [dict(e.message) for e in entries if e.role == "assistant" and e.message.get("partial")]


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_reply_reset_mid_stream_fails_the_turn_and_keeps_its_text_marked_partial(
        tmp_path: Path, fake_server: FakeServer, wire: str) -> None:
    base = fake_server.openai_base_url if wire == "openai" else fake_server.anthropic_base_url
    agent, _, _ = make_agent(tmp_path, wire, base)
    fake_server.enqueue(wire, Reply(headers=SSE, frames=_text_frames(wire, ["half ", "an ", "answer"]), abort=True))
    result = asyncio.run(asyncio.wait_for(agent.run_turn("talk"), HANG_GUARD))
    assert result.outcome == "failed" and "broke mid-stream" in (result.error or "")
    assert len(fake_server.requests) == 1, "a reply that already streamed is not retried"
    partial = _partial_entries(agent.store.path())
    assert [(m["content"], m["stopReason"]) for m in partial] == [("half an answer", "error")]


def test_a_cancelled_reply_keeps_its_streamed_text_marked_partial(tmp_path: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text=["first words ", "then more"], hold_open=True, delay=0.05)
    cancel = CancelToken()

    async def scenario() -> Any:
        streaming = asyncio.Event()
        agent.bus.subscribe(lambda e: streaming.set() if e.type == "message_delta" else None)
        task = asyncio.ensure_future(agent.run_turn("talk slowly", cancel))
        await asyncio.wait_for(streaming.wait(), HANG_GUARD)
        cancel.cancel()
        return await asyncio.wait_for(task, HANG_GUARD)

    result = asyncio.run(scenario())
    assert result.outcome == "cancelled"
    partial = _partial_entries(agent.store.path())
    assert len(partial) == 1 and partial[0]["stopReason"] == "cancelled"
    assert partial[0]["content"].startswith("first words")


# -- garbage --------------------------------------------------------------------------------------------

GARBAGE = b"\x00\xff\xfe<html>502 Bad Gateway</html>\nnot an event stream\n\n"


def test_garbage_bytes_before_done_are_a_provider_error_not_an_empty_reply(fake_server: FakeServer) -> None:
    fake_server.enqueue("openai", Reply(headers=SSE, frames=(GARBAGE, b"data: [DONE]\n\n")))
    with pytest.raises(ProviderError, match=r"no readable chunk before \[DONE\].*502 Bad Gateway"):
        _complete("openai", fake_server)


def test_garbage_bytes_before_message_stop_are_a_provider_error_not_an_empty_reply(fake_server: FakeServer) -> None:
    stop = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    fake_server.enqueue("anthropic", Reply(headers=SSE, frames=(GARBAGE, stop)))
    with pytest.raises(ProviderError, match=r"no readable event before message_stop"):
        _complete("anthropic", fake_server)


# -- overflow -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_silent_overflow_carries_its_reply_in_the_declared_response_field(fake_server: FakeServer,
                                                                            wire: str) -> None:
    usage = ({"prompt_tokens": 5_000, "completion_tokens": 3} if wire == "openai"
             else {"input_tokens": 5_000, "output_tokens": 3})
    getattr(fake_server, wire).enqueue(text="truncated answer", usage=usage)
    with pytest.raises(ContextOverflowError, match="silent context overflow") as info:
        _complete(wire, fake_server, context_window=4_000)
    reply = info.value.response
    assert isinstance(reply, ModelResponse) and reply.text == "truncated answer"
    assert (info.value.requested_tokens, info.value.context_limit) == (5_000, 4_000)
    assert ContextOverflowError("refused by the server").response is None
