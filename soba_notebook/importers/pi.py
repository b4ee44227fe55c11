"""pi session JSONL (badlogic/pi-mono coding agent) → SOBA entries.

This module owns the meaning of pi's records. A pi session file is a header line
``{"type": "session", "id", "timestamp", "cwd", "version"?}`` followed by one entry per line.
Version 1 files have no ids (the entries form a list, chained here in file order); version 2+
entries carry ``id`` / ``parentId`` (a tree, kept as it is: pi's ids become SOBA ids).

Mapping (``→`` SOBA entry):

* ``message`` with role ``user`` / ``assistant`` / ``toolResult`` → ``message`` in neutral form.
  Assistant ``text`` blocks are joined with newlines, ``thinking`` blocks go to ``thinking``,
  ``toolCall`` blocks to ``toolCalls``; ``usage`` (``input/output/cacheRead/cacheWrite``, and
  ``cost``), ``model``, ``provider``, ``stopReason`` are kept, ``errorMessage`` goes to
  ``imported.errorMessage``. A tool result's UI-only ``details`` (diffs) are not copied (counted in
  ``skipped``).
* Roles pi itself turns into user input before calling the model (``bashExecution``, ``custom`` /
  ``hookMessage``, ``branchSummary``, ``compactionSummary``) and the ``custom_message`` and
  ``branch_summary`` entry types → a user ``message`` marked with ``source: "pi_…"``. A
  ``bashExecution`` pi excluded from the context (``!!``) → ``imported_bash_execution``.
* ``compaction`` (``summary``, ``firstKeptEntryId`` or v1's ``firstKeptEntryIndex``,
  ``tokensBefore``) → ``imported_compaction``, kept but not model input: pi's summary is free text,
  not a SOBA capsule, so it cannot stand in for one.
* ``model_change``, ``thinking_level_change``, ``session_info`` → ``config`` entries
  (``{"changes": {"provider", "model"} | {"thinkingLevel"} | {"sessionName"}}``).
* ``label``, ``custom`` and any unknown type → ``imported_<type>`` with the record's fields.

The entry ``timestamp`` (ISO) becomes ``ts``; when absent, the message's epoch-milliseconds
``timestamp`` is used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._common import (
    IMAGE_PLACEHOLDER,
    Converted,
    ImportLog,
    Planned,
    assistant_data,
    content_text,
    iso_timestamp,
    object_or_empty,
    parse_arguments,
    tool_data,
    unknown_block,
    usage_json,
    user_data,
)
from .jsonl_reader import JsonlRead, JsonRecord, read_jsonl

__all__ = ["convert_pi"]

_RESERVED = frozenset({"type", "id", "parentId", "ts", "timestamp"})
_HEADER_INFO = {"id": "sessionId", "timestamp": "created", "cwd": "cwd", "version": "version",
                "provider": "provider", "modelId": "modelId", "thinkingLevel": "thinkingLevel",
                "parentSession": "parentSession"}


def convert_pi(data: bytes, name: str, log: ImportLog, *, head: JsonlRead | None = None) -> Converted:
    """Convert the bytes of a pi session file; problems and skips go to ``log``."""
    read = read_jsonl(data, name, head=head)  # head: the lines format detection parsed
    log.problems.extend(read.problems)
    records = list(read.records)
    info: dict[str, Any] = {}
    if records and isinstance(records[0].value, Mapping) and records[0].value.get("type") == "session":
        header = records.pop(0).value
        info = {out: header[key] for key, out in _HEADER_INFO.items() if key in header}
    else:
        log.problem(log.at(records[0].line if records else 1),
                    "no pi session header (a first line with type 'session'); entries imported anyway")
    # v1 compactions point at their first kept entry by index into pi's list (header = index 0).
    refs_by_index: dict[int, str] = {}
    planned: list[Planned] = []
    messages = 0
    for index, record in enumerate(records, start=1):
        item = _convert_record(record, log, refs_by_index)
        if item is None:
            continue
        refs_by_index[index] = item.ref or ""
        planned.append(item)
        if record.value["type"] == "message":  # a converted record is an object with a 'type'
            messages += 1
    return Converted("pi", tuple(planned), messages, info)


def _convert_record(record: JsonRecord, log: ImportLog, refs_by_index: Mapping[int, str]) -> Planned | None:
    value = record.value
    where = log.at(record.where)
    # exact-type checks first: they run for every record, and an ABC isinstance is slow
    if not (value.__class__ is dict or isinstance(value, Mapping)) or not isinstance(value.get("type"), str):
        log.problem(where, "not a pi entry (a JSON object with a 'type'); skipped")
        log.skip("invalid_records")
        return None
    kind: str = value["type"]
    own_id = found if isinstance(found := value.get("id"), str) and found else None
    parent = found if isinstance(found := value.get("parentId"), str) else None
    raw_ts = value.get("timestamp")
    ts = iso_timestamp(raw_ts)
    if ts is None and raw_ts is not None:
        log.problem(where, f"timestamp {raw_ts!r} is not a date; the import time is used")
    ref = own_id or f"#{record.line}.{record.part}"
    keep = own_id is not None

    def planned(entry_type: str, data: Mapping[str, Any], id_refs: tuple[str, ...] = ()) -> Planned:
        return Planned(entry_type, data, where, ref, keep, (), parent, keep, ts, True, id_refs)

    if kind == "message":
        msg = value.get("message")
        if not (msg.__class__ is dict or isinstance(msg, Mapping)):
            log.problem(where, "message entry without a 'message' object; kept as imported_message")
            return planned("imported_message", _fields(value))
        if ts is None:
            ts = iso_timestamp(msg.get("timestamp"))
        entry_type, data = _message(msg, where, log)
        return planned(entry_type, data)
    if kind == "model_change":
        changes = {"provider": value.get("provider"), "model": value.get("modelId")}
        return planned("config", _config(changes, kind))
    if kind == "thinking_level_change":
        return planned("config", _config({"thinkingLevel": value.get("thinkingLevel")}, kind))
    if kind == "session_info":
        return planned("config", _config({"sessionName": value.get("name")}, kind))
    if kind == "compaction":
        data = {"source": "pi", "summary": value.get("summary"), "tokensBefore": value.get("tokensBefore")}
        first_kept = value.get("firstKeptEntryId")
        index = value.get("firstKeptEntryIndex")
        if not isinstance(first_kept, str) and isinstance(index, int) and not isinstance(index, bool):
            first_kept = refs_by_index.get(index)
            if first_kept is None:
                log.problem(where, f"compaction's firstKeptEntryIndex {index} points at no entry")
        data["firstKeptEntryId"] = first_kept
        for key in ("details", "fromHook"):
            if key in value:
                data[key] = value[key]
        return planned("imported_compaction", data, ("firstKeptEntryId",))
    if kind == "branch_summary":
        text = found if isinstance(found := value.get("summary"), str) else ""
        return planned("message", user_data(text, source="pi_branch_summary",
                                            imported={"fromId": value.get("fromId")}))
    if kind == "custom_message":
        text, images = content_text(value.get("content"), where, log)
        return planned("message", user_data(text, images=images,
                                            source=f"pi_custom_message:{value.get('customType', '')}"))
    if kind == "label":
        return planned("imported_label", _fields(value), ("targetId",))
    if kind != "custom":
        log.problem_once(f"type:{kind}", where, f"unknown pi entry type {kind!r}; kept as "
                                                f"{_entry_type(kind)} entries, not model input")
    return planned(_entry_type(kind), _fields(value))


def _entry_type(kind: str) -> str:
    return "imported_" + (re.sub(r"[^A-Za-z0-9_-]", "_", kind) or "record")


def _fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """A record's own fields, minus those an Entry stores itself."""
    return {k: v for k, v in value.items() if k not in _RESERVED}


