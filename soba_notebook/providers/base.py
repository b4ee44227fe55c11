"""The provider interface: what the agent asks a model, and what it gets back.

Everything above ``providers/`` talks to a model only through these values: a
:class:`ModelRequest` built from provider-neutral message dicts (the same shape as
``Entry.message`` in :mod:`soba_notebook.session.entries`), streamed :class:`StreamEvent` values
while the answer arrives, and one :class:`ModelResponse` at the end. The wire formats (OpenAI chat
completions, Anthropic messages) live in their own modules; the offline demo model
(:mod:`soba_notebook.demo`) implements the same :class:`Provider` protocol.

This module also owns the wire-independent repair of a message list
(:func:`repair_tool_pairing`), because both wires reject the same broken shapes: a tool result
whose call is not in the request, or a tool call that is never answered. Such orphans can appear
after a rewind, a crash between a call and its result, or a hand-edited transcript. They are never
dropped silently: each becomes a plain text note the model can still read.

Neutral messages::

    {"role": "user", "content": str}
    {"role": "assistant", "content": str, "toolCalls": [{"id", "name", "arguments": dict}],
     "thinking"?: str}
    {"role": "tool", "toolCallId": str, "name": str, "content": str, "isError"?: bool}
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from soba_notebook.session.entries import Entry, ToolCall, Usage
from soba_notebook.surrogates import clean_surrogates, has_surrogates

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "STREAM_EVENT_KINDS",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "StreamEvent",
    "SummarySource",
    "ToolSpec",
    "arguments_error",
    "clean_tool_arguments",
    "message_text",
    "nested_deeper_than",
    "parse_tool_arguments",
    "repair_tool_pairing",
    "tool_call_from_text",
]

#: Every kind a :class:`StreamEvent` may have. ``data`` per kind:
#: ``text`` / ``thinking``: ``{"text": delta}``;
#: ``tool_call_start``: ``{"index", "id", "name"}``;
#: ``tool_call_delta``: ``{"index", "arguments": fragment of the JSON text}``;
#: ``usage``: ``Usage.to_json()`` (sent once, when the provider reported it);
#: ``retry``: ``{"provider", "attempt", "maxRetries", "delay", "status", "reason", "say"}`` before
#: sleeping (``say``: the failure in plain words, e.g. ``connection to the server failed (ReadError)``).
STREAM_EVENT_KINDS = frozenset({"text", "thinking", "tool_call_start", "tool_call_delta", "usage", "retry"})


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call. ``parameters`` is a JSON-schema object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SummarySource:
    """What a ``purpose == "summarize"`` request summarizes, as data rather than prompt text.

    ``entries`` are the transcript entries whose serialized text the prompt carries, and
    ``previous`` is the JSON of the capsule state the prompt asks the model to roll forward
    (``None`` for the first summary). A language model reads the prompt; the offline demo model
    (:mod:`soba_notebook.demo`) has no language understanding, so it answers from these values
    with the deterministic extractor instead of parsing the prompt back. Real providers ignore it.
    """

    entries: tuple[Entry, ...]
    previous: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One inference. ``messages`` are provider-neutral dicts (module docstring).

    ``purpose`` is ``"agent"`` or ``"summarize"``: the explicit kind of request (the offline model
    picks its reply by it; real providers ignore it). A summarize request also carries
    ``summary_source``, the entries and previous state its prompt was made from (see
    :class:`SummarySource`; real providers ignore it too).

    ``response_schema`` asks for constrained output: a JSON schema the answer must match. Providers
    whose server supports it (OpenAI structured outputs, llama.cpp grammars, vLLM guided decoding)
    send it; the others ignore it and the caller's prompt asks for JSON instead.

    ``estimated_input_tokens`` is the caller's estimate of the request's size; a provider uses it
    to recognise a context overflow that a server does not name (an empty reply to a request near
    or above the server's context).
    """

    model: str
    system: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int = 4096
    temperature: float | None = None
    purpose: str = "agent"
    response_schema: Mapping[str, Any] | None = None
    estimated_input_tokens: int | None = None
    summary_source: SummarySource | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A piece of the answer while it streams; see :data:`STREAM_EVENT_KINDS` for ``data``."""

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """The complete answer.

    ``tool_calls`` carry parsed argument dicts; arguments that were not a JSON object keep the
    model's text in ``ToolCall.raw_arguments`` (see :func:`tool_call_from_text`) so the agent can
    answer with the parse error instead of running the tool with guessed values. ``usage`` is
    normalized (``input`` excludes cached tokens). ``stop_reason`` is ``"stop"``, ``"tool_use"``,
    ``"length"`` or the provider's raw value for anything else.
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    stop_reason: str | None
    model: str | None
    thinking: str = ""
    provider: str = ""


