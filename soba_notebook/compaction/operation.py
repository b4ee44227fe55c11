"""One compaction as data: the record the barrier's steps pass along, and the engine's wiring.

The barrier (:mod:`.barrier`) runs a compaction as steps that each take and return an
:class:`Operation`: *prepare* fixes the plan (pure), *gate* adds the deterministic capsules and the
checks made before any summary is requested, *compact* adds the candidate capsules with the
continuation each was measured at and the one chosen (the last), *append* writes it. Whatever
ends the operation is one more field of the record (``ended``), and everything reported is made
from it: the ``compaction_start`` event, the capsule entry's data, the terminal
:class:`~.outcome.CompactionOutcome` (so the ``compaction_end`` event, the flight record and the
completion line). No step passes a dozen loose values to the next.

:class:`EngineParts` is what the engine is built with besides its store, config and counter (the
summarizer, the predictor, the checkpoint id source, the scrubber...), fixed at construction.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..budget import BudgetCheck
from ..events import EventBus
from ..flight import FlightRecorder
from ..pricing import Cost
from ..scrub import Scrubber
from ..session.entries import Entry
from ..session.payloads import CapsuleData, CompactionStartPayload, KernelStateData, Outcome, Quality
from .capsule import Capsule
from .capsule_count import TextCount
from .kernel_section import KernelStateProvider
from .outcome import CompactionOutcome
from .planner import CompactionPlan
from .predict import SavingsPredictor, SummaryAttempt
from .summarize import Summarizer
from .triggers import Trigger, trigger_name

__all__ = ["Candidate", "EngineParts", "Operation", "random_checkpoint_id", "random_operation_id"]


def random_checkpoint_id() -> str:
    return "ck_" + secrets.token_hex(5)


def random_operation_id() -> str:
    return "op_" + secrets.token_hex(6)


def _environ_scrub(value: Any) -> Any:
    """The environment's secrets as they are at the moment of the scrub."""
    return Scrubber.from_environ().json(value)


@dataclass(frozen=True, slots=True)
class EngineParts:
    """What a :class:`~.barrier.CompactionEngine` is built with besides its store, config and counter."""

    bus: EventBus = field(default_factory=EventBus)
    #: writes the capsule (``None``: the local deterministic capsule, ``quality: degraded``)
    summarizer: Summarizer | None = None
    #: the prediction's learned model-capsule factor (``None``: only the seed's pre-generation gate)
    predictor: SavingsPredictor | None = field(default_factory=SavingsPredictor)
    flight: FlightRecorder | None = None
    #: a new capsule's checkpoint id; its text is part of what is measured, so a replay numbers them
    checkpoint_ids: Callable[[], str] = random_checkpoint_id
    #: the transcript's secret scrubber (JSON value -> JSON value), applied once to a capsule entry's data as it
    #: is appended (and to a handoff capsule as it is returned)
    scrub: Callable[[Any], Any] = _environ_scrub
    #: the kernel's variables for the capsule's kernel-state section (the notebook layer's)
    kernel_state: KernelStateProvider | None = None
    #: the provider's exact count of a new capsule's text (compaction/capsule_count.py), where it has one
    count_text: TextCount | None = None
    clock: Callable[[], float] = time.monotonic
    #: what the summary requests since the last call cost (the agent's :class:`~soba_notebook.pricing.CostLedger`),
    #: taken once per operation for its ``compaction_end`` and flight record; ``None``: not priced
    summary_cost: Callable[[], Cost | None] | None = None
    #: seconds between progress updates while a summary is generated
    progress_interval: float = 0.25


@dataclass(frozen=True, slots=True)
class Candidate:
    """A capsule considered for the append, fitted, with the continuation measured with it."""

    capsule: Capsule
    quality: Quality
    note: str | None
    after: int
    #: per field (JSON key), the model's claims the history did not support (dropped); none for a local
    #: capsule, except one chosen over a rejected (partial) model capsule: it keeps that capsule's counts
    by_field: tuple[tuple[str, int], ...]
    #: why it was made: ``model`` (the summarizer's, or its fallback), ``local`` (the deterministic
    #: capsule, smaller than the model's), ``shrunk`` (less kept verbatim to fit the hard limit)
    why: str

    @property
    def ungrounded(self) -> int:
        """The model's claims the history did not support, dropped (all fields)."""
        return sum(n for _, n in self.by_field)


