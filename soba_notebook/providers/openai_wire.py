"""The chat-completions wire format as pure functions: messages, tools, usage and stop reasons.

What SOBA's neutral messages and tool specs look like on an OpenAI-compatible server, and how the
server's usage and finish reasons read back; no I/O, so the provider (:mod:`.openai`), the tool
protocol and the tests share one definition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from soba_notebook.session.attachments import ImageAttachment, attachments_of
from soba_notebook.session.entries import Usage

from .base import message_text, repair_tool_pairing

__all__ = ["image_part", "normalize_openai_stop_reason", "normalize_openai_usage", "to_openai_messages",
           "to_openai_tools"]

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


def _arguments_text(call: Mapping[str, Any]) -> str:
    raw = call.get("rawArguments")
    return raw if isinstance(raw, str) else json.dumps(call["arguments"], ensure_ascii=False)


def to_openai_messages(system: str, messages: Any) -> list[dict[str, Any]]:
    """Neutral messages (repaired by :func:`repair_tool_pairing`) as chat-completions messages."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    images: list[dict[str, Any]] = []  # image parts of the tool results since the last non-tool message
    for message in repair_tool_pairing(messages):
        role = message.get("role")
        text = message_text(message.get("content"))
        if role != "tool" and images:
            out.append(_images_message(images))
            images = []
        if role == "user":
            out.append({"role": "user", "content": text})
        elif role == "assistant":
            calls = message.get("toolCalls") or []
            if not text and not calls:
                continue
            wire: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                wire["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": _arguments_text(c)}}
                    for c in calls]
            out.append(wire)
        elif role == "tool":
            if message.get("isError") and not text.startswith("Error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": str(message.get("toolCallId")), "content": text})
            images.extend(image_part(a) for a in attachments_of(message))
        elif role == "system" and text:
            out.append({"role": "system", "content": text})
    if images:
        out.append(_images_message(images))
    return out


def image_part(image: ImageAttachment, *, detail: str = "auto") -> dict[str, Any]:
    """One image as a chat-completions ``image_url`` content part (a base64 data URL)."""
    return {"type": "image_url", "image_url": {"url": f"data:{image.mime};base64,{image.data}", "detail": detail}}


def _images_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    # A chat-completions ``tool`` message carries text only: the images of a run of tool results
    # follow them in one user message, before the assistant answers (a user message between the
    # tool results would break the run the assistant's tool calls must be answered by).
    return {"role": "user", "content": [{"type": "text", "text": "The images of the tool results above:"}, *parts]}
