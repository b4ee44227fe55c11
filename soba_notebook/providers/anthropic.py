"""Anthropic Messages API over raw ``httpx`` (``POST {base_url}/v1/messages``, streamed).

Owns the translation between neutral messages and Messages-API content blocks, and the parsing
of its named SSE events: ``message_start`` (input and cache usage), ``content_block_start`` /
``content_block_delta`` / ``content_block_stop`` for ``text``, ``tool_use`` (arguments as
``input_json_delta`` fragments) and ``thinking`` blocks, ``message_delta`` (stop reason, output
tokens), ``message_stop``, ``ping`` (ignored) and ``error`` (raised as the typed error).

Wire decisions, documented because they are visible in requests:

* the system prompt is the top-level ``system`` field (one text block), omitted when empty;
* all tool results answering one assistant turn go into ONE user message of ``tool_result``
  blocks (placed before any text in that message, as the API requires); adjacent messages of the
  same role are merged, so roles strictly alternate; a conversation that would start with the
  assistant gets a short user note first;
* empty text is never sent as a block (the API rejects empty text blocks): an assistant message
  with neither text nor calls is left out; ``thinking`` is not sent back (it would need the
  signature, which the neutral format does not keep);
* tool-call ids are reduced to the characters the API accepts (``[A-Za-z0-9_-]``) and made unique
  within the request (a suffix ``_2``, ``_3``… on reuse), the same way for a call and its result;
* with ``cache_prompts`` (default on) the system block and the last message's last block carry
  ``cache_control: {"type": "ephemeral"}``, so a long agent session reads its stable prefix from
  the prompt cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from soba_notebook.errors import AuthError, ProviderError
from soba_notebook.session.attachments import attachments_of
from soba_notebook.session.entries import ToolCall, Usage
from soba_notebook.surrogates import PairJoiner, clean_surrogates

from .base import (
    ModelRequest,
    ModelResponse,
    StreamEvent,
    clean_tool_arguments,
    message_text,
    repair_tool_pairing,
    tool_call_from_text,
)
from .failures import ErrorContext, error_message_from_body, redact
from .overflow import is_context_overflow, overflow_error
from .remote import Exchange, RemoteProvider
from .sse import aiter_sse

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicProvider",
    "normalize_anthropic_stop_reason",
    "to_anthropic_messages",
    "to_anthropic_tools",
]

ANTHROPIC_VERSION = "2023-06-01"

#: Placeholder user turn for a conversation that would otherwise start with the assistant (or be
#: empty): the API requires the first message to come from the user.
CONTINUE_NOTE = "(conversation continues)"


_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_use", "max_tokens": "length"}

#: Status equivalents of the error types the API sends in an ``error`` event.
_ERROR_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "overloaded_error": 529,
}

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def normalize_anthropic_stop_reason(reason: str | None) -> str | None:
    """``end_turn`` / ``stop_sequence`` → ``stop``, ``tool_use`` → ``tool_use``, ``max_tokens`` →
    ``length``; anything else (``pause_turn``, ``refusal``…) unchanged."""
    if reason is None:
        return None
    return _STOP_REASONS.get(reason, reason)


def _safe_id(value: Any) -> str:
    return _ID_UNSAFE.sub("_", str(value or "")) or "toolu_unknown"


class _IdMap:
    """Wire ids for tool calls: only allowed characters, and unique in the request (an id reused
    by a later turn, or two ids that reduce to the same text, get a numeric suffix). A result uses
    the id given to its call in the most recent assistant turn."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._turn: dict[str, str] = {}

    def new_turn(self) -> None:
        self._turn = {}

    def for_call(self, call_id: Any) -> str:
        base = candidate = _safe_id(call_id)
        n = 1
        while candidate in self._used:
            n += 1
            candidate = f"{base}_{n}"
        self._used.add(candidate)
        self._turn[str(call_id)] = candidate
        return candidate

    def for_result(self, call_id: Any) -> str:
        return self._turn.get(str(call_id), _safe_id(call_id))


def to_anthropic_tools(tools: Any) -> list[dict[str, Any]]:
    """``ToolSpec`` values as ``{name, description, input_schema}``."""
    return [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools]


def _blocks(message: Mapping[str, Any], ids: _IdMap) -> tuple[str, list[dict[str, Any]]]:
    role = message.get("role")
    text = message_text(message.get("content"))
    if role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": ids.for_result(message.get("toolCallId"))}
        images = attachments_of(message)
        if images:  # a tool result's content may hold image blocks beside its text
            block["content"] = ([{"type": "text", "text": text}] if text else []) + [
                {"type": "image", "source": {"type": "base64", "media_type": a.mime, "data": a.data}} for a in images]
        elif text:
            block["content"] = text
        if message.get("isError"):
            block["is_error"] = True
        return "user", [block]
    if role == "assistant":
        ids.new_turn()
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in message.get("toolCalls") or ():
            blocks.append({"type": "tool_use", "id": ids.for_call(call["id"]), "name": call["name"],
                           "input": dict(call["arguments"])})
        return "assistant", blocks
    return "user", [{"type": "text", "text": text}] if text else []


