"""How a provider talks HTTP, and what its failures mean.

Both wires share the same transport concerns, which live here so they are written (and tested)
once:

* :func:`is_context_overflow` — the pure recognizer of "your prompt is longer than my context
  window" across OpenAI, Anthropic and the common OpenAI-compatible servers (vLLM, llama.cpp,
  Ollama, LM Studio, OpenRouter, Mistral, Groq…). It decides whether the agent runs its one
  overflow-recovery compaction, so it errs on the side of the exact wordings servers really send.
* :func:`classify_http_error` — an HTTP error status plus body becomes :class:`AuthError`,
  :class:`ContextOverflowError` or :class:`ProviderError` (``retryable`` for 408/429/5xx), with a
  one-line message that names the provider, the status and what to do.
* :func:`parse_retry_after` and :class:`RetryPolicy` — capped exponential backoff with injectable
  sleep and jitter, honouring ``retry-after`` (seconds or HTTP date) and ``retry-after-ms``.
* :func:`stream_with_retries` — the request loop: send, retry what is safe to retry (error
  statuses, connection failures and timeouts before the first body byte), hand the byte stream to
  the wire parser, read the end of the body so the connection returns to the pool, and always
  close the response (also on cancellation).
* :class:`ClientCache` — one ``httpx.AsyncClient`` per event loop, so a provider object can be
  used from ``asyncio.run`` in tests and from the notebook's background loop alike.

Secrets: every message built here passes through :func:`redact`, so an API key echoed back by a
server (or a proxy) never reaches an exception text.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import json
import random
import re
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from soba_notebook.errors import AuthError, ContextOverflowError, ProviderError
from soba_notebook.scrub import Scrubber

from .base import StreamEvent

__all__ = [
    "ClientCache",
    "ErrorContext",
    "RetryPolicy",
    "check_silent_overflow",
    "classify_http_error",
    "error_message_from_body",
    "is_context_overflow",
    "is_loopback_url",
    "overflow_error",
    "overflow_figures",
    "parse_retry_after",
    "redact",
    "stream_with_retries",
]

T = TypeVar("T")

#: Lower-case fragments of real context-overflow messages. Sources: OpenAI (code and message),
#: Anthropic ("prompt is too long", "input length and `max_tokens` exceed context limit"), vLLM and
#: OpenRouter ("maximum context length"), llama.cpp ("exceeds the available context size"),
#: Ollama ("longer than the model's context length"), LM Studio ("context length of only"),
#: Bedrock ("input is too long"), Gemini's OpenAI endpoint ("exceeds the maximum number of tokens"),
#: Groq ("reduce the length of the messages"), xAI ("maximum prompt length").
OVERFLOW_MARKERS: tuple[str, ...] = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the context window",
    "exceed context limit",
    "exceeds the available context size",
    "exceeds the context size",
    "longer than the model's context length",
    "longer than the maximum context length",
    "exceeds the maximum context length",
    "exceeds context length",
    "exceeds the context length",
    "context window exceeded",
    "context_window_exceeded",
    "exceeds the maximum number of tokens",
    "reduce the length of the messages",
    "maximum prompt length",
    "context length of only",
)

#: Fragments that mean a *rate* limit on tokens, which must not be mistaken for an overflow
#: ("Request too large ... on tokens per min (TPM)").
_RATE_LIMIT_MARKERS = ("per min", "rate limit", "rate_limit", "tokens per day", "(tpm)", "(tpd)")


def is_context_overflow(status: int | None, body_text: str) -> bool:
    """True when an error (HTTP ``status`` may be ``None`` for a mid-stream error event) says the
    request was longer than the model's context window.

    Rate limits (429) and authentication failures are never overflows, whatever their wording.
    """
    if status in (401, 403, 429):
        return False
    text = (body_text or "").lower()
    if not text or any(marker in text for marker in _RATE_LIMIT_MARKERS):
        return False
    return any(marker in text for marker in OVERFLOW_MARKERS)


_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*)"),
    re.compile(r"context (?:size|window|length) (?:of (?:only )?)?\(?(\d[\d,]*) tokens"),
    re.compile(r"> (\d[\d,]*) maximum"),
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
)
_REQUESTED_PATTERNS = (
    re.compile(r"messages resulted in (\d[\d,]*)"),
    re.compile(r"too long: (\d[\d,]*) tokens"),
    re.compile(r"input length \((\d[\d,]*) tokens\)"),
    re.compile(r'"n_prompt_tokens"\s*:\s*(\d+)'),
    re.compile(r"you requested (?:about )?(\d[\d,]*)"),
    re.compile(r"requested tokens \((\d+)\)"),
)


def _first_number(patterns: Sequence[re.Pattern[str]], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1).replace(",", ""))
    return None


def overflow_figures(body_text: str) -> tuple[int | None, int | None]:
    """``(requested tokens, context limit)`` as an overflow message states them; each ``None``
    when the message does not say. The requested count is what the server says the request came
    to; vLLM and llama-cpp-python include the reserved completion ("you requested 2311 tokens
    (2055 in the messages, 256 in the completion)")."""
    text = (body_text or "").lower()
    return _first_number(_REQUESTED_PATTERNS, text), _first_number(_LIMIT_PATTERNS, text)


def overflow_error(message: str, body_text: str, status: int | None = None) -> ContextOverflowError:
    """A :class:`ContextOverflowError` carrying the figures its body states."""
    requested, limit = overflow_figures(body_text)
    return ContextOverflowError(message, status=status, requested_tokens=requested, context_limit=limit)


def redact(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` through the one scrubber (:mod:`soba_notebook.scrub`), ``secrets`` included."""
    return Scrubber.from_environ(extra_values=secrets).text(text)


def _shorten(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_message_from_body(body_text: str) -> str:
    """The human part of an error body: ``error.message`` (OpenAI, Anthropic), ``message``,
    ``detail`` (FastAPI-based servers) or, failing those, the body itself, shortened."""
    try:
        parsed = json.loads(body_text)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping):
        error = parsed.get("error")
        if isinstance(error, Mapping):
            message = error.get("message")
            if isinstance(message, str) and message:
                kind = error.get("type") or error.get("code")
                return _shorten(f"{kind}: {message}" if isinstance(kind, str) and kind else message)
        if isinstance(error, str) and error:
            return _shorten(error)
        for key in ("message", "detail"):
            value = parsed.get(key)
            if isinstance(value, str) and value:
                return _shorten(value)
            if value:
                return _shorten(json.dumps(value))
    return _shorten(body_text) or "(empty body)"


@dataclass(frozen=True, slots=True)
class ErrorContext:
    """What an error message needs to say about the provider. ``secrets`` are redacted."""

    provider: str                    # "openai" | "anthropic"
    url: str                         # the endpoint, for connection errors
    key_env: str                     # the environment variable the key comes from
    key_sent: bool                   # whether a key was sent at all
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def say(self, text: str) -> str:
        return redact(f"{self.provider}: {text}", self.secrets)


def classify_http_error(status: int, body_text: str, ctx: ErrorContext,
                        headers: Mapping[str, str] | None = None) -> ProviderError:
    """The typed error for an HTTP error response (not raised: the caller decides on retries)."""
    detail = error_message_from_body(body_text)
    if status in (401, 403):
        if ctx.key_sent:
            hint = f"the API key was refused; check the key in {ctx.key_env}"
        else:
            hint = f"no API key was sent; set {ctx.key_env}"
        return AuthError(ctx.say(f"HTTP {status} {detail} ({hint})"), status=status)
    if is_context_overflow(status, body_text):
        return overflow_error(ctx.say(f"context overflow (HTTP {status}): {detail}"), body_text, status)
    should_retry = (headers or {}).get("x-should-retry", "").lower()
    retryable = status in (408, 409, 429) or status >= 500
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    hint = ""
    if status == 404:
        hint = " (check the base URL and the model name)"
    return ProviderError(ctx.say(f"HTTP {status} {detail}{hint}"), status=status, retryable=retryable)


def parse_retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``retry-after`` as seconds or
    as an HTTP date. ``None`` when absent or unreadable; never negative."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if moment is None:
        return None
    return max(0.0, moment.timestamp() - now())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Capped exponential backoff: attempt ``n`` (0-based) waits ``min(max_delay, base * 2**n)``
    scaled by a jitter factor in ``[0.5, 1]`` (``0.5 + 0.5 * jitter()``), unless the server named
    a wait. A named wait longer than ``max_retry_after`` is not waited out: the error is raised
    at once, because a notebook that hangs for minutes is worse than a clear message."""

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[], float] = random.random
    now: Callable[[], float] = time.time

    def backoff(self, attempt: int) -> float:
        ceiling = min(self.max_delay, self.base_delay * (2 ** min(attempt, 62)))
        factor = 0.5 + 0.5 * min(1.0, max(0.0, self.jitter()))
        return ceiling * factor


@dataclass(slots=True)
class _Failure:
    message: str
    status: int | None = None
    retry_after: float | None = None
    cause: BaseException | None = None


class _Tap:
    """Passes the body bytes through and remembers whether any arrived."""

    __slots__ = ("_source", "started")

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source
        self.started = False

    def __aiter__(self) -> _Tap:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._source.__anext__()
        if chunk:
            self.started = True
        return chunk


async def _read_error_body(response: httpx.Response, limit: int = 65536) -> str:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data.extend(chunk)
        if len(data) >= limit:
            break
    return data.decode("utf-8", errors="replace")


#: How long to wait for the end of a body after the answer is complete (``[DONE]``,
#: ``message_stop``). Reading it lets the connection go back to the pool for the next inference;
#: a server that keeps the stream open longer just costs a fresh connection next time.
DRAIN_SECONDS = 2.0


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    async def read_rest() -> None:
        async for _ in chunks:
            pass

    try:
        await asyncio.wait_for(read_rest(), DRAIN_SECONDS)
    except (TimeoutError, httpx.TransportError):
        pass


def _timeout_seconds(client: httpx.AsyncClient) -> str:
    read = client.timeout.read
    return f"{read:g} s" if isinstance(read, int | float) else "the configured time"


async def stream_with_retries(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
    ctx: ErrorContext,
    policy: RetryPolicy,
    on_event: Callable[[StreamEvent], None] | None = None,
    adapt: Callable[[int, str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
) -> T:
    """POST ``body`` as JSON to ``url`` and return ``await consume(body_bytes)``.

    Retried (at most ``policy.max_retries`` times, each announced by a ``retry`` event before the
    sleep): retryable error statuses, connection failures, and timeouts or disconnects before the
    first body byte. Once bytes have streamed nothing is retried, since the caller has already
    seen deltas. ``adapt(status, body_text, body)`` may return a corrected request body for an
    error that names one parameter the server rejects (some servers answer a validation error with
    HTTP 500); it is tried at most three times and does not count as a retry. The response is
    closed on every path, cancellation included.
    """
    attempt = 0
    adaptations = 0
    current = body
    while True:
        failure: _Failure
        try:
            request = client.build_request("POST", url, headers=dict(headers), json=current)
            response = await client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            failure = _Failure(f"no response from {url} within {_timeout_seconds(client)} (timeout)",
                               cause=exc)
        except httpx.TransportError as exc:
            failure = _Failure(f"could not reach {url}: {type(exc).__name__}: {exc}", cause=exc)
        else:
            try:
                if response.status_code >= 400:
                    try:
                        text = await _read_error_body(response)
                    except httpx.TransportError:
                        text = ""
                    error = classify_http_error(response.status_code, text, ctx, response.headers)
                    if adapt is not None and adaptations < 3:
                        changed = adapt(response.status_code, text, current)
                        if changed is not None:
                            adaptations += 1
                            current = changed
                            continue
                    if not error.retryable or attempt >= policy.max_retries:
                        if error.retryable and attempt:
                            raise type(error)(f"{error} (gave up after {attempt} retries)",
                                              status=error.status, retryable=True) from None
                        raise error from None
                    failure = _Failure(str(error), status=response.status_code,
                                       retry_after=parse_retry_after(response.headers, policy.now))
                else:
                    tap = _Tap(response.aiter_bytes())
                    try:
                        result = await consume(tap)
                        await _drain(tap)
                        return result
                    except httpx.TimeoutException as exc:
                        if tap.started:
                            raise ProviderError(ctx.say(
                                f"the response stream stalled: no data for {_timeout_seconds(client)} "
                                "(read timeout)"), retryable=True) from exc
                        failure = _Failure(f"no response body from {url} within {_timeout_seconds(client)} "
                                           "(timeout)", cause=exc)
                    except httpx.TransportError as exc:
                        if tap.started:
                            raise ProviderError(ctx.say(
                                f"the connection broke mid-stream: {type(exc).__name__}: {exc}"),
                                retryable=True) from exc
                        failure = _Failure(f"the connection to {url} broke before the response body: "
                                           f"{type(exc).__name__}: {exc}", cause=exc)
            finally:
                await response.aclose()

        if attempt >= policy.max_retries:
            message = failure.message if failure.status is not None else ctx.say(failure.message)
            suffix = f" (gave up after {attempt} retries)" if attempt else ""
            raise ProviderError(redact(message + suffix, ctx.secrets), status=failure.status,
                                retryable=True) from failure.cause
        if failure.retry_after is not None:
            if failure.retry_after > policy.max_retry_after:
                raise ProviderError(redact(
                    f"{failure.message} (the provider asks to wait {failure.retry_after:.0f} s; "
                    "try again later)", ctx.secrets), status=failure.status, retryable=True)
            delay = failure.retry_after
        else:
            delay = policy.backoff(attempt)
        attempt += 1
        if on_event is not None:
            reason = failure.message if failure.status is not None else ctx.say(failure.message)
            on_event(StreamEvent("retry", {
                "provider": ctx.provider, "attempt": attempt, "maxRetries": policy.max_retries,
                "delay": delay, "status": failure.status, "reason": redact(reason, ctx.secrets)}))
        await policy.sleep(delay)


def check_silent_overflow(prompt_tokens: int | None, context_window: int | None,
                          ctx: ErrorContext) -> ContextOverflowError | None:
    """The error for a *silent* overflow: the provider answered, but reports having read more
    prompt tokens than the configured context window holds (servers such as Ollama truncate or
    wrap instead of refusing). ``None`` when there is nothing to report."""
    if context_window is None or prompt_tokens is None or prompt_tokens <= context_window:
        return None
    return ContextOverflowError(ctx.say(
        f"silent context overflow: the provider reports {prompt_tokens:,} prompt tokens, more than "
        f"the configured context window of {context_window:,}"), requested_tokens=prompt_tokens,
        context_limit=context_window)


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_url(url: str) -> bool:
    """True for URLs on this machine (local model servers, the test fake server)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ClientCache:
    """One ``httpx.AsyncClient`` per running event loop.

    An ``AsyncClient``'s pooled connections belong to the loop that opened them, and a provider
    object outlives ``asyncio.run`` calls (tests) or moves to the notebook's background loop.
    When the loop changes, the old client is abandoned (it cannot be closed from another loop);
    :meth:`aclose` closes the current one. Proxy environment variables are ignored for loopback
    servers, where they only ever do harm.
    """

    def __init__(self, *, base_url: str, timeout: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 30.0))
        self._transport = transport
        self._trust_env = not is_loopback_url(base_url)
        self._client: httpx.AsyncClient | None = None
        self._loop: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._client
        if client is None or client.is_closed or self._loop is None or self._loop() is not loop:
            client = httpx.AsyncClient(transport=self._transport, timeout=self._timeout,
                                       trust_env=self._trust_env)
            self._client = client
            self._loop = weakref.ref(loop)
        return client

    async def aclose(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None and not client.is_closed:
            await client.aclose()
