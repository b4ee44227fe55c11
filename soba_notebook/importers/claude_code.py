"""Claude Code session JSONL → SOBA entries.

This module owns the meaning of Claude Code's records. Each line is one record with ``type``
``user`` / ``assistant`` / ``system`` / ``summary`` (plus bookkeeping types such as
``file-history-snapshot``), ``uuid`` / ``parentUuid`` (a tree: edits and retries branch it),
``timestamp`` and, for messages, an Anthropic-style ``message`` whose ``content`` is a string or a
list of blocks (``text``, ``thinking``, ``redacted_thinking``, ``tool_use``, ``tool_result``,
``image``).

Mapping (``→`` SOBA entry):

* ``uuid`` → entry id, ``parentUuid`` → parent: the tree is kept, the leaf is the last line of
  the main conversation (not a sidechain).
* Claude Code writes *one line per content block* of a streamed response; consecutive assistant
  lines with the same ``message.id`` that chain parent → child are merged into one assistant
  ``message`` (the response the provider actually produced), so its usage is counted once and
  parallel tool calls sit on one message. The merged uuids stay addressable as aliases and are
  listed in ``imported.sourceIds``.
* ``message.usage`` ``input_tokens / output_tokens / cache_read_input_tokens /
  cache_creation_input_tokens`` → ``usage`` ``input / output / cacheRead / cacheWrite``.
* A user line whose content holds ``tool_result`` blocks → one tool-result ``message`` per block
  (chained in order; children of the line hang under the last one), then one user ``message``
  for any remaining text or images. ``toolUseResult`` (UI data) is not copied (``skipped``).
* ``isCompactSummary`` / ``isMeta`` user lines → user ``message`` with ``source``
  ``claude_code_compact_summary`` / ``claude_code_meta`` (Claude Code sends both to the model).
* ``system`` lines → ``system`` entries (kept, not model input); a ``compact_boundary`` → an
  ``imported_compaction`` placed under its ``logicalParentUuid``, so the history before the
  compaction stays on the path.
* ``summary`` lines (session titles) → ``imported_summary``; unknown line types →
  ``imported_<type>``; unknown content block types → reported, kept as ``[type]`` placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

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
from .jsonl_reader import JsonlRead, read_jsonl

__all__ = ["convert_claude_code"]

_RESERVED = frozenset({"type", "id", "parentId", "ts", "timestamp"})
_INFO_KEYS = {"sessionId": "sessionId", "cwd": "cwd", "version": "claudeCodeVersion", "gitBranch": "gitBranch"}


@dataclass(slots=True)
class _Assistant:
    """An assistant response being assembled from one or more consecutive lines."""

    where: str
    uuids: list[str]
    parent: str | None
    sidechain: bool
    message_id: str | None
    ts: str | None
    texts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    images: int = 0
    usage: dict[str, Any] | None = None
    model: str | None = None
    stop_reason: str | None = None
    api_error: bool = False

    def continues(self, line: Mapping[str, Any]) -> bool:
        msg = object_or_empty(line.get("message"))
        return (self.message_id is not None and msg.get("id") == self.message_id and bool(self.uuids)
                and line.get("parentUuid") == self.uuids[-1] and bool(line.get("isSidechain")) == self.sidechain)


def convert_claude_code(data: bytes, name: str, log: ImportLog, *, head: JsonlRead | None = None) -> Converted:
    """Convert the bytes of a Claude Code session file; problems and skips go to ``log``."""
    read = read_jsonl(data, name, head=head)  # head: the lines format detection parsed
    log.problems.extend(read.problems)
    planned: list[Planned] = []
    call_names: dict[str, str] = {}
    info: dict[str, Any] = {}
    info_missing = dict(_INFO_KEYS)
    session_ids: list[str] = []
    seen_sessions: set[str] = set()
    pending: _Assistant | None = None
    messages = 0

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            planned.append(_finish(pending))
            pending = None

    for record in read.records:
        value = record.value
        where = log.at(record.where)
        if not (value.__class__ is dict or isinstance(value, Mapping)) or not isinstance(value.get("type"), str):
            log.problem(where, "not a Claude Code record (a JSON object with a 'type'); skipped")
            log.skip("invalid_records")
            continue
        kind: str = value["type"]
        if info_missing:  # each header value from the first record that has it
            for key, out in tuple(info_missing.items()):
                if isinstance(value.get(key), str):
                    info[out] = value[key]
                    del info_missing[key]
        sid = value.get("sessionId")
        if isinstance(sid, str) and sid not in seen_sessions:  # a set: a resumed session has several
            seen_sessions.add(sid)
            session_ids.append(sid)
        if kind == "assistant":
            messages += 1
            if pending is not None and pending.continues(value):
                _add_assistant_line(pending, value, where, log, call_names)
                continue
            flush()
            pending = _start_assistant(value, where, log, call_names)
            continue
        flush()
        if kind == "user":
            messages += 1
            planned.extend(_user(value, where, log, call_names))
        elif kind == "system":
            planned.append(_system(value, where))
        elif kind == "summary":
            planned.append(Planned("imported_summary", {"summary": value.get("summary"),
                                                        "leafUuid": value.get("leafUuid")},
                                   where, leaf_candidate=False))
        else:
            entry_type = "imported_" + (re.sub(r"[^A-Za-z0-9_-]", "_", kind) or "record")
            log.problem_once(f"type:{kind}", where, f"Claude Code record type {kind!r} is not conversation; "
                                                    f"kept as {entry_type} entries, not model input")
            planned.append(_planned(entry_type, {k: v for k, v in value.items() if k not in _RESERVED}, where,
                                    _place(value), leaf_candidate=False))
    flush()
    if len(session_ids) > 1:
        info["sessionIds"] = session_ids
    return Converted("claude_code", tuple(planned), messages, info)


class _Place(NamedTuple):
    """Where a record goes in the tree: the ``ref``/``parent``/``tree``/``ts`` of its Planned entry."""

    ref: str | None
    parent: str | None
    tree: bool
    ts: str | None


def _planned(kind: str, data: Mapping[str, Any], where: str, place: _Place, *, aliases: tuple[str, ...] = (),
             leaf_candidate: bool = True) -> Planned:
    return Planned(kind, data, where, place.ref, True, aliases, place.parent, place.tree, place.ts, leaf_candidate)


def _place(value: Mapping[str, Any]) -> _Place:
    """Where ``value`` (a record) goes in the tree."""
    uuid = found if isinstance(found := value.get("uuid"), str) and found else None
    parent = found if isinstance(found := value.get("parentUuid"), str) else None
    if parent is None and isinstance(value.get("logicalParentUuid"), str):
        parent = value["logicalParentUuid"]  # a compact boundary: logically continues its parent
    # A sidechain (sub-agent) root hangs under whatever came before it, as its own branch.
    tree = uuid is not None and not (parent is None and bool(value.get("isSidechain")))
    return _Place(uuid, parent, tree, iso_timestamp(value.get("timestamp")))


def _start_assistant(value: Mapping[str, Any], where: str, log: ImportLog,
                     call_names: dict[str, str]) -> _Assistant:
    place = _place(value)
    msg = object_or_empty(value.get("message"))
    draft = _Assistant(where, [place.ref] if place.ref else [], place.parent if place.tree else None,
                       bool(value.get("isSidechain")), msg.get("id") if isinstance(msg.get("id"), str) else None,
                       place.ts)
    _blocks_into(draft, msg, where, log, call_names)
    draft.api_error = bool(value.get("isApiErrorMessage"))
    return draft


def _add_assistant_line(draft: _Assistant, value: Mapping[str, Any], where: str, log: ImportLog,
                        call_names: dict[str, str]) -> None:
    if isinstance(value.get("uuid"), str):
        draft.uuids.append(value["uuid"])
    msg = object_or_empty(value.get("message"))
    _blocks_into(draft, msg, where, log, call_names)


def _blocks_into(draft: _Assistant, msg: Mapping[str, Any], where: str, log: ImportLog,
                 call_names: dict[str, str]) -> None:
    content = msg.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for block in blocks if isinstance(blocks, list) else ():
        if block.__class__ is not dict and not isinstance(block, Mapping):
            log.problem(where, "assistant content block is not an object; skipped")
            continue
        kind = block.get("type")
        if kind == "text":
            draft.texts.append(str(block.get("text") or ""))
        elif kind == "thinking":
            draft.thinking.append(str(block.get("thinking") or ""))
        elif kind == "redacted_thinking":
            draft.thinking.append("[redacted thinking]")
        elif kind == "tool_use":
            call_id = str(block.get("id") or "")
            name = str(block.get("name") or "")
            call_names[call_id] = name
            draft.calls.append({"id": call_id, "name": name,
                                "arguments": parse_arguments(block.get("input"), where, log, call_id)})
        elif kind == "image":
            draft.images += 1
            draft.texts.append(IMAGE_PLACEHOLDER)
            log.skip("image_data")
        else:
            draft.texts.append(unknown_block(block, where, log))
    usage = usage_json(msg.get("usage"))
    if usage is not None:
        draft.usage = usage  # split lines repeat the usage; the last one is the most complete
    if isinstance(msg.get("model"), str):
        draft.model = msg["model"]
    if isinstance(msg.get("stop_reason"), str):
        draft.stop_reason = msg["stop_reason"]


def _finish(draft: _Assistant) -> Planned:
    provider = "anthropic" if draft.model and not draft.model.startswith("<") else None
    imported: dict[str, Any] = {"sourceIds": draft.uuids if len(draft.uuids) > 1 else None,
                                "sidechain": True if draft.sidechain else None,
                                "apiError": True if draft.api_error else None}
    data = assistant_data("\n".join(draft.texts), draft.calls, usage=draft.usage, model=draft.model,
                          provider=provider, stop_reason=draft.stop_reason, thinking="\n".join(draft.thinking),
                          images=draft.images, imported=imported)
    ref = draft.uuids[0] if draft.uuids else None
    tree = ref is not None and not (draft.parent is None and draft.sidechain)
    return Planned("message", data, draft.where, ref, True, tuple(draft.uuids[1:]), draft.parent, tree, draft.ts,
                   not draft.sidechain)


def _user(value: Mapping[str, Any], where: str, log: ImportLog, call_names: Mapping[str, str]) -> list[Planned]:
    place = _place(value)
    sidechain = bool(value.get("isSidechain"))
    msg = object_or_empty(value.get("message"))
    content = msg.get("content")
    source = ("claude_code_compact_summary" if value.get("isCompactSummary")
              else "claude_code_meta" if value.get("isMeta") else None)
    imported = {"sidechain": True} if sidechain else None
    if value.get("toolUseResult") is not None:
        log.skip("tool_use_result_details")
    datas: list[dict[str, Any]] = []
    rest: list[Any] = []
    if isinstance(content, list):
        for block in content:
            if (block.__class__ is dict or isinstance(block, Mapping)) and block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id") or "")
                text, images = content_text(block.get("content"), where, log)
                datas.append(tool_data(call_id, call_names.get(call_id, ""), text,
                                       is_error=bool(block.get("is_error")), images=images, imported=imported))
            else:
                rest.append(block)
    if not datas or rest or not isinstance(content, list):
        text, images = content_text(rest if isinstance(content, list) else content, where, log)
        datas.append(user_data(text, images=images, source=source, imported=imported))
    out: list[Planned] = []
    uuid = place.ref
    for k, data in enumerate(datas):
        last = k == len(datas) - 1
        aliases = (uuid,) if last and uuid is not None and k > 0 else ()
        if k == 0:
            out.append(_planned("message", data, where, place, aliases=aliases, leaf_candidate=not sidechain))
        else:  # blocks of one line: chained after the first, in order
            ref = f"{uuid}:{k}" if uuid is not None else None
            out.append(Planned("message", data, where, ref=ref, aliases=aliases, ts=place.ts,
                               leaf_candidate=not sidechain))
    return out


def _system(value: Mapping[str, Any], where: str) -> Planned:
    place = _place(value)
    leaf = not value.get("isSidechain")
    if value.get("subtype") == "compact_boundary":
        meta = object_or_empty(value.get("compactMetadata"))
        data = {"source": "claude_code", "content": value.get("content"), "trigger": meta.get("trigger"),
                "tokensBefore": meta.get("preTokens")}
        return _planned("imported_compaction", {k: v for k, v in data.items() if v is not None}, where, place,
                        leaf_candidate=leaf)
    content = value.get("content")
    data = {"content": content if isinstance(content, str) else "", "source": "claude_code",
            "subtype": value.get("subtype"), "level": value.get("level")}
    return _planned("system", {k: v for k, v in data.items() if v is not None}, where, place, leaf_candidate=leaf)
