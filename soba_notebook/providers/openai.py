"""OpenAI-compatible chat completions over raw ``httpx``: OpenAI itself, OpenRouter, and local
servers (Ollama, vLLM, llama.cpp, LM Studio) that speak the same wire.

Owns the translation between neutral messages and the chat-completions JSON, and the parsing of
its SSE stream (``data: {chunk}`` lines until ``data: [DONE]``): text deltas, reasoning deltas
(``reasoning_content`` / ``reasoning``, sent by DeepSeek-style and local servers), tool calls whose
``function.arguments`` arrive as fragments keyed by ``index``, ``finish_reason``, and the final
usage chunk requested with ``stream_options.include_usage``.

Wire decisions, documented because they are visible in requests:

* the system prompt is the first message (``role: system``), omitted when empty;
* an assistant message with tool calls and no text sends ``content: null``; an assistant message
  with neither text nor calls is left out; ``thinking`` is never sent back;
* each tool result is its own ``role: tool`` message; an error result's content is prefixed with
  ``"Error: "`` because the wire has no error flag;
* ``max_tokens`` is sent; a server that rejects it in favour of ``max_completion_tokens`` (newer
  OpenAI reasoning models) gets the request once more with that name, and the provider remembers;
  a server that rejects ``stream_options`` gets it once more without;
* no ``Authorization`` header when no key is configured (local servers); a missing key for
  ``api.openai.com`` or ``openrouter.ai`` is an :class:`AuthError` before any request.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from soba_notebook.errors import AuthError, ContextOverflowError, ProviderError
from soba_notebook.session.entries import ToolCall, Usage

from .base import (
    ModelRequest,
    ModelResponse,
    StreamEvent,
    message_text,
    parse_tool_arguments,
    repair_tool_pairing,
)
from .retry import (
    ClientCache,
    ErrorContext,
    RetryPolicy,
    check_silent_overflow,
    error_message_from_body,
    is_context_overflow,
    redact,
    stream_with_retries,
)
from .sse import aiter_sse

__all__ = [
    "OpenAIChatProvider",
    "normalize_openai_stop_reason",
    "normalize_openai_usage",
    "to_openai_messages",
    "to_openai_tools",
]

#: Hosts that never answer without a key: asking them without one is a configuration error.
_HOSTS_REQUIRING_KEY = frozenset({"api.openai.com", "openrouter.ai"})

_STOP_REASONS = {"stop": "stop", "tool_calls": "tool_use", "function_call": "tool_use", "length": "length"}


def normalize_openai_stop_reason(reason: str | None) -> str | None:
    """``stop`` → ``stop``, ``tool_calls`` / ``function_call`` → ``tool_use``, ``length`` →
    ``length``; anything else (``content_filter``…) unchanged."""
    if reason is None:
        return None
    return _STOP_REASONS.get(reason, reason)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def normalize_openai_usage(raw: Mapping[str, Any]) -> Usage:
    """OpenAI counts cached tokens inside ``prompt_tokens``; soba's :class:`Usage` does not:
    ``input = prompt_tokens - cached``, ``cache_read = cached``. DeepSeek's
    ``prompt_cache_hit_tokens`` is read when ``prompt_tokens_details`` is absent."""
    prompt = _int(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    if not cached:
        cached = _int(raw.get("prompt_cache_hit_tokens"))
    cached = min(cached, prompt)
    return Usage(input=prompt - cached, output=_int(raw.get("completion_tokens")), cache_read=cached)


def to_openai_tools(tools: Any) -> list[dict[str, Any]]:
    """``ToolSpec`` values in the ``{"type": "function", "function": {...}}`` form."""
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
            for t in tools]


def to_openai_messages(system: str, messages: Any) -> list[dict[str, Any]]:
    """Neutral messages (repaired by :func:`repair_tool_pairing`) as chat-completions messages."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in repair_tool_pairing(messages):
        role = message.get("role")
        text = message_text(message.get("content"))
        if role == "user":
            out.append({"role": "user", "content": text})
        elif role == "assistant":
            calls = message.get("toolCalls") or []
            if not text and not calls:
                continue
            wire: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                wire["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"],
                                  "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                    for c in calls]
            out.append(wire)
        elif role == "tool":
            if message.get("isError") and not text.startswith("Error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": str(message.get("toolCallId")), "content": text})
        elif role == "system" and text:
            out.append({"role": "system", "content": text})
    return out


