"""What a provider failure means, said in one line without a secret in it.

* :func:`classify_http_error` — an HTTP error status plus body becomes :class:`AuthError`,
  :class:`ContextOverflowError` or :class:`ProviderError` (``retryable`` for 408/409/429/5xx, or
  as the server's ``x-should-retry`` says), with a message that names the provider, the status
  and what to do.
* :func:`error_message_from_body` — the human part of the many error-body shapes servers send.
* :class:`ErrorContext` and :func:`redact` — every message built for a provider passes through
  the one scrubber (:mod:`soba_notebook.scrub`) with the key in use added, so an API key echoed
  back by a server (or a proxy) never reaches an exception text.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from soba_notebook.errors import AuthError, ProviderError
from soba_notebook.scrub import Scrubber

from .overflow import is_context_overflow, overflow_error

__all__ = ["ErrorContext", "classify_http_error", "error_message_from_body", "redact"]


def redact(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` through the one scrubber (:mod:`soba_notebook.scrub`), ``secrets`` included."""
    return Scrubber.from_environ(extra_values=secrets).text(text)


def _shorten(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _html_words(body_text: str) -> str | None:
    """The words of an HTML error page (a proxy's ``502 Bad Gateway``): its title, else its text."""
    if not re.match(r"\s*<(!doctype|html|head|body|title|h1)\b", body_text, re.IGNORECASE):
        return None
    title = re.search(r"<title[^>]*>(.*?)</title>", body_text, re.IGNORECASE | re.DOTALL)
    text = title.group(1) if title else re.sub(r"<[^>]+>", " ", body_text)
    return html.unescape(" ".join(text.split())) or None


def error_message_from_body(body_text: str) -> str:
    """The human part of an error body: ``error.message`` (OpenAI, Anthropic), ``message``,
    ``detail`` (FastAPI-based servers), an HTML page's title or, failing those, the body itself
    (a plain-text ``Internal Server Error``), shortened."""
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
    return _shorten(_html_words(body_text) or body_text) or "(empty body)"


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
