"""The retrying request loop: send, retry what is safe to retry, stream, and stop at the deadline.

* :func:`stream_with_retries` — POST a JSON body and hand the byte stream to the wire parser.
  Retried: retryable error statuses, connection failures, and timeouts or disconnects before the
  first body byte. Nothing is retried once bytes have streamed (the caller has seen deltas). The
  end of the body is read so the connection returns to the pool, and the response is always
  closed, cancellation included.
* :class:`RetryPolicy` and :func:`parse_retry_after` — capped exponential backoff with injectable
  sleep and jitter, honouring ``retry-after`` (seconds or HTTP date) and ``retry-after-ms``.
* :class:`Deadline` — the whole-request deadline (``model.requestTimeoutMs``). The idle timeout
  (``model.idleTimeoutMs``, httpx's read timeout) cannot catch a server that sends only
  keep-alives, and five retries of a stall before the headers would multiply it; the deadline
  bounds both: the provider abandons the request when it passes, and no retry is started whose
  wait would end beyond it. Its :class:`RequestProgress` says where the request stood when it was
  abandoned (how many attempts, and whether the last one had a response yet), so the error names
  the cause whether the deadline passes between two attempts or during one.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from soba_notebook.errors import ProviderError

from .base import StreamEvent
from .failures import ErrorContext, classify_http_error, error_message_from_body, redact

__all__ = ["DRAIN_SECONDS", "Deadline", "RequestProgress", "RetryPolicy", "parse_retry_after", "stream_with_retries"]

T = TypeVar("T")


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
class RequestProgress:
    """Where a request stands: the attempts started and what the last one was doing. Kept up to date
    by :func:`stream_with_retries`; read when the deadline abandons the request mid-attempt."""

    attempts: int = 0
    last: str = ""

    def detail(self) -> str:
        """The state in the words of the deadline's error ("" before any attempt)."""
        return f"{self.attempts:,} attempt(s), the last: {self.last}" if self.attempts else ""


@dataclass(frozen=True, slots=True)
class Deadline:
    """The whole-request deadline: ``seconds`` after the request started, at event-loop time ``at``;
    ``progress`` is what the request had done by then."""

    seconds: float
    at: float
    progress: RequestProgress = field(default_factory=RequestProgress, compare=False)

    @classmethod
    def start(cls, seconds: float) -> Deadline:
        return cls(seconds, asyncio.get_running_loop().time() + seconds)

    def left(self) -> float:
        return self.at - asyncio.get_running_loop().time()

    def error(self, ctx: ErrorContext, detail: str = "") -> ProviderError:
        """The error for a request abandoned at (or just before) the deadline; without a
        ``detail``, it says where the request stood (:attr:`progress`)."""
        detail = detail or self.progress.detail()
        more = f"; {detail}" if detail else ""
        return ProviderError(ctx.say(
            f"no complete reply within {self.seconds:g} s (model.requestTimeoutMs); the request was "
            f"abandoned{more}"), retryable=True)


@dataclass(slots=True)
class _Failure:
    """A failed attempt that may be retried: ``message`` for the final error, ``plain`` the same
    failure in the few words a retry note shows (no URL, no provider prefix)."""

    message: str
    plain: str
    status: int | None = None
    retry_after: float | None = None
    cause: BaseException | None = None


