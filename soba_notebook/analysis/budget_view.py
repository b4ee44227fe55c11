"""The token budget over a session's life: effective tokens per inference against the limits.

From the flight records' ``budget`` entries when the session has them (what the barrier really
measured), otherwise by walking the session: an assistant reply's provider usage gives the exact
prompt of the request that produced it (``input + cacheRead + cacheWrite``), and where a reply
has none, SOBA's own estimate of that request stands in.

The flight records also hold the *next* request as the displays showed it (``request: next``, after
a turn, a compaction, a rewind: compaction/snapshot.py). Only the last one means anything once more
inferences followed, so a history that ends on one ends with a ``next_request`` row: the figure the
widget, the end-of-turn line and ``%soba status`` show, never drawn as a request sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from ..config import SobaConfig, load_config
from ..session.context import first_kept_index
from ..session.entries import Entry
from ..tokens import REPLY_PRIMING
from ..trusted_import import trusted_import
from ._common import (
    OUTCOME_CATEGORIES,
    SOURCE_CATEGORIES,
    TRIGGER_CATEGORIES,
    SessionLike,
    Snapshot,
    categorical,
    counter_for,
    int64,
    snapshot,
    utc_times,
)
from .frames import capsule_cost, session_flight_records

__all__ = ["BUDGET_COLUMNS", "budget_history", "plot_budget"]

BUDGET_COLUMNS = ("inference", "event", "entry_id", "ts", "effective_tokens", "tokens_after", "estimated_tokens",
                  "hard_limit", "soft_limit", "context_window", "source", "origin", "compaction_trigger",
                  "compaction_outcome", "checkpoint_id")

#: What a row is: a request sent, a compaction outside the barrier, the next request (last row only).
BUDGET_EVENTS = ("inference", "compaction", "next_request")

#: Triggers that run at the preflight barrier, before an inference (the others run on their own).
_PREFLIGHT = frozenset({"hard_limit", "milestone", "plan_pivot", "turn_complete", "auto_threshold"})


@dataclass
class _Row:
    event: str
    entry_id: str | None = None
    ts: str | None = None
    effective: int | None = None
    after: int | None = None
    estimated: int | None = None
    hard_limit: int | None = None
    soft_limit: int | None = None
    context_window: int | None = None
    source: str | None = None
    origin: str = "session"
    trigger: str | None = None
    outcome: str | None = None
    checkpoint: str | None = None
    turn_inference: int | None = None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


#: The limits a budget or compaction record carries, by the names every layer in Python uses.
_LIMITS = ("hard_limit", "soft_limit", "context_window")


class _LimitFields(TypedDict):
    hard_limit: int | None
    soft_limit: int | None
    context_window: int | None


def _limits(rec: Mapping[str, Any]) -> _LimitFields:
    return _LimitFields(hard_limit=_int(rec.get("hard_limit")), soft_limit=_int(rec.get("soft_limit")),
                        context_window=_int(rec.get("context_window")))


def _from_flight(records: Sequence[Mapping[str, Any]]) -> list[_Row]:
    """One row per inference from the barrier's records; a preflight compaction joins the row of
    the inference it ran before (its 'after' budget record becomes ``tokens_after``)."""
    rows: list[_Row] = []
    awaiting_after = False
    for rec in records:
        kind = rec.get("kind")
        if kind == "budget" and rec.get("request") == "next":
            continue  # a display's figure, not a request sent: only the last one counts (below)
        if kind == "budget":
            effective = _int(rec.get("effective"))
            turn_inference = _int(rec.get("inference"))
            if awaiting_after and rows and rows[-1].turn_inference == turn_inference:
                rows[-1].after = effective
                awaiting_after = False
                continue
            awaiting_after = False
            rows.append(_Row("inference", ts=rec.get("ts"), effective=effective, after=effective,
                             estimated=_int(rec.get("estimated")), **_limits(rec),
                             source=rec.get("source"), origin="flight", turn_inference=turn_inference))
        elif kind == "compaction":
            trigger = rec.get("trigger")
            outcome = rec.get("outcome")
            checkpoint = rec.get("checkpoint_id")
            if trigger in _PREFLIGHT and rows and rows[-1].trigger is None and rows[-1].origin == "flight":
                row = rows[-1]
                row.trigger, row.outcome, row.checkpoint = trigger, outcome, checkpoint
                awaiting_after = outcome == "completed"
                if awaiting_after:
                    row.after = _int(rec.get("tokens_after"))
            else:  # %compact, overflow recovery: an event of its own between inferences
                rows.append(_Row("compaction", ts=rec.get("ts"),
                                 effective=_int(rec.get("tokens_before")),
                                 after=_int(rec.get("tokens_after")), **_limits(rec),
                                 source=rec.get("source"), origin="flight", trigger=trigger, outcome=outcome,
                                 checkpoint=checkpoint))
                awaiting_after = False
    if records and records[-1].get("kind") == "budget" and records[-1].get("request") == "next":
        rec = records[-1]
        effective = _int(rec.get("effective"))
        rows.append(_Row("next_request", ts=rec.get("ts"), effective=effective, after=effective, **_limits(rec),
                         source=rec.get("source"), origin="flight"))
    return rows


def _default_config(snap: Snapshot) -> SobaConfig:
    parent = snap.store.file.parent
    if parent.name == "sessions" and parent.parent.name == ".soba":
        return load_config(project_dir=parent.parent.parent)
    return load_config(project_dir=parent)


def _from_session(snap: Snapshot, config: SobaConfig) -> list[_Row]:
    """One row per assistant reply on the path: the request that produced it."""
    counter = counter_for(snap.model(), snap.id)
    count = counter.count_entry
    limits = _LimitFields(hard_limit=config.hard_limit, soft_limit=config.soft_limit,
                          context_window=config.model.context_window)
    rows: list[_Row] = []
    path = snap.path
    cum = 0  # tokens of path[0:i]
    start_cum = 0  # tokens of path[0:start], where the model input's verbatim part starts
    cum_at: list[int] = []
    cap_cost = 0
    pending: Entry | None = None  # a capsule appended since the last inference
    for i, entry in enumerate(path):
        cum_at.append(cum)
        if entry.type == "capsule":
            start = first_kept_index(path, i)
            start_cum = cum_at[start] if start <= i else cum
            cap_cost = capsule_cost(entry, counter)
            pending = entry
            continue
        if entry.type == "message" and entry.role == "assistant":
            estimate = cap_cost + cum - start_cum + REPLY_PRIMING
            usage = entry.usage
            if usage is not None and usage.prompt_tokens > 0:
                # the offline model's usage is SOBA's own count of the whole request: an estimate
                sent, source = usage.prompt_tokens, "provider_usage" if usage.reported else "estimated"
            else:
                sent, source = estimate, "estimated"
            row = _Row("inference", entry_id=entry.id, ts=entry.ts, effective=sent, after=sent, estimated=estimate,
                       source=source, **limits)
            if pending is not None:
                d = pending.data
                row.trigger, row.outcome = d.get("trigger"), "completed"
                row.checkpoint = d.get("checkpointId")
                row.effective = _int(d.get("tokensBefore")) or sent
                pending = None
            rows.append(row)
        cum += count(entry)
    return rows


def budget_history(session: SessionLike, config: SobaConfig | None = None) -> pd.DataFrame:
    """Effective tokens per inference, with the hard and soft limits and the measurement source.

    Rows come from the flight records' ``budget`` entries for this session when there are any
    (``origin == "flight"``), else from a walk over the session path (``origin == "session"``):
    each assistant reply is one inference, measured by its provider usage when it has one
    (``source == "provider_usage"``), else by SOBA's estimate of the request (``estimated``; the
    walk cannot see the system prompt and tool schemas, so they are not in it). Limits for a
    walk come from ``config`` (default: the session's project config, else the defaults).

    Columns:

    ================== =================== ==================================================
    inference          Int64               0, 1, 2… in order
    event              category            ``inference``, or ``compaction`` for a compaction
                                           outside the barrier (``%compact``, overflow recovery),
                                           or, last, ``next_request``: the next request as the
                                           displays show it, not sent yet
    entry_id           string              the assistant reply (session walk only)
    ts                 datetime64[ns, UTC] when it was measured / replied
    effective_tokens   Int64               effective tokens before the barrier
    tokens_after       Int64               tokens of the request sent (after any compaction)
    estimated_tokens   Int64               SOBA's own estimate, where known
    hard_limit         Int64               ``contextWindow - maxOutputTokens - safetyReserveTokens``
    soft_limit         Int64               the auto-compaction threshold
    context_window     Int64               the model's window
    source             category            ``provider_usage`` or ``estimated``
    origin             category            ``flight`` or ``session``
    compaction_trigger category            trigger of a compaction before this inference
    compaction_outcome category            its outcome (``completed``, ``skipped``…)
    checkpoint_id      string              the capsule it appended
    ================== =================== ==================================================
    """
    snap = snapshot(session)
    records = [r for r in session_flight_records(snap.store) if r.get("kind") in ("budget", "compaction")]
    rows = _from_flight(records) if any(r.get("kind") == "budget" for r in records) else []
    if not rows:
        rows = _from_session(snap, config or _default_config(snap))
    return pd.DataFrame({
        "inference": int64(range(len(rows))),
        "event": categorical((r.event for r in rows), BUDGET_EVENTS),
        "entry_id": pd.Series([r.entry_id for r in rows], dtype="string"),
        "ts": utc_times(r.ts if isinstance(r.ts, str) else None for r in rows),
        "effective_tokens": int64(r.effective for r in rows),
        "tokens_after": int64(r.after for r in rows),
        "estimated_tokens": int64(r.estimated for r in rows),
        **{name: int64(getattr(r, name) for r in rows) for name in _LIMITS},
        "source": categorical((r.source for r in rows), SOURCE_CATEGORIES),
        "origin": categorical((r.origin for r in rows), ("flight", "session")),
        "compaction_trigger": categorical((r.trigger for r in rows), TRIGGER_CATEGORIES),
        "compaction_outcome": categorical((r.outcome for r in rows), OUTCOME_CATEGORIES),
        "checkpoint_id": pd.Series([r.checkpoint for r in rows], dtype="string"),
    }, columns=list(BUDGET_COLUMNS))


# -- the plot -------------------------------------------------------------------------------------
_MARKERS = {"hard_limit": "v", "auto_threshold": "o", "turn_complete": "s", "milestone": "D", "plan_pivot": "P",
            "user": "*", "context_overflow": "X"}


def _floats(series: pd.Series) -> list[float]:
    return [math.nan if pd.isna(v) else float(v) for v in series.tolist()]


def _limit(ax: Any, x: list[float], values: list[float], label: str, color: str) -> None:
    known = {v for v in values if not math.isnan(v)}
    if len(known) == 1:
        value = known.pop()
        ax.axhline(value, color=color, linestyle="--", linewidth=1.2, label=f"{label} ({value:,.0f})")
    elif known:
        ax.step(x, values, where="post", color=color, linestyle="--", linewidth=1.2, label=label)


def _completed_compactions(frame: pd.DataFrame) -> set[int]:
    """Row positions where a compaction completed before that inference."""
    if "compaction_trigger" not in frame.columns:
        return set()
    outcomes = frame["compaction_outcome"].tolist() if "compaction_outcome" in frame.columns else \
        ["completed"] * len(frame)
    triggers = frame["compaction_trigger"].tolist()
    return {i for i, (t, o) in enumerate(zip(triggers, outcomes, strict=True))
            if isinstance(t, str) and o == "completed"}


def plot_budget(data: pd.DataFrame | SessionLike, ax: Any = None, *, title: str | None = None) -> Any:
    """Draw the tokens each request sent, the hard and soft limits as horizontal lines, and each
    compaction as a hollow marker (by trigger) at the history it replaced, never sent, with a dotted
    line down to what was sent instead.

    ``data`` is a :func:`budget_history` frame (or any frame with ``effective_tokens``,
    ``hard_limit`` and ``soft_limit``; ``inference``, ``tokens_after``, ``compaction_trigger`` and
    ``compaction_outcome`` are used when present), or a session to compute it for. Returns the
    matplotlib ``Axes``.
    """
    frame = data if isinstance(data, pd.DataFrame) else budget_history(data)
    if "event" in frame.columns:  # the next request is a display's figure, never a request sent
        frame = frame[frame["event"] != "next_request"].reset_index(drop=True)
    missing = [c for c in ("effective_tokens", "hard_limit", "soft_limit") if c not in frame.columns]
    if missing:
        raise ValueError(f"plot_budget needs a budget_history() frame; missing columns: {', '.join(missing)}")
    plt = trusted_import("matplotlib.pyplot")

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4))
    x = _floats(frame["inference"]) if "inference" in frame.columns else [float(i) for i in range(len(frame))]
    effective = _floats(frame["effective_tokens"])
    after = _floats(frame["tokens_after"]) if "tokens_after" in frame.columns else effective
    done_at = _completed_compactions(frame)
    # What each request really held: after a completed compaction, the continuation, not the
    # history it replaced (that history was never sent, however far over the limit it had grown).
    sent = [after[i] if i in done_at else effective[i] for i in range(len(effective))]
    ax.plot(x, sent, color="tab:blue", linewidth=1.3, label="tokens sent")
    _limit(ax, x, _floats(frame["hard_limit"]), "hard limit", "tab:red")
    _limit(ax, x, _floats(frame["soft_limit"]), "soft limit", "tab:orange")
    if "compaction_trigger" in frame.columns:
        outcomes = frame["compaction_outcome"] if "compaction_outcome" in frame.columns else \
            pd.Series(["completed"] * len(frame))
        triggers = frame["compaction_trigger"].tolist()
        for trig in dict.fromkeys(t for t in triggers if isinstance(t, str)):
            idx = [i for i, t in enumerate(triggers) if t == trig]
            done = [i for i in idx if outcomes.iloc[i] == "completed"]
            other = [i for i in idx if outcomes.iloc[i] != "completed"]
            if done:
                ax.vlines([x[i] for i in done], [after[i] for i in done], [effective[i] for i in done],
                          colors="tab:green", linewidth=1.0, alpha=0.7, linestyles="dotted")
                ax.scatter([x[i] for i in done], [effective[i] for i in done], marker=_MARKERS.get(trig, "o"),
                           facecolors="none", edgecolors="tab:green", zorder=3,
                           label=f"compaction: {trig} ({len(done)}), history before it (never sent)")
            if other:
                ax.scatter([x[i] for i in other], [effective[i] for i in other], marker="x", s=14, alpha=0.6,
                           color="tab:gray", zorder=3, label=f"{trig}, not completed ({len(other)})")
    if not len(frame):
        ax.text(0.5, 0.5, "no inferences", transform=ax.transAxes, ha="center", va="center")
    ticker, transforms = trusted_import("matplotlib.ticker"), trusted_import("matplotlib.transforms")
    FuncFormatter, MaxNLocator, offset_copy = ticker.FuncFormatter, ticker.MaxNLocator, transforms.offset_copy

    # as many ticks as the axes' width holds ("auto"), so two plots side by side do not run their
    # labels together; inferences are counted, not measured
    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, steps=[1, 2, 5, 10]))
    ax.yaxis.set_major_locator(MaxNLocator(nbins="auto"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_xlabel("inference")
    ax.set_ylabel("tokens")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    # under the axes (below the x label), not beside them: beside, the long labels took half the
    # width of each of two plots side by side; over them, they would hide the curve
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-34, units="points")
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.0), bbox_transform=below, fontsize="x-small",
              framealpha=0.8, borderaxespad=0.0, ncol=2)
    if title:
        ax.set_title(title)
    return ax
