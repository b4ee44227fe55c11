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

Steps 2-3 are :meth:`CompactionEngine.prepare` and :meth:`~CompactionEngine.gate`, 4-5
:meth:`~CompactionEngine.compact_step`, 6 :meth:`~CompactionEngine.append`: each takes and returns the
operation's record (:class:`~.operation.Operation`), and step 7 is made from it.

The hard limit is fail-closed: if effective input is over it and compaction cannot bring it under,
:class:`~soba_notebook.errors.CompactionFailed` is raised and no request is sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any, cast

from ..budget import BudgetCheck, BudgetTracker
from ..cancel import CancelToken, abandon
from ..config import SobaConfig
from ..errors import CompactionFailed, StaleLeafError, TurnCancelled
from ..events import EventBus
from ..ownership import Owner
from ..session.entries import Entry
from ..session.model_input import ModelInputBuilder
from ..session.payloads import (
    BudgetRequest,
    CompactionEndPayload,
    CompactionProgressPayload,
    CostFields,
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
from .extract import deterministic_capsule, user_messages
from .grounding import ground_plan_summary
from .kernel_section import kernel_state_field
from .operation import Candidate, EngineParts, Operation, random_operation_id
from .outcome import OUTCOMES, CompactionOutcome
from .planner import CompactionPlan
from .predict import SummaryAttempt
from .progress import Phase, wait_with_progress
from .snapshot import BudgetSnapshot, SnapshotBox, compaction_of_capsule
from .summarize import SummaryRequest, summary_input_tokens
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

#: the checkpoint id the predictor's capsules are rendered with: the shape of a real one
PLACEHOLDER_CHECKPOINT_ID = "ck_0000000000"

class CompactionEngine:
    """Compaction for one session store. Not thread-safe: its changes run on :attr:`owner`'s thread."""

    def __init__(self, store: SessionStore, config: SobaConfig, counter: TokenCounter,
                 parts: EngineParts | None = None, *, base_tokens: int = 0) -> None:
        self.store, self.config, self.counter = store, config, counter
        #: what it is built with: summarizer, predictor, checkpoint ids, scrubber, flight... (operation.py)
        self.parts = parts = parts or EngineParts()
        self.bus = parts.bus
        self.intents = IntentQueue()
        self.owner = Owner()  # the thread that may change this engine and its agent (ownership.py)
        self._capsule_cost: dict[str, int] = {}
        self.text_counts = CapsuleTextCounts(counter, parts.count_text)  # the server's count of a new capsule
        self._capsule_msg: tuple[str | None, dict[str, Any]] | None = None
        #: the model input of the leaf, maintained as entries are appended (never a whole-path walk)
        self.inputs = ModelInputBuilder(store, count=lambda e: self.counter.count_entry(e))
        self.tracker = BudgetTracker(store, counter, context_window=config.model.context_window,
                                     hard_limit=config.hard_limit, soft_limit=config.soft_limit,
                                     base_tokens=base_tokens,
                                     capsule_tokens=self.capsule_tokens, inputs=self.inputs)
        self.last_outcome: CompactionOutcome | None = None
        #: what every display reads (compaction/snapshot.py): published here, on the engine's thread
        self._published = SnapshotBox()
        self._recorded_next: tuple[str | None, str, int] | None = None  # the last ``next`` figure in the flight file
        self._inference = 0
        capsule = self.inputs.capsule  # a reopened session's last compaction is the capsule in force
        self._last_done: CompactionEndPayload | None = compaction_of_capsule(capsule) if capsule else None
        self._last_skip: CompactionEndPayload | None = None
        self._renders = CapsuleRenders()  # a compaction renders each capsule it measures once
        #: after a soft capsule missed the post-generation ROI: (context key, effective tokens) below
        #: which a completed turn records no new ``turn_complete`` intent (see growth_before_soft_retry)
        self._soft_retry_at: tuple[str, int] | None = None

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
        self.tracker.hard_limit, self.tracker.soft_limit = config.hard_limit, config.soft_limit
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

    def publish(self, check: BudgetCheck | None = None, inference: int | None = None, *,
                request: BudgetRequest = "next") -> BudgetSnapshot:
        """Measure (unless ``check`` is given), publish the snapshot every display reads, and emit
        it as a ``budget`` event. On the engine's thread only, like :meth:`measure`.

        ``request``: which request ``check`` measures (compaction/snapshot.py). A ``next`` figure
        that differs from the last one recorded is a flight record too, so ``views.budget_history``
        ends on the figure the displays show."""
        check = check or self.measure()
        self._inference = self._inference if inference is None else inference
        snapshot = BudgetSnapshot.of(self.store.id, self._inference, check, last_compaction=self._last_done,
                                     skipped=self._last_skip,
                                     pending_intents=tuple(i.trigger.value for i in self.intents.pending()),
                                     request=request)
        self._published.publish(snapshot)
        seen = (check.leaf_id, check.context_key, check.effective)
        if request == "next" and self.parts.flight is not None and seen != self._recorded_next:
            self._recorded_next = seen  # recorded before the event: a display that shows it finds it there
            self.parts.flight.record("budget", {"inference": self._inference, "request": "next", **check.to_event()})
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
        return [dict(m) for m in self.counter.model_messages(out)]  # old images go first (tokens.py)

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
        self.publish(after, request="sent")  # what this inference sends (the compaction's end said ``next``)
        if outcome.outcome == "completed" and self.parts.flight is not None:
            self.parts.flight.record("budget", {"inference": turn.inferences, **after.to_event()})
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
            operation_id=random_operation_id(), trigger=trigger_name(trigger), leaf_id=self.store.leaf_id,
            tokens_before=check.effective, source=check.source, hard_limit=check.hard_limit,
            soft_limit=check.soft_limit, keep_recent_tokens=keep, summarize=tuple(entries[:cut]),
            first_kept_entry_id=entries[cut].id if cut < len(entries) else None,
            kept_tokens=total - cum[cut], summarized_tokens=cum[cut], previous_capsule=previous,
            previous_checkpoint_id=capsule_data(capsule_entry).get("checkpointId") if capsule_entry else None,
            instructions=instructions, tail_has_request=bool(user_messages(entries[cut:])))

    async def summarize_current(self, *, instructions: str | None = None,
                                cancel: CancelToken | None = None) -> tuple[Capsule, Quality, str | None]:
        """A capsule of the whole current context, for an intentional handoff (``%capsule create``).

        Same summarizer, timeout, fallback and fact merging as a compaction, but nothing is cut or appended:
        the model input does not change. Raises :class:`~soba_notebook.errors.TurnCancelled` on ``cancel``."""
        entries, capsule_entry = self.inputs.context_slice()
        check = self.measure()
        plan = CompactionPlan(
            operation_id=random_operation_id(), trigger="handoff", leaf_id=self.store.leaf_id,
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
        scrub = self.parts.scrub
        return Capsule.from_json(scrub(capsule.to_json()), where="scrubbed capsule"), quality, scrub(note)

    async def run(self, trigger: Trigger, *, cancel: CancelToken | None = None, check: BudgetCheck | None = None,
                  instructions: str | None = None) -> CompactionOutcome:
        """One compaction to its terminal outcome: prepare, gate, compact, append, each taking and returning the
        operation's record (:class:`~.operation.Operation`); what is reported is made from the record."""
        cancel = cancel or CancelToken()
        op = self.prepare(trigger, check or self.measure(), instructions=instructions)
        self.bus.emit("compaction_start", **op.start_event())
        if op.plan is None:  # nothing to plan: still a terminal outcome, visible and recorded
            return self._finish(op)
        progress = Phase(self.bus, op.operation_id)
        progress("plan", 5)
        try:
            op = self.gate(op)
            if op.outcome is None:
                op = self._requesting(op)
                op = await self.compact_step(op, cancel, progress)
            if op.outcome is None:
                op = self.append(op, cancel, progress)
            return self._finish(op)
        except asyncio.CancelledError:
            self._finish(op.ended("cancelled", "the turn was cancelled"))
            raise
        except Exception as exc:  # a bug: the session goes on (nothing appended), the bug is named and logged
            logging.getLogger(__name__).exception("compaction %s failed with an internal error", op.operation_id)
            return self._finish(op.ended("failed", f"internal error: {type(exc).__name__}: {exc}; nothing was "
                                                   f"appended"))

    # -- the steps ---------------------------------------------------------------------------
    def prepare(self, trigger: Trigger, check: BudgetCheck, *, instructions: str | None = None) -> Operation:
        """The operation's record with its plan, checkpoint id and the kernel's variables; ended ``skipped`` when
        there is nothing safe to compact. Writes and emits nothing."""
        started = self.parts.clock()
        kernel_now = kernel_state_field(self.parts.kernel_state)
        planned = self.plan(trigger, check, instructions=instructions)
        if isinstance(planned, str):
            return Operation(random_operation_id(), trigger, check, started, kernel_now=kernel_now,
                             outcome="skipped", reason=planned, skipped_before_generation=True)
        # in the capsule's text, so every measure renders it (a placeholder was up to 6 tokens short)
        return Operation(planned.operation_id, trigger, check, started, plan=planned,
                         checkpoint_id=self.parts.checkpoint_ids(), kernel_now=kernel_now)

    def gate(self, op: Operation) -> Operation:
        """The plan's deterministic capsules and, for soft triggers, the checks made before any summary is requested:
        the seed's pre-generation estimate exactly as written, then the stricter prediction of :mod:`.predict`
        (``baseline``'s cost, scaled by the model factor and fitted, must pass the post-generation gate; a miss
        waits like a measured one). Ended ``skipped`` when a check fails. Writes and emits nothing."""
        plan = self._plan_of(op)
        raw = _local(plan)
        model = self.parts.summarizer is not None and self.parts.predictor is not None
        # the baseline: grounded and rolled like a model's answer, not fitted (the factor measures the model)
        op = replace(op, local=self._fitted(op, raw), baseline=ground_plan_summary(plan, raw, raw).capsule if model
                     else None)
        if op.trigger not in SOFT:
            return op
        config, predictor = self.config.compaction, self.parts.predictor
        roi = pre_generation_roi(plan.tokens_before, config)
        if roi.passed and predictor is not None:
            model = self.parts.summarizer is not None
            baseline = op.baseline or op.local
            assert baseline is not None
            cost = self._rendered_tokens(op, baseline, "ok" if model else "degraded")
            if model:  # scaled before the fit, then fitted: :meth:`.SavingsPredictor.fitted_capsule_tokens`
                fitted = self._rendered_tokens(op, self._fitted(op, baseline, "ok"), "ok")
                cost = predictor.fitted_capsule_tokens(cost, fitted, capsule_reserve(plan.hard_limit))
            predicted = self.tracker.sized(self.base_tokens + cost + self._tail_tokens(plan) + REPLY_PRIMING)
            op = replace(op, attempt=SummaryAttempt(predicted_after=predicted,
                                                    factor=predictor.factor if model else 1.0))
            roi = predicted_roi(plan.tokens_before, predicted, config)
            if not roi.passed:
                op = self._wait_for_growth(op, predicted)
        return op if roi.passed else op.ended("skipped", roi.reason, skipped_before_generation=True)

    async def compact_step(self, op: Operation, cancel: CancelToken, progress: Phase) -> Operation:
        """Generate the capsule and weigh it: the candidates, each measured, the last the one to append; ended when
        none may be appended (a missed ROI, no smaller context, over the hard limit) or on cancel."""
        plan = self._plan_of(op)
        generated, quality, note, by_field = await self._generate(plan, cancel, progress, local=op.local)
        capsule = self._fitted(op, generated, quality)
        if quality != "degraded":  # a fallback's server may still be busy with the abandoned summary
            await self.text_counts.learn(self._capsule_text(op, capsule, quality))
        if cancel.cancelled:
            return op.ended("cancelled", cancel.reason)
        progress("measure", 85)
        after = self._measure_after(op, plan, capsule, quality)
        op = self._observe(op, generated, capsule, quality, after)
        op = op.choose(Candidate(capsule, quality, note, after, by_field, why="model"))
        if quality == "partial":  # the checks rejected it: the deterministic capsule replaces it when smaller
            op = await self._instead_of_partial(op)
            quality, after = op.candidates[-1].quality, op.candidates[-1].after
        trigger = op.trigger
        if trigger not in EXEMPT_FROM_SOFT_ROI:
            roi = post_generation_roi(plan.tokens_before, after, self.config.compaction)  # seed section 6
            if not roi.passed:
                return self._wait_for_growth(op, after).ended("skipped", roi.reason)
        elif trigger not in MANDATORY and after >= plan.tokens_before:
            # exempt from the ROI gate, not from growth: the local capsule replaces it when smaller
            smaller = await self._smaller_than_before(op, after, idle=quality != "degraded")
            if smaller is None:
                return op.ended("skipped", f"a capsule would not make the context smaller ({plan.tokens_before:,} → "
                                           f"{after:,} tokens); nothing appended")
            op = op.choose(smaller)
        if trigger in MANDATORY and after > plan.hard_limit:
            # the capsule came out too large: keep less verbatim, then a smaller local capsule
            shrunk = self._shrink(op)
            if shrunk is None:
                return op.ended("failed", f"capsule plus retained tail need {after} tokens, over the hard limit "
                                          f"{plan.hard_limit}")
            op = shrunk
        return op

    def append(self, op: Operation, cancel: CancelToken, progress: Phase) -> Operation:
        """The only write of a compaction: synchronous, so nothing can run between the cancel and leaf checks
        and the append of the chosen capsule (measured with its checkpoint id: exactly what is sent)."""
        progress("append", 95)
        if cancel.cancelled:
            return op.ended("cancelled", cancel.reason)
        plan, chosen = self._plan_of(op), op.chosen
        assert chosen is not None, "compact_step chose a capsule"
        counted = self.text_counts.counted(self._capsule_text(op, chosen.capsule, chosen.quality))
        # the one scrub of the capsule: secrets in its text (a model can echo a tool's output)
        # become markers as it is written, like every other entry's (measured before: a few tokens)
        capsule_entry = Entry("capsule", self.parts.scrub(op.capsule_data(counted)), parent_id=plan.leaf_id)
        try:
            entry = self.store.append(capsule_entry, expect_leaf=plan.leaf_id)
        except StaleLeafError:
            return op.ended("stale", f"session leaf moved from {plan.leaf_id} to {self.store.leaf_id} while "
                                     f"compacting; no capsule appended")
        return op.ended("completed", chosen.note, entry=entry, tokens_after=self.measure().effective)

    # -- the summary: predicted before, accounted for after --------------------------------
    @staticmethod
    def _plan_of(op: Operation) -> CompactionPlan:
        assert op.plan is not None, "a step after prepare runs only on a planned operation"
        return op.plan

    def _requesting(self, op: Operation) -> Operation:
        """Account for the summary request about to be made (none without a summarizer)."""
        if self.parts.summarizer is None:
            return op
        plan = self._plan_of(op)
        request = SummaryRequest(plan.summarize, plan.previous_capsule, plan.instructions)
        return replace(op, attempt=replace(op.attempt, generated=True,
                                           input_tokens=summary_input_tokens(request, self.counter)))

    def _observe(self, op: Operation, generated: Capsule, fitted: Capsule, quality: Quality, after: int) -> Operation:
        """Record the measured continuation; teach the predictor how the model's capsule (``generated``, then
        ``fitted``) compares with the baseline before the fit, sized like "after"."""
        attempt = replace(op.attempt, measured_after=after)
        if attempt.generated and quality != "degraded":  # only the local fallback is degraded
            predictor = self.parts.predictor
            if predictor is not None and op.baseline is not None:  # by the server's count where it counted one
                scale = self.text_counts.scale(self._capsule_text(op, fitted, quality))
                predictor.observe(round(self._rendered_tokens(op, generated, quality, placeholder=True) * scale),
                                  self._rendered_tokens(op, op.baseline, "ok", placeholder=True))
            attempt = replace(attempt, output_tokens=self.counter.count_text(json.dumps(generated.to_json())))
        return replace(op, attempt=attempt)

    def _wait_for_growth(self, op: Operation, after: int) -> Operation:
        """After a (predicted) miss with ``after`` tokens: no soft attempt until the context grew
        enough for one to pass, and by at least one token (the same context, the same capsule)."""
        plan = self._plan_of(op)
        growth = growth_before_soft_retry(plan.tokens_before, after, plan.kept_tokens, self.config.compaction)
        return replace(op, retry_below=plan.tokens_before + max(1, growth))

    def _shrink(self, op: Operation) -> Operation | None:
        """A smaller plan (less kept verbatim) whose local capsule fits the hard limit, chosen; else ``None``."""
        plan = self._plan_of(op)
        for max_tail in shrink_tails(tail_room(op.check.hard_limit, self.base_tokens), self.inputs):
            smaller = self.plan(Trigger(plan.trigger), op.check, instructions=plan.instructions,
                                max_tail_tokens=max_tail)
            if isinstance(smaller, str):
                continue
            smaller = replace(smaller, operation_id=plan.operation_id)
            capsule = self._fitted(op, capsule=None, plan=smaller)
            after = self._measure_after(op, smaller, capsule, "degraded")
            if after <= smaller.hard_limit:
                return op.choose(Candidate(capsule, "degraded", "retained tail shrunk to fit the hard limit",
                                           after, (), why="shrunk"), plan=smaller)
        return None

    async def _smaller_than_before(self, op: Operation, model_after: int, *, idle: bool) -> Candidate | None:
        """The deterministic capsule, when it makes the continuation smaller than the history (the model's did not:
        ``model_after``); else ``None``. ``idle``: the server counts it first (the estimate let 2,184 → 2,186 in)."""
        plan = self._plan_of(op)
        local = self._fitted(op)
        if idle:
            await self.text_counts.learn(self._capsule_text(op, local, "degraded"))
        after = self._measure_after(op, plan, local, "degraded")
        if after >= plan.tokens_before:
            return None
        return Candidate(local, "degraded", (f"the model's capsule would have grown the context "
                                             f"({plan.tokens_before:,} → {model_after:,} tokens); the local "
                                             f"deterministic capsule was used"), after, (), why="local")

    async def _instead_of_partial(self, op: Operation) -> Operation:
        """The plan's deterministic capsule chosen over the model's partial one (incomplete or holding
        junk) when it renders smaller, as an explicit compaction prefers it over a capsule that grows the
        context; the model's drop counts stay on the record. Else ``op`` unchanged. The server counts
        the local capsule's text first, as it counted the model's: the summary is done, so it is idle,
        and without the count "after" is the local estimate of text the model's tokenizer may split
        finer (about 5% low for SmolLM2)."""
        plan, model = self._plan_of(op), op.chosen
        local = op.local or self._fitted(op)
        assert model is not None, "called once the model's capsule is a candidate"
        if self._rendered_tokens(op, local, "degraded") >= self._rendered_tokens(op, model.capsule, model.quality):
            return op
        await self.text_counts.learn(self._capsule_text(op, local, "degraded"))
        note = (f"the model's capsule was rejected ({model.note or 'partial'}); the smaller local deterministic "
                f"capsule was used")
        return op.choose(Candidate(local, "degraded", note, self._measure_after(op, plan, local, "degraded"),
                                   model.by_field, why="local"))

    async def _generate(self, plan: CompactionPlan, cancel: CancelToken, progress: Phase, *,
                        local: Capsule | None = None
                        ) -> tuple[Capsule, Quality, str | None, tuple[tuple[str, int], ...]]:
        """The capsule of ``plan``, its quality, the note, and per field the model's claims the history did not support
        (dropped; none for the fallback). ``local``: the plan's deterministic capsule, if made. Only the fallback is
        ``degraded``."""
        entries = list(plan.summarize)
        fallback = local or _local(plan)
        if self.parts.summarizer is None:
            progress("summarize", 80)
            return fallback, "degraded", "no summarizer configured: local deterministic capsule", ()
        # the size the model's capsule is expected to have: the local one's, scaled as the predictor learned
        factor = self.parts.predictor.factor if self.parts.predictor is not None else 1.0
        request = SummaryRequest(tuple(entries), plan.previous_capsule, plan.instructions,
                                 expected_chars=round(len(json.dumps(fallback.to_json())) * factor))
        progress.wait_for(self.config.model.compaction_model or self.config.model.model)
        progress("summarize", 10)
        task = asyncio.ensure_future(self.parts.summarizer.summarize(request, progress.summarizing))
        waiter = asyncio.ensure_future(cancel.wait())
        timeout = self.config.compaction.timeout_ms / 1000
        try:
            done = await wait_with_progress(task, waiter, timeout, progress, self.parts.progress_interval)
        finally:
            waiter.cancel()
        if task not in done:
            await abandon(task)  # abort the model request: timeout or cancellation
            if cancel.cancelled:
                return fallback, "degraded", "cancelled", ()
            progress("summarize", 80)
            return fallback, "degraded", (f"model summarization exceeded timeoutMs "
                                          f"{self.config.compaction.timeout_ms}; local deterministic capsule used"), ()
        try:
            summary = task.result()
        except Exception as exc:
            progress("summarize", 80)
            return fallback, "degraded", f"model summarization failed ({exc}); local deterministic capsule used", ()
        grounded = ground_plan_summary(plan, summary, fallback)
        progress("summarize", 80)
        return grounded.capsule, grounded.quality, grounded.note, grounded.by_field

    def _measure_after(self, op: Operation, plan: CompactionPlan, capsule: Capsule, quality: Quality) -> int:
        """Exact size of the continuation: base + rendered capsule (with the id it is written with) + retained tail."""
        return self.tracker.sized(self.base_tokens + self._rendered_tokens(op, capsule, quality)
                                  + self._tail_tokens(plan) + REPLY_PRIMING)

    def _fitted(self, op: Operation, capsule: Capsule | None = None, quality: Quality = "degraded", *,
                plan: CompactionPlan | None = None) -> Capsule:
        """``capsule`` (else the plan's deterministic one) within the plan's reserve for it (:mod:`.capsule_fit`)."""
        plan = plan or self._plan_of(op)
        capsule = capsule or _local(plan)
        return fit_capsule(capsule, capsule_reserve(plan.hard_limit),
                           lambda c: self._rendered_tokens(op, c, quality))

    def _capsule_text(self, op: Operation, capsule: Capsule, quality: Quality) -> str:
        return self._renders.render(capsule, quality, op.checkpoint_id, op.kernel_now).text

    def _rendered_tokens(self, op: Operation, capsule: Capsule, quality: Quality, *, placeholder: bool = False) -> int:
        """Tokens of ``capsule`` as the first message of model input (kernel state included), rendered with the
        operation's checkpoint id (``placeholder``: with one of the same shape, as the predictor learned them)."""
        checkpoint_id = PLACEHOLDER_CHECKPOINT_ID if placeholder else op.checkpoint_id
        done = self._renders.render(capsule, quality, checkpoint_id, op.kernel_now)
        return self._renders.raw_count(done, self.counter) + self.text_counts.extra(done.text)  # extra: learned since

    def _tail_tokens(self, plan: CompactionPlan) -> int:
        """Tokens of the entries ``plan`` keeps verbatim, as they are now."""
        start = self.inputs.position_in_context(plan.first_kept_entry_id) if plan.first_kept_entry_id else None
        cum = self.inputs.cumulative_tokens()
        return cum[-1] - cum[start] if start is not None else 0

    # -- reporting ---------------------------------------------------------------------------
    def _finish(self, op: Operation) -> CompactionOutcome:
        """Report the ended operation: its ``compaction_end`` event, flight record and snapshot, all from the record."""
        result = op.result(self.parts.clock())
        if result.outcome == "completed":
            self.bus.emit("compaction_progress", **CompactionProgressPayload(
                operation_id=op.operation_id, phase="done", percent=100))
        event = result.to_event()
        spent = self.parts.summary_cost() if self.parts.summary_cost is not None else None
        if spent is not None:
            event["summary_cost"] = cast(CostFields, spent.to_json())
        self.bus.emit("compaction_end", **event)
        if result.outcome == "skipped":
            self._last_skip = event
        else:
            self._last_done, self._last_skip = event, None
        if (gate := op.soft_retry_gate()) is not None:
            self._soft_retry_at = gate
        if self.parts.flight is not None:
            self.parts.flight.record("compaction", {**result.flight_record(op.check), "summary_used": op.summary_used,
                                                    **(spent.to_record("summary_cost") if spent is not None else {})})
        self.last_outcome = result
        self.publish()  # the next request as SOBA will send it: what every display shows from now on
        return result

    def _budget_record(self, check: BudgetCheck, turn: TurnState) -> None:
        # the agent's nth inference, never the turn's (a widget point each)
        self.publish(check, self._inference + 1, request="sent")
        if self.parts.flight is not None:
            self.parts.flight.record("budget", {"inference": turn.inferences, **check.to_event()})


def _local(plan: CompactionPlan) -> Capsule:
    """The plan's local deterministic capsule, as the plan appends it."""
    return plan.with_request_rule(deterministic_capsule(list(plan.summarize), plan.previous_capsule,
                                                        plan.previous_checkpoint_id))
