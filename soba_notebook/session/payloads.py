"""The shapes of the string-keyed payloads, for the type checker: entry data and event data.

An :class:`~soba_notebook.session.entries.Entry` keeps its type-specific fields in ``data``, in
the camelCase JSON form that goes on disk, and the event bus carries plain keyword payloads. Both
stay plain dicts: a file written by a newer version, or an imported transcript, may hold fields
and values this version never wrote, and readers are defensive about them. What this module adds
is a name for every field SOBA itself writes and reads, with its type, so a reader that asks for a
field no writer produces, or uses a value as the wrong type, fails ``mypy`` rather than a session.

Nothing here converts, copies or validates. The ``TypedDict`` classes are annotations over the
same dicts (``CheckpointData(kind=..., note=...)`` *is* a ``dict``), and the ``*_data`` accessors
only give ``entry.data`` its type for the entry type the caller has already checked. The
vocabularies (outcome, quality, verification status, trigger) are ``Literal`` types; their values
are the strings on disk and in events.

The event payloads live here, one floor above the bus (``events.py``, which carries any payload),
because they speak the session's vocabulary.
"""

# No ``from __future__ import annotations``: Required[...] must be evaluated when a class is made,
# or the runtime's ``__required_keys__`` (which the tests read) would be empty.
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Required, TypedDict, cast

if TYPE_CHECKING:
    from .entries import Entry

__all__ = [
    "BudgetFields",
    "BudgetPayload",
    "BudgetRequest",
    "BudgetSource",
    "CapsuleData",
    "CapsuleTrigger",
    "CheckpointData",
    "CompactionEndPayload",
    "CompactionProgressPayload",
    "CompactionStartPayload",
    "ConfigData",
    "CostFields",
    "CostPayload",
    "ErrorPayload",
    "KernelStateData",
    "LeafData",
    "MessageBody",
    "MessageData",
    "MessageDeltaPayload",
    "OperationTrigger",
    "Outcome",
    "Quality",
    "RequestStartPayload",
    "ResponseKind",
    "ResponseStartPayload",
    "RetryPayload",
    "Role",
    "ToolCallData",
    "ToolEndPayload",
    "ToolStartPayload",
    "TriggerName",
    "TurnEndPayload",
    "TurnOutcome",
    "TurnStartPayload",
    "UsageData",
    "VerificationStatus",
    "capsule_data",
    "checkpoint_data",
    "config_data",
    "leaf_data",
    "message_data",
]

# -- vocabularies ------------------------------------------------------------------------------
#: How one compaction operation ended (``compaction_end.outcome``, DESIGN.md "Events").
Outcome = Literal["completed", "skipped", "cancelled", "stale", "failed"]
#: A capsule's quality, best first (the one definition; other modules derive theirs with
#: ``typing.get_args``). ``ok``: a model summary, its files, checks and skills grounded in the
#: history, with a real goal and next steps. ``partial``: a grounded model summary whose goal, or
#: every next step, was template text or empty (filled from the history where it could be).
#: ``degraded``: the local deterministic capsule, no model summary (timeout, failure, none configured).
Quality = Literal["ok", "partial", "degraded"]
#: A verification check's status in the capsule state, most to least informative.
VerificationStatus = Literal["passed", "failed", "unknown"]
#: The seven compaction triggers (seed section 4); :class:`~soba_notebook.compaction.triggers.Trigger`
#: is the enum of the same strings.
TriggerName = Literal["hard_limit", "milestone", "plan_pivot", "turn_complete", "auto_threshold", "user",
                      "context_overflow"]
#: What a ``capsule`` entry records as its trigger: a compaction trigger, or ``capsule_load`` for a
#: Portable Capsule loaded into a new session.
CapsuleTrigger = TriggerName | Literal["capsule_load"]
#: The trigger of a compaction plan: a compaction trigger, or ``handoff`` for the summary of
#: ``%capsule create`` (which cuts nothing and emits no event).
OperationTrigger = TriggerName | Literal["handoff"]
#: Where an effective token count came from (DESIGN.md, "Budget").
BudgetSource = Literal["provider_usage", "estimated"]
#: Which request a budget figure measures: the one the running inference sent (``sent``), or the
#: next one SOBA would send as the session stands (``next``: after a turn, a compaction, a rewind).
BudgetRequest = Literal["sent", "next"]
#: Roles of model-input messages.
Role = Literal["user", "assistant", "tool"]
#: How a turn ended (``turn_end.outcome``; ``stopped``: a per-turn limit ended it).
TurnOutcome = Literal["completed", "cancelled", "failed", "stopped"]
#: What a model's reply began with (``response_start.kind``).
ResponseKind = Literal["text", "thinking", "tool_call"]


