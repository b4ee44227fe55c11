"""Which agent wrote a transcript file: format detection from content, not from the file name.

This module owns the decision *which converter reads this file*. It looks at the shape of the
data (the first JSONL records, or the top-level keys of a JSON document); the file name is only a
tie-breaker between the two SWE-agent families. A file that matches nothing raises
:class:`~soba_notebook.errors.SessionError` naming the file and the formats that are understood,
so a wrong path fails loudly instead of producing an empty session.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SessionError
from .jsonl_reader import JsonlRead, read_jsonl

__all__ = ["FORMATS", "detect_format", "detect_format_and_document", "detect_format_and_parsed", "detect_format_of"]

#: Every format an importer exists for, in the spelling ``importedFrom.format`` records.
FORMATS = ("pi", "claude_code", "mini_swe_agent", "swe_agent", "openai_messages")

_HEAD_LINES = 64
_NON_SPACE = re.compile(rb"\S")  # what bytes.strip() strips is exactly what \S is not
_CLAUDE_CODE_TYPES = frozenset({"user", "assistant", "summary", "system"})
_PI_TYPES = frozenset({"model_change", "thinking_level_change", "compaction", "branch_summary", "custom_message"})
_PI_ROLES = frozenset({"toolResult", "bashExecution"})
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of the transcript at ``path``: one of :data:`FORMATS`.

    Raises :class:`SessionError` when the file cannot be read or matches no known format.
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise SessionError(f"{file}: no such transcript file") from None
    except IsADirectoryError:
        raise SessionError(f"{file}: is a directory, not a transcript file") from None
    except OSError as exc:
        raise SessionError(f"{file}: cannot read transcript ({exc.strerror})") from None
    return detect_format_of(data, str(file))


def detect_format_of(data: bytes, name: str) -> str:
    """Like :func:`detect_format`, for bytes already read (``name`` is used in messages)."""
    return detect_format_and_document(data, name)[0]


def detect_format_and_document(data: bytes, name: str) -> tuple[str, Any]:
    """Like :func:`detect_format_of`, also returning the whole JSON document when detection had to
    parse it (``None`` otherwise), so an import does not parse a ``.traj.json`` file a second time."""
    format, doc, _head = detect_format_and_parsed(data, name)
    return format, doc


def detect_format_and_parsed(data: bytes, name: str) -> tuple[str, Any, JsonlRead | None]:
    """Like :func:`detect_format_and_document`, also returning the JSON Lines head detection read
    (``None`` when it read none), so an import does not parse those lines a second time either."""
    stripped = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not stripped:
        raise SessionError(f"{name}: empty file; expected a transcript ({_expected()})")
    if stripped[:1] == b"[":
        doc = _load_document(data)
        if isinstance(doc, list) and _looks_like_chat(doc):
            return "openai_messages", doc, None
        raise SessionError(f"{name}: a JSON array, but not of chat messages (objects with a 'role'); "
                           f"expected a transcript ({_expected()})")
    doc = _load_document(data) if _may_be_document(stripped) else None
    if isinstance(doc, Mapping) and _is_document(doc):
        fmt = _document_format(doc, name)
        if fmt is not None:
            return fmt, doc, None
    head = read_jsonl(data, name, max_lines=_HEAD_LINES)
    records = [r.value for r in head.records if isinstance(r.value, Mapping)]
    if records and (doc is None or isinstance(doc, Mapping)):
        fmt = _jsonl_format(records[0], records)
        if fmt is not None:
            return fmt, doc, head
        if records[0].get("type") == "session" and records[0].get("producer") == "soba_notebook":
            raise SessionError(f"{name}: this is already a SOBA session; open it with SessionStore.open "
                               f"instead of importing it")
    if isinstance(doc, Mapping):
        shape = "a JSON object with keys " + ", ".join(sorted(map(str, doc))[:8])
    else:
        shape = "JSON Lines of unrecognized records" if records else "not JSON"
    raise SessionError(f"{name}: unknown transcript format ({shape}); expected {_expected()}")


def _expected() -> str:
    return ("pi session JSONL, Claude Code JSONL, mini-swe-agent .traj.json, SWE-agent .traj, "
            "or a JSON list of OpenAI chat messages")


def _load_document(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8", errors="replace").lstrip("\ufeff"))
    except ValueError:
        return None


def _may_be_document(stripped: bytes) -> bool:
    """False for JSON Lines (a complete first line followed by more), so big logs are not decoded
    whole just to find out they are not one document."""
    newline = stripped.find(b"\n")
    if newline < 0 or _NON_SPACE.search(stripped, newline + 1) is None:  # searched in place: no copy of the rest
        return True
    try:
        json.loads(stripped[:newline])
    except ValueError:
        return True
    return False


def _is_document(value: Mapping[str, Any]) -> bool:
    return isinstance(value.get("messages"), list) or isinstance(value.get("history"), list)


def _looks_like_chat(items: list[Any]) -> bool:
    dicts = [m for m in items if isinstance(m, Mapping)]
    return not items or (bool(dicts) and all(isinstance(m.get("role"), str) for m in dicts))


def _jsonl_format(first: Mapping[str, Any], records: list[Mapping[str, Any]]) -> str | None:
    if first.get("type") == "session" and first.get("producer") != "soba_notebook":
        return "pi"
    if any(_is_claude_code(r) for r in records):
        return "claude_code"
    if any(_is_pi_entry(r) for r in records):  # a pi file whose header line is damaged
        return "pi"
    if isinstance(first.get("role"), str) and first.get("role") in _CHAT_ROLES and "type" not in first:
        return "openai_messages"
    return None


def _is_claude_code(record: Mapping[str, Any]) -> bool:
    if record.get("type") not in _CLAUDE_CODE_TYPES:
        return False
    if record.get("type") == "summary":
        return "leafUuid" in record
    return "uuid" in record and ("parentUuid" in record or "sessionId" in record)


def _is_pi_entry(record: Mapping[str, Any]) -> bool:
    if record.get("type") in _PI_TYPES:
        return True
    msg = record.get("message")
    return record.get("type") == "message" and isinstance(msg, Mapping) and msg.get("role") in _PI_ROLES


def _document_format(doc: Mapping[str, Any], name: str) -> str | None:
    messages, history = doc.get("messages"), doc.get("history")
    if isinstance(history, list) and (isinstance(doc.get("trajectory"), list) or name.endswith(".traj")
                                      or _looks_like_chat(history)):
        return "swe_agent"
    if isinstance(messages, list):
        trajectory_format = str(doc.get("trajectory_format", ""))
        info = doc.get("info")
        if trajectory_format.startswith("mini-swe-agent") or name.endswith(".traj.json") or (
                isinstance(info, Mapping) and "mini_version" in info):
            return "mini_swe_agent"
        if _looks_like_chat(messages):
            return "openai_messages"
    return None
