"""Transcript entries: the values the session tree is made of, and their stored JSON form.

An :class:`Entry` is one line of a session file. Its common fields (``type``, ``id``,
``parentId``, ``ts``) are attributes; everything type-specific lives in ``data``, kept in exactly
the camelCase JSON form that goes on disk, so an entry of a type this version does not know
survives a round trip untouched.

Messages are provider-neutral: a ``message`` entry holds ``{"role": "user" | "assistant" |
"tool", ...}``. Providers translate to and from their wire formats; nothing here knows them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from os import urandom as _urandom
from types import MappingProxyType
from typing import Any

from .attachments import ImageAttachment
from .payloads import CheckpointData, ConfigData, LeafData

__all__ = [
    "MESSAGE_TYPES_FOR_MODEL",
    "MODEL_ROLES",
    "Entry",
    "ToolCall",
    "Usage",
    "assistant_message",
    "checkpoint",
    "config_change",
    "leaf_marker",
    "new_id",
    "now_iso",
    "tool_result",
    "user_message",
]

#: Entry types that carry model input. Everything else (leaf, checkpoint, config, unknown types
#: from a newer version) is kept in the transcript but never sent to the model.
MESSAGE_TYPES_FOR_MODEL = frozenset({"message"})


#: The roles of model input: an entry is model input when its role is one of these.
MODEL_ROLES = frozenset({"user", "assistant", "tool"})
#: Type names and roles are shared objects: every entry of a long session names one of a handful,
#: and a walk over a whole context compares or hashes them per entry; one object each stays in the
#: cache where a separate copy per line read would cost a miss per entry (and 56 bytes).
_shared = sys.intern
#: Message fields with few distinct values across a session (the role, which model and provider
#: answered, why it stopped, which tool a result is from): read from a file, each is shared.
_FEW_VALUED = ("role", "model", "provider", "stopReason", "name")
_NO_MESSAGE: Mapping[str, Any] = MappingProxyType({})


def _as_str(value: Any) -> str:
    return value if value.__class__ is str else str(value)


def new_id(prefix: str = "") -> str:
    """A fresh entry id: 64 random bits, hex, so 100k-entry sessions never collide in practice."""
    return prefix + _urandom(8).hex()  # what secrets.token_hex(8) does, without its two extra calls


def now_iso(moment: datetime | None = None) -> str:
    """UTC timestamp with milliseconds, the form every entry's ``ts`` uses."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation requested by the model.

    ``raw_arguments`` holds the model's own argument text when it was not a JSON object
    (``arguments`` is then empty): the call is answered with the parse error, and the model is
    shown its text as it wrote it, not a wrapper it never saw.
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.raw_arguments is not None:
            out["rawArguments"] = self.raw_arguments
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ToolCall:
        args = raw.get("arguments")
        text = raw.get("rawArguments")
        return cls(str(raw.get("id", "")), str(raw.get("name", "")), args if isinstance(args, dict) else {},
                   text if isinstance(text, str) else None)


