"""OpenAI-compatible chat completions over raw ``httpx``: OpenAI itself, OpenRouter, and local
servers (Ollama, vLLM, llama.cpp, LM Studio) that speak the same wire.

Owns the translation between neutral messages and the chat-completions JSON, and the parsing of
its SSE stream (``data: {chunk}`` lines until ``data: [DONE]``): text deltas, reasoning deltas
(``reasoning_content`` / ``reasoning``, sent by DeepSeek-style and local servers), tool calls whose
``function.arguments`` arrive as fragments keyed by ``index``, ``finish_reason``, and the final
usage chunk requested with ``stream_options.include_usage``.

Wire decisions, documented because they are visible in requests (the differences between servers,
and how the provider learns them, live in :mod:`~soba_notebook.providers.openai_compat`):

* the system prompt is the first message (``role: system``), omitted when empty;
* an assistant message with tool calls and no text sends ``content: ""`` (not ``null``: some
  servers' chat templates fail on it); an assistant message with neither text nor calls is left
  out; ``thinking`` is never sent back;
* a tool list goes with ``tool_choice: "auto"`` (some servers ignore tools without it);
* a tool call whose arguments were not valid JSON is sent back with the model's own text, as
  the model wrote it;
* each tool result is its own ``role: tool`` message; an error result's content is prefixed with
  ``"Error: "`` because the wire has no error flag;
* replies stream; a server whose stream carries no usage is asked without streaming from then on
  (``stream="auto"``, decided from streamed replies only), and a stream that ends with no data at
  all is asked once more without streaming, on a fresh connection (the server may have closed the
  one it sent the empty stream on), so the server can say what went wrong (llama-cpp-python sends
  its context overflow that way only); when that plain request answers a request with automatic
  tool choice, the server cannot stream those (llama-cpp-python) and they go unstreamed from then
  on, one request each;
* ``response_schema`` becomes ``response_format`` (structured output) in the form the server
  accepts;
* a local server is asked once, before the first request, what it is (its context, whether its
  chat template shows the model tools); one that drops the tool list is named in :attr:`warnings`
  with what to do, and :attr:`~OpenAIChatProvider.renders_tools` tells the budget to leave the
  tool definitions out of its estimate, as the server does (the list is still sent: a server
  started with a tool-capable template later needs nothing else); a llama.cpp server also counts
  a request's prompt exactly on request (:meth:`~OpenAIChatProvider.count_request_tokens`);
* with ``tool_protocol`` ``"json"``, or ``"auto"`` once the server said its template drops tools,
  a request with tools runs SOBA's own protocol (:mod:`~soba_notebook.providers.tool_protocol`):
  the definitions in the system prompt, no ``tools`` list, ``response_format`` = one call or a
  reply, results as user messages; the reply is read back into a canonical tool call;
* no ``Authorization`` header when no key is configured (local servers); a missing key for
  ``api.openai.com`` or ``openrouter.ai`` is an :class:`AuthError` before any request.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from soba_notebook.errors import ContextOverflowError, ProviderError
from soba_notebook.session.entries import Usage
from soba_notebook.surrogates import PairJoiner, clean_surrogates
from soba_notebook.tokens import html_escaped

from .base import (
    ModelRequest,
    ModelResponse,
    StreamEvent,
    tool_call_from_text,
)
from .clients import is_loopback_url
from .failures import ErrorContext, error_message_from_body, redact
from .openai_compat import (
    ServerQuirks,
    StreamMode,
    adapt_request,
    count_rendered_tokens,
    count_text_tokens,
    probe_server,
    response_format_for,
)
from .openai_wire import (
    normalize_openai_stop_reason,
    normalize_openai_usage,
    to_openai_messages,
    to_openai_tools,
)
from .overflow import generated_past_its_context, is_context_overflow, overflow_error
from .remote import Exchange, RemoteProvider
from .sse import aiter_sse
from .tool_protocol import (
    ToolProtocol,
    protocol_response,
    step_schema,
    to_protocol_messages,
    tools_prompt,
    wire_message,
)

__all__ = [
    "OpenAIChatProvider",
    "normalize_openai_stop_reason",
    "normalize_openai_usage",
    "to_openai_messages",
    "to_openai_tools",
]

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
    chunks: int = 0  # data events received, [DONE] excluded
    # what the screen is sent: an emoji's surrogate pair split over two deltas arrives whole
    shown_text: PairJoiner = field(default_factory=PairJoiner)
    shown_thinking: PairJoiner = field(default_factory=PairJoiner)


class _Head:
    """Passes body bytes through, keeping the first ``limit`` for an error message."""

    __slots__ = ("_source", "limit", "seen")

    def __init__(self, source: AsyncIterator[bytes], limit: int = 200) -> None:
        self._source, self.limit, self.seen = source, limit, bytearray()

    def __aiter__(self) -> _Head:
        return self

    async def __anext__(self) -> bytes:
        piece = await self._source.__anext__()
        if len(self.seen) < self.limit:
            self.seen.extend(piece[: self.limit - len(self.seen)])
        return piece


class _EmptyStream(Exception):
    """A 200 reply whose stream carried no data at all (not even ``[DONE]``)."""


#: An empty reply to a request at least this share of the server's context is an overflow.
EMPTY_REPLY_OVERFLOW_SHARE = 0.9


class OpenAIChatProvider(RemoteProvider):
    """A :class:`~soba_notebook.providers.base.Provider` for ``POST {base_url}/chat/completions``.

    ``stream`` is ``"auto"`` (stream; fall back to plain requests when the server streams no
    usage), ``"always"`` or ``"never"``. ``context_window`` is the configured window; the server's
    own (probed once, see :func:`~soba_notebook.providers.openai_compat.probe_server`) is used
    where it is smaller, and :attr:`warnings` says so; a server whose chat template drops the tool
    list is named there too, and :attr:`renders_tools` is then ``False``.
    """

    name = "openai"
    endpoint = "/chat/completions"
    hosts_requiring_key = frozenset({"api.openai.com", "openrouter.ai"})
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    default_display_name = "OpenAI-compatible"

    def __init__(self, model: str, *, stream: StreamMode = "auto", probe: bool | None = None,
                 tool_protocol: ToolProtocol = "auto", **options: Any) -> None:
        super().__init__(model, **options)
        self.stream_mode: StreamMode = stream
        self.tool_protocol: ToolProtocol = tool_protocol
        self.quirks = ServerQuirks()
        #: one line per thing the user should know about this server (shown by ``%soba status``)
        self.warnings: list[str] = []
        # probing costs a request per endpoint; hosted APIs have no /props, local servers may
        self._probe = probe if probe is not None else is_loopback_url(self.base_url)

    @property
    def effective_context_window(self) -> int | None:
        """The smaller of the configured window and the server's own, where known."""
        known = [w for w in (self.context_window, self.quirks.server_context) if w]
        return min(known) if known else None

    @property
    def accepts_images(self) -> bool:
        """OpenAI's own API takes images (its current chat models all see them); another server only
        when ``model.vision`` says so, since a local model without a vision projector refuses them."""
        return urlsplit(self.base_url).hostname == "api.openai.com"

    @property
    def image_rule(self) -> str:
        return "openai"

    @property
    def renders_tools(self) -> bool:
        """Whether the tool definitions reach the model's prompt: ``False`` only once the server
        said its chat template drops them (``/props``, confirmed by ``/apply-template``), or when
        they go as text in the system prompt instead (:attr:`json_tools`, :meth:`sent_system`)."""
        return self.quirks.renders_tools is not False and not self.json_tools

    @property
    def json_tools(self) -> bool:
        """Whether requests with tools run SOBA's own JSON tool protocol: ``tool_protocol`` is
        ``"json"``, or ``"auto"`` and the server is known not to show tools natively."""
        return self.tool_protocol == "json" or (self.tool_protocol == "auto" and self.quirks.renders_tools is False)

    def sent_system(self, system: str, tools: tuple[Any, ...]) -> str:
        """The system prompt as sent for a request with ``tools``: with the JSON tool protocol it
        ends with the tool definitions as text (what the budget must count in their place)."""
        if not (tools and self.json_tools):
            return system
        prompt = tools_prompt(tools)
        return f"{system}\n\n{prompt}" if system else prompt

    @property
    def message_form(self) -> Callable[[Mapping[str, Any]], Mapping[str, Any]] | None:
        """How a canonical message is sent (for the budget to count it so): in the JSON tool
        protocol's text form while :attr:`json_tools`; ``None``: as stored."""
        return wire_message if self.json_tools else None

    def _protocol(self, request: ModelRequest) -> bool:
        return bool(request.tools) and self.json_tools and request.response_schema is None

    def _messages_and_tools(self, request: ModelRequest) -> dict[str, Any]:
        """The ``messages`` (and native ``tools``) of the body for ``request``."""
        if self._protocol(request):
            return {"messages": to_protocol_messages(request.system, request.messages, request.tools)}
        body: dict[str, Any] = {"messages": to_openai_messages(request.system, request.messages)}
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        return body

    @property
    def rendering_hint(self) -> tuple[bool, float] | None:
        """``(tool results rendered, extra tokens per '"' in call arguments)`` where the server's
        behaviour names its chat template: only llama-cpp-python's ``chatml-function-calling``
        handler refuses to stream automatic tool choice, and its template renders a tool message
        without its content and HTML-escapes each ``"`` as ``&#34;`` (five tokens instead of one
        in SmolLM2's, a Llama-family, vocabulary). The agent's token count starts from this and
        learns from the replies (``agent/rendering.py``); ``None``: nothing known."""
        return (False, 4.0) if self.escapes_text else None

    @property
    def escapes_text(self) -> bool:
        """Whether the server's template HTML-escapes the text it renders: known of llama-cpp-python's
        ``chatml-function-calling`` handler, the one that refuses to stream automatic tool choice."""
        return self.quirks.streams_tool_choice is False

    async def prepare(self) -> None:
        """Learn what the server is before the first request is sized (the agent calls this before
        its first budget check; :meth:`respond` calls it too, for callers that do not)."""
        await self._ensure_probed(self.wire_headers(self.get_key()))

    async def count_request_tokens(self, request: ModelRequest) -> int | None:
        """The server's exact prompt count for ``request`` where it can tell without generating
        (llama-server: ``/apply-template`` + ``/tokenize``); ``None`` elsewhere. Two local requests:
        worth it where an estimate has nothing to learn from yet (a session's first request)."""
        await self.prepare()
        if not self.quirks.renders_on_request:
            return None
        body = self._messages_and_tools(request)
        return await count_rendered_tokens(self._clients.get(), self.base_url, body,
                                           self.wire_headers(self.get_key()))

    async def count_text_tokens(self, text: str) -> int | None:
        """The server's own token count of ``text`` inside a prompt, where a local llama.cpp server
        tokenizes on request (llama-server, llama-cpp-python); ``None`` elsewhere. A server that
        did not answer once is not asked again. Counted as the template puts it in the prompt:
        llama-cpp-python's ``chatml-function-calling`` template HTML-escapes every message's text
        (a capsule's ``<context_capsule checkpoint="...">`` and its quotes cost more tokens
        escaped than raw)."""
        await self.prepare()
        if not self._probe or self.quirks.counts_text is False:
            return None
        if self.escapes_text:
            text = html_escaped(text)
        try:
            count = await count_text_tokens(self._clients.get(), self.base_url, text, self.wire_headers(self.get_key()),
                                            llama_server=self.quirks.renders_on_request)
        except httpx.TransportError:
            return None  # this time only: a failed connection says nothing of the endpoint
        self.quirks.counts_text = count is not None
        return count

    def wire_headers(self, key: str | None) -> dict[str, str]:
        """JSON in; ``Authorization: Bearer`` only when there is a key (local servers need none)."""
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        return headers

    def _streaming(self, request: ModelRequest | None = None) -> bool:
        if self.stream_mode == "never":
            return False
        if request is not None and self._automatic_tool_choice(request) and self.quirks.streams_tool_choice is False:
            return False  # the server cannot stream these at all, whatever ``stream`` asks
        return self.stream_mode == "always" or self.quirks.streams_usage is not False

    def _automatic_tool_choice(self, request: ModelRequest) -> bool:
        return bool(request.tools) and self.quirks.tool_choice

    def build_body(self, request: ModelRequest, *, stream: bool | None = None) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and debugging can inspect it)."""
        streaming = self._streaming(request) if stream is None else stream
        body: dict[str, Any] = {
            "model": request.model or self.model,
            **self._messages_and_tools(request),
            "stream": streaming,
            self.quirks.token_param: request.max_output_tokens,
        }
        if streaming and self.quirks.stream_options:
            body["stream_options"] = {"include_usage": True}
        if "tools" in body and self.quirks.tool_choice:
            body["tool_choice"] = "auto"
        schema = step_schema(request.tools) if self._protocol(request) else request.response_schema
        if schema is not None:
            name = "soba_step" if self._protocol(request) else "context_capsule"
            response_format = response_format_for(schema, self.quirks, name=name)
            if response_format is not None:
                body["response_format"] = response_format
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    def _adapt(self, status: int, text: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return adapt_request(status, text, body, self.quirks)

    async def _ensure_probed(self, headers: Mapping[str, str]) -> None:
        if self.quirks.probed or not self._probe:
            return
        self.quirks.probed = True
        facts = await probe_server(self._clients.get(), self.base_url, self.model, headers)
        found = self.quirks.server_context = facts.context
        self.quirks.renders_tools = facts.renders_tools
        self.quirks.renders_on_request = facts.renders_on_request
        if found and self.context_window and found < self.context_window:
            self.warnings.append(
                f"the server at {self.base_url} has a context of {found:,} tokens, smaller than "
                f"model.contextWindow {self.context_window:,}; set model.contextWindow to {found:,} so "
                "the hard limit holds (overflow detection uses the server's size meanwhile)")
        if facts.renders_tools is False:
            how = ("its /apply-template renders no tool definitions" if facts.tools_source == "/apply-template"
                   else "its /props says chat_template_caps.supports_tools is false")
            fix = ("llama-server with --jinja and a tool-capable template, --chat-template-file FILE (for a "
                   "ChatML model such as SmolLM2 or Qwen: llama.cpp's models/templates/Qwen-Qwen2.5-7B-Instruct.jinja)")
            if self.tool_protocol == "native":
                self.warnings.append(
                    f"the server at {self.base_url} does not show tools to the model ({how}): its chat template "
                    f"has no tool syntax, so the model cannot call SOBA's tools and no turn will run one. Start {fix}, "
                    "or set model.toolProtocol to \"json\" (SOBA's own tool protocol). Until then the token "
                    "estimate leaves the tool definitions out, as the server does")
            elif self.tool_protocol == "auto":
                self.warnings.append(
                    f"the server at {self.base_url} does not show tools to the model ({how}): its chat template "
                    "has no tool syntax, so SOBA runs its own tool protocol (model.toolProtocol \"auto\"): the "
                    "tool definitions go into the system prompt and each answer is one JSON tool call or reply. "
                    f"For the model's native tool calls, start {fix}")

    async def respond(self, request: ModelRequest, exchange: Exchange) -> ModelResponse:
        await self._ensure_probed(exchange.headers)
        if self._protocol(request):
            # the raw answer is protocol JSON: shown once it is read back, as a reply or a call
            quiet = exchange.on_event or (lambda _event: None)
            response = await self._respond(request, replace(
                exchange, on_event=lambda event: None if event.kind == "text" else quiet(event)))
            return protocol_response(response, exchange.on_event)
        return await self._respond(request, exchange)

    async def _respond(self, request: ModelRequest, exchange: Exchange) -> ModelResponse:
        streaming = self._streaming(request)
        streamed = streaming  # whether ``state`` below is a streamed reply
        try:
            try:
                state = await self._request(request, exchange, stream=streaming)
            except _EmptyStream:
                # Ask once more without streaming: the server can then answer with a status and an
                # error body (llama-cpp-python reports a context overflow only this way). On a fresh
                # connection: llama-cpp-python closes the one its empty stream came on.
                streamed = False
                await self._clients.drop_connections()
                state = await self._request(request, exchange, stream=False)
                if self._automatic_tool_choice(request) and (state.text or state.tools):
                    # it answers plainly what it cannot stream: ask such requests plainly from now on
                    self.quirks.streams_tool_choice = False
        except ContextOverflowError as exc:
            if not generated_past_its_context(exc, request.max_output_tokens, request.estimated_input_tokens):
                raise
            raise ProviderError(exchange.ctx.say(
                f"the server ran past its own context of {exc.context_limit:,} tokens while generating "
                f"(it reports {exc.requested_tokens:,} tokens, {exc.completion_tokens or 0:,} of them completion, "
                f"for a request of about {request.estimated_input_tokens or 0:,} tokens with max_tokens "
                f"{request.max_output_tokens:,}); the request itself fits, so nothing was compacted "
                "(llama-cpp-python's automatic tool choice ignores max_tokens when the model answers in text, "
                "and appends the model's function calls to its own prompt)")) from exc
        if streamed and self.stream_mode == "auto" and self.quirks.streams_usage is not False:
            # one complete stream without usage is enough: some servers send it for some replies only
            self.quirks.streams_usage = state.usage is not None
            if state.usage is None:
                self.warnings.append(f"the server at {self.base_url} streams no token usage; later requests "
                                     "are sent without streaming so each reply reports its exact prompt size")
        self._check_empty_reply(request, state, exchange.ctx)
        return self._finish(state)

    async def _request(self, request: ModelRequest, exchange: Exchange, *, stream: bool) -> _StreamState:
        state = _StreamState()

        async def consume(chunks: AsyncIterator[bytes]) -> None:
            if stream:
                await self._consume(chunks, state, exchange.ctx, exchange.on_event)
            else:
                await self._consume_whole(chunks, state, exchange.ctx, exchange.on_event)

        accept = "text/event-stream" if stream else "application/json"
        await self.post(exchange, self.build_body(request, stream=stream), consume, headers={"accept": accept},
                        adapt=self._adapt)
        return state

    def _check_empty_reply(self, request: ModelRequest, state: _StreamState, ctx: ErrorContext) -> None:
        """An empty reply (no text, no calls) to a request near or above the server's context is
        the overflow some servers do not name; anything else empty passes as an empty answer."""
        if state.text or state.tools or state.finish_reason not in (None, "length"):
            return
        window = self.effective_context_window
        size = request.estimated_input_tokens
        if window and size and size >= EMPTY_REPLY_OVERFLOW_SHARE * window:
            raise ContextOverflowError(ctx.say(
                f"context overflow: the server sent an empty reply to a request of about {size:,} tokens, "
                f"near or above its context of {window:,} tokens"), requested_tokens=size, context_limit=window)

    async def _consume_whole(self, chunks: AsyncIterator[bytes], state: _StreamState, ctx: ErrorContext,
                             on_event: Callable[[StreamEvent], None] | None) -> None:
        """A non-streamed ``chat.completion`` object, applied as if it were one big chunk."""
        data = bytearray()
        async for piece in chunks:
            data.extend(piece)
        try:
            body = json.loads(bytes(data))
        except ValueError:
            start = bytes(data[:200]).decode("utf-8", "replace")
            raise ProviderError(ctx.say(f"the reply is not JSON: {redact(start, ctx.secrets)}"),
                                retryable=True) from None
        if not isinstance(body, Mapping):
            raise ProviderError(ctx.say("the reply is not a JSON object"), retryable=True)
        emit = on_event or (lambda _event: None)
        choices = body.get("choices")
        chunk: dict[str, Any] = {k: v for k, v in body.items() if k != "choices"}
        if isinstance(choices, list):
            chunk["choices"] = [
                {"index": c.get("index", 0), "finish_reason": c.get("finish_reason"),
                 "delta": _message_as_delta(c.get("message"))}
                for c in choices if isinstance(c, Mapping)]
        self._apply_chunk(chunk, state, ctx, emit)
        state.done = True

    async def _consume(self, chunks: AsyncIterator[bytes], state: _StreamState, ctx: ErrorContext,
                       on_event: Callable[[StreamEvent], None] | None) -> None:
        emit = on_event or (lambda _event: None)
        head = _Head(chunks)
        async with aclosing(aiter_sse(head)) as events:
            async for event in events:
                data = event.data.strip()
                if data == "[DONE]":
                    if state.chunks == 0:  # nothing readable came first: not an empty answer
                        start = bytes(head.seen).decode("utf-8", "replace")
                        raise ProviderError(ctx.say(f"the stream held no readable chunk before [DONE]: "
                                                    f"{redact(start, ctx.secrets)!r}"))
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
                    state.chunks += 1
                    self._apply_chunk(chunk, state, ctx, emit)
        if not state.done and state.finish_reason is None:
            if state.chunks == 0:
                raise _EmptyStream
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
                raise overflow_error(ctx.say(f"context overflow (mid-stream): {detail}"), text, status)
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
                if shown := state.shown_thinking.feed(reasoning):
                    emit(StreamEvent("thinking", {"text": shown}))
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            state.text.append(content)
            if shown := state.shown_text.feed(content):
                emit(StreamEvent("text", {"text": shown}))
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return
        for position, call in enumerate(calls):
            if not isinstance(call, Mapping):
                continue
            slot = _slot_for(call, position, state)
            function = found if isinstance(found := call.get("function"), Mapping) else {}
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
            calls.append(tool_call_from_text(call_id, slot.name, "".join(slot.arguments)))
        reason = normalize_openai_stop_reason(state.finish_reason)
        if calls and reason == "stop":  # some local servers say "stop" after emitting tool calls
            reason = "tool_use"
        return ModelResponse(text=clean_surrogates("".join(state.text)), tool_calls=tuple(calls), usage=state.usage,
                             stop_reason=reason, model=state.model or self.model,
                             thinking=clean_surrogates("".join(state.thinking)), provider=self.name)


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


def _message_as_delta(message: Any) -> dict[str, Any]:
    """A non-streamed ``choices[i].message`` in the shape of one stream delta (tool calls get the
    ``index`` a delta would carry)."""
    if not isinstance(message, Mapping):
        return {}
    delta = {k: v for k, v in message.items() if k != "tool_calls"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping)]
    return delta