@runtime_checkable
class Provider(Protocol):
    """What the agent needs from a model backend."""

    # Read-only members, so a class constant (the scripted model's) satisfies them as well as an attribute.
    @property
    def name(self) -> str: ...      # "openai" | "anthropic" | "scripted"

    @property
    def label(self) -> str: ...     # human readable, e.g. "OpenAI-compatible · gpt-4o-mini @ https://api.openai.com/v1"

    @property
    def offline(self) -> bool: ...  # True only for the scripted model

    async def complete(self, request: ModelRequest, *,
                       on_event: Callable[[StreamEvent], None] | None = None) -> ModelResponse: ...

    async def aclose(self) -> None: ...


# -- helpers shared by the wire modules --------------------------------------------------------------

def message_text(value: Any) -> str:
    """The text of a neutral ``content`` field: strings as they are, ``None`` as ``""``, anything
    else as JSON (a defensive fallback; the transcript stores strings)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


#: Arguments nested deeper than this (objects and arrays) are refused like unparsable text: no
#: tool takes them, and every later step that walks them (the secret scrubber, the store's JSON
#: encoder, the next request) would meet Python's recursion limit and end the turn.
MAX_ARGUMENT_DEPTH = 100


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds objects or arrays more than ``limit`` levels deep (counted
    without recursion, so any depth is safe to ask about)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_tool_arguments(raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Turn streamed argument text into a dict (``{}`` for empty text); raises ``ValueError``
    with the JSON parse error when the text is not a JSON object, or one nested more than
    :data:`MAX_ARGUMENT_DEPTH` levels deep."""
    if isinstance(raw, Mapping):
        value: Any = dict(raw)
    elif raw is None or not raw.strip():
        return {}
    else:
        try:
            value = json.loads(raw)
        except RecursionError:  # hostile nesting: a parse error like any other, not a crash
            value = _TOO_DEEP
    if value is _TOO_DEEP or nested_deeper_than(value, MAX_ARGUMENT_DEPTH):
        raise ValueError(f"arguments nested too deeply (more than {MAX_ARGUMENT_DEPTH:,} levels)")
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


_TOO_DEEP = object()


