"""Importers: transcripts recorded by other coding agents, turned into new SOBA sessions.

This package owns the step *foreign transcript file → new SOBA session file*. The public entry
points are :func:`import_transcript` and :func:`import_transcript_with_report`; format modules
(:mod:`.pi`, :mod:`.claude_code`, :mod:`.openai_messages`) convert a source into a list of
:class:`Planned` entries, and this module writes them through :meth:`SessionStore.append`, so an
imported session obeys every rule of a native one (append-only, one line per entry, a tree with
a leaf). The source file is only ever read; its sha256 goes into the session header as
``importedFrom`` so an import can be traced and repeated.

What an import promises:

* Every source message becomes one ``message`` entry in SOBA's neutral form (user / assistant
  with ``toolCalls``, ``usage``, ``model``, ``provider``, ``stopReason``, ``thinking`` / tool
  with ``toolCallId``, ``name``, ``isError``); content blocks are joined into one string, images
  become ``"images": n`` plus an ``[image]`` placeholder. Records that are not model input (system
  prompts, compactions, configuration changes, unknown record types) are kept as entries of their
  own type, never dropped.
* Ids and the parent tree are kept when the source has them; sources without ids are chained in
  file order. The leaf is the source's last conversation entry.
* Nothing is invented: a tool result whose call is missing, or a call that never got a result,
  is kept as it is and listed in :attr:`ImportReport.problems`, with ``file:line`` of the entry.

The building blocks the format modules share (:class:`ImportLog`, :class:`Planned`,
:class:`Converted` and the small value normalizers) live here too, because they are the contract
between the converters and the writer; the converters are imported lazily, so importing this
package stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import SessionError
from ..session.entries import Entry, new_id, now_iso
from ..session.store import SessionStore
from .detect import FORMATS, detect_format, detect_format_of

__all__ = [
    "FORMATS",
    "IMAGE_PLACEHOLDER",
    "Converted",
    "ImportLog",
    "ImportReport",
    "Planned",
    "assistant_data",
    "content_text",
    "detect_format",
    "import_transcript",
    "import_transcript_with_report",
    "iso_timestamp",
    "parse_arguments",
    "tool_data",
    "unknown_block",
    "usage_json",
    "user_data",
]

#: Placeholder text standing in for an image block (the image itself is counted in ``images``).
IMAGE_PLACEHOLDER = "[image]"

_TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
_IMAGE_BLOCKS = frozenset({"image", "image_url", "input_image"})


# -- the report ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one import did: counts, and every problem with the ``file:line`` it concerns.

    ``skipped`` counts source data that was read but deliberately not written, by kind (image
    bytes, UI-only tool details, SWE-agent ``trajectory`` steps that duplicate ``history``…);
    ``problems`` lists what was wrong or had to be repaired. ``unpaired_tool_calls`` and
    ``orphan_tool_results`` are measured on the written session tree.
    """

    format: str
    source: Path
    session: Path
    sha256: str
    entries_written: int
    source_messages: int
    message_entries: int
    tool_calls: int
    tool_results: int
    unpaired_tool_calls: int
    orphan_tool_results: int
    problems: tuple[str, ...]
    skipped: Mapping[str, int]
    seconds: float

    @property
    def tool_pairs_intact(self) -> bool:
        return self.unpaired_tool_calls == 0 and self.orphan_tool_results == 0

    def summary(self) -> str:
        """One line for a notebook or a log."""
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "nothing"
        return (f"imported {self.source.name} ({self.format}) -> {self.session.name}: "
                f"{self.entries_written} entries ({self.message_entries} messages from "
                f"{self.source_messages} source messages), {self.tool_calls} tool calls / "
                f"{self.tool_results} results ({self.unpaired_tool_calls} calls without a result, "
                f"{self.orphan_tool_results} results without a call), {len(self.problems)} problems, "
                f"skipped: {skipped}; {self.seconds * 1000:.0f} ms")