# -- entry data (stored form, camelCase) ----------------------------------------------------------
class ToolCallData(TypedDict, total=False):
    """One tool call of an assistant message (``rawArguments``: the model's text when not a JSON object)."""

    id: Required[str]
    name: Required[str]
    arguments: Required[dict[str, Any]]
    rawArguments: str


class UsageData(TypedDict):
    """Provider-reported usage of one inference (``input`` excludes cached tokens)."""

    input: int
    output: int
    cacheRead: int
    cacheWrite: int


class MessageBody(TypedDict, total=False):
    """``data["message"]`` of a ``message`` entry: the provider-neutral message.

    Only ``role`` is always there; every other field is written only when it has a value.
    """

    role: Required[Role]
    content: str
    # user
    source: str
    # assistant
    toolCalls: list[ToolCallData]
    usage: UsageData
    model: str
    provider: str
    stopReason: str
    thinking: str
    contextKey: str
    estimatedInput: int
    partial: bool
    server: str
    # tool result
    toolCallId: str
    name: str
    isError: bool
    cancelled: bool
    fullChars: int
    exitCode: int
    filesChanged: dict[str, Any]
    statusRecorded: bool
    #: images shown to the model (``session/attachments.py``: ``ImageAttachment.to_json`` each)
    attachments: list[dict[str, Any]]
    #: the cells a ``notebook_run`` ran: ``{"path": str, "cells": [{"id", "count", "outcome"}]}``
    cellRuns: dict[str, Any]
    # imported transcripts
    images: int


class MessageData(TypedDict, total=False):
    """``data`` of a ``message`` entry (``imported``: what an importer kept of the source line)."""

    message: Required[MessageBody]
    imported: dict[str, Any]


class KernelStateData(TypedDict, total=False):
    """The kernel-state fields of a ``capsule`` entry (``kernelStateLoaded``: from another session)."""

    kernelState: list[str]
    kernelStateLoaded: bool


class CapsuleData(KernelStateData, total=False):
    """``data`` of a ``capsule`` entry. ``state`` is the capsule's JSON form (the schema that
    ``validate_capsule_json`` checks); a loaded Portable Capsule adds ``loadedFrom``."""

    checkpointId: Required[str]
    firstKeptEntryId: Required[str | None]
    trigger: Required[CapsuleTrigger]
    quality: Required[Quality]
    state: Required[dict[str, Any]]
    tokensBefore: int | None
    tokensAfter: int
    source: BudgetSource
    operationId: str | None
    previousCheckpointId: str | None
    summarizedEntries: int
    note: str | None
    #: how many of the model's claims the history did not support (files, checks, skills; goals and
    #: constraints no user message supports; items naming what never happened): dropped from ``state``;
    #: the count only, never the claims
    ungroundedClaims: int
    #: the dropped claims per capsule field (JSON key -> count); only fields with any
    ungroundedByField: NotRequired[dict[str, int]]
    #: the server's own token count of the capsule's message text, where the server counted it
    #: (compaction/capsule_count.py): every later measure of the capsule uses it
    textTokens: int
    loadedFrom: dict[str, Any]


class CheckpointData(TypedDict):
    """``data`` of a ``checkpoint`` entry: its kind (``milestone`` and ``plan_pivot`` are intents to
    compact) and its note."""

    kind: str
    note: str


class LeafData(TypedDict):
    """``data`` of a ``leaf`` entry: the session leaf moves to ``targetId`` (``None``: the root)."""

    targetId: str | None
    reason: str


class ConfigData(TypedDict):
    """``data`` of a ``config`` entry: the configuration changes it records (``auto``, ``activeSkills``…)."""

    changes: dict[str, Any]


def message_data(entry: "Entry") -> MessageData:
    """``entry.data`` of a ``message`` entry, typed (the same mapping: nothing is copied or checked)."""
    return cast("MessageData", entry.data)


def capsule_data(entry: "Entry") -> CapsuleData:
    """``entry.data`` of a ``capsule`` entry, typed (the same mapping: nothing is copied or checked)."""
    return cast("CapsuleData", entry.data)


def checkpoint_data(entry: "Entry") -> CheckpointData:
    """``entry.data`` of a ``checkpoint`` entry, typed (the same mapping: nothing is copied or checked)."""
    return cast("CheckpointData", entry.data)


def leaf_data(entry: "Entry") -> LeafData:
    """``entry.data`` of a ``leaf`` entry, typed (the same mapping: nothing is copied or checked)."""
    return cast("LeafData", entry.data)


def config_data(entry: "Entry") -> ConfigData:
    """``entry.data`` of a ``config`` entry, typed (the same mapping: nothing is copied or checked)."""
    return cast("ConfigData", entry.data)


# -- event payloads (snake_case; EventBus.emit(type, **payload)) -----------------------------------
class BudgetFields(TypedDict):
    """A budget measurement (:meth:`~soba_notebook.budget.BudgetCheck.to_event`)."""

    effective: int
    hard_limit: int
    soft_limit: int
    context_window: int
    source: BudgetSource