#: A JSON escape of a UTF-16 surrogate half (``\ud83d``): the parsed text may hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def clean_tool_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with every string (keys too) free of lone UTF-16 surrogates, pairs joined
    (:func:`~soba_notebook.surrogates.clean_surrogates`); unchanged when there are none."""
    text = json.dumps(arguments, ensure_ascii=False)  # leaves surrogates as they are, so they can be found
    if not has_surrogates(text):
        return dict(arguments)
    value = json.loads(clean_surrogates(text))
    return value if isinstance(value, dict) else {}


def tool_call_from_text(call_id: str, name: str, text: str | None) -> ToolCall:
    """A :class:`ToolCall` from the model's argument text: parsed when it is a JSON object, else
    kept verbatim in ``raw_arguments`` (never guessed at, never wrapped). Lone UTF-16 surrogates,
    as characters or as ``\\uXXXX`` escapes, become U+FFFD, so the call can be stored and run."""
    text = clean_surrogates(text) if text else text
    try:
        arguments = parse_tool_arguments(text)
    except ValueError:
        return ToolCall(call_id, name, {}, raw_arguments=text or "")
    if text and _SURROGATE_ESCAPE.search(text):
        arguments = clean_tool_arguments(arguments)
    return ToolCall(call_id, name, arguments)


def arguments_error(call: ToolCall) -> str | None:
    """The tool-result text for a call whose arguments were not a JSON object, ``None`` if they
    were: the parse error, so the model can correct its own text."""
    if call.raw_arguments is None:
        return None
    try:
        parse_tool_arguments(call.raw_arguments)
    except ValueError as exc:
        return (f"the arguments of {call.name} were not a valid JSON object ({exc}); nothing was run. "
                "Call the tool again with its arguments as one JSON object.")
    return None


def _calls_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("toolCalls") or ()
    out: list[dict[str, Any]] = []
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return out
    for call in calls:
        if isinstance(call, Mapping):
            args = call.get("arguments")
            item = {"id": str(call.get("id") or ""), "name": str(call.get("name") or ""),
                    "arguments": dict(args) if isinstance(args, Mapping) else {}}
            if isinstance(call.get("rawArguments"), str):
                item["rawArguments"] = call["rawArguments"]
            out.append(item)
    return out


def _unanswered_note(call: Mapping[str, Any]) -> str:
    args = json.dumps(call["arguments"], ensure_ascii=False, sort_keys=True, default=str)
    return f"[tool call {call['name']} (id {call['id']}) with arguments {args} has no recorded result]"


def _orphan_note(message: Mapping[str, Any]) -> str:
    name = message.get("name") or "unknown tool"
    call_id = message.get("toolCallId") or "?"
    status = "error " if message.get("isError") else ""
    return (f"[{status}result of tool {name} (call {call_id}); its call is not in this context]\n"
            f"{message_text(message.get('content'))}")


def repair_tool_pairing(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return a copy of ``messages`` in which every tool call is answered and every result answers.

    Rules (pure; the transcript is never changed, only the request):

    * The results of an assistant message's tool calls are looked for among the ``tool`` messages
      after it, up to the next assistant message, and moved to directly after it (in their original
      order), because both wires require the results to follow their calls immediately. Messages
      that sat in between (a queued user message) keep their order after the results.
    * A call without a result there (interrupted turn, rewind) is removed from ``toolCalls`` and
      described in the assistant's text: ``[tool call NAME (id ID) with arguments {...} has no
      recorded result]``. A second call reusing an id already used in the same message is treated
      the same way.
    * A tool result that no earlier assistant call claims becomes a user message
      ``[result of tool NAME (call ID); its call is not in this context]`` followed by its content.
    * Messages of any other role pass through unchanged (copied).
    """
    msgs = [dict(m) for m in messages]
    placed: set[int] = set()
    out: list[dict[str, Any]] = []
    for i, message in enumerate(msgs):
        if i in placed:
            continue
        role = message.get("role")
        if role == "tool":
            out.append({"role": "user", "content": _orphan_note(message)})
            continue
        calls = _calls_of(message) if role == "assistant" else []
        if not calls:
            out.append({**message, "toolCalls": []} if role == "assistant" else message)
            continue
        wanted: dict[str, dict[str, Any]] = {}
        duplicates: list[dict[str, Any]] = []
        for call in calls:
            if call["id"] in wanted:
                duplicates.append(call)
            else:
                wanted[call["id"]] = call
        found: dict[str, int] = {}
        for j in range(i + 1, len(msgs)):
            other = msgs[j]
            if other.get("role") == "assistant":
                break
            call_id = other.get("toolCallId")
            if (other.get("role") == "tool" and j not in placed and isinstance(call_id, str)
                    and call_id in wanted and call_id not in found):
                found[call_id] = j
        answered = [c for c in wanted.values() if c["id"] in found]
        missing = [c for c in wanted.values() if c["id"] not in found] + duplicates
        repaired = dict(message)
        repaired["toolCalls"] = answered
        if missing:
            text = message_text(message.get("content"))
            notes = "\n".join(_unanswered_note(c) for c in missing)
            repaired["content"] = f"{text}\n\n{notes}" if text else notes
        out.append(repaired)
        for j in sorted(found.values()):
            placed.add(j)
            out.append(msgs[j])
    return out
