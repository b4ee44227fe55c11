"""The preflight barrier: the one place compaction runs, immediately before an inference.

:class:`CompactionEngine` owns a session's compaction state (pending intents, the budget tracker) and runs each
compaction to exactly one terminal outcome: ``completed``, ``skipped``, ``cancelled``, ``stale`` or ``failed``.
Only the thread that owns it changes it (``ownership.py``). The pipeline (DESIGN.md, "Compaction pipeline"):

1. measure the budget; pick the winning trigger (:func:`~.triggers.choose_trigger`);
2. make an immutable :class:`~.planner.CompactionPlan` and emit ``compaction_start``;
3. soft triggers: the pre-generation ROI gate (seed section 6, as written), then a stricter prediction
   (:mod:`.predict`): the continuation the deterministic capsule would give (grounded and rolled like a model's
   answer, its cost scaled by the learned model factor) must pass the post-generation gate, or no summary is requested;
4. generate the capsule with the summarizer under ``timeoutMs``; on timeout (or a failing summarizer) fall back
   at once to the deterministic capsule, ``quality: degraded``;
5. ground the summary (:func:`~.grounding.ground`: files, checks and skills are the deterministic facts, unsupported
   claims dropped and counted; template text for a goal or next steps makes it ``quality: partial``); fit it to its
   reserve (:mod:`.capsule_fit`); measure the exact continuation; soft triggers: the post-generation ROI gate
   (hard_limit, context_overflow, user exempt); a hard limit not met keeps less verbatim, the current prompt last;
6. just before the append, check the cancel signal and the leaf: else ``cancelled`` / ``stale``, nothing written;
7. emit ``compaction_end`` and write a flight record (never the summary text).

The hard limit is fail-closed: if effective input is over it and compaction cannot bring it under,
:class:`~soba_notebook.errors.CompactionFailed` is raised and no request is sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..budget import BudgetCheck, BudgetTracker
from ..cancel import CancelToken, abandon
from ..config import SobaConfig
from ..errors import CompactionFailed, StaleLeafError, TurnCancelled
from ..events import EventBus
from ..flight import FlightRecorder
from ..ownership import Owner
from ..scrub import Scrubber
from ..session.entries import Entry
from ..session.model_input import ModelInputBuilder
from ..session.payloads import (
    CapsuleData,
    CompactionEndPayload,
    CompactionProgressPayload,
    CompactionStartPayload,
    KernelStateData,
    Outcome,
    Quality,
    capsule_data,
)
from ..session.store import SessionStore
from ..tokens import REPLY_PRIMING, TokenCounter
from .capsule import Capsule
from .capsule_count import CapsuleTextCounts
from .capsule_entry import capsule_message, capsule_of
from .capsule_fit import capsule_reserve, fit_capsule, tail_room
from .capsule_renders import CapsuleRenders
from .extract import deterministic_capsule
from .grounding import ground_plan_summary
from .kernel_section import KernelStateProvider, kernel_state_field
from .outcome import OUTCOMES, CompactionOutcome
from .planner import CompactionPlan
from .predict import SavingsPredictor, SummaryAttempt
from .progress import Phase, wait_with_progress
from .snapshot import BudgetSnapshot, SnapshotBox, compaction_of_capsule
from .summarize import Summarizer, SummaryRequest, summary_input_tokens
from .tail_cut import shrink_tails, tail_cut_point
from .triggers import (
    EXEMPT_FROM_SOFT_ROI,
    MANDATORY,
    SOFT,
    IntentQueue,
    Trigger,
    TurnState,
    choose_trigger,
    growth_before_soft_retry,
    post_generation_roi,
    pre_generation_roi,
    predicted_roi,
    trigger_name,
)

__all__ = ["OUTCOMES", "CompactionEngine", "CompactionOutcome"]

class CompactionEngine:
    """Compaction for one session store. Not thread-safe: its changes run on :attr:`owner`'s thread."""

    def __init__(self, store: SessionStore, config: SobaConfig, counter: TokenCounter, *,
                 bus: EventBus | None = None, summarizer: Summarizer | None = None, base_tokens: int = 0,
                 flight: FlightRecorder | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.config, self.counter = store, config, counter
        self.bus = bus or EventBus()
        self.summarizer, self.flight, self.clock = summarizer, flight, clock
        self.intents = IntentQueue()
        self.owner = Owner()  # the thread that may change this engine and its agent (ownership.py)
        self._capsule_cost: dict[str, int] = {}
        self.text_counts = CapsuleTextCounts(counter)  # the server's count of a new capsule (agent sets .count)
        self._capsule_msg: tuple[str | None, dict[str, Any]] | None = None
        #: the model input of the leaf, maintained as entries are appended (never a whole-path walk)
        self.inputs = ModelInputBuilder(store, count=lambda e: self.counter.count_entry(e))
        self.tracker = BudgetTracker(store, counter, context_window=config.model.context_window,
                                     hard=config.hard_limit, soft=config.soft_limit, base_tokens=base_tokens,
                                     capsule_tokens=self.capsule_tokens, inputs=self.inputs)
        self.last_outcome: CompactionOutcome | None = None
        #: what every display reads (compaction/snapshot.py): published here, on the engine's thread
        self._published = SnapshotBox()
        self._inference = 0
        capsule = self.inputs.capsule  # a reopened session's last compaction is the capsule in force
        self._last_done: CompactionEndPayload | None = compaction_of_capsule(capsule) if capsule else None
        self._last_skip: CompactionEndPayload | None = None
        #: a new capsule's checkpoint id; its text is part of what is measured, so a replay numbers them
        self.new_checkpoint_id: Callable[[], str] = lambda: "ck_" + secrets.token_hex(5)
        #: seconds between progress updates while a summary is generated
        self.progress_interval = 0.25
        #: the transcript's secret scrubber (JSON value -> JSON value), applied once to a capsule entry's data as
        #: it is appended (and to a handoff capsule as it is returned); the agent sets its own, by default the
        #: environment's secrets as they are at that moment
        self.scrub: Callable[[Any], Any] = lambda value: Scrubber.from_environ().json(value)
        #: the kernel's variables for the capsule's kernel-state section (set by the notebook layer)
        self.kernel_state: KernelStateProvider | None = None
        self._kernel_now: KernelStateData = {}
        self._renders = CapsuleRenders()  # a compaction renders each capsule it measures once
        #: after a soft capsule missed the post-generation ROI: (context key, effective tokens) below
        #: which a completed turn records no new ``turn_complete`` intent (see growth_before_soft_retry)
        self._soft_retry_at: tuple[str, int] | None = None
        #: the prediction's learned model-capsule factor (``None``: only the seed's pre-generation gate)
        self.predictor: SavingsPredictor | None = SavingsPredictor()
        #: operation id -> what its summary was predicted, requested and measured at (for _finish)
        self._attempts: dict[str, SummaryAttempt] = {}

    # -- configuration -----------------------------------------------------------------------
    @property
    def base_tokens(self) -> int:
        return self.tracker.base_tokens

    @base_tokens.setter
    def base_tokens(self, value: int) -> None:
        self.tracker.base_tokens = value

    def set_config(self, config: SobaConfig) -> None:
        self.owner.check("set_config")
        self.config = config
        self._soft_retry_at = None  # computed from the old ROI minimums
        self.tracker.hard, self.tracker.soft = config.hard_limit, config.soft_limit
        self.tracker.context_window = config.model.context_window

    def capsule_tokens(self, entry: Entry) -> int:
        costs, key = self._capsule_cost, entry.id or ""
        if key not in costs:  # one capsule is in force at a time: kept small, a long session never grows it
            if len(costs) >= 8:
                costs.clear()
            message = capsule_message(entry)
            counted = capsule_data(entry).get("textTokens")
            costs[key] = self.counter.count_message(message) + self.text_counts.extra(message["content"], counted)
        return costs[key]

    # -- measurement -------------------------------------------------------------------------
    def measure(self) -> BudgetCheck:
        """Measure the next request. Mutates the tracker: only on the thread that owns the engine."""
        return self.tracker.check()

    def publish(self, check: BudgetCheck | None = None, inference: int | None = None) -> BudgetSnapshot:
        """Measure (unless ``check`` is given), publish the snapshot every display reads, and emit
        it as a ``budget`` event. On the engine's thread only, like :meth:`measure`."""
        check = check or self.measure()
        self._inference = self._inference if inference is None else inference
        snapshot = BudgetSnapshot.of(self.store.id, self._inference, check, last_compaction=self._last_done,
                                     skipped=self._last_skip,
                                     pending_intents=tuple(i.trigger.value for i in self.intents.pending()))
        self._published.publish(snapshot)
        self.bus.emit("budget", **snapshot.event())
        return snapshot

    def snapshot(self) -> BudgetSnapshot | None:
        """The latest published snapshot, from any thread (``None`` before the first)."""
        return self._published.latest()

    def record_intent(self, trigger: Trigger | str, note: str = "") -> bool:
        self.owner.check("record_intent")
        return self.intents.record(trigger, self.config.compaction, note)

    def soft_ready(self, check: BudgetCheck | None = None) -> bool:
        """Whether a soft compaction now could get past the pre-generation checks: the ROI gate, enough growth
        since a soft capsule last missed (or was predicted to miss) the ROI, and a safe cut before the tail."""
        check = check or self.measure()
        if not pre_generation_roi(check.effective, self.config.compaction).passed or self._waiting_for_growth(check):
            return False
        return not isinstance(self.plan(Trigger.TURN_COMPLETE, check), str)

    def _waiting_for_growth(self, check: BudgetCheck) -> bool:
        """The last soft capsule missed (or was predicted to miss) the ROI, and too little was
        added since for one to pass (see growth_before_soft_retry)."""
        gate = self._soft_retry_at
        return gate is not None and gate[0] == check.context_key and check.effective < gate[1]

    def record_turn_complete(self) -> bool:
        """After a completed turn: record a ``turn_complete`` intent only when it could pass the pre-generation
        ROI (seed: a completed turn *may* record one), so an intent that would be skipped anyway is never
        recorded. (The safe-cut check waits for the preflight: the next user message, appended first, is what
        makes older history cuttable.) Nothing is compacted here."""
        check = self.measure()
        if not pre_generation_roi(check.effective, self.config.compaction).passed or self._waiting_for_growth(check):
            return False
        return self.record_intent(Trigger.TURN_COMPLETE)

    def model_messages(self) -> list[dict[str, Any]]:
        """The message part of the next request: capsule (if any) then the retained entries. O(what the
        request holds): the builder keeps the input on append; the rendered capsule is kept while in force."""
        capsule = self.inputs.capsule
        out: list[dict[str, Any]] = []
        if capsule is not None:
            cached = self._capsule_msg
            if cached is None or cached[0] != capsule.id:
                cached = self._capsule_msg = (capsule.id, capsule_message(capsule))
            out.append(dict(cached[1]))
        out.extend(dict(e.message) for e in self.inputs.messages())
        return out

    # -- the barrier -------------------------------------------------------------------------
    async def preflight(self, turn: TurnState, cancel: CancelToken | None = None) -> BudgetCheck:
        """Run before every inference; returns the budget the request will have. Raises CompactionFailed
        when the request would be over the hard limit and compaction could not fix it: it must not be sent."""
        check = self.measure()
        self._budget_record(check, turn)
        trigger = choose_trigger(check, self.intents.pending(), self.config.compaction,
                                 soft_attempted=turn.soft_attempted)
        if trigger is None:
            return check
        if trigger in SOFT:
            if turn.soft_skipped and not self.soft_ready(check):
                return check  # already skipped before generation this turn, and nothing changed that
            # One soft attempt answers every pending soft intent: they all ask for a compaction at this
            # boundary, so each is consumed once here whatever the outcome (none goes stale and fires turns later).
            self.intents.clear()
        outcome = await self.run(trigger, cancel=cancel, check=check)
        if trigger in SOFT:
            # a skip before generation spent nothing: it does not use up the turn's soft attempt
            if outcome.skipped_before_generation:
                turn.soft_skipped = True
            else:
                turn.soft_attempted = True
        after = self.measure()
        if after.over_hard:
            if outcome.outcome == "cancelled":
                raise TurnCancelled("turn cancelled during a mandatory compaction; nothing was sent")
            raise CompactionFailed(
                f"the next request needs {after.effective} tokens, over the hard limit {after.hard_limit}, and "
                f"compaction ({outcome.outcome}: {outcome.reason or 'no reason given'}) could not bring it under; "
                f"nothing was sent")
        if outcome.outcome == "completed" and self.flight is not None:  # published when it ended
            self.flight.record("budget", {"inference": turn.inferences, **after.to_event()})
        return after

    async def compact(self, trigger: Trigger | str = Trigger.USER, *, instructions: str | None = None,
                      cancel: CancelToken | None = None) -> CompactionOutcome:
        """An explicit compaction (``%compact``) or the overflow recovery; no trigger choice."""
        return await self.run(Trigger(trigger), cancel=cancel, instructions=instructions)

    def plan(self, trigger: Trigger, check: BudgetCheck, *, instructions: str | None = None,
             max_tail_tokens: int | None = None) -> CompactionPlan | str:
        """The plan for compacting now, or the reason there is nothing safe to compact."""
        inputs = self.inputs  # O(tail): counts and tool-call index are kept with the model input
        entries, capsule_entry, cum = inputs.context_entries(), inputs.capsule, inputs.cumulative_tokens()
        keep = self.config.compaction.keep_recent_tokens
        if max_tail_tokens is None and trigger in MANDATORY:
            max_tail_tokens = tail_room(check.hard_limit, self.base_tokens)
        cut, total = tail_cut_point(entries, cum, inputs.tool_index, keep, max_tail_tokens=max_tail_tokens), cum[-1]
        if cut is None:
            return (f"nothing old enough to compact yet: {total:,} tokens of history, "
                    f"{keep:,} kept verbatim (keepRecentTokens)")
        previous = capsule_of(capsule_entry) if capsule_entry is not None else None
        return CompactionPlan(
            operation_id="op_" + secrets.token_hex(6), trigger=trigger_name(trigger), leaf_id=self.store.leaf_id,
            tokens_before=check.effective, source=check.source, hard_limit=check.hard_limit,
            soft_limit=check.soft_limit, keep_recent_tokens=keep, summarize=tuple(entries[:cut]),
            first_kept_entry_id=entries[cut].id if cut < len(entries) else None,
            kept_tokens=total - cum[cut], summarized_tokens=cum[cut], previous_capsule=previous,
            previous_checkpoint_id=capsule_data(capsule_entry).get("checkpointId") if capsule_entry else None,
            instructions=instructions)

    async def summarize_current(self, *, instructions: str | None = None,
                                cancel: CancelToken | None = None) -> tuple[Capsule, Quality, str | None]:
        """A capsule of the whole current context, for an intentional handoff (``%capsule create``).

        Same summarizer, timeout, fallback and fact merging as a compaction, but nothing is cut or appended:
        the model input does not change. Raises :class:`~soba_notebook.errors.TurnCancelled` on ``cancel``."""
        entries, capsule_entry = self.inputs.context_slice()
        check = self.measure()
        plan = CompactionPlan(
            operation_id="op_" + secrets.token_hex(6), trigger="handoff", leaf_id=self.store.leaf_id,
            tokens_before=check.effective, source=check.source, hard_limit=check.hard_limit,
            soft_limit=check.soft_limit, keep_recent_tokens=0, summarize=tuple(entries), first_kept_entry_id=None,
            kept_tokens=0, summarized_tokens=sum(self.counter.count_entry(e) for e in entries),
            previous_capsule=capsule_of(capsule_entry) if capsule_entry is not None else None,
            previous_checkpoint_id=capsule_data(capsule_entry).get("checkpointId") if capsule_entry else None,
            instructions=instructions)
        cancel = cancel or CancelToken()
        silent = Phase(EventBus(), plan.operation_id)
        capsule, quality, note, _ = await self._generate(plan, cancel, silent)
        if cancel.cancelled:
            raise TurnCancelled(f"{cancel.reason or 'cancelled'}; the summary request was aborted and nothing "
                                f"was written")
        return Capsule.from_json(self.scrub(capsule.to_json()), where="scrubbed capsule"), quality, self.scrub(note)

    async def run(self, trigger: Trigger, *, cancel: CancelToken | None = None, check: BudgetCheck | None = None,
                  instructions: str | None = None) -> CompactionOutcome:
        cancel = cancel or CancelToken()
        check = check or self.measure()
        started = self.clock()
        self._kernel_now = kernel_state_field(self.kernel_state)
        planned = self.plan(trigger, check, instructions=instructions)
        if isinstance(planned, str):
            # nothing to plan: still a terminal outcome, visible and recorded
            op = "op_" + secrets.token_hex(6)
            self.bus.emit("compaction_start", **CompactionStartPayload(
                operation_id=op, trigger=trigger_name(trigger), tokens_before=check.effective,
                hard_limit=check.hard_limit, soft_limit=check.soft_limit, source=check.source))
            return self._finish(op, trigger, "skipped", planned, check, None, started, before_generation=True)
        plan = planned
        # in the capsule's text, so every measure renders it (a placeholder was up to 6 tokens short)
        checkpoint_id = self.new_checkpoint_id()
        self.bus.emit("compaction_start", **plan.to_event())
        progress = Phase(self.bus, plan.operation_id)
        progress("plan", 5)
        try:
            raw = deterministic_capsule(list(plan.summarize), plan.previous_capsule, plan.previous_checkpoint_id)
            local, baseline = self._fitted(plan, checkpoint_id, raw), self._baseline(plan, raw)
            if trigger in SOFT and (skipped := self._soft_gate(plan, trigger, check, baseline or local, started,
                                                                checkpoint_id)) is not None:
                return skipped
            self._requesting(plan)
            generated, quality, note, ungrounded = await self._generate(plan, cancel, progress, local=local)
            capsule = self._fitted(plan, checkpoint_id, generated, quality)
            if quality != "degraded":  # a fallback's server may still be busy with the abandoned summary
                await self.text_counts.learn(self._capsule_text(capsule, quality, checkpoint_id))
            if cancel.cancelled:
                return self._finish(plan.operation_id, trigger, "cancelled", cancel.reason, check, None, started)
            progress("measure", 85)
            after = self._measure_after(plan, capsule, quality, checkpoint_id)
            self._observe(plan, baseline, (generated, capsule), quality, (after, checkpoint_id))
            if trigger not in EXEMPT_FROM_SOFT_ROI:
                missed = self._missed_soft_roi(plan, check, after)
                if missed is not None:
                    return self._finish(plan.operation_id, trigger, "skipped", missed, check, None, started,
                                        tokens_after=after, quality=quality, ungrounded=ungrounded)
            elif trigger not in MANDATORY and after >= plan.tokens_before:
                # exempt from the ROI gate, not from growth: the local capsule replaces it when smaller
                smaller = await self._smaller_than_before(plan, after, checkpoint_id, idle=quality != "degraded")
                if smaller is None:
                    return self._finish(
                        plan.operation_id, trigger, "skipped",
                        f"a capsule would not make the context smaller ({plan.tokens_before:,} → {after:,} "
                        f"tokens); nothing appended", check, None, started, tokens_after=after, quality=quality,
                        ungrounded=ungrounded)
                capsule, quality, note, after = smaller
                ungrounded = 0  # the model's capsule, grounded or not, is not what is appended
            if trigger in MANDATORY and after > plan.hard_limit:
                # the capsule came out too large: keep less verbatim, then a smaller local capsule
                retry = self._shrink(plan, check, checkpoint_id)
                if retry is None:
                    return self._finish(plan.operation_id, trigger, "failed",
                                        f"capsule plus retained tail need {after} tokens, over the hard limit "
                                        f"{plan.hard_limit}", check, None, started, tokens_after=after)
                plan, capsule, quality, note = retry
                ungrounded = 0
                after = self._measure_after(plan, capsule, quality, checkpoint_id)
            return self._append(plan, trigger, capsule, quality, note, (after, checkpoint_id), ungrounded, check,
                                cancel, started, progress)
        except asyncio.CancelledError:
            self._finish(plan.operation_id, trigger, "cancelled", "the turn was cancelled", check, None, started)
            raise
        except Exception as exc:  # a bug: the session goes on (nothing appended), the bug is named and logged
            logging.getLogger(__name__).exception("compaction %s failed with an internal error", plan.operation_id)
            return self._finish(plan.operation_id, trigger, "failed",
                                f"internal error: {type(exc).__name__}: {exc}; nothing was appended", check, None,
                                started)

    # -- the summary: predicted before, accounted for after --------------------------------
    def _baseline(self, plan: CompactionPlan, raw: Capsule) -> Capsule | None:
        """What the prediction scales when a model writes the capsule: the plan's deterministic one (``raw``)
        grounded and rolled like a model's answer, not fitted (the factor measures the model); else ``None``."""
        model = self.summarizer is not None and self.predictor is not None
        return ground_plan_summary(plan, raw, raw).capsule if model else None

    def _soft_gate(self, plan: CompactionPlan, trigger: Trigger, check: BudgetCheck, baseline: Capsule,
                   started: float, checkpoint_id: str) -> CompactionOutcome | None:
        """The skip before any summary is requested, or ``None``: the seed's pre-generation estimate
        exactly as written, then the stricter prediction of :mod:`.predict` (``baseline``'s cost, scaled by the
        model factor and fitted, must pass the post-generation gate; a miss waits like a measured one)."""
        config = self.config.compaction
        roi = pre_generation_roi(plan.tokens_before, config)
        if roi.passed and self.predictor is not None:
            model = self.summarizer is not None
            cost = self._rendered_tokens(baseline, "ok" if model else "degraded", checkpoint_id)
            if model:  # scaled before the fit, then fitted: :meth:`.SavingsPredictor.fitted_capsule_tokens`
                fitted = self._rendered_tokens(self._fitted(plan, checkpoint_id, baseline, "ok"), "ok", checkpoint_id)
                cost = self.predictor.fitted_capsule_tokens(cost, fitted, capsule_reserve(plan.hard_limit))
            predicted = self.tracker.sized(self.base_tokens + cost + self._tail_tokens(plan) + REPLY_PRIMING)
            self._attempts[plan.operation_id] = SummaryAttempt(predicted_after=predicted,
                                                               factor=self.predictor.factor if model else 1.0)
            roi = predicted_roi(plan.tokens_before, predicted, config)
            if not roi.passed:
                self._wait_for_growth(plan, check, predicted)
        if roi.passed:
            return None
        return self._finish(plan.operation_id, trigger, "skipped", roi.reason, check, None, started,
                            before_generation=True)

    def _requesting(self, plan: CompactionPlan) -> None:
        """Account for the summary request about to be made (none without a summarizer)."""
        if self.summarizer is None:
            return
        request = SummaryRequest(plan.summarize, plan.previous_capsule, plan.instructions)
        self._attempts[plan.operation_id] = replace(self._attempts.get(plan.operation_id, SummaryAttempt()),
                                                    generated=True,
                                                    input_tokens=summary_input_tokens(request, self.counter))

    def _observe(self, plan: CompactionPlan, baseline: Capsule | None, made: tuple[Capsule, Capsule],
                 quality: Quality, measured: tuple[int, str]) -> None:
        """Record the measured continuation; teach the predictor how the model's capsule (``made``: it, then fitted)
        compares with ``baseline`` before the fit, sized like "after" (``measured``: it and its checkpoint id)."""
        attempt = replace(self._attempts.get(plan.operation_id, SummaryAttempt()), measured_after=measured[0])
        if attempt.generated and quality != "degraded":  # only the local fallback is degraded
            if self.predictor is not None and baseline is not None:  # by the server's count where it counted one
                scale = self.text_counts.scale(self._capsule_text(made[1], quality, measured[1]))
                self.predictor.observe(round(self._rendered_tokens(made[0], quality) * scale),
                                       self._rendered_tokens(baseline, "ok"))
            attempt = replace(attempt, output_tokens=self.counter.count_text(json.dumps(made[1].to_json())))
        self._attempts[plan.operation_id] = attempt

    def _missed_soft_roi(self, plan: CompactionPlan, check: BudgetCheck, after: int) -> str | None:
        """The post-generation gate (seed section 6): the reason the capsule misses it, with the
        wait before the next soft attempt armed, or ``None`` when it passes."""
        roi = post_generation_roi(plan.tokens_before, after, self.config.compaction)
        if roi.passed:
            return None
        self._wait_for_growth(plan, check, after)
        return roi.reason

    def _wait_for_growth(self, plan: CompactionPlan, check: BudgetCheck, after: int) -> None:
        """After a (predicted) miss with ``after`` tokens: no soft attempt until the context grew
        enough for one to pass, and by at least one token (the same context, the same capsule)."""
        growth = growth_before_soft_retry(plan.tokens_before, after, plan.kept_tokens, self.config.compaction)
        self._soft_retry_at = (check.context_key, plan.tokens_before + max(1, growth))

    def _append(self, plan: CompactionPlan, trigger: Trigger, capsule: Capsule, quality: Quality, note: str | None,
                measured: tuple[int, str], ungrounded: int, check: BudgetCheck, cancel: CancelToken, started: float,
                progress: Phase) -> CompactionOutcome:
        """The only write of a compaction: synchronous, so nothing can run between the cancel and leaf checks
        and the append. ``measured``: the continuation's tokens with the checkpoint id it was measured with."""
        progress("append", 95)
        if cancel.cancelled:
            return self._finish(plan.operation_id, trigger, "cancelled", cancel.reason, check, None, started)
        after, checkpoint_id = measured  # measured with its id: exactly what is sent
        data: CapsuleData = {
            "checkpointId": checkpoint_id, "firstKeptEntryId": plan.first_kept_entry_id,
            "trigger": trigger_name(trigger), "quality": quality, "state": capsule.to_json(),
            "tokensBefore": plan.tokens_before, "tokensAfter": after, "source": plan.source,
            "operationId": plan.operation_id, "previousCheckpointId": plan.previous_checkpoint_id,
            "summarizedEntries": plan.entry_count, "note": note, "ungroundedClaims": ungrounded}
        if "kernelState" in self._kernel_now:  # the only field kernel_state_field writes
            data["kernelState"] = self._kernel_now["kernelState"]
        if (counted := self.text_counts.counted(self._capsule_text(capsule, quality, checkpoint_id))) is not None:
            data["textTokens"] = counted
        # the one scrub of the capsule: secrets in its text (a model can echo a tool's output)
        # become markers as it is written, like every other entry's (measured before: a few tokens)
        capsule_entry = Entry("capsule", self.scrub(data), parent_id=plan.leaf_id)
        try:
            entry = self.store.append(capsule_entry, expect_leaf=plan.leaf_id)
        except StaleLeafError:
            return self._finish(plan.operation_id, trigger, "stale",
                                f"session leaf moved from {plan.leaf_id} to {self.store.leaf_id} while "
                                f"compacting; no capsule appended", check, None, started)
        return self._finish(plan.operation_id, trigger, "completed", note, check, entry, started,
                            tokens_after=self.measure().effective, quality=quality, checkpoint_id=checkpoint_id,
                            ungrounded=ungrounded)

    def _shrink(self, plan: CompactionPlan, check: BudgetCheck,
                checkpoint_id: str) -> tuple[CompactionPlan, Capsule, Quality, str] | None:
        for max_tail in shrink_tails(tail_room(check.hard_limit, self.base_tokens), self.inputs):
            smaller = self.plan(Trigger(plan.trigger), check, instructions=plan.instructions, max_tail_tokens=max_tail)
            if isinstance(smaller, str):
                continue
            smaller = CompactionPlan(**{**{f: getattr(smaller, f) for f in smaller.__slots__},
                                        "operation_id": plan.operation_id})
            capsule = self._fitted(smaller, checkpoint_id)
            if self._measure_after(smaller, capsule, "degraded", checkpoint_id) <= smaller.hard_limit:
                return smaller, capsule, "degraded", "retained tail shrunk to fit the hard limit"
        return None

    async def _smaller_than_before(self, plan: CompactionPlan, model_after: int, checkpoint_id: str, *,
                                   idle: bool) -> tuple[Capsule, Quality, str, int] | None:
        """The deterministic capsule, when it makes the continuation smaller than the history (the model's did not:
        ``model_after``); else ``None``. ``idle``: the server counts it first (the estimate let 2,184 → 2,186 in)."""
        local = self._fitted(plan, checkpoint_id)
        if idle:
            await self.text_counts.learn(self._capsule_text(local, "degraded", checkpoint_id))
        after = self._measure_after(plan, local, "degraded", checkpoint_id)
        if after >= plan.tokens_before:
            return None
        return local, "degraded", (f"the model's capsule would have grown the context ({plan.tokens_before:,} → "
                                   f"{model_after:,} tokens); the local deterministic capsule was used"), after

    async def _generate(self, plan: CompactionPlan, cancel: CancelToken, progress: Phase, *,
                        local: Capsule | None = None) -> tuple[Capsule, Quality, str | None, int]:
        """The capsule of ``plan``, its quality, the note, and the model's claims the history did not support (dropped;
        0 for the fallback). ``local``: the plan's deterministic capsule, if made. Only the fallback is ``degraded``."""
        entries = list(plan.summarize)
        fallback = local or deterministic_capsule(entries, plan.previous_capsule, plan.previous_checkpoint_id)
        if self.summarizer is None:
            progress("summarize", 80)
            return fallback, "degraded", "no summarizer configured: local deterministic capsule", 0
        request = SummaryRequest(tuple(entries), plan.previous_capsule, plan.instructions)
        task = asyncio.ensure_future(self.summarizer.summarize(
            request, lambda f: progress("summarize", 10 + 70 * max(0.0, min(1.0, f)))))
        waiter = asyncio.ensure_future(cancel.wait())
        timeout = self.config.compaction.timeout_ms / 1000
        try:
            done = await wait_with_progress(task, waiter, timeout, progress, self.progress_interval)
        finally:
            waiter.cancel()
        if task not in done:
            await abandon(task)  # abort the model request: timeout or cancellation
            if cancel.cancelled:
                return fallback, "degraded", "cancelled", 0
            progress("summarize", 80)
            return fallback, "degraded", (f"model summarization exceeded timeoutMs "
                                          f"{self.config.compaction.timeout_ms}; local deterministic capsule used"), 0
        try:
            summary = task.result()
        except Exception as exc:
            progress("summarize", 80)
            return fallback, "degraded", f"model summarization failed ({exc}); local deterministic capsule used", 0
        grounded = ground_plan_summary(plan, summary, fallback)
        progress("summarize", 80)
        return grounded.capsule, grounded.quality, grounded.note, grounded.ungrounded

    def _measure_after(self, plan: CompactionPlan, capsule: Capsule, quality: Quality, checkpoint_id: str) -> int:
        """Exact size of the continuation: base + rendered capsule (with the id it is written with) + retained tail."""
        return self.tracker.sized(self.base_tokens + self._rendered_tokens(capsule, quality, checkpoint_id)
                                       + self._tail_tokens(plan) + REPLY_PRIMING)

    def _fitted(self, plan: CompactionPlan, checkpoint_id: str, capsule: Capsule | None = None,
                quality: Quality = "degraded") -> Capsule:
        """``capsule`` (else the plan's deterministic one) within the plan's reserve for it (:mod:`.capsule_fit`)."""
        capsule = capsule or deterministic_capsule(list(plan.summarize), plan.previous_capsule,
                                                   plan.previous_checkpoint_id)
        return fit_capsule(capsule, capsule_reserve(plan.hard_limit),
                           lambda c: self._rendered_tokens(c, quality, checkpoint_id))

    def _capsule_text(self, capsule: Capsule, quality: Quality, checkpoint_id: str) -> str:
        return self._renders.render(capsule, quality, checkpoint_id, self._kernel_now).text

    def _rendered_tokens(self, capsule: Capsule, quality: Quality, checkpoint_id: str = "ck_0000000000") -> int:
        """Tokens of ``capsule`` as the first message of model input (kernel state included)."""
        done = self._renders.render(capsule, quality, checkpoint_id, self._kernel_now)
        return self._renders.raw_count(done, self.counter) + self.text_counts.extra(done.text)  # extra: learned since

    def _tail_tokens(self, plan: CompactionPlan) -> int:
        """Tokens of the entries ``plan`` keeps verbatim, as they are now."""
        start = self.inputs.position_in_context(plan.first_kept_entry_id) if plan.first_kept_entry_id else None
        cum = self.inputs.cumulative_tokens()
        return cum[-1] - cum[start] if start is not None else 0

    # -- reporting ---------------------------------------------------------------------------
    def _finish(self, operation_id: str, trigger: Trigger, outcome: Outcome, reason: str | None,
                check: BudgetCheck, entry: Entry | None, started: float, *, tokens_after: int | None = None,
                quality: Quality | None = None, checkpoint_id: str | None = None,
                before_generation: bool = False, ungrounded: int = 0) -> CompactionOutcome:
        result = CompactionOutcome(
            operation_id=operation_id, trigger=trigger_name(trigger), outcome=outcome, reason=reason,
            tokens_before=check.effective,
            tokens_after=tokens_after if tokens_after is not None and outcome == "completed" else check.effective,
            checkpoint_id=checkpoint_id, duration_ms=round((self.clock() - started) * 1000),
            quality=quality if outcome in ("completed", "skipped") else None, source=check.source, entry=entry,
            skipped_before_generation=before_generation, ungrounded_claims=ungrounded,
            attempt=self._attempts.pop(operation_id, SummaryAttempt()))
        if outcome == "completed":
            self.bus.emit("compaction_progress", **CompactionProgressPayload(operation_id=operation_id, phase="done",
                                                                             percent=100))
        self.bus.emit("compaction_end", **result.to_event())
        if outcome == "skipped":
            self._last_skip = result.to_event()
        else:
            self._last_done, self._last_skip = result.to_event(), None
        if self.flight is not None:
            self.flight.record("compaction", result.flight_record(check))
        self.last_outcome = result
        self.publish()  # the next request as SOBA will send it: what every display shows from now on
        return result

    def _budget_record(self, check: BudgetCheck, turn: TurnState) -> None:
        self.publish(check, self._inference + 1)  # the agent's nth inference, never the turn's (a widget point each)
        if self.flight is not None:
            self.flight.record("budget", {"inference": turn.inferences, **check.to_event()})
