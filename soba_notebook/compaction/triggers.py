"""Triggers, pending intents, the barrier's priority, and the two ROI gates. All pure.

Seven triggers (seed section 4). Soft triggers only *record an intent*; nothing compacts in the
background. At the preflight barrier the winner is chosen by priority: ``hard_limit`` >
``milestone`` / ``plan_pivot`` > ``turn_complete`` > ``auto_threshold``. ``user`` (``%compact``)
and ``context_overflow`` (the provider said the request was too long) are their own paths.
``auto: false`` disables only the soft triggers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import cast

from ..budget import BudgetCheck
from ..config import CompactionConfig
from ..session.payloads import TriggerName

__all__ = [
    "EXEMPT_FROM_SOFT_ROI",
    "MANDATORY",
    "SOFT",
    "Intent",
    "IntentQueue",
    "RoiCheck",
    "Trigger",
    "TurnState",
    "choose_trigger",
    "growth_before_soft_retry",
    "post_generation_roi",
    "pre_generation_roi",
    "predicted_roi",
    "trigger_name",
]


class Trigger(StrEnum):
    HARD_LIMIT = "hard_limit"
    MILESTONE = "milestone"
    PLAN_PIVOT = "plan_pivot"
    TURN_COMPLETE = "turn_complete"
    AUTO_THRESHOLD = "auto_threshold"
    USER = "user"
    CONTEXT_OVERFLOW = "context_overflow"


def trigger_name(trigger: Trigger) -> TriggerName:
    """The trigger as stored and emitted: its value (the enum's values are exactly ``TriggerName``'s)."""
    return cast(TriggerName, str(trigger))


SOFT = frozenset({Trigger.MILESTONE, Trigger.PLAN_PIVOT, Trigger.TURN_COMPLETE, Trigger.AUTO_THRESHOLD})
MANDATORY = frozenset({Trigger.HARD_LIMIT, Trigger.CONTEXT_OVERFLOW})
EXEMPT_FROM_SOFT_ROI = frozenset({Trigger.HARD_LIMIT, Trigger.CONTEXT_OVERFLOW, Trigger.USER})


@dataclass(frozen=True, slots=True)
class Intent:
    trigger: Trigger
    note: str = ""
    recorded_at: float = field(default_factory=time.time)


def _enabled(trigger: Trigger, config: CompactionConfig) -> bool:
    if trigger not in SOFT:
        return True
    if not config.auto:
        return False
    if trigger in (Trigger.MILESTONE, Trigger.PLAN_PIVOT):
        return config.compact_on_milestone
    if trigger is Trigger.TURN_COMPLETE:
        return config.compact_on_turn_complete
    return True


class IntentQueue:
    """Pending soft intents of one session. Each kind is held once and consumed once."""

    def __init__(self) -> None:
        self._pending: dict[Trigger, Intent] = {}

    def record(self, trigger: Trigger | str, config: CompactionConfig, note: str = "") -> bool:
        """Record a pending intent; False (and nothing recorded) when config disables it."""
        trigger = Trigger(trigger)
        if trigger not in (Trigger.MILESTONE, Trigger.PLAN_PIVOT, Trigger.TURN_COMPLETE):
            raise ValueError(f"{trigger} is not an intent; only milestone, plan_pivot and turn_complete are")
        if not _enabled(trigger, config):
            return False
        self._pending[trigger] = Intent(trigger, note)
        return True

    def pending(self) -> tuple[Intent, ...]:
        return tuple(self._pending.values())

    def consume(self, trigger: Trigger) -> Intent | None:
        return self._pending.pop(trigger, None)

    def clear(self) -> None:
        self._pending.clear()


@dataclass(slots=True)
class TurnState:
    """Per-turn bookkeeping the barrier needs: at most one soft attempt, one overflow retry.

    ``soft_attempted`` is set only by a soft compaction that reached generation; one skipped
    before generation (pre-generation ROI, no safe history) only sets ``soft_skipped``, so it
    does not spend the turn's attempt: a later ``auto_threshold`` that has become eligible in the
    same turn still runs.
    """

    soft_attempted: bool = False
    overflow_recovered: bool = False
    inferences: int = 0
    soft_skipped: bool = False


def choose_trigger(check: BudgetCheck, intents: Sequence[Intent], config: CompactionConfig, *,
                   soft_attempted: bool) -> Trigger | None:
    """The trigger that wins at this preflight, or None when nothing is due."""
    if check.over_hard:
        return Trigger.HARD_LIMIT
    if soft_attempted:
        return None
    pending = {i.trigger for i in intents}
    for trigger in (Trigger.MILESTONE, Trigger.PLAN_PIVOT, Trigger.TURN_COMPLETE):
        if trigger in pending and _enabled(trigger, config):
            return trigger
    if check.effective >= check.soft_limit and _enabled(Trigger.AUTO_THRESHOLD, config):
        return Trigger.AUTO_THRESHOLD
    return None


@dataclass(frozen=True, slots=True)
class RoiCheck:
    reclaimable: int
    savings_ratio: float
    passed: bool
    reason: str


def _roi(reclaimable: int, total: int, config: CompactionConfig, what: str) -> RoiCheck:
    ratio = reclaimable / total if total > 0 else 0.0
    if reclaimable < config.min_reclaimable_tokens:
        return RoiCheck(reclaimable, ratio, False, f"{what} {reclaimable:,} tokens < minReclaimableTokens "
                                                   f"{config.min_reclaimable_tokens:,}")
    if ratio < config.min_savings_ratio:
        return RoiCheck(reclaimable, ratio, False, f"{what} savings ratio {ratio:.3f} < minSavingsRatio "
                                                   f"{config.min_savings_ratio}")
    return RoiCheck(reclaimable, ratio, True, "")


def pre_generation_roi(effective: int, config: CompactionConfig) -> RoiCheck:
    """Seed section 6: ``reclaimable = effective - keepRecentTokens``, ratio over effective."""
    return _roi(effective - config.keep_recent_tokens, effective, config, "estimated reclaimable")


def post_generation_roi(tokens_before: int, tokens_after: int, config: CompactionConfig) -> RoiCheck:
    """Seed section 6, after generation: the exact continuation against what it replaces."""
    return _roi(tokens_before - tokens_after, tokens_before, config, "measured reclaimed")


def predicted_roi(tokens_before: int, predicted_after: int, config: CompactionConfig) -> RoiCheck:
    """The post-generation gate applied to a *predicted* continuation, before any summary is
    requested (:mod:`.predict`): stricter than the seed's pre-generation estimate, never looser."""
    roi = _roi(tokens_before - predicted_after, tokens_before, config, "predicted reclaimed")
    return roi if roi.passed else RoiCheck(roi.reclaimable, roi.savings_ratio, False,
                                           f"{roi.reason}; no summary requested")


