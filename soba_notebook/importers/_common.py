"""The contract between the transcript converters and the session writer, and their shared helpers.

Each format module (:mod:`.pi`, :mod:`.claude_code`, :mod:`.openai_messages`) turns a source file
into a :class:`Converted`: :class:`Planned` entries (SOBA entry type, ``data``, place in the
source tree), with every problem and skipped datum recorded in an :class:`ImportLog`. The package
(:mod:`soba_notebook.importers`) writes those entries and builds the report. This module owns
that contract and the small value normalizers every converter needs, so that all formats produce
the same neutral message form: timestamps (:func:`iso_timestamp`), tool-call arguments
(:func:`parse_arguments`), message content and images (:func:`content_text`,
:func:`unknown_block`), provider usage (:func:`usage_json`) and entry ``data``
(:func:`user_data`, :func:`assistant_data`, :func:`tool_data`).

It is a leaf of the package: it imports neither the converters nor the package ``__init__``, so
both can import it at module level.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from ..session.entries import now_iso

__all__ = [
    "IMAGE_PLACEHOLDER",
    "Converted",
    "ImportLog",
    "Planned",
    "assistant_data",
    "content_text",
    "iso_timestamp",
    "object_or_empty",
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


# -- the contract between converters and the writer ---------------------------------------------
@dataclass
class ImportLog:
    """Collects problems (``file:line: what``) and skip counts while one source is converted."""

    name: str
    problems: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    _seen: set[str] = field(default_factory=set, repr=False)
    _element_lines: Callable[[], Sequence[int]] | None = field(default=None, repr=False)
    _lines: Sequence[int] | None = field(default=None, repr=False)

    def at(self, line: int | str) -> str:
        """The ``file:line`` prefix for a location in the source."""
        return f"{self.name}:{line}"

    def at_element(self, index: int) -> str:
        """The location of element ``index`` of a JSON document's message array: ``file:[index]``,
        which a problem reported there turns into ``file:line`` once :meth:`locate_elements` is set."""
        return f"{self.name}:[{index}]"

    def locate_elements(self, lines: Callable[[], Sequence[int]]) -> None:
        """``lines()`` gives the line each element starts on (``[]``: unknown, keep ``[index]``).

        Called only when a problem is reported, at most once: finding the lines decodes the
        whole document again, which a file without problems never needs.
        """
        self._element_lines = lines
        self._lines = None

    def problem(self, where: str, what: str) -> None:
        if self._element_lines is not None:
            where = self._element_line(where)
        self.problems.append(f"{where}: {what}")

    def _element_line(self, where: str) -> str:
        prefix = f"{self.name}:["
        index = where[len(prefix):-1]
        if not (where.startswith(prefix) and where.endswith("]") and index.isdigit()):
            return where
        if self._lines is None and self._element_lines is not None:
            self._lines = self._element_lines()
        lines = self._lines or ()
        return self.at(lines[int(index)]) if int(index) < len(lines) else where

    def problem_once(self, key: str, where: str, what: str) -> None:
        """Report ``what`` only the first time ``key`` is seen (repetitive facts, e.g. a record type)."""
        if key not in self._seen:
            self._seen.add(key)
            self.problem(where, what)

    def skip(self, kind: str, n: int = 1) -> None:
        if n:
            self.skipped[kind] += n


class Planned(NamedTuple):
    """One entry a converter wants written, with its place in the source tree.

    An immutable value like the frozen dataclasses elsewhere, but a named tuple: one is built per
    source record, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
    cost 2.4 µs for these eleven fields against 0.5 µs, a tenth of the floor an import is held to.

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
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def object_or_empty(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty (read-only) one.

    The exact type is checked first: converters ask this of every record and nested object, and
    an ``isinstance`` against the ``Mapping`` ABC costs several times as much.
    """
    return value if value.__class__ is dict or isinstance(value, Mapping) else _EMPTY


def iso_timestamp(value: Any) -> str | None:
    """``value`` (ISO-8601 text, or epoch seconds / milliseconds, number or numeric text) as the
    ``YYYY-MM-DDTHH:MM:SS.mmmZ`` UTC form every SOBA ``ts`` uses; ``None`` when it is neither."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if _CANONICAL_TS.fullmatch(text):  # already the form we write (most sources): validate, keep
            try:
                datetime.fromisoformat(text[:-1])
            except ValueError:
                return None
            return text
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


_CANONICAL_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


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
    if raw.__class__ is dict:
        return dict(raw)
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
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
    if content.__class__ is str or isinstance(content, str):
        return content, 0
    if content.__class__ is not list and isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list):
        log.problem(where, f"message content is a {type(content).__name__}; kept as its text form")
        return str(content), 0
    parts: list[str] = []
    images = 0
    for block in content:
        if block.__class__ is str or isinstance(block, str):
            parts.append(block)
            continue
        if block.__class__ is not dict and not isinstance(block, Mapping):
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


