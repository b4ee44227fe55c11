"""SOBA's own tool protocol, for servers that cannot show the model tools natively.

A chat template without tool syntax (llama-server serving SmolLM2 with its own template, for one)
drops the request's ``tools`` list and every ``role: tool`` message: the model never learns it can
call anything, nor what a call returned. With ``model.toolProtocol`` ``"json"`` (or ``"auto"`` once
the server said so) the OpenAI-compatible wire speaks this protocol instead, in its request and
response layer only; the transcript keeps its canonical form (assistant entries with
``toolCalls``, ``tool`` entries with results) whichever protocol carried them:

* **the tool definitions** become text at the end of the system prompt (:func:`tools_prompt`):
  one compact block per tool, its parameters with type and description, and how to answer;
* **each answer is constrained** by ``response_format`` to :func:`step_schema`: a JSON object that
  is either ``{"tool": NAME, "arguments": {...}}`` (the tool's own parameter schema) or
  ``{"reply": TEXT}``. llama-server compiles the schema to a grammar, so even a 135M model's
  answer parses, and its arguments have the tool's shape;
* **earlier calls** are sent as the assistant's own JSON (what the model wrote), **results** as
  user messages the template renders: ``Result of tool NAME (call ID):`` and the content
  (``Error from tool NAME (call ID):`` for an error). Adjacent user messages are joined, for
  templates that insist on alternating roles;
* **the answer** is parsed back (:func:`parse_step`) into one tool call with a fresh id, or a
  reply. An answer that is not such JSON (a server that ignored ``response_format``, a reply cut
  at ``max_tokens``) is kept as a plain text reply, never retried: a retry costs a whole second
  generation on the slow local servers this protocol is for, and the grammar makes a malformed
  answer rare; a ``{"reply": "...`` cut short keeps the text it has.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from .base import ModelResponse, StreamEvent, ToolSpec, message_text, repair_tool_pairing, tool_call_from_text

__all__ = [
    "TOOL_PROTOCOLS",
    "ParsedStep",
    "ToolProtocol",
    "parse_step",
    "protocol_response",
    "result_message",
    "step_schema",
    "to_protocol_messages",
    "tools_prompt",
    "wire_message",
]

ToolProtocol = Literal["auto", "native", "json"]
#: every accepted value of ``model.toolProtocol``
TOOL_PROTOCOLS: tuple[str, ...] = get_args(ToolProtocol)

_HOW_TO_ANSWER = """\
# Tools
You can use the tools below. Answer with exactly one JSON object and nothing else:
- to call a tool: {"tool": "TOOL_NAME", "arguments": {...}}
- to answer the user: {"reply": "your answer"}
Call a tool when you need to read, change or run something; reply once you have what you need.
One tool call per answer. Its result comes back in a user message that starts with "Result of tool".
"""


def _example(tool: ToolSpec) -> str:
    """A call of ``tool`` with its required parameters as placeholders, shown as the form's example."""
    required = tool.parameters.get("required") or ()
    arguments = {str(name): "..." for name in required}
    return f'For example: {{"tool": {json.dumps(tool.name)}, "arguments": {json.dumps(arguments)}}}'


def _type_of(schema: Mapping[str, Any]) -> str:
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    return str(kind) if kind else "any"


def tools_prompt(tools: Iterable[ToolSpec]) -> str:
    """The tool definitions as the system prompt's last section, e.g.::

        ## read_file
        Read a text file from the workspace. ...
        - path (string, required): Path relative to the workspace root ...
    """
    tools = list(tools)
    parts = [_HOW_TO_ANSWER + (_example(tools[0]) if tools else "")]
    for tool in tools:
        lines = [f"## {tool.name}", tool.description.strip()]
        properties = tool.parameters.get("properties")
        required = set(tool.parameters.get("required") or ())
        if isinstance(properties, Mapping):
            for name, schema in properties.items():
                schema = schema if isinstance(schema, Mapping) else {}
                need = ", required" if name in required else ""
                described = str(schema.get("description") or "").strip()
                lines.append(f"- {name} ({_type_of(schema)}{need})" + (f": {described}" if described else ""))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def step_schema(tools: Iterable[ToolSpec]) -> dict[str, Any]:
    """One step's answer: one tool call (with that tool's parameter schema) or a reply."""
    choices: list[dict[str, Any]] = [
        {"type": "object",
         "properties": {"tool": {"const": tool.name}, "arguments": dict(tool.parameters)},
         "required": ["tool", "arguments"], "additionalProperties": False}
        for tool in tools]
    choices.append({"type": "object", "properties": {"reply": {"type": "string"}},
                    "required": ["reply"], "additionalProperties": False})
    return {"anyOf": choices}


def _call_json(call: Mapping[str, Any]) -> str:
    """A call as the model writes it in this protocol; arguments that were not JSON stay its text."""
    raw = call.get("rawArguments")
    name = json.dumps(str(call.get("name", "")), ensure_ascii=False)
    if isinstance(raw, str):
        return f'{{"tool": {name}, "arguments": {raw}}}'
    arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
    return f'{{"tool": {name}, "arguments": {arguments}}}'