@dataclass(slots=True)
class _ToolSlot:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamState:
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    tools: dict[int, _ToolSlot] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    done: bool = False


class OpenAIChatProvider:
    """A :class:`~soba_notebook.providers.base.Provider` for ``POST {base_url}/chat/completions``."""

    name = "openai"
    offline = False

    def __init__(self, model: str, *, base_url: str = "https://api.openai.com/v1", api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", transport: httpx.AsyncBaseTransport | None = None,
                 timeout: float = 120.0, max_retries: int = 4,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 context_window: int | None = None, jitter: Callable[[], float] = random.random,
                 display_name: str = "OpenAI-compatible") -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.context_window = context_window
        self.label = f"{display_name} · {model} @ {self.base_url}"
        self._api_key = api_key
        self._policy = RetryPolicy(max_retries=max(0, max_retries), sleep=sleep, jitter=jitter)
        self._clients = ClientCache(base_url=self.base_url, timeout=timeout, transport=transport)
        self._token_param = "max_tokens"
        self._send_stream_options = True

    def __repr__(self) -> str:
        key = "set" if self._resolve_key() else "unset"
        return (f"OpenAIChatProvider(model={self.model!r}, base_url={self.base_url!r}, "
                f"api_key_env={self.api_key_env!r}, key={key})")

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _resolve_key(self) -> str | None:
        key = self._api_key if self._api_key is not None else os.environ.get(self.api_key_env)
        return (key.strip() or None) if key else None

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and debugging can inspect it)."""
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": to_openai_messages(request.system, request.messages),
            "stream": True,
            self._token_param: request.max_output_tokens,
        }
        if self._send_stream_options:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    def _adapt(self, status: int, text: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if status not in (400, 422):
            return None
        lowered = text.lower()
        if ("max_completion_tokens" in lowered and "max_tokens" in body
                and "max_completion_tokens" not in body):
            self._token_param = "max_completion_tokens"
            changed = {k: v for k, v in body.items() if k != "max_tokens"}
            changed["max_completion_tokens"] = body["max_tokens"]
            return changed
        if "stream_options" in lowered and "stream_options" in body:
            self._send_stream_options = False
            return {k: v for k, v in body.items() if k != "stream_options"}
        return None

    async def complete(self, request: ModelRequest, *,
                       on_event: Callable[[StreamEvent], None] | None = None) -> ModelResponse:
        key = self._resolve_key()
        ctx = ErrorContext("openai", self.url, self.api_key_env, key is not None, (key,) if key else ())
        host = (urlsplit(self.base_url).hostname or "").lower()
        if key is None and host in _HOSTS_REQUIRING_KEY:
            raise AuthError(ctx.say(f"no API key for {host}; set the {self.api_key_env} environment variable"))
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"

        state = _StreamState()

        async def consume(chunks: AsyncIterator[bytes]) -> None:
            await self._consume(chunks, state, ctx, on_event)

        await stream_with_retries(self._clients.get(), self.url, headers=headers, body=self.build_body(request),
                                  consume=consume, ctx=ctx, policy=self._policy, on_event=on_event,
                                  adapt=self._adapt)
        response = self._finish(state)
        overflow = check_silent_overflow(response.usage.prompt_tokens if response.usage else None,
                                         self.context_window, ctx)
        if overflow is not None:
            overflow.response = response  # type: ignore[attr-defined]
            raise overflow
        return response

    async def _consume(self, chunks: AsyncIterator[bytes], state: _StreamState, ctx: ErrorContext,
                       on_event: Callable[[StreamEvent], None] | None) -> None:
        emit = on_event or (lambda _event: None)
        async with aclosing(aiter_sse(chunks)) as events:
            async for event in events:
                data = event.data.strip()
                if data == "[DONE]":
                    state.done = True
                    break
                if not data:
                    continue
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise ProviderError(ctx.say(f"malformed stream chunk: {redact(data[:200], ctx.secrets)}"),
                                        retryable=True) from None
                if isinstance(chunk, Mapping):
                    self._apply_chunk(chunk, state, ctx, emit)
        if not state.done and state.finish_reason is None:
            raise ProviderError(ctx.say("the stream ended before the response was complete"), retryable=True)

    def _apply_chunk(self, chunk: Mapping[str, Any], state: _StreamState, ctx: ErrorContext,
                     emit: Callable[[StreamEvent], None]) -> None:
        error = chunk.get("error")
        if error:
            text = json.dumps(chunk, ensure_ascii=False)
            detail = error_message_from_body(text)
            code = error.get("code") if isinstance(error, Mapping) else None
            status = code if isinstance(code, int) else None
            if is_context_overflow(status, text):
                raise ContextOverflowError(ctx.say(f"context overflow (mid-stream): {detail}"), status=status)
            raise ProviderError(ctx.say(f"error mid-stream: {detail}"), status=status, retryable=True)
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            state.model = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            state.usage = normalize_openai_usage(usage)
            emit(StreamEvent("usage", state.usage.to_json()))
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                self._apply_delta(delta, state, emit)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                state.finish_reason = reason

    @staticmethod
    def _apply_delta(delta: Mapping[str, Any], state: _StreamState, emit: Callable[[StreamEvent], None]) -> None:
        for key in ("reasoning_content", "reasoning"):
            reasoning = delta.get(key)
            if isinstance(reasoning, str) and reasoning:
                state.thinking.append(reasoning)
                emit(StreamEvent("thinking", {"text": reasoning}))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            state.text.append(content)
            emit(StreamEvent("text", {"text": content}))
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return
        for position, call in enumerate(calls):
            if not isinstance(call, Mapping):
                continue
            slot = _slot_for(call, position, state)
            function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
            call_id, name = call.get("id"), function.get("name")
            fresh = not slot.id and not slot.name
            if isinstance(call_id, str) and call_id and not slot.id:
                slot.id = call_id
            if isinstance(name, str) and name and not slot.name:
                slot.name = name
            if fresh and (slot.id or slot.name):
                emit(StreamEvent("tool_call_start", {"index": slot.index, "id": slot.id, "name": slot.name}))
            arguments = function.get("arguments")
            if isinstance(arguments, Mapping):  # some local servers send an object, not text
                arguments = json.dumps(arguments, ensure_ascii=False)
            if isinstance(arguments, str) and arguments:
                slot.arguments.append(arguments)
                emit(StreamEvent("tool_call_delta", {"index": slot.index, "arguments": arguments}))

    def _finish(self, state: _StreamState) -> ModelResponse:
        calls = []
        for index in sorted(state.tools):
            slot = state.tools[index]
            call_id = slot.id or f"call_{index}_{secrets.token_hex(4)}"
            calls.append(ToolCall(call_id, slot.name, parse_tool_arguments("".join(slot.arguments))))
        reason = normalize_openai_stop_reason(state.finish_reason)
        if calls and reason == "stop":  # some local servers say "stop" after emitting tool calls
            reason = "tool_use"
        return ModelResponse(text="".join(state.text), tool_calls=tuple(calls), usage=state.usage,
                             stop_reason=reason, model=state.model or self.model,
                             thinking="".join(state.thinking), provider=self.name)

    async def aclose(self) -> None:
        await self._clients.aclose()


def _slot_for(call: Mapping[str, Any], position: int, state: _StreamState) -> _ToolSlot:
    """The accumulator a tool-call fragment belongs to: by ``index`` when present; otherwise by
    ``id`` (a new id opens a new slot), else the most recent slot (or ``position``)."""
    index = call.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        call_id = call.get("id")
        known = {slot.id: i for i, slot in state.tools.items() if slot.id}
        if isinstance(call_id, str) and call_id:
            index = known.get(call_id, max(state.tools, default=-1) + 1)
        else:
            index = max(state.tools, default=position)
    slot = state.tools.get(index)
    if slot is None:
        slot = state.tools[index] = _ToolSlot(index)
    return slot