def _count(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value.__class__ is int:  # the usual case, checked first: this runs for every usage field
        return value if value >= 0 else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return int(value)
    return None


_PI_USAGE = frozenset({"input", "output", "cacheRead", "cacheWrite"})
_ANTHROPIC_USAGE = frozenset({"input_tokens", "output_tokens"})
_OPENAI_USAGE = frozenset({"prompt_tokens", "completion_tokens"})


def usage_json(raw: Any) -> dict[str, Any] | None:
    """Provider usage in SOBA's form ``{input, output, cacheRead, cacheWrite}``, from pi
    (``input/output/cacheRead/cacheWrite``, ``cost`` kept), Anthropic (``input_tokens`` …
    ``cache_creation_input_tokens``) or OpenAI-style (``prompt_tokens`` including cached tokens,
    ``completion_tokens``) usage; ``None`` when ``raw`` is not usage."""
    if raw is None or (raw.__class__ is not dict and not isinstance(raw, Mapping)):
        return None
    if not _PI_USAGE.isdisjoint(raw):
        out: dict[str, Any] = {"input": _count(raw, "input") or 0, "output": _count(raw, "output") or 0,
                               "cacheRead": _count(raw, "cacheRead") or 0,
                               "cacheWrite": _count(raw, "cacheWrite") or 0}
        cost = raw.get("cost")
        if cost is not None and (cost.__class__ is dict or isinstance(cost, Mapping)):
            out["cost"] = dict(cost)
        return out
    if not _ANTHROPIC_USAGE.isdisjoint(raw):
        return {"input": _count(raw, "input_tokens") or 0, "output": _count(raw, "output_tokens") or 0,
                "cacheRead": _count(raw, "cache_read_input_tokens") or 0,
                "cacheWrite": _count(raw, "cache_creation_input_tokens") or 0}
    if not _OPENAI_USAGE.isdisjoint(raw):
        prompt = _count(raw, "prompt_tokens") or 0
        details = raw.get("prompt_tokens_details")
        cached = _count(details, "cached_tokens") if isinstance(details, Mapping) else None
        if cached is None:
            cached = _count(raw, "prompt_cache_hit_tokens") or 0
        cached = min(cached, prompt)
        return {"input": prompt - cached, "output": _count(raw, "completion_tokens") or 0,
                "cacheRead": cached, "cacheWrite": 0}
    return None


def _without_none(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


# The three builders below write each message's keys in one fixed order, leaving out what is None
# (the stored form): spelled out key by key, because they run once per imported message and a
# dict of every key filtered afterwards cost a tenth of a conversion.
def user_data(text: str, *, images: int = 0, source: str | None = None,
              imported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` of a user ``message`` entry; ``source`` marks where a non-typed message came from."""
    msg: dict[str, Any] = {"role": "user", "content": text}
    if images:
        msg["images"] = images
    if source is not None:
        msg["source"] = source
    return {"message": msg, "imported": _without_none(imported)} if imported else {"message": msg}


def assistant_data(text: str, calls: Sequence[Mapping[str, Any]] = (), *, usage: Mapping[str, Any] | None = None,
                   model: str | None = None, provider: str | None = None, stop_reason: str | None = None,
                   thinking: str | None = None, images: int = 0,
                   imported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` of an assistant ``message`` entry (``calls``: ``{id, name, arguments: dict}``)."""
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["toolCalls"] = [dict(c) for c in calls]
    if usage is not None:
        msg["usage"] = usage
    if model is not None:
        msg["model"] = model
    if provider is not None:
        msg["provider"] = provider
    if stop_reason is not None:
        msg["stopReason"] = stop_reason
    if thinking:
        msg["thinking"] = thinking
    if images:
        msg["images"] = images
    return {"message": msg, "imported": _without_none(imported)} if imported else {"message": msg}


def tool_data(call_id: str, name: str, text: str, *, is_error: bool = False, images: int = 0,
              imported: Mapping[str, Any] | None = None, exit_code: Any = None,
              status_recorded: bool = False) -> dict[str, Any]:
    """``data`` of a tool-result ``message`` entry.

    ``exit_code`` is the command's exit status when the source records it (mini-swe-agent's
    ``returncode``); ``status_recorded`` says the source records ``is_error`` for every run (pi),
    so ``False`` there means success and the extractor may rely on it.
    """
    msg: dict[str, Any] = {"role": "tool", "toolCallId": call_id, "name": name, "content": text,
                           "isError": bool(is_error)}
    if images:
        msg["images"] = images
    if exit_code.__class__ is int or (isinstance(exit_code, int) and not isinstance(exit_code, bool)):
        msg["exitCode"] = exit_code
    if status_recorded:
        msg["statusRecorded"] = True
    return {"message": msg, "imported": _without_none(imported)} if imported else {"message": msg}
