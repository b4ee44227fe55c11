"""Provider failures: retries and backoff, typed errors, overflow recognition, secrets, cancellation,
and the factory that builds providers from config."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakeserver import OVERFLOW_BODIES, FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.config import ModelConfig, load_config
from soba_notebook.errors import AuthError, ConfigError, ContextOverflowError, ProviderError
from soba_notebook.providers import (
    AnthropicProvider,
    ModelRequest,
    ModelResponse,
    OpenAIChatProvider,
    Provider,
    StreamEvent,
    is_context_overflow,
    make_provider,
)
from soba_notebook.providers.retry import RetryPolicy, parse_retry_after

REQUEST = ModelRequest("m", "sys", ({"role": "user", "content": "hi"},))
SECRET = "sk-THIS-IS-A-SECRET-KEY-0123456789"


class Recorder:
    """An injectable ``sleep`` that records delays (and, in order, the events seen before them)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.log: list[tuple[str, Any]] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.log.append(("sleep", seconds))

    def on_event(self, event: StreamEvent) -> None:
        self.log.append((event.kind, dict(event.data)))


@dataclass
class Wire:
    name: str
    server: FakeServer

    def provider(self, **options: Any) -> OpenAIChatProvider | AnthropicProvider:
        options.setdefault("api_key", "test-key")
        if self.name == "openai":
            return OpenAIChatProvider("m", base_url=self.server.openai_base_url, **options)
        return AnthropicProvider("m", base_url=self.server.anthropic_base_url, **options)

    def ok(self, **reply: Any) -> None:
        getattr(self.server, self.name).enqueue(**reply)

    def error(self, status: int, body: Any = None, headers: Mapping[str, str] | None = None) -> None:
        getattr(self.server, self.name).enqueue_error(status, body, headers)

    def run(self, recorder: Recorder | None = None, **options: Any) -> ModelResponse:
        recorder = recorder or Recorder()
        options.setdefault("sleep", recorder.sleep)

        async def go() -> ModelResponse:
            provider = self.provider(**options)
            try:
                return await provider.complete(REQUEST, on_event=recorder.on_event)
            finally:
                await provider.aclose()

        return asyncio.run(go())


@pytest.fixture(params=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest, fake_server: FakeServer) -> Wire:
    return Wire(request.param, fake_server)


# -- retries -----------------------------------------------------------------------------------------

def test_429_is_retried_after_retry_after_seconds(wire: Wire) -> None:
    wire.error(429, headers={"retry-after": "7"})
    wire.ok(text="fine")
    recorder = Recorder()
    assert wire.run(recorder).text == "fine"
    assert recorder.delays == [7.0]
    kind, data = recorder.log[0]
    assert kind == "retry" and recorder.log[1] == ("sleep", 7.0)  # announced before sleeping
    assert data["attempt"] == 1 and data["status"] == 429 and data["delay"] == 7.0
    assert data["provider"] == wire.name and "429" in data["reason"]
    assert len(wire.server.requests) == 2


def test_retry_after_ms_is_preferred_over_retry_after(wire: Wire) -> None:
    wire.error(429, headers={"retry-after-ms": "1500", "retry-after": "9"})
    wire.ok(text="fine")
    recorder = Recorder()
    wire.run(recorder)
    assert recorder.delays == [1.5]


def test_retry_after_as_http_date_is_converted_to_seconds() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": later}, now=now.timestamp) == 30.0
    assert parse_retry_after({"retry-after": "Mon, 01 Jan 2001 00:00:00 GMT"}, now=now.timestamp) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_exponential_and_capped_at_20_seconds(wire: Wire) -> None:
    for _ in range(9):
        wire.error(500)
    recorder = Recorder()
    with pytest.raises(ProviderError) as info:
        wire.run(recorder, max_retries=8, jitter=lambda: 1.0)
    assert recorder.delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert info.value.retryable and info.value.status == 500
    assert wire.name in str(info.value) and "HTTP 500" in str(info.value)
    assert "gave up after 8 retries" in str(info.value)
    assert len(wire.server.requests) == 9


