"""OpenAI-style chat transcripts → SOBA entries: mini-swe-agent, SWE-agent, plain message lists.

This module owns the three formats whose messages are OpenAI chat-completions messages
(``role``, ``content``, ``tool_calls`` with JSON-text ``function.arguments``, ``role: "tool"``
results with ``tool_call_id``), wrapped differently:

* ``mini_swe_agent`` — ``*.traj.json``: ``{"messages": [...], "info": {"model_stats", ...},
  "trajectory_format", "instance_id"}``. Each assistant message carries the raw provider response
  in ``extra.response``: its ``usage`` (OpenAI form: ``prompt_tokens`` *includes* cached tokens,
  normalized to ``input`` = uncached, ``cacheRead`` = cached), ``model`` and ``finish_reason`` are
  kept; ``extra.timestamp`` (epoch seconds) becomes ``ts``; ``reasoning_content`` becomes
  ``thinking``. The final ``role: "exit"`` message (exit status and submitted patch) →
  ``imported_message``, kept but not model input.
* ``swe_agent`` — ``*.traj``: ``history`` is imported (the messages the model saw);
  ``trajectory`` duplicates it step by step and is counted in ``skipped``. Tool results name
  their call in ``tool_call_ids`` (a list). Text-mode agents keep the action inside the assistant
  text; it stays there. Demonstration messages (``is_demo``) are kept as user messages marked
  ``source: "swe_agent_demonstration"``, because the model saw them.
* ``openai_messages`` — a JSON list of messages, ``{"messages": [...]}`` or JSON Lines of them.
  Per-message ``usage`` is kept when present; legacy ``function_call`` / ``role: "function"`` pairs
  are mapped to tool calls with a synthetic call id (``fc_<index>``).

System (and ``developer``) messages → ``system`` entries ``{"content", "role"}``: kept, not model
input. SOBA's own system prompt describes SOBA's tools, so an imported prompt must not replace it
(a ``config`` change would); it stays readable in the transcript.

Problems name ``file:line`` — the line on which the message starts in the JSON document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._common import (
    Converted,
    ImportLog,
    Planned,
    assistant_data,
    content_text,
    iso_timestamp,
    object_or_empty,
    parse_arguments,
    tool_data,
    usage_json,
    user_data,
)
from .jsonl_reader import array_element_lines, read_jsonl

__all__ = ["convert_openai_format"]


def convert_openai_format(format: str, data: bytes, name: str, log: ImportLog, *, doc: Any = None) -> Converted:
    """Convert a ``mini_swe_agent``, ``swe_agent`` or ``openai_messages`` source; ``doc`` is the
    whole document when format detection already parsed it (the same text, so the same value)."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if doc is None:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            if format != "openai_messages":
                raise _not_json(name, exc) from None
            doc = None
    info: dict[str, Any] = {}
    lines: list[int] = []
    if doc is None:  # JSON Lines of messages
        read = read_jsonl(data, name)
        log.problems.extend(read.problems)
        messages: Sequence[Any] = [r.value for r in read.records]
        lines = [r.line for r in read.records]
    elif isinstance(doc, list):
        messages = doc
        _locate_lazily(log, text, None, len(messages))
    elif isinstance(doc, Mapping) and format == "openai_messages" and isinstance(doc.get("role"), str):
        messages = [doc]  # JSON Lines holding a single message
        lines = [1]
    elif isinstance(doc, Mapping):
        key = "history" if format == "swe_agent" else "messages"
        raw = doc.get(key)
        messages = raw if isinstance(raw, list) else []
        if not isinstance(raw, list):
            log.problem(log.at(1), f"no '{key}' list in the document; nothing to import")
        _locate_lazily(log, text, key, len(messages))
        info = _info(format, doc, log)
    else:
        log.problem(log.at(1), "the document is neither a list of messages nor an object holding one")
        messages = []
    if len(lines) != len(messages):
        lines = []
    entries = _convert_messages(messages, lines, log, demo_source=format == "swe_agent")
    return Converted(format, tuple(entries), len(messages), info)


def _locate_lazily(log: ImportLog, text: str, key: str | None, count: int) -> None:
    """Problems at ``file:[index]`` name the line the message starts on, found when the first one is
    reported: finding the lines decodes every message once more (a tenth of a clean import)."""

    def lines() -> list[int]:
        found = array_element_lines(text, key)
        return found if len(found) == count else []

    log.locate_elements(lines)


def _not_json(name: str, exc: ValueError) -> Exception:
    from ..errors import SessionError

    where = f"{name}:{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else name
    return SessionError(f"{where}: not a valid JSON document ({exc}); a truncated JSON transcript cannot be "
                        f"imported")


def _info(format: str, doc: Mapping[str, Any], log: ImportLog) -> dict[str, Any]:
    info: dict[str, Any] = {}
    raw_info = object_or_empty(doc.get("info"))
    if isinstance(raw_info.get("model_stats"), Mapping):
        info["modelStats"] = dict(raw_info["model_stats"])
    for key, out in (("exit_status", "exitStatus"), ("mini_version", "miniVersion"), ("swe_agent_version",
                                                                                      "sweAgentVersion")):
        if isinstance(raw_info.get(key), str):
            info[out] = raw_info[key]
    for key, out in (("instance_id", "instanceId"), ("trajectory_format", "trajectoryFormat"),
                     ("environment", "environment")):
        if isinstance(doc.get(key), str):
            info[out] = doc[key]
    if format == "swe_agent" and isinstance(doc.get("trajectory"), list):
        log.skip("swe_agent_trajectory_steps", len(doc["trajectory"]))
    return info


