"""The Context Capsule's fields, defined once: the :class:`Capsule` value and its stored form.

Every fact about a capsule field is written here, on the field itself (:func:`dataclasses.field`
metadata, read through :data:`CAPSULE_FIELDS`): its JSON key, its kind, the heading it is shown
under, and what the summarizing model is asked to put in it (``ask``; ``None`` for the fields the
code fills). Everything else is derived from that one definition, so a field added here is stored,
validated, rendered, written to ``.capsule.md`` files and asked of the model without another edit:

* :meth:`Capsule.to_json` / :meth:`Capsule.from_json` and :func:`validate_capsule_json` (here);
* the summarizer's prompt and its constrained-output schema (:mod:`soba_notebook.compaction.summarize`);
* the rendered model input (:func:`soba_notebook.compaction.capsule.render`) and the
  ``.capsule.md`` sections (:mod:`soba_notebook.memory.portable`).

It sits on the session floor because reading a transcript needs it: the model input
(:mod:`.context`) skips an invalid capsule (hand-edited, written by a buggy tool) instead of
sending it. Building, rolling and rendering capsules is compaction's (:mod:`soba_notebook.compaction.capsule`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from itertools import repeat
from typing import Any, Literal, get_args

from ..errors import CapsuleFormatError
from .payloads import VerificationStatus

__all__ = [
    "CAPSULE_FIELDS",
    "CAPSULE_SCHEMA_VERSION",
    "STATUSES",
    "Capsule",
    "CapsuleField",
    "Decision",
    "EntryRange",
    "FieldKind",
    "Verification",
    "validate_capsule_json",
]

CAPSULE_SCHEMA_VERSION = 1
#: Verification statuses, most to least informative (the ``VerificationStatus`` Literal's values).
STATUSES: tuple[str, ...] = get_args(VerificationStatus)

#: What a field holds: a string, a list of strings, a list of decisions, a list of checks, or the
#: range of entries the capsule summarizes.
FieldKind = Literal["text", "strings", "decisions", "verification", "range"]


@dataclass(frozen=True, slots=True)
class Decision:
    what: str
    why: str = ""

    def to_json(self) -> dict[str, str]:
        return {"what": self.what, "why": self.why}


@dataclass(frozen=True, slots=True)
class Verification:
    """A command that checks the work, and what it said the last time it ran."""

    command: str
    status: VerificationStatus = "unknown"
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"command": self.command, "status": self.status, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class EntryRange:
    """The transcript entries a capsule summarizes (inclusive ids, and how many)."""

    first_id: str | None = None
    last_id: str | None = None
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"firstId": self.first_id, "lastId": self.last_id, "count": self.count}


def _meta(key: str, kind: FieldKind, title: str, ask: str | None, *, shown: bool | None = None) -> dict[str, Any]:
    """A capsule field's facts, as its ``dataclasses.field`` metadata (see :class:`CapsuleField`);
    ``shown`` defaults to whether the model is asked for it."""
    return {"key": key, "kind": kind, "title": title, "ask": ask, "shown": ask is not None if shown is None else shown}


@dataclass(frozen=True, slots=True)
class Capsule:
    """The structured working state that replaces old model input (the seed's section 1 fields)."""

    # each field: its default, then (JSON key, kind, title, what the summarizer is asked to put there)
    goal: str = field(default="", metadata=_meta("goal", "text", "Goal", "the goal"))
    #: the most recent user request of the covered history, verbatim (a long one keeps its head and
    #: tail around a marker: ``compaction.extract.latest_request``); the code's, never the model's.
    #: Stored only when non-empty, so a capsule without one hashes as before the field existed.
    latest_request: str = field(default="", metadata=_meta(
        "latestRequest", "text", "Latest user request (verbatim)", None, shown=True))
    constraints: tuple[str, ...] = field(
        default=(), metadata=_meta("constraints", "strings", "Constraints", "constraints the user set"))
    done: tuple[str, ...] = field(default=(), metadata=_meta("done", "strings", "Completed work", "what is done"))
    active: tuple[str, ...] = field(default=(), metadata=_meta("active", "strings", "Active work", "what is active"))
    pending: tuple[str, ...] = field(
        default=(), metadata=_meta("pending", "strings", "Pending work", "what is pending"))
    decisions: tuple[Decision, ...] = field(
        default=(), metadata=_meta("decisions", "decisions", "Decisions", "decisions and why"))
    blockers: tuple[str, ...] = field(
        default=(), metadata=_meta("blockers", "strings", "Unresolved blockers", "unresolved blockers"))
    next_steps: tuple[str, ...] = field(
        default=(), metadata=_meta("nextSteps", "strings", "Next steps", "concrete next steps"))
    files_read: tuple[str, ...] = field(
        default=(), metadata=_meta("filesRead", "strings", "Files read", "files read"))
    files_modified: tuple[str, ...] = field(
        default=(), metadata=_meta("filesModified", "strings", "Files modified", "files modified"))
    verification: tuple[Verification, ...] = field(
        default=(), metadata=_meta("verification", "verification", "Verification",
                                   "verification commands with their last result"))
    active_skills: tuple[str, ...] = field(
        default=(), metadata=_meta("activeSkills", "strings", "Active skills", "active skills"))
    artifacts: tuple[str, ...] = field(default=(), metadata=_meta("artifacts", "strings", "Artifacts", "artifacts"))
    #: the notebook cells the covered history ran and the figures the model saw, one item per cell
    #: (``nb.ipynb cell c3: ran [7] ok; figure 640×480 seen (…) — the model said: "…"``): facts of
    #: the transcript (``compaction.cell_facts``), the code's, never the model's. Stored only when
    #: non-empty, so a capsule without any hashes as before the field existed.
    cells_run: tuple[str, ...] = field(default=(), metadata=_meta(
        "cellsRun", "strings", "Notebook cells run and figures seen", None, shown=True))
    # filled by the code, never asked of the model (ask None)
    covers: EntryRange = field(default_factory=EntryRange, metadata=_meta("covers", "range", "Covered range", None))
    #: checkpoint ids of the latest capsules this one rolled up, oldest first: the last few only
    #: (``compaction.capsule.MAX_ROLLED_FROM``); each capsule entry's ``previousCheckpointId`` links
    #: the older ones on disk. A stored capsule with more ids is still valid.
    rolled_from: tuple[str, ...] = field(
        default=(), metadata=_meta("rolledFrom", "strings", "Rolled up from", None))

    def to_json(self) -> dict[str, Any]:
        """The ``state`` stored in a ``capsule`` entry (camelCase keys, lists for tuples)."""
        out: dict[str, Any] = {"schemaVersion": CAPSULE_SCHEMA_VERSION}
        for f in CAPSULE_FIELDS:
            value = getattr(self, f.attr)
            if f.optional and not value:
                continue
            out[f.key] = (value if f.kind == "text" else value.to_json() if f.kind == "range"
                          else list(value) if f.kind == "strings" else [item.to_json() for item in value])
        return out

    @classmethod
    def from_json(cls, raw: Any, *, where: str = "capsule") -> Capsule:
        """The capsule of a stored ``state``; :class:`CapsuleFormatError` lists every problem."""
        problems = validate_capsule_json(raw)
        if problems:
            raise CapsuleFormatError(f"{where}: invalid capsule: " + "; ".join(problems))
        return cls(**{f.attr: _from_json(f.kind, raw[f.key]) for f in CAPSULE_FIELDS if f.key in raw})

    def is_empty(self) -> bool:
        return self == Capsule(covers=self.covers, rolled_from=self.rolled_from)


def _from_json(kind: FieldKind, value: Any) -> Any:
    if kind == "text":
        return value
    if kind == "strings":
        return tuple(value)
    if kind == "decisions":
        return tuple(Decision(d["what"], d.get("why", "")) for d in value)
    if kind == "verification":
        return tuple(Verification(v["command"], v.get("status", "unknown"), v.get("detail", "")) for v in value)
    covers = value or {}
    return EntryRange(covers.get("firstId"), covers.get("lastId"), int(covers.get("count", 0) or 0))


@dataclass(frozen=True, slots=True)
class CapsuleField:
    """One field of :class:`Capsule`, as its metadata describes it.

    ``attr``: the attribute; ``key``: the JSON key of the stored form; ``kind``: what it holds;
    ``title``: the heading it is shown under (model input, ``.capsule.md``); ``ask``: what the
    summarizing model is asked to put in it, or ``None`` when the code fills it (``covers``,
    ``rolledFrom``, ``latestRequest``, ``cellsRun``); ``shown``: whether the model input shows it.
    """

    attr: str
    key: str
    kind: FieldKind
    title: str
    ask: str | None
    shown: bool = True

    @property
    def optional(self) -> bool:
        """Filled by the code and shown, yet left out of the stored form when empty (``latestRequest``,
        ``cellsRun``): capsules written before it existed keep their exact stored form and hash."""
        return self.ask is None and self.shown and self.kind in ("text", "strings")


#: The capsule's fields in their order (stored form, rendering, prompt).
CAPSULE_FIELDS: tuple[CapsuleField, ...] = tuple(
    CapsuleField(f.name, f.metadata["key"], f.metadata["kind"], f.metadata["title"], f.metadata["ask"],
                 f.metadata["shown"])
    for f in fields(Capsule))


def validate_capsule_json(raw: Any) -> list[str]:
    """Every problem with a capsule's JSON form, each naming the field; empty when valid."""
    if not isinstance(raw, Mapping):
        return [f"expected an object, got {type(raw).__name__}"]
    problems: list[str] = []
    version = raw.get("schemaVersion", CAPSULE_SCHEMA_VERSION)
    if version != CAPSULE_SCHEMA_VERSION:
        problems.append(f"schemaVersion {version!r} is not supported (expected {CAPSULE_SCHEMA_VERSION})")
    for f in CAPSULE_FIELDS:
        if f.key in raw:
            problems.extend(_field_problems(f.key, f.kind, raw[f.key]))
    known = {"schemaVersion", *(f.key for f in CAPSULE_FIELDS)}
    problems.extend(f"unknown field {k!r}" for k in raw if k not in known)
    return problems


def _field_problems(key: str, kind: FieldKind, value: Any) -> list[str]:
    if kind == "text":
        return [] if isinstance(value, str) else [f"{key} must be a string"]
    if kind == "range":
        if not isinstance(value, Mapping):
            return [f"{key} must be an object"]
        return [] if isinstance(value.get("count", 0), int) else [f"{key}.count must be an integer"]
    if not isinstance(value, list):
        return [f"{key} must be a list" + (" of strings" if kind == "strings" else "")]
    if kind == "strings":
        # in C (no generator frame per item): every capsule is checked, with up to hundreds of file names
        return [] if all(map(isinstance, value, repeat(str))) else [f"{key} must be a list of strings"]
    if kind == "decisions":
        return [f"{key}[{i}] must be {{'what': str, 'why': str}}" for i, d in enumerate(value)
                if not isinstance(d, Mapping) or not isinstance(d.get("what"), str)
                or not isinstance(d.get("why", ""), str)]
    problems = []
    for i, v in enumerate(value):
        if not isinstance(v, Mapping) or not isinstance(v.get("command"), str):
            problems.append(f"{key}[{i}] must have a 'command' string")
        elif v.get("status", "unknown") not in STATUSES:
            problems.append(f"{key}[{i}].status {v.get('status')!r} is not one of {', '.join(STATUSES)}")
        elif not isinstance(v.get("detail", ""), str):
            problems.append(f"{key}[{i}].detail must be a string")
    return problems