def test_jitter_scales_each_backoff_between_half_and_full() -> None:
    assert RetryPolicy(jitter=lambda: 0.0).backoff(3) == 2.0
    assert RetryPolicy(jitter=lambda: 1.0).backoff(3) == 4.0
    assert RetryPolicy(jitter=lambda: 0.5).backoff(30) == 15.0


def test_5xx_then_success_returns_the_answer(wire: Wire) -> None:
    wire.error(500)
    wire.error(503)
    wire.error(529, body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    wire.ok(text="recovered")
    recorder = Recorder()
    assert wire.run(recorder, jitter=lambda: 1.0).text == "recovered"
    assert recorder.delays == [0.5, 1.0, 2.0]
    assert [d["attempt"] for k, d in recorder.log if k == "retry"] == [1, 2, 3]


def test_retry_after_beyond_a_minute_is_reported_instead_of_waited_out(wire: Wire) -> None:
    wire.error(429, headers={"retry-after": "3600"})
    recorder = Recorder()
    with pytest.raises(ProviderError, match="wait 3600 s") as info:
        wire.run(recorder)
    assert recorder.delays == []
    assert info.value.retryable and info.value.status == 429


def test_x_should_retry_false_stops_retries(wire: Wire) -> None:
    wire.error(503, headers={"x-should-retry": "false"})
    with pytest.raises(ProviderError) as info:
        wire.run()
    assert not info.value.retryable
    assert len(wire.server.requests) == 1


def test_client_errors_are_not_retried_and_404_hints_at_url_and_model(wire: Wire) -> None:
    wire.error(404)
    with pytest.raises(ProviderError, match="check the base URL and the model name") as info:
        wire.run()
    assert info.value.status == 404 and not info.value.retryable
    assert len(wire.server.requests) == 1


# -- authentication and secrets ----------------------------------------------------------------------------

@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_is_auth_error_naming_the_environment_variable(wire: Wire, status: int) -> None:
    wire.error(status)
    env = "OPENAI_API_KEY" if wire.name == "openai" else "ANTHROPIC_API_KEY"
    with pytest.raises(AuthError, match=env) as info:
        wire.run()
    assert info.value.status == status
    assert len(wire.server.requests) == 1


def test_auth_failure_without_a_key_says_to_set_it(fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_LOCAL_KEY", raising=False)
    fake_server.openai.enqueue_error(401, message="missing bearer token")

    async def go() -> None:
        provider = OpenAIChatProvider("m", base_url=fake_server.openai_base_url, api_key_env="MY_LOCAL_KEY")
        try:
            await provider.complete(REQUEST)
        finally:
            await provider.aclose()

    with pytest.raises(AuthError, match="no API key was sent; set MY_LOCAL_KEY"):
        asyncio.run(go())


@pytest.mark.parametrize(("cls", "env"), [(OpenAIChatProvider, "OPENAI_API_KEY"),
                                          (AnthropicProvider, "ANTHROPIC_API_KEY")])
def test_missing_key_error_names_environment_variable(monkeypatch: pytest.MonkeyPatch, cls: type,
                                                      env: str) -> None:
    monkeypatch.delenv(env, raising=False)
    calls: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        return httpx.Response(500)

    provider = cls("m", transport=httpx.MockTransport(handler))
    with pytest.raises(AuthError, match=f"set the {env} environment variable"):
        asyncio.run(provider.complete(REQUEST))
    assert calls == []


def test_the_key_is_read_from_the_environment_when_the_request_is_made(fake_server: FakeServer,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    provider = AnthropicProvider("m", base_url=fake_server.anthropic_base_url, api_key_env="LATE_KEY")
    monkeypatch.setenv("LATE_KEY", "set-after-construction")
    fake_server.anthropic.enqueue(text="ok")

    async def go() -> None:
        try:
            await provider.complete(REQUEST)
        finally:
            await provider.aclose()

    asyncio.run(go())
    assert fake_server.requests[0].headers["x-api-key"] == "set-after-construction"


def test_api_key_never_appears_in_errors_events_or_repr(wire: Wire) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {SECRET}.", "type": "invalid_request_error"}}
    wire.error(500, body={"error": {"message": f"upstream said {SECRET}", "type": "server_error"}})
    wire.error(401, body=echo)
    recorder = Recorder()
    with pytest.raises(AuthError) as info:
        wire.run(recorder, api_key=SECRET)
    texts = [str(info.value), repr(info.value), "".join(traceback.format_exception(info.value)), str(recorder.log)]
    assert all(SECRET not in text for text in texts)
    assert "[REDACTED:api_key]" in str(info.value)
    provider = wire.provider(api_key=SECRET)
    assert SECRET not in repr(provider) and SECRET not in provider.label and "key=set" in repr(provider)


# -- context overflow ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "text"), [
    (400, OVERFLOW_BODIES["openai"][1]),
    (400, OVERFLOW_BODIES["anthropic"][1]),
    (400, OVERFLOW_BODIES["vllm"][1]),
    (400, OVERFLOW_BODIES["llamacpp"][1]),
    (400, OVERFLOW_BODIES["ollama"][1]),
    (400, OVERFLOW_BODIES["openrouter"][1]),
    (400, '{"error": {"code": "context_length_exceeded", "message": "too long"}}'),
    (400, "Context length exceeded"),
    (400, "input is too long for requested model"),
    (400, "Too many tokens in the prompt"),
    (400, "Your request exceeds the context window of this model"),
    (400, "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000"),
    (413, "prompt is too long: 300000 tokens > 200000 maximum"),
    (500, "the request exceeds the available context size, try increasing it"),
    (None, "This model's maximum context length is 8192 tokens"),
    (400, "Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with "
          "context length of only 4096 tokens, which is not enough."),
])
def test_context_overflow_is_recognized(status: int | None, text: str) -> None:
    assert is_context_overflow(status, text)


@pytest.mark.parametrize(("status", "text"), [
    (429, "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 45000."),
    (429, "too many tokens"),
    (400, "Rate limit reached: too many tokens per min"),
    (401, "maximum context length"),
    (400, '{"error": {"message": "Invalid value for temperature", "code": "invalid_value"}}'),
    (500, "Internal server error"),
    (400, ""),
])
def test_other_errors_are_not_context_overflow(status: int | None, text: str) -> None:
    assert not is_context_overflow(status, text)


@pytest.mark.parametrize("server", sorted(OVERFLOW_BODIES))
def test_overflow_error_bodies_raise_context_overflow_without_retry(fake_server: FakeServer, server: str) -> None:
    status, body = OVERFLOW_BODIES[server]
    name = "anthropic" if server == "anthropic" else "openai"
    getattr(fake_server, name).enqueue_error(status, body)
    recorder = Recorder()
    with pytest.raises(ContextOverflowError) as info:
        Wire(name, fake_server).run(recorder)
    assert info.value.status == status and not info.value.retryable
    assert recorder.delays == [] and len(fake_server.requests) == 1


def test_silent_overflow_raises_after_the_response(wire: Wire) -> None:
    usage = ({"prompt_tokens": 1500, "completion_tokens": 3, "cached_tokens": 500} if wire.name == "openai"
             else {"input_tokens": 1000, "cache_read_input_tokens": 500, "output_tokens": 3})
    wire.ok(text="ok", usage=usage)
    wire.ok(text="ok", usage=usage)
    with pytest.raises(ContextOverflowError, match=r"silent context overflow.*1,500.*1,000") as info:
        wire.run(context_window=1000)
    assert info.value.response.text == "ok"  # type: ignore[attr-defined]
    assert wire.run(context_window=1500).text == "ok"


# -- transport failures ------------------------------------------------------------------------------------------

def _sse_ok(provider: str) -> bytes:
    if provider == "openai":
        return (b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'
                b"data: [DONE]\n\n")
    return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"ok"}}\n\n'
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