def _convert_messages(messages: Sequence[Any], lines: Sequence[int], log: ImportLog, *,
                      demo_source: bool) -> list[Planned]:
    out: list[Planned] = []
    call_names: dict[str, str] = {}
    legacy_calls: list[tuple[str, str]] = []  # (synthetic id, function name) awaiting a "function" result
    for index, msg in enumerate(messages):
        where = log.at(lines[index]) if lines else log.at_element(index)
        if not (msg.__class__ is dict or isinstance(msg, Mapping)) or not isinstance(msg.get("role"), str):
            log.problem(where, "not a chat message (an object with a 'role'); skipped")
            log.skip("invalid_records")
            continue
        role: str = msg["role"]
        extra = object_or_empty(msg.get("extra"))
        ts_raw = msg.get("timestamp", extra.get("timestamp"))
        ts = iso_timestamp(ts_raw)
        if ts is None and ts_raw is not None:
            log.problem(where, f"timestamp {ts_raw!r} is not a date; the import time is used")
        if role in ("system", "developer"):
            text, _ = content_text(msg.get("content"), where, log)
            out.append(Planned("system", {"content": text, "role": role}, where, ts=ts))
        elif role == "user":
            text, images = content_text(msg.get("content"), where, log)
            source = "swe_agent_demonstration" if demo_source and msg.get("is_demo") else None
            out.append(Planned("message", user_data(text, images=images, source=source), where, ts=ts))
        elif role == "assistant":
            data = _assistant(msg, extra, index, where, log, call_names, legacy_calls)
            out.append(Planned("message", data, where, ts=ts))
        elif role in ("tool", "function"):
            out.append(Planned("message", _tool(msg, extra, where, log, call_names, legacy_calls), where, ts=ts))
        else:
            text, _ = content_text(msg.get("content"), where, log)
            kept = {k: v for k, v in extra.items() if not (k == "submission" and v == text)}
            if role != "exit":
                log.problem(where, f"unknown message role {role!r}; kept as imported_message, not model input")
            out.append(Planned("imported_message", {"role": role, "content": text, "extra": kept or None},
                               where, ts=ts))
    return out


def _assistant(msg: Mapping[str, Any], extra: Mapping[str, Any], index: int, where: str, log: ImportLog,
               call_names: dict[str, str], legacy_calls: list[tuple[str, str]]) -> dict[str, Any]:
    text, images = content_text(msg.get("content"), where, log)
    calls: list[dict[str, Any]] = []
    raw_calls = msg.get("tool_calls")
    for call in raw_calls if isinstance(raw_calls, list) else ():
        if call.__class__ is not dict and not isinstance(call, Mapping):
            log.problem(where, "a tool call is not an object; skipped")
            continue
        fn = object_or_empty(call.get("function"))
        call_id = str(call.get("id") or "")
        name = str(fn.get("name") or call.get("name") or "")
        if not call_id:
            log.problem(where, f"tool call {name!r} has no id; kept with an empty id")
        call_names[call_id] = name
        calls.append({"id": call_id, "name": name,
                      "arguments": parse_arguments(fn.get("arguments", call.get("arguments")), where, log,
                                                   call_id)})
    legacy = msg.get("function_call")
    if legacy is not None and isinstance(legacy, Mapping):
        call_id = f"fc_{index}"
        name = str(legacy.get("name") or "")
        legacy_calls.append((call_id, name))
        call_names[call_id] = name
        calls.append({"id": call_id, "name": name,
                      "arguments": parse_arguments(legacy.get("arguments"), where, log, call_id)})
    response = object_or_empty(extra.get("response"))
    usage = usage_json(msg.get("usage")) or usage_json(response.get("usage"))
    model = msg.get("model", response.get("model"))
    stop = msg.get("finish_reason")
    choices = response.get("choices")
    if stop is None and isinstance(choices, list) and choices:
        stop = object_or_empty(choices[0]).get("finish_reason")
    specific = msg.get("provider_specific_fields")
    thinking = msg.get("reasoning_content") or (specific.get("reasoning_content")
                                                if specific is not None and isinstance(specific, Mapping) else None)
    return assistant_data(text, calls, usage=usage, model=model if isinstance(model, str) else None,
                          stop_reason=stop if isinstance(stop, str) else None,
                          thinking=thinking if isinstance(thinking, str) else None, images=images)


def _tool(msg: Mapping[str, Any], extra: Mapping[str, Any], where: str, log: ImportLog,
          call_names: Mapping[str, str], legacy_calls: list[tuple[str, str]]) -> dict[str, Any]:
    text, images = content_text(msg.get("content"), where, log)
    call_id = msg.get("tool_call_id")
    ids = msg.get("tool_call_ids")
    if call_id is None and isinstance(ids, list) and ids:
        call_id = ids[0]
        if len(ids) > 1:
            log.problem(where, f"one tool result names {len(ids)} calls {ids!r}; paired with the first, "
                               f"its content is not split")
    if call_id is None and msg.get("role") == "function":
        name = str(msg.get("name") or "")
        match = next((c for c in legacy_calls if c[1] == name), None)
        if match is not None:
            legacy_calls.remove(match)
            call_id = match[0]
    if not isinstance(call_id, str):
        log.problem(where, "tool result names no call (no tool_call_id)")
        call_id = ""
    name = found if isinstance(found := msg.get("name"), str) else call_names.get(call_id, "")
    failed = bool(msg.get("is_error")) or bool(extra.get("exception_info")) or "exception" in extra
    return tool_data(call_id, name or "", text, is_error=failed, images=images, exit_code=extra.get("returncode"))