def growth_before_soft_retry(tokens_before: int, tokens_after: int, kept_tokens: int,
                             config: CompactionConfig) -> int:
    """After a soft capsule missed the post-generation ROI: how many tokens the context must grow
    before another soft attempt could pass it.

    The seed lets a completed turn *record* a ``turn_complete`` intent, not must; each attempt that
    is skipped after generation spent a summary request. New history moves the cut forward, so
    what a capsule reclaims grows at most one-for-one with it, plus whatever the retained tail
    (``kept_tokens``) held beyond ``keepRecentTokens`` (a later boundary may keep less). The
    capsule is assumed to stay its size: a smaller one could pass sooner, and then the soft limit
    (``auto_threshold``) and the hard limit still run as before.
    """
    reclaimable_now = tokens_before - tokens_after + max(0, kept_tokens - config.keep_recent_tokens)
    by_tokens = config.min_reclaimable_tokens - reclaimable_now
    ratio = config.min_savings_ratio
    # (reclaimable + g) / (before + g) >= ratio  <=>  g >= (ratio * before - reclaimable) / (1 - ratio)
    by_ratio = max(0, math.ceil((ratio * tokens_before - reclaimable_now) / (1 - ratio))) if ratio < 1 else 0

    def ratio_passes(g: int) -> bool:  # the comparison _roi makes, so float rounding cannot disagree
        total = tokens_before + g
        return ((reclaimable_now + g) / total if total > 0 else 0.0) >= ratio

    while by_ratio > 0 and ratio_passes(by_ratio - 1):
        by_ratio -= 1
    while ratio < 1 and not ratio_passes(by_ratio):
        by_ratio += 1
    return max(0, by_tokens, by_ratio)