# -- the contract between converters and the writer ---------------------------------------------
@dataclass
class ImportLog:
    """Collects problems (``file:line: what``) and skip counts while one source is converted."""

    name: str
    problems: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    _seen: set[str] = field(default_factory=set, repr=False)

    def at(self, line: int | str) -> str:
        """The ``file:line`` prefix for a location in the source."""
        return f"{self.name}:{line}"

    def problem(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def problem_once(self, key: str, where: str, what: str) -> None:
        """Report ``what`` only the first time ``key`` is seen (repetitive facts, e.g. a record type)."""
        if key not in self._seen:
            self._seen.add(key)
            self.problem(where, what)

    def skip(self, kind: str, n: int = 1) -> None:
        if n:
            self.skipped[kind] += n


@dataclass(frozen=True, slots=True)
class Planned:
    """One entry a converter wants written, with its place in the source tree.

    ``ref`` is the entry's id in the source (or a synthetic unique reference); it becomes the SOBA
    id when ``keep_id``. ``aliases`` are further source ids that must resolve to this entry (lines
    merged into it, or split out of one line). With ``tree`` the entry is placed under the entry
    ``parent`` refers to (``None``: a root in the source); without it, under the previously
    written entry. ``id_refs`` names keys of ``data`` that hold source ids to translate.
    ``leaf_candidate`` marks entries of the main conversation: the last one becomes the leaf.
    """

    type: str
    data: Mapping[str, Any]
    where: str
    ref: str | None = None
    keep_id: bool = True
    aliases: tuple[str, ...] = ()
    parent: str | None = None
    tree: bool = False
    ts: str | None = None
    leaf_candidate: bool = True
    id_refs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Converted:
    """A converter's result: the entries to write, the source's message count, header info."""

    format: str
    entries: tuple[Planned, ...]
    source_messages: int
    info: Mapping[str, Any] = field(default_factory=dict)


# -- value normalizers shared by the converters -------------------------------------------------
def iso_timestamp(value: Any) -> str | None:
    """``value`` (ISO-8601 text, or epoch seconds / milliseconds, number or numeric text) as the
    ``YYYY-MM-DDTHH:MM:SS.mmmZ`` UTC form every SOBA ``ts`` uses; ``None`` when it is neither."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            number = float(text)
        except ValueError:
            return _iso_from_text(text)
        value = number
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            return None
        seconds = value / 1000.0 if value >= 1e11 else float(value)  # >= 1e11: milliseconds
        try:
            return now_iso(datetime.fromtimestamp(seconds, UTC))
        except (OverflowError, OSError, ValueError):
            return None
    return None


def _iso_from_text(text: str) -> str | None:
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return now_iso(moment.astimezone(UTC))


def parse_arguments(raw: Any, where: str, log: ImportLog, call_id: str = "") -> dict[str, Any]:
    """Tool-call arguments as a dict: JSON text is parsed; what cannot be becomes ``{"_raw": ...}``
    and is reported."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            log.problem(where, f"arguments of tool call {call_id!r} are not valid JSON (column {exc.pos + 1}: "
                               f"{exc.msg}); kept as {{\"_raw\": ...}}")
            return {"_raw": raw}
        if isinstance(parsed, Mapping):
            return dict(parsed)
        log.problem(where, f"arguments of tool call {call_id!r} are JSON but not an object; kept as "
                           f"{{\"_raw\": ...}}")
        return {"_raw": raw}
    log.problem(where, f"arguments of tool call {call_id!r} are a {type(raw).__name__}, not an object; "
                       f"kept as {{\"_raw\": ...}}")
    return {"_raw": str(raw)}


def content_text(content: Any, where: str, log: ImportLog, *, joiner: str = "\n") -> tuple[str, int]:
    """Flatten message content (a string, or a list of text / image blocks) to ``(text, images)``.

    Images become :data:`IMAGE_PLACEHOLDER` in the text and are counted (their bytes are not
    kept: ``skipped["image_data"]``). A block of any other type is reported and kept as a
    ``[type]`` placeholder, so the position of the unknown data stays visible.
    """
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list):
        log.problem(where, f"message content is a {type(content).__name__}; kept as its text form")
        return str(content), 0
    parts: list[str] = []
    images = 0
    for block in content:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, Mapping):
            log.problem(where, f"content block is a {type(block).__name__}, not an object; kept as text")
            parts.append(str(block))
            continue
        kind = block.get("type")
        if kind in _TEXT_BLOCKS or (kind is None and isinstance(block.get("text"), str)):
            text = block.get("text")
            parts.append(text if isinstance(text, str) else str(text or ""))
        elif kind in _IMAGE_BLOCKS:
            images += 1
            parts.append(IMAGE_PLACEHOLDER)
            log.skip("image_data")
        else:
            parts.append(unknown_block(block, where, log))
    return joiner.join(parts), images