@dataclass(frozen=True, slots=True)
class Usage:
    """Provider-reported token usage of one inference, normalized across providers.

    ``input`` excludes cached tokens; the prompt the provider saw is
    ``input + cache_read + cache_write`` (this is how pi and Anthropic report it; OpenAI-style
    providers report cached tokens inside ``prompt_tokens`` and are normalized on the way in).
    ``counted``: no provider reported it, SOBA counted it (the offline scripted model has no
    tokenizer of its own), so a budget built on it is an estimate, never ``provider_usage``.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    counted: bool = False

    @property
    def prompt_tokens(self) -> int:
        return self.input + self.cache_read + self.cache_write

    @property
    def reported(self) -> bool:
        """A provider reported a prompt size (not counted by SOBA, not zero)."""
        return not self.counted and self.prompt_tokens > 0

    def to_json(self) -> dict[str, int]:
        out = {"input": self.input, "output": self.output, "cacheRead": self.cache_read,
               "cacheWrite": self.cache_write}
        if self.counted:
            out["counted"] = True
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Usage | None:
        if not isinstance(raw, Mapping):
            return None

        def num(key: str) -> int:
            value = raw.get(key, 0)
            return int(value) if isinstance(value, int | float) and value >= 0 else 0

        return cls(num("input"), num("output"), num("cacheRead"), num("cacheWrite"), raw.get("counted") is True)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Entry:
    """One transcript line. ``data`` is the type-specific payload in its stored JSON form.

    An entry can be weakly referenced: a file store holds an old entry only while someone else
    does, and reads it back from its line after (:mod:`.store`).

    ``line`` is where the entry was read from (1-based, header is line 1); it is not stored and
    takes no part in equality, it only lets error messages point at the file.

    A message's role is read once, when the entry is made, and kept on the entry itself: the
    model input, the cut point and the budget ask it of every entry of a context, and reading it
    through ``data`` touched two more objects per entry, scattered over a long session's heap
    (``data`` is never changed in place once an entry exists).
    """

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    parent_id: str | None = None
    ts: str | None = None
    line: int | None = field(default=None, compare=False)
    #: the message's role (None for other entries), read once when the entry is made: a plain
    #: attribute, since every walk over a context asks it of every entry
    role: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = self.type
        if kind.__class__ is str:  # one shared object per type name, not one per line read
            kind = _shared(kind)
            object.__setattr__(self, "type", kind)
        role = None
        if kind == "message":
            msg = self.data.get("message")
            if msg.__class__ is dict or isinstance(msg, Mapping):
                found = msg.get("role")
                if found.__class__ is str:
                    role = _shared(found)
                elif isinstance(found, str):
                    role = found
        object.__setattr__(self, "role", role)

    # -- stored form -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "id": self.id, "parentId": self.parent_id, "ts": self.ts}
        out.update(self.data)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], line: int | None = None) -> Entry:
        data = dict(raw)
        kind = data.pop("type", None)
        eid = data.pop("id", None)
        parent = data.pop("parentId", None)
        ts = data.pop("ts", None)
        return cls(str(kind), data, eid, parent if isinstance(parent, str) else None, ts, line)

    @classmethod
    def from_parsed(cls, obj: dict[str, Any], line: int | None = None) -> Entry:
        """Like :meth:`from_json` for a dict just parsed from a line: takes it over instead of copying."""
        pop = obj.pop
        parent = pop("parentId", None)
        msg = obj.get("message")
        if msg.__class__ is dict:  # the message's few-valued fields: one shared object each (same value)
            for key in _FEW_VALUED:
                value = msg.get(key)
                if value.__class__ is str:
                    msg[key] = _shared(value)
        return cls(pop("type"), obj, pop("id", None), parent if parent.__class__ is str else None,
                   pop("ts", None), line)

    def with_ids(self, id: str, parent_id: str | None, ts: str) -> Entry:
        return Entry(self.type, self.data, id, parent_id, ts, self.line)

    # -- message accessors -------------------------------------------------------------------
    @property
    def message(self) -> Mapping[str, Any]:
        if self.type != "message":
            return _NO_MESSAGE
        msg = self.data.get("message")
        # exact-type check first: this sits on every hot path, and an ABC isinstance is slow
        return msg if msg.__class__ is dict or isinstance(msg, Mapping) else _NO_MESSAGE

    @property
    def text(self) -> str:
        content = self.message.get("content", "")
        return content if isinstance(content, str) else ""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        calls = self.message.get("toolCalls") or ()
        return tuple(ToolCall.from_json(c) for c in calls if isinstance(c, Mapping))

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        """The ids of :attr:`tool_calls`, read without building them (hot paths walk whole contexts)."""
        calls = self.message.get("toolCalls")
        if not calls:
            return ()
        # a list, not a generator: no frame per call (the cut point asks it of every reply in its window)
        return tuple([_as_str(c.get("id", "")) for c in calls if c.__class__ is dict or isinstance(c, Mapping)])

    @property
    def tool_call_id(self) -> str | None:
        value = self.message.get("toolCallId")
        return value if isinstance(value, str) else None

    @property
    def usage(self) -> Usage | None:
        return Usage.from_json(self.message.get("usage"))

    @property
    def is_model_input(self) -> bool:
        return self.role in MODEL_ROLES  # only a "message" entry has a role (MESSAGE_TYPES_FOR_MODEL)


def _message(**fields: Any) -> Entry:
    return Entry("message", {"message": {k: v for k, v in fields.items() if v is not None}})


def user_message(text: str, *, source: str | None = None) -> Entry:
    """A user turn. ``source`` marks where it came from (``"capsule_load"``, ``"queue"``…)."""
    return _message(role="user", content=text, source=source)


def assistant_message(text: str = "", tool_calls: Iterable[ToolCall] = (), *, usage: Usage | None = None,
                      model: str | None = None, provider: str | None = None, stop_reason: str | None = None,
                      thinking: str | None = None, context_key: str | None = None,
                      estimated_input: int | None = None, partial: bool = False, server: str | None = None) -> Entry:
    """An assistant reply. ``context_key`` identifies the model input it answered (the capsule
    in force and its first kept entry), so the budget knows whether ``usage`` still describes a
    prefix of the next request. ``estimated_input`` is what SOBA's budget check held that
    request's size to be (provider usage plus a calibrated estimate of what was appended since,
    or the calibrated estimate alone), kept beside the provider's count so it can be checked.
    ``partial`` marks the text a reply streamed before it was cancelled or broke off. ``server``:
    where the request went (``scheme://host[:port]``), which prices it (:mod:`soba_notebook.pricing`)."""
    calls = [c.to_json() for c in tool_calls] or None
    return _message(role="assistant", content=text, toolCalls=calls,
                    usage=usage.to_json() if usage else None, model=model, provider=provider,
                    stopReason=stop_reason, thinking=thinking or None, contextKey=context_key,
                    estimatedInput=estimated_input, partial=partial or None, server=server)


def tool_result(tool_call_id: str, name: str, content: str, *, is_error: bool = False,
                cancelled: bool = False, full_chars: int | None = None, exit_code: int | None = None,
                files_changed: Mapping[str, Any] | None = None,
                images: Iterable[ImageAttachment] = (), cell_runs: Mapping[str, Any] | None = None) -> Entry:
    """The result of one tool call. ``full_chars`` is set when ``content`` was truncated;
    ``exit_code`` is a command's recorded exit status; ``files_changed`` the workspace files the
    run was observed to create, modify or delete (:class:`~soba_notebook.compaction.file_changes.FileChanges`);
    ``images`` the figures it shows the model (stored as ``attachments``, :mod:`.attachments`);
    ``cell_runs`` the notebook cells a ``notebook_run`` ran (stored as ``cellRuns``)."""
    attachments = [a.to_json() for a in images] or None
    return _message(role="tool", toolCallId=tool_call_id, name=name, content=content,
                    isError=is_error or None, cancelled=cancelled or None, fullChars=full_chars,
                    exitCode=exit_code, filesChanged=dict(files_changed) if files_changed is not None else None,
                    attachments=attachments, cellRuns=dict(cell_runs) if cell_runs is not None else None)


def checkpoint(kind: str, note: str = "") -> Entry:
    """A milestone or plan_pivot marker; compaction reads it as an intent."""
    return Entry("checkpoint", CheckpointData(kind=kind, note=note))


def leaf_marker(target_id: str | None, reason: str = "rewind") -> Entry:
    """Moves the session leaf to ``target_id`` without touching any earlier line."""
    return Entry("leaf", LeafData(targetId=target_id, reason=reason))


def config_change(changes: Mapping[str, Any]) -> Entry:
    """Records a configuration change (``auto: false``, a model switch…) in the transcript."""
    return Entry("config", ConfigData(changes=dict(changes)))
