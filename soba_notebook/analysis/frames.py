"""DataFrames over a session: its transcript, its capsules, and its flight records.

Every function takes a session path, a :class:`~soba_notebook.session.SessionStore` or a
transcript of another agent (see :func:`~._common.open_session`), never writes anything, and
returns columns with stable names and dtypes (listed in each docstring).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..agent.approval import Rule
from ..compaction.capsule_entry import capsule_message
from ..errors import SessionError
from ..flight import read_flight_records
from ..image_tokens import image_tokens
from ..pricing import entry_cost, stamp_time
from ..session.attachments import attachments_of
from ..session.context import build_context, first_kept_index
from ..session.entries import Entry
from ..session.payloads import capsule_data, message_data
from ..session.store import SessionStore
from ..tokens import TokenCounter
from ._common import (
    OUTCOME_CATEGORIES,
    QUALITY_CATEGORIES,
    SOURCE_CATEGORIES,
    TRIGGER_CATEGORIES,
    SessionLike,
    Snapshot,
    categorical,
    counter_for,
    find_flight_file,
    first_json_line,
    int64,
    is_native_tokenizer,
    open_session,
    snapshot,
    utc_times,
)
from .calls import describe_call, describe_result

__all__ = [
    "CAPSULE_COLUMNS",
    "FLIGHT_COLUMNS",
    "TRANSCRIPT_COLUMNS",
    "capsule_cost",
    "capsules",
    "coverage",
    "flight_records",
    "session_flight_records",
    "transcript",
]

TRANSCRIPT_COLUMNS = ("id", "parent_id", "type", "role", "tool_name", "tokens", "tokens_source", "ts",
                      "in_context", "on_path", "covered_by", "line", "detail", "verdict", "decided_by", "subject",
                      "reason", "cost_usd", "cost_status", "image_tokens")
#: The verdicts of ``approval`` entries (agent/approval.py ``Verdict``), the ``verdict`` column's categories.
_VERDICTS = ["once", "session", "deny", "timeout", "cancelled"]
CAPSULE_COLUMNS = ("checkpoint_id", "trigger", "quality", "tokens_before", "tokens_after", "reclaimed_tokens",
                   "reclaimed_percent", "first_kept_entry_id", "summarized_entries", "duration_ms", "operation_id",
                   "ts", "entry_id", "source", "previous_checkpoint_id", "on_path", "ungrounded_claims",
                   "ungrounded_by_field", "note")


# -- helpers shared by the views ------------------------------------------------------------------
def capsule_cost(entry: Entry, counter: TokenCounter) -> int:
    """Tokens of a capsule entry as the model sees it (rendered); a malformed state is counted as
    its raw JSON text rather than failing the whole view."""
    try:
        return counter.count_message(capsule_message(entry))
    except Exception:
        return counter.count_text(str(capsule_data(entry).get("state", "")))


def _cover_path(path: Sequence[Entry], covered: dict[str, str]) -> None:
    """Assign each entry on ``path`` the checkpoint of the capsule that summarized it.

    A capsule summarizes the context it replaced: from the previous capsule's first kept entry
    (or the root) up to its own first kept entry, capsule entries excluded (they are rolled into
    the next capsule, not summarized). Entries already assigned keep their capsule.
    """
    start = 0
    for i, entry in enumerate(path):
        if entry.type != "capsule":
            continue
        end = first_kept_index(path, i)
        ck = capsule_data(entry).get("checkpointId")
        ck = ck if isinstance(ck, str) else (entry.id or "")
        for covered_entry in path[start:min(end, i)]:
            eid = covered_entry.id
            if eid is not None and covered_entry.type != "capsule" and eid not in covered:
                covered[eid] = ck
        start = end


def coverage(snap: Snapshot) -> dict[str, str]:
    """Entry id -> checkpoint id of the capsule whose summarized range holds it.

    Capsules on the current path are resolved first; capsules left on abandoned branches (after a
    rewind) cover what they summarized on their own path, unless a current capsule already does.
    """
    covered: dict[str, str] = {}
    _cover_path(snap.path, covered)
    on_path = {e.id for e in snap.path}
    for entry in snap.entries:
        if entry.type == "capsule" and entry.id not in on_path and entry.id is not None:
            _cover_path(snap.path_of(entry.id), covered)
    return covered


# -- transcript -----------------------------------------------------------------------------------
def transcript(session: SessionLike) -> pd.DataFrame:
    """One row per transcript entry, in file order (header excluded).

    Columns:

    ========== ======================= ==========================================================
    id         string                  entry id
    parent_id  string                  parent entry id (``<NA>`` for a root)
    type       category                ``message``, ``capsule``, ``checkpoint``, ``leaf``, ...
    role       category                ``user`` / ``assistant`` / ``tool`` for messages (``system``
                                       for imported system prompts), else ``<NA>``
    tool_name  string                  a tool result's tool; an assistant's tool calls, comma-joined
    tokens     Int64                   tokens the entry adds to a request (messages: the token
                                       counter's per-entry count; capsules: rendered; others: 0)
    tokens_source category             ``exact`` (the model's own tiktoken encoding) or
                                       ``estimate`` (nearest encoding, or characters / 4)
    ts         datetime64[ns, UTC]     entry timestamp
    in_context bool                    part of the next model input (capsule in force + its tail)
    on_path    bool                    on the root-to-leaf path (False: an abandoned branch)
    covered_by string                  checkpoint id of the capsule that summarized the entry
    line       Int64                   line in the session file (header is line 1)
    detail     string                  tool calls in words (``notebook_edit: replace cell a1b2 in
                                       x.ipynb``; ``; ``-joined), a result's observed files
                                       (``modified x.ipynb#a1b2``); an approval's session rules
                                       (``adds shell: pytest …``); else ``<NA>``
    verdict    category                an ``approval`` entry's answer: ``once``, ``session``,
                                       ``deny``, ``timeout``, ``cancelled``; else ``<NA>``
    decided_by string                  who answered: ``user``, ``rule`` (a session rule allowed
                                       it), ``timeout``, ``headless`` (no one could), ``error``
    subject    string                  what was asked about: the command, the code, the path
    reason     string                  a denial's reason as given (``<NA>`` when none)
    cost_usd   float64                 an assistant reply's cost in dollars, priced from its
                                       recorded usage, model and server at the rates of its day
                                       (:mod:`soba_notebook.pricing`); 0 for a local model; NaN
                                       when unknown or not a priced request
    cost_status category               ``priced``, ``local`` or ``unknown`` (``<NA>``: no request)
    image_tokens Int64                 a tool result's images (``attachments``) by the provider's
                                       rule (:mod:`soba_notebook.image_tokens`: a ``claude`` model
                                       Anthropic's, a ``gpt``/``o`` model OpenAI's, another the
                                       larger of the two); 0 for every other row
    ========== ======================= ==========================================================
    """
    snap = snapshot(session)
    counter = counter_for(snap.model(), snap.id)
    rule = _image_rule(snap.model())
    count = counter.count_entry
    source = "exact" if is_native_tokenizer(counter) else "estimate"
    ctx = build_context(snap.path)
    in_context = {e.id for e in ctx.messages}
    if ctx.capsule is not None:
        in_context.add(ctx.capsule.id)
    on_path = {e.id for e in snap.path}
    covered = coverage(snap)

    n = len(snap.entries)
    ids: list[str | None] = [None] * n
    parents: list[str | None] = [None] * n
    types: list[str] = [""] * n
    roles: list[str | None] = [None] * n
    tools: list[str | None] = [None] * n
    tokens: list[int] = [0] * n
    stamps: list[str | None] = [None] * n
    lines: list[int | None] = [None] * n
    details: list[str | None] = [None] * n
    verdicts: list[str | None] = [None] * n
    deciders: list[str | None] = [None] * n
    subjects: list[str | None] = [None] * n
    reasons: list[str | None] = [None] * n
    costs: list[float | None] = [None] * n
    cost_states: list[str | None] = [None] * n
    pictured: list[int] = [0] * n
    for i, entry in enumerate(snap.entries):
        ids[i] = entry.id
        parents[i] = entry.parent_id
        etype = entry.type
        types[i] = etype
        stamps[i] = entry.ts if isinstance(entry.ts, str) else None
        lines[i] = entry.line
        if etype == "message":
            msg = message_data(entry).get("message")
            if isinstance(msg, Mapping):
                role = msg.get("role")
                roles[i] = role if isinstance(role, str) else None
                if role == "tool":
                    name = msg.get("name")
                    tools[i] = name if isinstance(name, str) else None
                    details[i] = describe_result(msg)
                    pictured[i] = sum(image_tokens(rule, a.width, a.height) for a in attachments_of(msg))
                elif role == "assistant":
                    if (cost := entry_cost(msg, stamp_time(entry.ts))) is not None:
                        costs[i] = float(cost.usd) if cost.usd is not None else None
                        cost_states[i] = cost.status
                    calls = msg.get("toolCalls")
                    if calls:
                        tools[i] = ",".join(str(c.get("name", "")) for c in calls if isinstance(c, Mapping))
                        details[i] = "; ".join(_call_words(c) for c in calls if isinstance(c, Mapping))
            tokens[i] = count(entry)
        elif etype == "capsule":
            tokens[i] = capsule_cost(entry, counter)
        elif etype == "approval":  # who allowed or denied which tool call (agent/approval_gate.py)
            tools[i] = _str_or_none(entry.data.get("tool"))
            data = entry.data
            verdicts[i], deciders[i] = _str_or_none(data.get("verdict")), _str_or_none(data.get("decidedBy"))
            subjects[i], reasons[i] = _str_or_none(data.get("subject")), _str_or_none(data.get("reason"))
            rules = [Rule.from_json(raw) for raw in entry.data.get("rules") or ()]
            if any(rules):
                details[i] = "adds " + ", ".join(rule.describe() for rule in rules if rule is not None)
        else:  # an entry type of another version or an import: whatever role it names
            other = entry.data.get("role")
            roles[i] = other if isinstance(other, str) else None

    return pd.DataFrame({
        "id": pd.Series(ids, dtype="string"),
        "parent_id": pd.Series(parents, dtype="string"),
        "type": categorical(types),
        "role": categorical(roles),
        "tool_name": pd.Series(tools, dtype="string"),
        "tokens": pd.Series(tokens, dtype="Int64"),
        "tokens_source": pd.Series([source] * n, dtype=pd.CategoricalDtype(["exact", "estimate"])),
        "ts": utc_times(stamps),
        "in_context": pd.Series([i in in_context for i in ids], dtype=bool),
        "on_path": pd.Series([i in on_path for i in ids], dtype=bool),
        "covered_by": pd.Series([covered.get(i) if i is not None else None for i in ids], dtype="string"),
        "line": int64(lines),
        "detail": pd.Series(details, dtype="string"),
        "verdict": pd.Series(verdicts, dtype=pd.CategoricalDtype(_VERDICTS)),
        "decided_by": pd.Series(deciders, dtype="string"),
        "subject": pd.Series(subjects, dtype="string"),
        "reason": pd.Series(reasons, dtype="string"),
        "cost_usd": pd.Series(costs, dtype="float64"),
        "cost_status": pd.Series(cost_states, dtype=pd.CategoricalDtype(["priced", "local", "unknown"])),
        "image_tokens": pd.Series(pictured, dtype="Int64"),
    }, columns=list(TRANSCRIPT_COLUMNS))


def _image_rule(model: str | None) -> str:
    """The image-token rule of the session's model, from its name (the transcript names no provider)."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    if name.startswith("claude"):
        return "anthropic"
    if name.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    return ""  # unknown: image_tokens counts the larger of the two



def _call_words(call: Mapping[str, Any]) -> str:
    args = call.get("arguments")
    return describe_call(str(call.get("name", "")), args if isinstance(args, Mapping) else {})


# -- flight records -------------------------------------------------------------------------------
_CATEGORY_FIELDS = {"kind", "trigger", "outcome", "quality", "source", "summary_cost_status"}
#: Fields of the records the engine writes (budget checks, compactions), always present as columns.
FLIGHT_COLUMNS = ("kind", "ts", "session_id", "inference", "effective", "hard_limit", "soft_limit", "context_window",
                  "source", "operation_id", "trigger", "outcome", "reason", "tokens_before", "tokens_after",
                  "reclaimed_tokens", "reclaimed_percent", "checkpoint_id", "duration_ms", "quality",
                  "generated", "skipped_before_generation", "summary_used", "predicted_after", "measured_after",
                  "summary_input_tokens", "summary_output_tokens", "wasted_ms", "wasted_tokens",
                  "summary_cost_usd", "summary_cost_status")
_INT_FIELDS = {"inference", "effective", "hard_limit", "soft_limit", "context_window", "tokens_before",
               "tokens_after", "reclaimed_tokens", "duration_ms", "estimated", "predicted_after", "measured_after",
               "summary_input_tokens", "summary_output_tokens", "wasted_ms", "wasted_tokens"}
_BOOL_FIELDS = {"generated", "skipped_before_generation", "summary_used"}
_FLOAT_FIELDS = {"reclaimed_percent", "summary_cost_usd"}
_STRING_FIELDS = {"session_id", "operation_id", "reason", "checkpoint_id"}


def _flatten(record: Mapping[str, Any], prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """A record as read (:func:`~soba_notebook.flight.read_flight_records`: snake_case already),
    its nested objects' fields as ``outer.inner`` columns."""
    out = {} if out is None else out
    for key, value in record.items():
        name = prefix + str(key)
        if isinstance(value, Mapping) and value:
            _flatten(value, name + ".", out)
        else:
            out[name] = value
    return out


def _wasted(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with what its compaction spent on a summary that was thrown away: the duration and
    the summary request's estimated tokens when a summary was requested (``generated``) and
    nothing was appended, or the local deterministic capsule was appended instead (``summary_used``
    false); 0 for any other compaction; missing (NA) for budget records and for compaction records
    written before ``generated`` was recorded."""
    if row.get("kind") != "compaction" or not isinstance(row.get("generated"), bool):
        return row
    thrown_away = row["generated"] and (row.get("outcome") != "completed" or row.get("summary_used") is False)
    tokens = sum(v for v in (row.get("summary_input_tokens"), row.get("summary_output_tokens")) if isinstance(v, int))
    duration = row.get("duration_ms")
    return {**row, "wasted_ms": (duration if isinstance(duration, int) else None) if thrown_away else 0,
            "wasted_tokens": tokens if thrown_away else 0}


def _records_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = [_wasted(_flatten(r)) for r in records]
    columns: dict[str, None] = dict.fromkeys(FLIGHT_COLUMNS)
    for row in rows:
        columns.update(dict.fromkeys(row))
    out: dict[str, pd.Series] = {}
    for name in columns:
        values = [row.get(name) for row in rows]
        present = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
        if name in _INT_FIELDS and numbers and all(float(v).is_integer() for v in present):
            out[name] = int64(int(v) if isinstance(v, int | float) and v == v else None for v in values)
        elif name in _BOOL_FIELDS and all(isinstance(v, bool) for v in present):
            out[name] = pd.Series(pd.array([v if isinstance(v, bool) else None for v in values], dtype="boolean"))
        elif name in _FLOAT_FIELDS and numbers:
            out[name] = pd.Series([float(v) if isinstance(v, int | float) else None for v in values], dtype="float64")
        elif name in _STRING_FIELDS and all(isinstance(v, str) for v in present):
            out[name] = pd.Series([v if isinstance(v, str) else None for v in values], dtype="string")
        elif name == "ts":
            out[name] = utc_times(v if isinstance(v, str) else None for v in values)
        elif name in _CATEGORY_FIELDS:
            categories = {"trigger": TRIGGER_CATEGORIES, "outcome": OUTCOME_CATEGORIES,
                          "quality": QUALITY_CATEGORIES, "source": SOURCE_CATEGORIES}.get(name)
            known = categories is not None and all(v in categories for v in present)
            out[name] = categorical((v if isinstance(v, str) else None for v in values),
                                    categories if known else None)
        elif present and all(isinstance(v, bool) for v in present):
            out[name] = pd.Series(pd.array([v if isinstance(v, bool) else None for v in values], dtype="boolean"))
        elif present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            out[name] = int64(v if isinstance(v, int) else None for v in values)
        elif present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
            out[name] = pd.Series([float(v) if isinstance(v, int | float) else None for v in values], dtype="float64")
        elif present and all(isinstance(v, str) for v in present):
            out[name] = pd.Series([v if isinstance(v, str) else None for v in values], dtype="string")
        else:
            out[name] = pd.Series(values, dtype=object)
    return pd.DataFrame(out, columns=list(columns))


def session_flight_records(store: SessionStore) -> list[dict[str, Any]]:
    """The records of ``store``'s project flight file that belong to this session.

    A record belongs to the session when its ``session_id`` is the session's id, or when it has no
    ``session_id`` at all (a recorder created without one).
    """
    file = find_flight_file(store)
    if file is None:
        return []
    sid = store.id
    return [r for r in read_flight_records(file) if r.get("session_id") in (sid, None)]


def _looks_like_flight_file(file: Path) -> bool:
    if file.name == "flight.jsonl":
        return True
    first = first_json_line(file)
    return isinstance(first, dict) and "kind" in first and "type" not in first


def flight_records(path_or_session: SessionLike) -> pd.DataFrame:
    """One row per flight record (``.soba/flight.jsonl``), in file order.

    ``path_or_session`` is a flight file, or a session (path or store) whose project's flight
    file is then read and filtered to that session's records (an imported transcript has none:
    the frame is empty but has the columns below).

    Columns (always, in this order; :data:`FLIGHT_COLUMNS`): ``kind`` (category: ``budget`` /
    ``compaction``), ``ts`` (datetime64[ns, UTC]), ``session_id`` (string), ``inference``,
    ``effective``, ``hard_limit``, ``soft_limit``, ``context_window`` (Int64), ``source``
    (category), ``operation_id`` (string), ``trigger``, ``outcome`` (category), ``reason``
    (string), ``tokens_before``, ``tokens_after``, ``reclaimed_tokens`` (Int64),
    ``reclaimed_percent`` (float64), ``checkpoint_id`` (string), ``duration_ms`` (Int64),
    ``quality`` (category); ``generated``, ``skipped_before_generation``, ``summary_used`` (boolean),
    ``predicted_after``, ``measured_after``, ``summary_input_tokens``, ``summary_output_tokens``,
    ``wasted_ms``, ``wasted_tokens`` (Int64), ``summary_cost_usd`` (float64: what the compaction's
    summary requests cost in dollars; 0 for a local model, NaN when unknown or on older records)
    and ``summary_cost_status`` (category: ``priced``, ``local``, ``unknown``;
    :mod:`soba_notebook.pricing`); then any other field of the records in order of
    first appearance.

    The summary of a compaction: ``generated`` is true when a summary request
    was made to the model; ``predicted_after`` is the continuation predicted before it (soft
    triggers), ``measured_after`` the one measured after it, ``summary_input_tokens`` /
    ``summary_output_tokens`` the request's estimated size. ``wasted_ms`` and ``wasted_tokens``
    are what a *thrown-away* summary cost: its compaction's duration and those tokens when a
    summary was requested and nothing was appended (skipped by the post-generation ROI,
    cancelled, stale, failed) or the local deterministic capsule was appended instead of it
    (``summary_used`` false: the model's would have grown the context, or was partial and larger),
    else 0 (NA on budget rows and on older records). Totals:
    ``df[["wasted_ms", "wasted_tokens"]].sum()``; the post-generation ROI misses alone:
    ``df[df.generated.fillna(False) & (df.outcome == "skipped")]``, and their rate among soft
    summaries is that count over ``df.generated.fillna(False) & df.trigger.isin(["milestone",
    "plan_pivot", "turn_complete", "auto_threshold"])``.
    Fields read in snake_case whichever spelling the file used (``hardLimit`` -> ``hard_limit``:
    :func:`~soba_notebook.flight.read_flight_records`) and nested objects are flattened with dots.
    An extra field whose values are all whole numbers is ``Int64``, all booleans ``boolean``, all text ``string``.
    """
    if isinstance(path_or_session, SessionStore):
        return _records_frame(session_flight_records(path_or_session))
    if not isinstance(path_or_session, str | os.PathLike):
        raise TypeError(f"flight_records needs a flight file, a session file or a SessionStore; "
                        f"got {type(path_or_session).__name__}")
    file = Path(path_or_session).expanduser()
    if not file.exists():
        raise SessionError(f"{file}: no such flight record or session file")
    if file.is_dir():
        raise SessionError(f"{file}: is a directory; pass .soba/flight.jsonl or a session file")
    if _looks_like_flight_file(file):
        records = read_flight_records(file)
        return _records_frame(records)
    return _records_frame(session_flight_records(open_session(file)))


# -- capsules -------------------------------------------------------------------------------------
def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def capsules(session: SessionLike) -> pd.DataFrame:
    """One row per capsule entry (a completed compaction), in file order.

    Columns:

    ====================== =================== ====================================================
    checkpoint_id          string              ``ck_…``
    trigger                category            the trigger that ran it (fixed set of seven)
    quality                category            ``ok``, ``partial`` (a model summary with no usable
                                               goal or next steps, or with a junk decision, blocker
                                               or next step; kept only when no smaller local
                                               capsule exists) or ``degraded`` (local fallback,
                                               or a rejected partial capsule's replacement)
    tokens_before          Int64               effective tokens of the request before compaction
    tokens_after           Int64               exact size of the continuation after it
    reclaimed_tokens       Int64               ``tokens_before - tokens_after``
    reclaimed_percent      float64             reclaimed share of ``tokens_before``, in percent
    first_kept_entry_id    string              first entry kept verbatim (``<NA>``: nothing kept)
    summarized_entries     Int64               entries the capsule summarized
    duration_ms            Int64               from the flight record of the same operation id,
                                               when ``<project>/.soba/flight.jsonl`` is found
    operation_id           string              ``op_…``, joins with :func:`flight_records`
    ts                     datetime64[ns, UTC] when the capsule was appended
    entry_id               string              the capsule entry's id
    source                 category            measurement source of ``tokens_before``
    previous_checkpoint_id string              the capsule it rolled forward
    on_path                bool                on the current root-to-leaf path
    ungrounded_claims      Int64               model claims about files, checks or skills the
                                               history did not support, dropped (``<NA>``: not
                                               recorded, a capsule written before the count):
                                               files, checks and skills the history does not show,
                                               goals and constraints no user message supports,
                                               decisions, blockers and next steps naming what
                                               never happened
    ungrounded_by_field    string              the same per field, ``constraints 1, decisions 2``
                                               (``<NA>``: none)
    note                   string              the capsule's note: why it is ``partial`` (junk,
                                               a missing goal or next steps), what was dropped, or
                                               why the fallback was used
    ====================== =================== ====================================================
    """
    snap = snapshot(session)
    durations: dict[str, int] = {}
    for record in session_flight_records(snap.store):
        if record.get("kind") != "compaction":
            continue
        op = record.get("operation_id")
        ms = _int_or_none(record.get("duration_ms"))
        if isinstance(op, str) and ms is not None:
            durations[op] = ms
    on_path = {e.id for e in snap.path}
    rows: dict[str, list[Any]] = {name: [] for name in CAPSULE_COLUMNS}
    for entry in snap.entries:
        if entry.type != "capsule":
            continue
        d = entry.data
        before = _int_or_none(d.get("tokensBefore"))
        after = _int_or_none(d.get("tokensAfter"))
        reclaimed = before - after if before is not None and after is not None else None
        op = _str_or_none(d.get("operationId"))
        rows["checkpoint_id"].append(_str_or_none(d.get("checkpointId")))
        rows["trigger"].append(_str_or_none(d.get("trigger")))
        rows["quality"].append(_str_or_none(d.get("quality")))
        rows["tokens_before"].append(before)
        rows["tokens_after"].append(after)
        rows["reclaimed_tokens"].append(reclaimed)
        rows["reclaimed_percent"].append(round(100.0 * reclaimed / before, 1) if reclaimed is not None and before
                                         else float("nan"))
        rows["first_kept_entry_id"].append(_str_or_none(d.get("firstKeptEntryId")))
        rows["summarized_entries"].append(_int_or_none(d.get("summarizedEntries")))
        rows["duration_ms"].append(durations.get(op) if op else None)
        rows["operation_id"].append(op)
        rows["ts"].append(entry.ts if isinstance(entry.ts, str) else None)
        rows["entry_id"].append(entry.id)
        rows["source"].append(_str_or_none(d.get("source")))
        rows["previous_checkpoint_id"].append(_str_or_none(d.get("previousCheckpointId")))
        rows["on_path"].append(entry.id in on_path)
        rows["ungrounded_claims"].append(_int_or_none(d.get("ungroundedClaims")))
        by_field = d.get("ungroundedByField")
        rows["ungrounded_by_field"].append(", ".join(f"{k} {n}" for k, n in by_field.items())
                                           if isinstance(by_field, dict) and by_field else None)
        rows["note"].append(_str_or_none(d.get("note")))
    strings = ("checkpoint_id", "first_kept_entry_id", "operation_id", "entry_id", "previous_checkpoint_id",
               "ungrounded_by_field", "note")
    return pd.DataFrame({
        **{name: pd.Series(rows[name], dtype="string") for name in strings},
        "trigger": categorical(rows["trigger"], TRIGGER_CATEGORIES),
        "quality": categorical(rows["quality"], QUALITY_CATEGORIES),
        "source": categorical(rows["source"], SOURCE_CATEGORIES),
        **{name: int64(rows[name]) for name in ("tokens_before", "tokens_after", "reclaimed_tokens",
                                                "summarized_entries", "duration_ms", "ungrounded_claims")},
        "reclaimed_percent": pd.Series(rows["reclaimed_percent"], dtype="float64"),
        "ts": utc_times(rows["ts"]),
        "on_path": pd.Series(rows["on_path"], dtype=bool),
    }, columns=list(CAPSULE_COLUMNS))