def to_anthropic_messages(messages: Any) -> list[dict[str, Any]]:
    """Neutral messages (repaired by :func:`repair_tool_pairing`) as strictly alternating
    Messages-API messages, starting with the user."""
    out: list[dict[str, Any]] = []
    ids = _IdMap()
    for message in repair_tool_pairing(messages):
        if message.get("role") not in ("user", "assistant", "tool"):
            continue
        role, blocks = _blocks(message, ids)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for wire in out:
        if wire["role"] == "user":  # tool_result blocks must lead their user message
            content = wire["content"]
            wire["content"] = ([b for b in content if b["type"] == "tool_result"]
                               + [b for b in content if b["type"] != "tool_result"])
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUE_NOTE}]})
    return out


@dataclass(slots=True)
class _Block:
    type: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    initial_input: Mapping[str, Any] | None = None
    # what the screen is sent: an emoji's surrogate pair split over two deltas arrives whole
    shown: PairJoiner = field(default_factory=PairJoiner)


@dataclass(slots=True)
class _StreamState:
    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0
    usage_seen: bool = False
    stop_reason: str | None = None
    model: str | None = None
    done: bool = False

    def usage(self) -> Usage | None:
        if not self.usage_seen:
            return None
        return Usage(input=self.input_tokens, output=self.output_tokens, cache_read=self.cache_read,
                     cache_write=self.cache_write)


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