class BudgetPayload(BudgetFields):
    """``budget``: before every inference (``inference``: its number among the agent's inferences,
    1 for the first, 0 before any; a later event with the same number re-measures that inference),
    after every compaction, at a turn's end, and when a display asks while no turn runs; ``request``
    says which request it measures (:data:`BudgetRequest`). The engine's published
    snapshot (``compaction/snapshot.py``) adds the last compaction that did something and a
    skipped one after it, so every display shows the same lines as ``%soba status``."""

    session_id: str
    inference: int
    request: NotRequired[BudgetRequest]
    last_compaction: NotRequired["CompactionEndPayload | None"]
    skipped: NotRequired["CompactionEndPayload | None"]


class CompactionStartPayload(TypedDict, total=False):
    """``compaction_start``: the plan of one operation (nothing to plan: only the first six)."""

    operation_id: Required[str]
    trigger: Required[OperationTrigger]
    tokens_before: Required[int]
    hard_limit: Required[int]
    soft_limit: Required[int]
    source: Required[BudgetSource]
    summarized_entries: int
    summarized_tokens: int
    kept_tokens: int
    first_kept_entry_id: str | None


class CompactionProgressPayload(TypedDict):
    """``compaction_progress``: a named phase and a monotonic 0..100 percent; ``waiting_for``: the
    model whose summary has not begun to arrive (the percent then moves with the time only)."""

    operation_id: str
    phase: str
    percent: int
    waiting_for: NotRequired[str]


class CostFields(TypedDict):
    """A cost as the ``cost`` event and flight records carry it (:meth:`soba_notebook.pricing.Cost.to_json`):
    ``usd`` a decimal string or ``None`` (no price), ``status`` ``priced``/``unknown``/``local``,
    ``reason`` why it is unknown, ``text`` the cost in words (``$0.0123``, ``local: $0``)."""

    usd: str | None
    status: str
    reason: str | None
    text: str


class CompactionEndPayload(TypedDict):
    """``compaction_end``: the terminal outcome of one operation (exactly one per operation)."""

    operation_id: str
    trigger: TriggerName
    outcome: Outcome
    reason: str | None
    tokens_before: int
    tokens_after: int
    reclaimed_tokens: int
    reclaimed_percent: float
    checkpoint_id: str | None
    duration_ms: int
    quality: Quality | None
    source: BudgetSource
    #: what the operation's summary requests cost (only when one was made and the agent prices them)
    summary_cost: NotRequired[CostFields]


class TurnStartPayload(TypedDict):
    """``turn_start``: a prompt (its first 200 characters) begins a turn."""

    session_id: str
    prompt: str
    provider: str


class TurnEndPayload(TypedDict):
    """``turn_end``: how the turn ended, and its error when it failed."""

    session_id: str
    outcome: TurnOutcome
    error: str | None


class MessageDeltaPayload(TypedDict):
    """``message_delta``: streamed reply text."""

    text: str


class ToolStartPayload(TypedDict):
    """``tool_start``: a tool call begins."""

    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolEndPayload(TypedDict):
    """``tool_end``: a tool call ended (``content``: its result, scrubbed and clipped; ``notebook``:
    the cells a ``notebook_edit`` changed, each with its short diff, for the cell's display)."""

    call_id: str
    name: str
    is_error: bool
    cancelled: bool
    content: str
    notebook: NotRequired[list[dict[str, Any]]]


class ErrorPayload(TypedDict, total=False):
    """``error``: something went wrong that the user should see (a retried attempt is a ``retry``
    event, not an error; ``retry`` is only read from older emitters)."""

    source: Required[str]
    message: Required[str]
    retry: bool


class RequestStartPayload(TypedDict):
    """``request_start``: an inference request of the turn is being sent (``inference``: its
    number in the turn, from 1) to ``model`` at ``provider`` (the provider's label)."""

    model: str
    provider: str
    inference: int


class ResponseStartPayload(TypedDict):
    """``response_start``: the reply began (its first text, thinking or tool call), or another tool
    call in it began (``name``: the tool's, for ``tool_call``). The request has succeeded."""

    kind: ResponseKind
    name: str | None


class RetryPayload(TypedDict):
    """``retry``: a failed attempt is retried after ``delay`` seconds (attempt ``attempt`` of
    ``max_retries``). ``reason`` says what failed in plain words (``connection to the server failed
    (ReadError)``), ``detail`` the full message; ``status`` the HTTP status, if one came."""

    provider: str
    attempt: int
    max_retries: int
    delay: float
    status: int | None
    reason: str
    detail: str


class CostPayload(TypedDict):
    """``cost``: what the session and its current (or last) turn have cost, after every priced
    request (a turn's or a compaction summary's)."""

    session: CostFields
    last_turn: CostFields
    #: priced requests of the session so far
    requests: int