def unknown_block(block: Mapping[str, Any], where: str, log: ImportLog) -> str:
    """Report a content block of an unknown type; return the placeholder that keeps its place."""
    kind = str(block.get("type", "untyped"))
    log.problem(where, f"unknown content block type {kind!r}; kept as a '[{kind}]' text placeholder")
    return f"[{kind}]"


def _count(raw: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def usage_json(raw: Any) -> dict[str, Any] | None:
    """Provider usage in SOBA's form ``{input, output, cacheRead, cacheWrite}``, from pi
    (``input/output/cacheRead/cacheWrite``, ``cost`` kept), Anthropic (``input_tokens`` …
    ``cache_creation_input_tokens``) or OpenAI-style (``prompt_tokens`` including cached tokens,
    ``completion_tokens``) usage; ``None`` when ``raw`` is not usage."""
    if not isinstance(raw, Mapping):
        return None
    if any(k in raw for k in ("input", "output", "cacheRead", "cacheWrite")):
        out: dict[str, Any] = {"input": _count(raw, "input") or 0, "output": _count(raw, "output") or 0,
                               "cacheRead": _count(raw, "cacheRead") or 0,
                               "cacheWrite": _count(raw, "cacheWrite") or 0}
        if isinstance(raw.get("cost"), Mapping):
            out["cost"] = dict(raw["cost"])
        return out
    if any(k in raw for k in ("input_tokens", "output_tokens")):
        return {"input": _count(raw, "input_tokens") or 0, "output": _count(raw, "output_tokens") or 0,
                "cacheRead": _count(raw, "cache_read_input_tokens") or 0,
                "cacheWrite": _count(raw, "cache_creation_input_tokens") or 0}
    if any(k in raw for k in ("prompt_tokens", "completion_tokens")):
        prompt = _count(raw, "prompt_tokens") or 0
        details = raw.get("prompt_tokens_details")
        cached = _count(details, "cached_tokens") if isinstance(details, Mapping) else None
        if cached is None:
            cached = _count(raw, "prompt_cache_hit_tokens") or 0
        cached = min(cached, prompt)
        return {"input": prompt - cached, "output": _count(raw, "completion_tokens") or 0,
                "cacheRead": cached, "cacheWrite": 0}
    return None


def _message_data(fields: Mapping[str, Any], imported: Mapping[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = {"message": {k: v for k, v in fields.items() if v is not None}}
    if imported:
        data["imported"] = {k: v for k, v in imported.items() if v is not None}
    return data


def user_data(text: str, *, images: int = 0, source: str | None = None,
              imported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` of a user ``message`` entry; ``source`` marks where a non-typed message came from."""
    return _message_data({"role": "user", "content": text, "images": images or None, "source": source},
                         imported)


def assistant_data(text: str, calls: Sequence[Mapping[str, Any]] = (), *, usage: Mapping[str, Any] | None = None,
                   model: str | None = None, provider: str | None = None, stop_reason: str | None = None,
                   thinking: str | None = None, images: int = 0,
                   imported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` of an assistant ``message`` entry (``calls``: ``{id, name, arguments: dict}``)."""
    return _message_data({"role": "assistant", "content": text, "toolCalls": [dict(c) for c in calls] or None,
                          "usage": usage, "model": model, "provider": provider, "stopReason": stop_reason,
                          "thinking": thinking or None, "images": images or None}, imported)


def tool_data(call_id: str, name: str, text: str, *, is_error: bool = False, images: int = 0,
              imported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` of a tool-result ``message`` entry."""
    return _message_data({"role": "tool", "toolCallId": call_id, "name": name, "content": text,
                          "isError": bool(is_error), "images": images or None}, imported)


# -- public API ---------------------------------------------------------------------------------
def import_transcript(source_path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str]) -> Path:
    """Import the transcript at ``source_path`` into a new session in ``sessions_dir``; its path.

    The format is detected (:func:`detect_format`); the source is only read. Raises
    :class:`~soba_notebook.errors.SessionError` for unreadable files and unknown formats; problems
    inside a recognized file are reported, not raised (see :func:`import_transcript_with_report`).
    """
    path, _report = import_transcript_with_report(source_path, sessions_dir)
    return path


def import_transcript_with_report(source_path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str],
                                  *, session_id: str | None = None,
                                  format: str | None = None) -> tuple[Path, ImportReport]:
    """Like :func:`import_transcript`, also returning the :class:`ImportReport`.

    ``format`` skips detection (one of :data:`FORMATS`); ``session_id`` names the new session.
    """
    started = time.perf_counter()
    source = Path(source_path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise SessionError(f"{source}: no such transcript file") from None
    except IsADirectoryError:
        raise SessionError(f"{source}: is a directory, not a transcript file") from None
    except OSError as exc:
        raise SessionError(f"{source}: cannot read transcript ({exc.strerror})") from None
    name = str(source)
    if format is None:
        format = detect_format_of(data, name)
    elif format not in FORMATS:
        raise SessionError(f"{source}: unknown import format {format!r}; expected one of {', '.join(FORMATS)}")
    digest = hashlib.sha256(data).hexdigest()
    log = ImportLog(name)
    converted = _convert(format, data, name, log)
    meta: dict[str, Any] = {"importedFrom": {"path": str(source.resolve()), "format": format, "sha256": digest}}
    if converted.info:
        meta["importedInfo"] = dict(converted.info)
    store = SessionStore.create(sessions_dir, session_id=session_id, meta=meta)
    where_by_id = _write(converted.entries, store, log)
    pairs = _check_tool_pairs(store.entries(), where_by_id, log)
    messages = sum(1 for e in store.entries() if e.type == "message")
    report = ImportReport(
        format=format, source=source, session=store.file, sha256=digest,
        entries_written=len(store.entries()), source_messages=converted.source_messages,
        message_entries=messages, tool_calls=pairs[0], tool_results=pairs[1],
        unpaired_tool_calls=pairs[2], orphan_tool_results=pairs[3], problems=tuple(log.problems),
        skipped=dict(log.skipped), seconds=time.perf_counter() - started)
    return store.file, report


def _convert(format: str, data: bytes, name: str, log: ImportLog) -> Converted:
    if format == "pi":
        from .pi import convert_pi

        return convert_pi(data, name, log)
    if format == "claude_code":
        from .claude_code import convert_claude_code

        return convert_claude_code(data, name, log)
    from .openai_messages import convert_openai_format

    return convert_openai_format(format, data, name, log)


# -- writing ------------------------------------------------------------------------------------
_ID_OK = re.compile(r"^[\x21-\x7e]{1,200}$")


def _write(planned: Sequence[Planned], store: SessionStore, log: ImportLog) -> dict[str, str]:
    """Append ``planned`` to ``store`` in order; returns entry id -> source location.

    An entry without a source timestamp gets the previous entry's (the first known one for
    leading entries), marked ``imported.tsInferred``, so ``ts`` stays in source order instead of
    jumping to the import time.
    """
    last_ts = next((p.ts for p in planned if p.ts), None)
    refmap: dict[str, str] = {}
    used: set[str] = set()
    where_by_id: dict[str, str] = {}
    prev: str | None = None
    leaf_target: str | None = None
    tree_written = False
    for p in planned:
        eid = None
        if p.ref is not None and p.keep_id and _ID_OK.match(p.ref) and p.ref not in used:
            eid = p.ref
        elif p.ref is not None and p.ref in refmap:
            log.problem(p.where, f"id {p.ref!r} appears twice in the source; this entry gets a fresh id and "
                                 f"references resolve to the first one")
        eid = eid or new_id()
        if p.tree and p.parent is not None:
            parent = refmap.get(p.parent)
            if parent is None:
                log.problem(p.where, f"parent {p.parent!r} is not an earlier entry of this file; attached to "
                                     f"the previous entry")
                parent = prev
        else:
            if p.tree and p.parent is None and tree_written:
                log.problem(p.where, "a second root in the source tree; attached to the previous entry")
            parent = prev
        data = dict(p.data)
        ts = p.ts or last_ts
        if p.ts is None and ts is not None:
            data["imported"] = {**data.get("imported", {}), "tsInferred": True}
        last_ts = ts
        for key in p.id_refs:
            value = data.get(key)
            if isinstance(value, str) and value in refmap:
                data[key] = refmap[value]
        entry = Entry(p.type, data, id=eid, parent_id=parent, ts=ts)
        try:
            store.append(entry)
        except UnicodeEncodeError:  # lone surrogates from \\ud800-style escapes in the source
            log.problem(p.where, "text holds unpaired UTF-16 surrogates; replaced with U+FFFD")
            store.append(Entry(p.type, _scrub(data), id=eid, parent_id=parent, ts=ts))
        used.add(eid)
        where_by_id[eid] = p.where
        if p.ref is not None:
            refmap.setdefault(p.ref, eid)
        for alias in p.aliases:
            refmap[alias] = eid
        prev = eid
        tree_written = tree_written or p.tree
        if p.leaf_candidate:
            leaf_target = eid
    if leaf_target is not None and store.leaf_id != leaf_target:
        store.rewind(leaf_target, reason="import")
    return where_by_id


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, Mapping):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _check_tool_pairs(entries: Sequence[Entry], where_by_id: Mapping[str, str],
                      log: ImportLog) -> tuple[int, int, int, int]:
    """Walk the written tree: every tool result must follow its call on its root-to-entry path.

    Reports results whose call is not an ancestor and calls with no result below them; returns
    ``(calls, results, unpaired calls, orphan results)``.
    """
    ids = {e.id for e in entries}
    children: dict[str | None, list[Entry]] = {}
    for e in entries:
        children.setdefault(e.parent_id if e.parent_id in ids else None, []).append(e)
    open_calls: dict[str, list[str]] = {}
    answered: set[tuple[str, str]] = set()
    calls = results = orphans = 0
    stack: list[tuple[Entry, bool]] = [(e, False) for e in reversed(children.get(None, []))]
    while stack:
        e, leaving = stack.pop()
        own = [c.id for c in e.tool_calls] if e.role == "assistant" else []
        if leaving:
            for cid in own:
                open_calls[cid].pop()
            continue
        if e.type == "message" and e.role == "tool":
            results += 1
            cid = e.tool_call_id or ""
            owners = open_calls.get(cid)
            if owners:
                answered.add((owners[-1], cid))
            else:
                orphans += 1
                log.problem(where_by_id.get(e.id or "", log.name),
                            f"tool result for call {cid!r} has no matching call before it; kept as it is")
        for cid in own:
            open_calls.setdefault(cid, []).append(e.id or "")
        stack.append((e, True))
        stack.extend((c, False) for c in reversed(children.get(e.id, [])))
    unpaired = 0
    for e in entries:
        if e.type == "message" and e.role == "assistant":
            for call in e.tool_calls:
                calls += 1
                if (e.id, call.id) not in answered:
                    unpaired += 1
                    log.problem(where_by_id.get(e.id or "", log.name),
                                f"tool call {call.id!r} ({call.name}) has no result in the source; kept, no "
                                f"result invented")
    return calls, results, unpaired, orphans
