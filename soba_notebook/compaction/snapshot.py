"""The budget a user reads: one immutable snapshot, published by the engine, read by every display.

Why it exists: the widget, ``%soba status``, ``%budget`` and a cell's completion line used to
measure on their own, at different moments and from two threads, and disagreed (issue 20 item 7);
the kernel thread even ran the tracker while the agent's thread was using it (issue 21 item 12).
Now the engine, on the thread that owns it, publishes a :class:`BudgetSnapshot` with every
``budget`` event and after every compaction (:class:`SnapshotBox`); readers on any thread take
the latest one. The ``budget`` event carries the same fields (:meth:`BudgetSnapshot.event`), so
a display fed by the bus holds exactly what ``%soba status`` reads.

Every snapshot says which request it measures (``request``): the one the running inference sent
(published before each inference), or the next one SOBA would send (after a turn, a compaction,
a rewind, or when a display asks between turns). A turn's end publishes a ``next`` snapshot, so
the cell's end-of-turn line and the widget under it show the request the reply and tool results
made, not the smaller one sent before them; :data:`REQUEST_WORDS` is how every display says it.

"Last compaction" means the last one that did something (completed, failed, cancelled, stale);
a skipped one is a note (``skipped``) that a later compaction clears, as the widget has always
shown it. A reopened session's last compaction comes from the capsule in force
(:func:`compaction_of_capsule`): its trigger, figures and checkpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast

from ..budget import BudgetCheck
from ..session.entries import Entry
from ..session.payloads import BudgetPayload, BudgetRequest, BudgetSource, CompactionEndPayload, capsule_data

__all__ = ["REQUEST_WORDS", "BudgetSnapshot", "SnapshotBox", "compaction_of_capsule"]

#: What each display says a figure measures.
REQUEST_WORDS: Mapping[str, str] = MappingProxyType({"sent": "last request sent", "next": "next request"})


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """The session's budget at one moment, as the engine measured it on its own thread.

    ``last_compaction`` and ``skipped`` are ``compaction_end`` payloads (read-only mappings);
    ``skipped`` is the last skipped compaction after ``last_compaction``, if any.
    """

    session_id: str
    inference: int
    effective: int
    hard_limit: int
    soft_limit: int
    context_window: int
    source: BudgetSource
    leaf_id: str | None
    last_compaction: Mapping[str, Any] | None = None
    skipped: Mapping[str, Any] | None = None
    pending_intents: tuple[str, ...] = ()
    request: BudgetRequest = "next"

    @classmethod
    def of(cls, session_id: str, inference: int, check: BudgetCheck, *,
           last_compaction: Mapping[str, Any] | None = None, skipped: Mapping[str, Any] | None = None,
           pending_intents: tuple[str, ...] = (), request: BudgetRequest = "next") -> BudgetSnapshot:
        return cls(session_id, inference, check.effective, check.hard_limit, check.soft_limit, check.context_window,
                   check.source, check.leaf_id, _frozen(last_compaction), _frozen(skipped), pending_intents, request)

    @property
    def request_words(self) -> str:
        """Which request the figure measures, in the words every display uses."""
        return REQUEST_WORDS[self.request]

    def event(self) -> BudgetPayload:
        """The ``budget`` event's payload: the measurement, and the compaction lines it goes with."""
        payload = BudgetPayload(session_id=self.session_id, inference=self.inference, effective=self.effective,
                                hard_limit=self.hard_limit, soft_limit=self.soft_limit,
                                context_window=self.context_window, source=self.source, request=self.request)
        payload["last_compaction"] = _payload(self.last_compaction)
        payload["skipped"] = _payload(self.skipped)
        return payload


def _payload(frozen: Mapping[str, Any] | None) -> CompactionEndPayload | None:
    return cast(CompactionEndPayload, dict(frozen)) if frozen is not None else None


def _frozen(payload: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return MappingProxyType(dict(payload)) if payload is not None else None


class SnapshotBox:
    """The latest published snapshot; written by the engine's thread, read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: BudgetSnapshot | None = None

    def publish(self, snapshot: BudgetSnapshot) -> None:
        with self._lock:
            self._latest = snapshot

    def latest(self) -> BudgetSnapshot | None:
        with self._lock:
            return self._latest


def compaction_of_capsule(entry: Entry) -> CompactionEndPayload | None:
    """The ``compaction_end`` figures a capsule entry records (a reopened session's last
    compaction); ``None`` for a loaded Portable Capsule, which no compaction made.

    Nothing is invented: the duration was not recorded, so it is 0.
    """
    data = capsule_data(entry)
    trigger = data.get("trigger")
    before, after = data.get("tokensBefore"), data.get("tokensAfter")
    if trigger == "capsule_load" or not isinstance(before, int) or not isinstance(after, int):
        return None
    reclaimed = before - after
    return CompactionEndPayload(
        operation_id=str(data.get("operationId") or ""), trigger=trigger, outcome="completed",
        reason=data.get("note"), tokens_before=before, tokens_after=after, reclaimed_tokens=reclaimed,
        reclaimed_percent=round(100.0 * reclaimed / before, 1) if before else 0.0,
        checkpoint_id=data.get("checkpointId"), duration_ms=0, quality=data.get("quality"),
        source=data.get("source") or "estimated")