@dataclass(frozen=True, slots=True)
class Operation:
    """Everything one compaction decided and measured, step by step; terminal once :attr:`outcome` is set."""

    operation_id: str
    trigger: Trigger
    check: BudgetCheck
    started: float
    #: ``None``: nothing safe to compact (the reason is :attr:`reason`)
    plan: CompactionPlan | None = None
    checkpoint_id: str = ""
    kernel_now: KernelStateData = field(default_factory=lambda: KernelStateData())
    #: the plan's deterministic capsule fitted to its reserve (the fallback) and, when a model writes the
    #: capsule, the same capsule grounded and rolled like a model's answer (what the prediction scales)
    local: Capsule | None = None
    baseline: Capsule | None = None
    #: what the summary was predicted, requested and measured at
    attempt: SummaryAttempt = field(default_factory=SummaryAttempt)
    #: the capsules considered, in order; the last is the one chosen
    candidates: tuple[Candidate, ...] = ()
    #: a soft capsule missed (or was predicted to miss) the ROI: no soft attempt below this many tokens
    retry_below: int | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    skipped_before_generation: bool = False
    entry: Entry | None = None
    #: the next request's effective tokens, measured after the append
    tokens_after: int | None = None

    @property
    def chosen(self) -> Candidate | None:
        return self.candidates[-1] if self.candidates else None

    @property
    def summary_used(self) -> bool:
        """Whether a model summary was generated and became the appended capsule; a generated one that
        did not (skipped, failed, or replaced by the local deterministic capsule) was thrown away."""
        chosen = self.chosen
        return (self.attempt.generated and self.outcome == "completed" and chosen is not None
                and chosen.why == "model" and chosen.quality != "degraded")

    def choose(self, candidate: Candidate, plan: CompactionPlan | None = None) -> Operation:
        return replace(self, candidates=(*self.candidates, candidate), plan=plan or self.plan)

    def ended(self, outcome: Outcome, reason: str | None, **more: Any) -> Operation:
        return replace(self, outcome=outcome, reason=reason, **more)

    def start_event(self) -> CompactionStartPayload:
        if self.plan is not None:
            return self.plan.to_event()
        check = self.check
        return CompactionStartPayload(operation_id=self.operation_id, trigger=trigger_name(self.trigger),
                                      tokens_before=check.effective, hard_limit=check.hard_limit,
                                      soft_limit=check.soft_limit, source=check.source)

    def capsule_data(self, text_tokens: int | None) -> CapsuleData:
        """The chosen capsule's entry data (before the scrub); ``text_tokens``: the server's count of its text."""
        plan, chosen = self.plan, self.chosen
        assert plan is not None and chosen is not None, "only a planned operation with a chosen capsule appends"
        data: CapsuleData = {
            "checkpointId": self.checkpoint_id, "firstKeptEntryId": plan.first_kept_entry_id,
            "trigger": trigger_name(self.trigger), "quality": chosen.quality, "state": chosen.capsule.to_json(),
            "tokensBefore": plan.tokens_before, "tokensAfter": chosen.after, "source": plan.source,
            "operationId": plan.operation_id, "previousCheckpointId": plan.previous_checkpoint_id,
            "summarizedEntries": plan.entry_count, "note": chosen.note, "ungroundedClaims": chosen.ungrounded}
        if chosen.by_field:
            data["ungroundedByField"] = dict(chosen.by_field)
        if "kernelState" in self.kernel_now:  # the only field kernel_state_field writes
            data["kernelState"] = self.kernel_now["kernelState"]
        if text_tokens is not None:
            data["textTokens"] = text_tokens
        return data

    def result(self, now: float) -> CompactionOutcome:
        """The terminal outcome (``now``: the engine's clock at the end): the figures of the chosen capsule
        count only when it was appended (completed) or weighed and skipped."""
        outcome = self.outcome
        assert outcome is not None, "an operation has a result only once it ended"
        weighed = self.chosen if outcome in ("completed", "skipped") else None
        completed = outcome == "completed"
        return CompactionOutcome(
            operation_id=self.operation_id, trigger=trigger_name(self.trigger), outcome=outcome, reason=self.reason,
            tokens_before=self.check.effective,
            tokens_after=self.tokens_after if completed and self.tokens_after is not None else self.check.effective,
            checkpoint_id=self.checkpoint_id if completed else None, duration_ms=round((now - self.started) * 1000),
            quality=weighed.quality if weighed else None, source=self.check.source, entry=self.entry,
            skipped_before_generation=self.skipped_before_generation,
            ungrounded_claims=weighed.ungrounded if weighed else 0, attempt=self.attempt)

    def soft_retry_gate(self) -> tuple[str, int] | None:
        """(context key, effective tokens) below which no soft attempt is made, when this one armed it."""
        return None if self.retry_below is None else (self.check.context_key, self.retry_below)