class _Stream(httpx.AsyncByteStream):
    """Yields ``chunks``, then raises ``error`` (a transport failure in the middle of a body)."""

    def __init__(self, chunks: list[bytes], error: Exception | None) -> None:
        self._chunks, self._error = chunks, error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._error is not None:
            raise self._error


def _mock_provider(name: str, handler: Callable[[httpx.Request], httpx.Response], recorder: Recorder,
                   **options: Any) -> OpenAIChatProvider | AnthropicProvider:
    cls = OpenAIChatProvider if name == "openai" else AnthropicProvider
    return cls("m", base_url="http://model.test", api_key="k", transport=httpx.MockTransport(handler),
               sleep=recorder.sleep, jitter=lambda: 1.0, **options)


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_timeouts_before_a_response_are_retried_then_reported_clearly(name: str) -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=req)

    recorder = Recorder()
    provider = _mock_provider(name, handler, recorder, timeout=42.0, max_retries=2)
    with pytest.raises(ProviderError, match=r"no response from http://model\.test.* within 42 s \(timeout\)") as info:
        asyncio.run(provider.complete(REQUEST))
    assert info.value.retryable and "gave up after 2 retries" in str(info.value)
    assert recorder.delays == [0.5, 1.0]


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_connection_errors_and_early_read_timeouts_are_retried(name: str) -> None:
    attempts: list[int] = []

    def handler(req: httpx.Request) -> httpx.Response:
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx.ConnectError("connection refused", request=req)
        if len(attempts) == 2:  # headers arrived, then no body byte before the read timeout
            return httpx.Response(200, stream=_Stream([], httpx.ReadTimeout("read timed out", request=req)))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_sse_ok(name))

    recorder = Recorder()
    events: list[StreamEvent] = []

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        recorder.on_event(event)

    provider = _mock_provider(name, handler, recorder)
    response = asyncio.run(provider.complete(REQUEST, on_event=on_event))
    assert response.text == "ok"
    assert len(attempts) == 3 and recorder.delays == [0.5, 1.0]
    reasons = [e.data["reason"] for e in events if e.kind == "retry"]
    assert "could not reach" in reasons[0] and "no response body" in reasons[1]


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_a_stall_after_bytes_streamed_is_not_retried(name: str) -> None:
    attempts: list[int] = []

    def handler(req: httpx.Request) -> httpx.Response:
        attempts.append(1)
        first = _sse_ok(name).split(b"\n\n")[0] + b"\n\n"
        return httpx.Response(200, stream=_Stream([first], httpx.ReadTimeout("read timed out", request=req)))

    recorder = Recorder()
    provider = _mock_provider(name, handler, recorder, timeout=9.0)
    with pytest.raises(ProviderError, match=r"stream stalled: no data for 9 s"):
        asyncio.run(provider.complete(REQUEST))
    assert attempts == [1] and recorder.delays == []