def result_message(message: Mapping[str, Any]) -> str:
    """A ``tool`` message's text for a user message: ``Result of tool NAME (call ID):`` + content."""
    head = "Error from tool" if message.get("isError") else "Result of tool"
    name = message.get("name") or "unknown tool"
    return f"{head} {name} (call {message.get('toolCallId')}):\n{message_text(message.get('content'))}"


def wire_message(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """One canonical message as :func:`to_protocol_messages` sends it, for counting (the budget
    counts what is sent): a ``tool`` result as the user message :func:`result_message` writes, an
    assistant's calls as the JSON text the model wrote, after its text (its thinking is not sent),
    a user message as its text. (Adjacent user messages are joined on the wire; counted apart they
    cost one message overhead more, a few tokens, on the safe side.)"""
    role = message.get("role")
    if role == "tool":
        return {"role": "user", "content": result_message(message)}
    if role == "assistant":
        calls = "\n".join(_call_json(c) for c in message.get("toolCalls") or [])
        text = message_text(message.get("content"))
        return {"role": "assistant", "content": "\n".join(part for part in (text, calls) if part)}
    if role == "user":
        return {"role": "user", "content": message_text(message.get("content"))}
    return message


def to_protocol_messages(system: str, messages: Sequence[Mapping[str, Any]],
                         tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral messages as chat-completions messages a template without tool syntax renders whole:
    no ``tools`` list, no ``tool_calls``, no ``role: tool`` (module docstring)."""
    out: list[dict[str, Any]] = []
    prompt = tools_prompt(tools)
    system_text = f"{system}\n\n{prompt}" if system else prompt
    out.append({"role": "system", "content": system_text})

    def add(role: str, text: str) -> None:
        if role == "user" and out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{text}"}
        else:
            out.append({"role": role, "content": text})

    for message in repair_tool_pairing(messages):
        role = message.get("role")
        text = message_text(message.get("content"))
        if role == "user":
            add("user", text)
        elif role == "assistant":
            calls = "\n".join(_call_json(c) for c in message.get("toolCalls") or [])
            joined = "\n".join(part for part in (text, calls) if part)
            if joined:
                add("assistant", joined)
        elif role == "tool":
            add("user", result_message(message))
        elif role == "system" and text:
            add("system", text)
    return out


@dataclass(frozen=True, slots=True)
class ParsedStep:
    """A protocol answer read back: a reply's ``text``, or one call (``tool`` and its ``arguments``
    as JSON text). ``valid`` is ``False`` when the answer was not protocol JSON at all."""

    text: str
    tool: str | None = None
    arguments: str = ""
    valid: bool = True
    call_id: str = ""


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
_REPLY_START = re.compile(r'^\s*\{\s*"reply"\s*:\s*"')


def _partial_reply(text: str) -> str | None:
    """The reply text of a ``{"reply": "...`` answer cut short (``max_tokens``), else ``None``."""
    start = _REPLY_START.match(text)
    if start is None:
        return None
    body = text[start.end():]
    for cut in range(len(body), max(len(body) - 6, -1), -1):  # an escape may be cut mid-way
        try:
            value = json.loads(f'"{body[:cut]}"')
        except ValueError:
            continue
        return value if isinstance(value, str) else None
    return None


def parse_step(text: str) -> ParsedStep:
    """Read one protocol answer (module docstring): a call gets a fresh ``call_…`` id; anything
    that is not ``{"tool": …, "arguments": …}`` or ``{"reply": …}`` is a plain text reply."""
    fenced = _FENCE.match(text)
    candidate = fenced.group(1) if fenced else text
    try:
        value = json.loads(candidate)
    except ValueError:
        partial = _partial_reply(candidate)
        return ParsedStep(partial, valid=True) if partial is not None else ParsedStep(text, valid=False)
    if isinstance(value, Mapping) and isinstance(value.get("tool"), str) and value["tool"]:
        arguments = value.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return ParsedStep("", value["tool"], raw, call_id=f"call_{secrets.token_hex(6)}")
    if isinstance(value, Mapping) and isinstance(value.get("reply"), str):
        return ParsedStep(value["reply"])
    return ParsedStep(text, valid=False)


def protocol_response(response: ModelResponse, emit: Callable[[StreamEvent], None] | None) -> ModelResponse:
    """``response`` (whose text is the raw protocol answer, not yet shown) as the canonical reply:
    one tool call, or the reply's text; the events a native reply would have streamed go to
    ``emit`` (the reply's text as one ``text`` event, a call as ``tool_call_start`` + its arguments)."""
    step = parse_step(response.text)
    send = emit or (lambda _event: None)
    if step.tool is None:
        if step.text:
            send(StreamEvent("text", {"text": step.text}))
        return replace(response, text=step.text)
    send(StreamEvent("tool_call_start", {"index": 0, "id": step.call_id, "name": step.tool}))
    send(StreamEvent("tool_call_delta", {"index": 0, "arguments": step.arguments}))
    call = tool_call_from_text(step.call_id, step.tool, step.arguments)
    return replace(response, text="", tool_calls=(call,), stop_reason="tool_use")