def _config(changes: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {"changes": {k: v for k, v in changes.items() if v is not None}, "imported": {"sourceType": kind}}


def _message(msg: Mapping[str, Any], where: str, log: ImportLog) -> tuple[str, dict[str, Any]]:
    role = msg.get("role")
    if role == "user":
        text, images = content_text(msg.get("content"), where, log)
        return "message", user_data(text, images=images)
    if role == "assistant":
        return "message", _assistant(msg, where, log)
    if role == "toolResult":
        text, images = content_text(msg.get("content"), where, log)
        if msg.get("details"):
            log.skip("tool_result_details")
        call_id = msg.get("toolCallId")
        if not isinstance(call_id, str):
            log.problem(where, "tool result without a toolCallId")
            call_id = ""
        details = object_or_empty(msg.get("details"))
        return "message", tool_data(call_id, str(msg.get("toolName") or ""), text,
                                    is_error=bool(msg.get("isError")), images=images,
                                    exit_code=details.get("exitCode"),
                                    status_recorded=isinstance(msg.get("isError"), bool))
    if role == "bashExecution":
        if msg.get("excludeFromContext"):
            return "imported_bash_execution", {k: msg.get(k) for k in
                                               ("command", "output", "exitCode", "cancelled", "truncated")}
        return "message", user_data(_bash_text(msg), source="pi_bash_execution")
    if role in ("custom", "hookMessage"):
        text, images = content_text(msg.get("content"), where, log)
        return "message", user_data(text, images=images, source=f"pi_custom:{msg.get('customType', '')}")
    if role in ("branchSummary", "compactionSummary"):
        summary = found if isinstance(found := msg.get("summary"), str) else ""
        source = "pi_branch_summary" if role == "branchSummary" else "pi_compaction_summary"
        return "message", user_data(summary, source=source)
    log.problem(where, f"unknown pi message role {role!r}; kept as imported_message, not model input")
    text, _ = content_text(msg.get("content"), where, log)
    return "imported_message", {"role": role, "content": text}


def _assistant(msg: Mapping[str, Any], where: str, log: ImportLog) -> dict[str, Any]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    images = 0
    content = msg.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for block in blocks if isinstance(blocks, list) else ():
        kind = block.get("type") if block.__class__ is dict or isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking") or ""))
        elif kind == "toolCall":
            call_id = str(block.get("id") or "")
            calls.append({"id": call_id, "name": str(block.get("name") or ""),
                          "arguments": parse_arguments(block.get("arguments"), where, log, call_id)})
        elif kind == "image":
            images += 1
            texts.append(IMAGE_PLACEHOLDER)
            log.skip("image_data")
        elif isinstance(block, Mapping):
            texts.append(unknown_block(block, where, log))
        else:
            log.problem(where, "assistant content block is not an object; skipped")
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    provider = msg.get("provider") if isinstance(msg.get("provider"), str) else None
    stop = msg.get("stopReason") if isinstance(msg.get("stopReason"), str) else None
    return assistant_data("\n".join(texts), calls, usage=usage_json(msg.get("usage")), model=model,
                          provider=provider, stop_reason=stop, thinking="\n".join(thinking), images=images,
                          imported={"errorMessage": msg.get("errorMessage")})


def _bash_text(msg: Mapping[str, Any]) -> str:
    text = f"$ {msg.get('command', '')}\n{msg.get('output') or '(no output)'}"
    if msg.get("cancelled"):
        text += "\n(command cancelled)"
    elif isinstance(msg.get("exitCode"), int) and msg.get("exitCode") != 0:
        text += f"\n(exit code {msg.get('exitCode')})"
    return text