# -- cancellation ---------------------------------------------------------------------------------------------------

def _cancel_after_first_text(wire: Wire) -> bool:
    async def go() -> bool:
        provider = wire.provider()
        first_text = asyncio.Event()

        def on_event(event: StreamEvent) -> None:
            if event.kind == "text":
                first_text.set()

        task = asyncio.create_task(provider.complete(REQUEST, on_event=on_event))
        await asyncio.wait_for(first_text.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        try:
            return await asyncio.to_thread(wire.server.wait_for_disconnect, 1, 30.0)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_cancelling_mid_stream_closes_the_connection(wire: Wire) -> None:
    wire.ok(text=["first words"], hold_open=True, delay=0.01)
    assert _cancel_after_first_text(wire)


def test_cancelling_before_the_response_closes_the_connection(wire: Wire) -> None:
    wire.ok(text="never seen", headers_delay=60)

    async def go() -> bool:
        provider = wire.provider()
        task = asyncio.create_task(provider.complete(REQUEST))
        assert await asyncio.to_thread(wire.server.wait_for_requests, 1, 30.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        try:
            return await asyncio.to_thread(wire.server.wait_for_disconnect, 1, 30.0)
        finally:
            await provider.aclose()

    assert asyncio.run(go())


def test_a_provider_still_works_after_a_cancelled_request(wire: Wire) -> None:
    wire.ok(text=["first words"], hold_open=True, delay=0.01)
    wire.ok(text="second")

    async def go() -> str:
        provider = wire.provider()
        started = asyncio.Event()
        task = asyncio.create_task(provider.complete(REQUEST, on_event=lambda e: started.set()))
        await asyncio.wait_for(started.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        try:
            return (await provider.complete(REQUEST)).text
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == "second"


# -- factory ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "base_url", "env", "display"), [
    ("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "OpenAI-compatible"),
    ("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", "OpenRouter"),
    ("ollama", "http://127.0.0.1:11434/v1", "OLLAMA_API_KEY", "Ollama"),
    ("vllm", "http://127.0.0.1:8000/v1", "VLLM_API_KEY", "vLLM"),
    ("lmstudio", "http://127.0.0.1:1234/v1", "LMSTUDIO_API_KEY", "LM Studio"),
    ("llamacpp", "http://127.0.0.1:8080/v1", "LLAMACPP_API_KEY", "llama.cpp"),
])
def test_openai_compatible_aliases_get_their_default_base_url(name: str, base_url: str, env: str,
                                                              display: str) -> None:
    provider = make_provider({"provider": name, "model": "m1"})
    assert isinstance(provider, OpenAIChatProvider) and isinstance(provider, Provider)
    assert (provider.name, provider.base_url, provider.api_key_env) == ("openai", base_url, env)
    assert provider.label == f"{display} · m1 @ {base_url}"
    assert provider.offline is False


def test_factory_passes_base_url_key_env_context_window_and_transport() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_sse_ok("anthropic"))

    provider = make_provider({"provider": "Anthropic", "model": "claude-x", "baseUrl": "http://proxy.test/",
                              "apiKeyEnv": "PROXY_KEY", "contextWindow": 65000, "maxOutputTokens": 8000},
                             transport=httpx.MockTransport(handler))
    assert isinstance(provider, AnthropicProvider)
    assert (provider.base_url, provider.api_key_env, provider.context_window) == (
        "http://proxy.test", "PROXY_KEY", 65000)
    assert asyncio.run(provider.complete(REQUEST)).text == "ok"
    assert str(seen[0].url) == "http://proxy.test/v1/messages"
    assert make_provider({"provider": "llama.cpp", "model": "m"}).base_url == "http://127.0.0.1:8080/v1"


def test_the_typed_model_config_builds_the_provider_its_block_describes(tmp_path: Path) -> None:
    typed = ModelConfig(provider="llama.cpp", model="m", base_url="http://127.0.0.1:9/v1", context_window=40_960,
                        tool_protocol="json", request_timeout_ms=2_500)
    block = {"provider": "llama.cpp", "model": "m", "baseUrl": "http://127.0.0.1:9/v1", "contextWindow": 40_960,
             "toolProtocol": "json", "requestTimeoutMs": 2_500}
    loaded = load_config(home=tmp_path, project_dir=tmp_path, overrides={"model": block}).model
    built = [make_provider(c) for c in (typed, block, loaded)]
    assert all(isinstance(p, OpenAIChatProvider) for p in built)
    assert {(p.label, p.base_url, p.context_window, p.tool_protocol, p.request_timeout) for p in built} == {
        ("llama.cpp · m @ http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", 40_960, "json", 2.5)}


def test_a_model_block_without_a_provider_is_the_openai_compatible_wire() -> None:
    provider = make_provider({"model": "gpt-4o-mini"})
    assert isinstance(provider, OpenAIChatProvider) and provider.base_url == "https://api.openai.com/v1"


def test_unknown_provider_is_a_config_error_naming_value_and_choices() -> None:
    with pytest.raises(ConfigError, match=r"'gemini'.*anthropic, openai, openrouter, ollama") as info:
        make_provider({"provider": "gemini", "model": "m"})
    assert info.value.key == "model.provider" and info.value.value == "gemini"


@pytest.mark.parametrize(("config", "key"), [
    ({"provider": "openai"}, "model.model"),
    ({"provider": "openai", "model": "m", "apiKey": SECRET}, "model.apiKey"),
    ({"provider": "openai", "model": "m", "contextWindow": -5}, "model.contextWindow"),
    ({"provider": "openai", "model": "m", "contextWindow": "big"}, "model.contextWindow"),
    ({"provider": "openai", "model": "m", "baseUrl": "localhost:11434"}, "model.baseUrl"),
])
def test_invalid_model_config_is_a_config_error(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_provider(config)
    assert info.value.key == key
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.value)
