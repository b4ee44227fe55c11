"""The terminal outcome of one compaction: what the barrier emits, records and returns.

Its own module so that the barrier holds the pipeline and this holds the value the pipeline
ends in: ``completed``, ``skipped``, ``cancelled``, ``stale`` or ``failed`` (seed section 3), with
the token figures, and the account of the summary request (:class:`~.predict.SummaryAttempt`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from ..budget import BudgetCheck
from ..session.entries import Entry
from ..session.payloads import BudgetSource, CompactionEndPayload, Outcome, Quality, TriggerName
from .predict import SummaryAttempt

__all__ = ["OUTCOMES", "CompactionOutcome"]

OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    operation_id: str
    trigger: TriggerName
    outcome: Outcome
    reason: str | None
    tokens_before: int
    tokens_after: int
    checkpoint_id: str | None
    duration_ms: int
    quality: Quality | None
    source: BudgetSource
    entry: Entry | None = None
    #: skipped before any summary was generated (pre-generation ROI, the prediction, or no safe history)
    skipped_before_generation: bool = False
    #: model claims (files, checks, skills) the history did not support, dropped from the capsule;
    #: a count for the flight record and the entry, never the claims' text
    ungrounded_claims: int = 0
    #: what was predicted, requested and measured for the summary
    attempt: SummaryAttempt = field(default_factory=SummaryAttempt)

    @property
    def generated(self) -> bool:
        """A summary request was made (a model call, whatever became of its answer)."""
        return self.attempt.generated

    @property
    def reclaimed_tokens(self) -> int:
        return self.tokens_before - self.tokens_after if self.outcome == "completed" else 0

    @property
    def reclaimed_percent(self) -> float:
        return round(100.0 * self.reclaimed_tokens / self.tokens_before, 1) if self.tokens_before else 0.0

    def to_event(self) -> CompactionEndPayload:
        return {"operation_id": self.operation_id, "trigger": self.trigger, "outcome": self.outcome,
                "reason": self.reason, "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "reclaimed_tokens": self.reclaimed_tokens, "reclaimed_percent": self.reclaimed_percent,
                "checkpoint_id": self.checkpoint_id, "duration_ms": self.duration_ms, "quality": self.quality,
                "source": self.source}

    def flight_record(self, check: BudgetCheck) -> dict[str, Any]:
        """The ``compaction`` flight record: the outcome, the limits it ran under, what its summary
        cost and how the prediction fared; counts and figures only, never the summary's text."""
        return {**self.to_event(), "hard_limit": check.hard_limit, "soft_limit": check.soft_limit,
                "context_window": check.context_window, "ungrounded_claims": self.ungrounded_claims,
                "skipped_before_generation": self.skipped_before_generation, **self.attempt.to_record()}