def _exc_words(exc: BaseException) -> str:
    """``ReadError`` or ``ConnectError: [Errno 111] Connection refused`` (httpx often raises with
    an empty message, which made ``ReadError: `` with nothing after it)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(slots=True)
class _Refused:
    """An HTTP error response: its classified error, body text and headers."""

    error: ProviderError
    text: str
    headers: httpx.Headers


@dataclass(slots=True)
class _Done(Generic[T]):
    value: T


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


async def _consume_body(response: httpx.Response, url: str, client: httpx.AsyncClient,
                        consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
                        ctx: ErrorContext) -> _Done[T] | _Failure:
    """Stream a 2xx body into ``consume``; a failure before the first body byte may be retried."""
    tap = _Tap(response.aiter_bytes())
    try:
        result = await consume(tap)
        await _drain(tap)
        return _Done(result)
    except httpx.TimeoutException as exc:
        if tap.started:
            raise ProviderError(ctx.say(f"the response stream stalled: no data for {_timeout_seconds(client)} "
                                        "(read timeout)"), retryable=True) from exc
        return _Failure(f"no response body from {url} within {_timeout_seconds(client)} (timeout)",
                        f"the server sent no reply within {_timeout_seconds(client)}", cause=exc)
    except httpx.TransportError as exc:
        if tap.started:
            raise ProviderError(ctx.say(f"the connection broke mid-stream: {_exc_words(exc)}"),
                                retryable=True) from exc
        return _Failure(f"the connection to {url} broke before the response body: {_exc_words(exc)}",
                        f"the connection broke before the reply ({_exc_words(exc)})", cause=exc)


async def _attempt(client: httpx.AsyncClient, url: str, headers: Mapping[str, str], body: Mapping[str, Any],
                   consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
                   ctx: ErrorContext, progress: RequestProgress) -> _Done[T] | _Failure | _Refused:
    """One POST: the consumed result, a retryable failure, or an HTTP error response."""
    progress.attempts += 1
    progress.last = f"no response from {url} yet"
    try:
        request = client.build_request("POST", url, headers=dict(headers), json=body)
        response = await client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        return _Failure(f"no response from {url} within {_timeout_seconds(client)} (timeout)",
                        f"the server did not answer within {_timeout_seconds(client)}", cause=exc)
    except httpx.TransportError as exc:
        return _Failure(f"could not reach {url}: {_exc_words(exc)}",
                        f"connection to the server failed ({_exc_words(exc)})", cause=exc)
    progress.last = f"{url} answered HTTP {response.status_code}; its body had not all arrived"
    try:
        if response.status_code < 400:
            return await _consume_body(response, url, client, consume, ctx)
        try:
            text = await _read_error_body(response)
        except httpx.TransportError:
            text = ""
        return _Refused(classify_http_error(response.status_code, text, ctx, response.headers), text,
                        response.headers)
    finally:
        await response.aclose()


def _wait_before_retry(failure: _Failure, attempt: int, policy: RetryPolicy, ctx: ErrorContext,
                       deadline: Deadline | None) -> float:
    """The wait before retry ``attempt + 1``; raises when the failure is final instead."""
    if attempt >= policy.max_retries:
        message = failure.message if failure.status is not None else ctx.say(failure.message)
        suffix = f" (gave up after {attempt} retries)" if attempt else ""
        raise ProviderError(redact(message + suffix, ctx.secrets), status=failure.status,
                            retryable=True) from failure.cause
    if failure.retry_after is not None and failure.retry_after > policy.max_retry_after:
        raise ProviderError(redact(f"{failure.message} (the provider asks to wait {failure.retry_after:.0f} s; "
                                   "try again later)", ctx.secrets), status=failure.status, retryable=True)
    delay = failure.retry_after if failure.retry_after is not None else policy.backoff(attempt)
    if deadline is not None and delay >= deadline.left():
        detail = f"{attempt + 1:,} attempt(s), the last: {redact(failure.message, ctx.secrets)}"
        raise deadline.error(ctx, detail) from failure.cause
    return delay


def _refusal_words(status: int, body_text: str) -> str:
    """An HTTP error that is retried, in plain words with the server's own reason."""
    what = "the server is busy or rate limiting" if status in (429, 529) else "the server answered with an error"
    return f"{what} (HTTP {status}: {error_message_from_body(body_text)})"


def _final_http_error(refused: _Refused, attempt: int, policy: RetryPolicy) -> ProviderError | None:
    """The error to raise for an HTTP error response, or ``None`` when it is retried."""
    error = refused.error
    if error.retryable and attempt < policy.max_retries:
        return None
    if error.retryable and attempt:
        return type(error)(f"{error} (gave up after {attempt} retries)", status=error.status, retryable=True)
    return error


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
    deadline: Deadline | None = None,
) -> T:
    """POST ``body`` as JSON to ``url`` and return ``await consume(body_bytes)``.

    Retried (at most ``policy.max_retries`` times, each announced by a ``retry`` event before the
    sleep, and never when the sleep would end past ``deadline``): see the module docstring. The
    event's ``say`` is the failure in plain words for a retry note, ``reason`` the full message.
    ``adapt(status, body_text, body)`` may return a corrected request body for an error that
    names one parameter the server rejects (some servers answer a validation error with HTTP
    500); it is tried at most three times and does not count as a retry.
    """
    attempt = 0
    adaptations = 0
    current = body
    progress = deadline.progress if deadline is not None else RequestProgress()
    while True:
        outcome = await _attempt(client, url, headers, current, consume, ctx, progress)
        if isinstance(outcome, _Done):
            return outcome.value
        if isinstance(outcome, _Refused):
            status = outcome.error.status or 0
            if adapt is not None and adaptations < 3:
                changed = adapt(status, outcome.text, current)
                if changed is not None:
                    adaptations += 1
                    current = changed
                    continue
            final = _final_http_error(outcome, attempt, policy)
            if final is not None:
                raise final from None
            failure = _Failure(str(outcome.error), _refusal_words(status, outcome.text), status=status,
                               retry_after=parse_retry_after(outcome.headers, policy.now))
        else:
            failure = outcome
        progress.last = redact(failure.message, ctx.secrets)
        delay = _wait_before_retry(failure, attempt, policy, ctx, deadline)
        attempt += 1
        if on_event is not None:
            reason = failure.message if failure.status is not None else ctx.say(failure.message)
            on_event(StreamEvent("retry", {
                "provider": ctx.provider, "attempt": attempt, "maxRetries": policy.max_retries,
                "delay": delay, "status": failure.status, "reason": redact(reason, ctx.secrets),
                "say": redact(failure.plain, ctx.secrets)}))
        await policy.sleep(delay)