class AnthropicProvider(RemoteProvider):
    """A :class:`~soba_notebook.providers.base.Provider` for the Anthropic Messages API."""

    name = "anthropic"
    endpoint = "/v1/messages"
    hosts_requiring_key = frozenset({"api.anthropic.com"})
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    default_display_name = "Anthropic"

    def __init__(self, model: str, *, cache_prompts: bool = True, **options: Any) -> None:
        super().__init__(model, **options)
        self.cache_prompts = cache_prompts

    @property
    def accepts_images(self) -> bool:
        return True  # every current Claude model takes images

    @property
    def image_rule(self) -> str:
        return "anthropic"

    def wire_headers(self, key: str | None) -> dict[str, str]:
        """JSON in, an event stream out, the API version, and ``x-api-key`` when there is a key."""
        headers = {"content-type": "application/json", "accept": "text/event-stream",
                   "anthropic-version": ANTHROPIC_VERSION}
        if key is not None:
            headers["x-api-key"] = key
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and debugging can inspect it)."""
        messages = to_anthropic_messages(request.messages)
        body: dict[str, Any] = {"model": request.model or self.model, "max_tokens": request.max_output_tokens,
                                "stream": True}
        if request.system:
            system: dict[str, Any] = {"type": "text", "text": request.system}
            if self.cache_prompts:
                system["cache_control"] = {"type": "ephemeral"}
            body["system"] = [system]
        if self.cache_prompts:
            last = messages[-1]["content"]
            last[-1] = {**last[-1], "cache_control": {"type": "ephemeral"}}
        body["messages"] = messages
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    async def respond(self, request: ModelRequest, exchange: Exchange) -> ModelResponse:
        state = _StreamState()

        async def consume(chunks: AsyncIterator[bytes]) -> None:
            await self._consume(chunks, state, exchange.ctx, exchange.on_event)

        await self.post(exchange, self.build_body(request), consume)
        return self._finish(state)

    async def _consume(self, chunks: AsyncIterator[bytes], state: _StreamState, ctx: ErrorContext,
                       on_event: Callable[[StreamEvent], None] | None) -> None:
        emit = on_event or (lambda _event: None)
        async with aclosing(aiter_sse(chunks)) as events:
            async for event in events:
                if event.event == "ping" or not event.data.strip():
                    continue
                try:
                    payload = json.loads(event.data)
                except ValueError:
                    raise ProviderError(ctx.say(
                        f"malformed {event.event} event: {redact(event.data[:200], ctx.secrets)}"),
                        retryable=True) from None
                if not isinstance(payload, Mapping):
                    continue
                kind = payload.get("type") if event.event == "message" else event.event
                if kind == "message_stop" and not state.blocks and not state.usage_seen and state.model is None:
                    raise ProviderError(ctx.say("the stream held no readable event before message_stop"))
                self._apply(str(kind), payload, state, ctx, emit)
                if state.done:
                    break
        if not state.done:
            raise ProviderError(ctx.say("the stream ended before message_stop"), retryable=True)

    def _apply(self, kind: str, payload: Mapping[str, Any], state: _StreamState, ctx: ErrorContext,
               emit: Callable[[StreamEvent], None]) -> None:
        if kind == "message_start":
            message = found if isinstance(found := payload.get("message"), Mapping) else {}
            if isinstance(message.get("model"), str):
                state.model = message["model"]
            self._read_usage(message.get("usage"), state)
        elif kind == "content_block_start":
            index = payload.get("index", len(state.blocks))
            raw = found if isinstance(found := payload.get("content_block"), Mapping) else {}
            block = _Block(str(raw.get("type", "")))
            if block.type == "tool_use":
                block.id, block.name = str(raw.get("id", "")), str(raw.get("name", ""))
                initial = raw.get("input")
                block.initial_input = initial if isinstance(initial, Mapping) and initial else None
                emit(StreamEvent("tool_call_start", {"index": index, "id": block.id, "name": block.name}))
            elif block.type == "text" and raw.get("text"):
                block.parts.append(str(raw["text"]))
                if shown := block.shown.feed(str(raw["text"])):
                    emit(StreamEvent("text", {"text": shown}))
            elif block.type == "thinking" and raw.get("thinking"):
                block.parts.append(str(raw["thinking"]))
                if shown := block.shown.feed(str(raw["thinking"])):
                    emit(StreamEvent("thinking", {"text": shown}))
            state.blocks[index] = block
        elif kind == "content_block_delta":
            self._apply_delta(payload, state, emit)
        elif kind == "message_delta":
            delta = found if isinstance(found := payload.get("delta"), Mapping) else {}
            if isinstance(delta.get("stop_reason"), str):
                state.stop_reason = delta["stop_reason"]
            self._read_usage(payload.get("usage"), state)
        elif kind == "message_stop":
            state.done = True
            usage = state.usage()
            if usage is not None:
                emit(StreamEvent("usage", usage.to_json()))
        elif kind == "error":
            raise self._stream_error(payload, ctx)
        # content_block_stop and unknown future events need no action.

    @staticmethod
    def _apply_delta(payload: Mapping[str, Any], state: _StreamState, emit: Callable[[StreamEvent], None]) -> None:
        index = payload.get("index")
        delta = found if isinstance(found := payload.get("delta"), Mapping) else {}
        block = state.blocks.get(index) if isinstance(index, int) else None
        if block is None:  # a delta without its start: keep it rather than lose it
            block = state.blocks.setdefault(index if isinstance(index, int) else len(state.blocks),
                                            _Block(_DELTA_BLOCK.get(str(delta.get("type")), "text")))
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block.parts.append(delta["text"])
            if shown := block.shown.feed(delta["text"]):
                emit(StreamEvent("text", {"text": shown}))
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            if delta["partial_json"]:
                block.parts.append(delta["partial_json"])
                emit(StreamEvent("tool_call_delta", {"index": index, "arguments": delta["partial_json"]}))
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block.parts.append(delta["thinking"])
            if shown := block.shown.feed(delta["thinking"]):
                emit(StreamEvent("thinking", {"text": shown}))
        # signature_delta: the signature is only needed to send thinking back, which soba does not.

    @staticmethod
    def _read_usage(raw: Any, state: _StreamState) -> None:
        if not isinstance(raw, Mapping):
            return
        for key, attr in (("input_tokens", "input_tokens"), ("cache_read_input_tokens", "cache_read"),
                          ("cache_creation_input_tokens", "cache_write"), ("output_tokens", "output_tokens")):
            value = _count(raw.get(key))
            if value is not None:
                setattr(state, attr, value)
                state.usage_seen = True

    @staticmethod
    def _stream_error(payload: Mapping[str, Any], ctx: ErrorContext) -> ProviderError:
        error = found if isinstance(found := payload.get("error"), Mapping) else {}
        kind = str(error.get("type", "error"))
        status = _ERROR_STATUS.get(kind)
        text = json.dumps(payload, ensure_ascii=False)
        detail = error_message_from_body(text)
        if status in (401, 403):
            return AuthError(ctx.say(f"{detail} (check the key in {ctx.key_env})"), status=status)
        if is_context_overflow(status, text):
            return overflow_error(ctx.say(f"context overflow (mid-stream): {detail}"), text, status)
        retryable = status is None or status == 429 or status >= 500
        return ProviderError(ctx.say(f"error mid-stream: {detail}"), status=status, retryable=retryable)

    def _finish(self, state: _StreamState) -> ModelResponse:
        text: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(state.blocks):
            block = state.blocks[index]
            if block.type == "text":
                text.extend(block.parts)
            elif block.type == "thinking":
                thinking.extend(block.parts)
            elif block.type == "tool_use":
                raw = "".join(block.parts)
                calls.append(tool_call_from_text(block.id, block.name, raw) if raw
                             else ToolCall(block.id, block.name, clean_tool_arguments(block.initial_input or {})))
        return ModelResponse(text=clean_surrogates("".join(text)), tool_calls=tuple(calls), usage=state.usage(),
                             stop_reason=normalize_anthropic_stop_reason(state.stop_reason),
                             model=state.model or self.model, thinking=clean_surrogates("".join(thinking)),
                             provider=self.name)


_DELTA_BLOCK = {"text_delta": "text", "input_json_delta": "tool_use", "thinking_delta": "thinking"}
