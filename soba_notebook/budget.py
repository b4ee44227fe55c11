"""Token budget: the seed's hard and soft limits, and what the next request will cost.

``hard_limit`` and ``soft_limit`` are the seed's formulas (section 5), pure. A
:class:`BudgetTracker` measures the *effective tokens* of the next request incrementally: it
remembers how far along the session path it has counted, so a check costs O(entries appended
since the last check), not O(history).

Measurement source (DESIGN.md, "Budget"): ``provider_usage`` when the latest assistant reply on
the current model input reported usage for a request whose input is a prefix of this one (same
capsule in force), plus an estimate of what was appended since; otherwise ``estimated``. Usage
SOBA counted itself (the offline scripted model's, :attr:`Usage.counted`) is no report: a model
that reports no usage is never badged ``provider_usage``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .session.entries import Entry
from .session.model_input import ModelInputBuilder
from .session.payloads import BudgetFields, BudgetSource, capsule_data
from .session.store import SessionStore
from .tokens import REPLY_PRIMING, TokenCounter

__all__ = ["BudgetCheck", "BudgetTracker", "hard_limit", "soft_limit"]


def hard_limit(context_window: int, max_output_tokens: int, safety_reserve_tokens: int) -> int:
    """``contextWindow - maxOutputTokens - safetyReserveTokens`` (65000/8000/8192 -> 48808)."""
    return context_window - max_output_tokens - safety_reserve_tokens


def soft_limit(hard_limit: int, min_tokens_for_auto_compact: int, auto_compact_threshold_ratio: float) -> int:
    """``min(hard - 1, max(minTokensForAutoCompact, floor(hard * ratio)))`` (48808 -> 39046)."""
    return min(hard_limit - 1, max(min_tokens_for_auto_compact, math.floor(hard_limit * auto_compact_threshold_ratio)))


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """The budget of the next request, as measured before an inference."""

    effective: int
    hard_limit: int
    soft_limit: int
    context_window: int
    source: BudgetSource
    estimated: int  # our own (calibrated) estimate, whatever the source
    context_key: str
    leaf_id: str | None

    @property
    def over_hard(self) -> bool:
        return self.effective > self.hard_limit

    @property
    def over_soft(self) -> bool:
        return self.effective >= self.soft_limit

    def to_event(self) -> BudgetFields:
        return {"effective": self.effective, "hard_limit": self.hard_limit, "soft_limit": self.soft_limit,
                "context_window": self.context_window, "source": self.source}


class BudgetTracker:
    """Incremental effective-token measurement for one session store.

    ``base_tokens`` is what every request carries besides history (system prompt and tool
    schemas); ``capsule_tokens`` measures a capsule entry as rendered for the model (injected, as
    rendering belongs to the compaction layer above).
    """

    def __init__(self, store: SessionStore, counter: TokenCounter, *, context_window: int, hard_limit: int,
                 soft_limit: int, base_tokens: int = 0, capsule_tokens: Callable[[Entry], int] | None = None,
                 inputs: ModelInputBuilder | None = None) -> None:
        self.store = store
        self.counter = counter
        self.context_window = context_window
        self.hard_limit = hard_limit
        self.soft_limit = soft_limit
        self.base_tokens = base_tokens
        self.inputs = inputs if inputs is not None else ModelInputBuilder(store)
        self._capsule_tokens = capsule_tokens or (lambda e: counter.count_text(str(capsule_data(e).get("state", ""))))
        #: (reported prompt, raw estimate of that request) of the latest reply with provider usage:
        #: what an estimate of another request is sized against (see :meth:`sized`); it outlives a
        #: change of context (a compaction, a rewind), since it measures what every request shares
        self.anchor: tuple[int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self._path: list[str] | None = None
        self._base = 0  # path position of _cum[0]: counting starts where the model input starts
        self._seen = 0
        self._cum: list[int] = [0]
        self._capsule_id: str | None = None
        self._past_capsule = True  # the entries counted next come after the capsule in force
        self._capsule_cost = 0
        self._usage: dict[str, int] = {}  # context key -> path position of its latest reply with usage

    def invalidate(self) -> None:
        """Forget everything (after a config change that alters counts)."""
        self.anchor = None
        self._reset()
        self.inputs.invalidate_counts()

    @property
    def context_key(self) -> str:
        return self.inputs.key

    def _catch_up(self) -> int:
        """Count what was appended since the last call; returns where the model input starts.

        Only entries from the start of the model input (the capsule in force's first kept entry,
        or the root) are ever counted here: reopening a long compacted session tokenizes its
        tail, not its history. Older counts are left to whoever asks for them (the views).
        """
        inputs = self.inputs
        start = inputs.start
        path = self.store.path_ids()
        if path is not self._path or len(path) < self._seen or start < self._base or start > self._seen:
            self._reset()
            self._path, self._base, self._seen = path, start, start
        elif start > self._base:  # a new capsule moved the start on: the counts before it are never asked again
            del self._cum[:start - self._base]
            self._base = start
        capsule = inputs.capsule
        cid = capsule.id if capsule is not None else None
        if cid != self._capsule_id:
            self._capsule_id = cid
            self._past_capsule = cid is None  # the retained tail comes first, then the capsule
            self._capsule_cost = self._capsule_tokens(capsule) if capsule is not None else 0
        get = self.store.get
        count = self.counter.count_entry
        cum, usage = self._cum, self._usage
        for pos in range(self._seen, len(path)):
            entry = get(path[pos])
            cum.append(cum[-1] + count(entry))
            if entry.id == cid:
                self._past_capsule = True
            if entry.role == "assistant" and entry.message.get("usage") is not None:
                reply_usage = entry.usage
                if reply_usage is not None and reply_usage.reported:  # a count of SOBA's own is no report
                    key = entry.message.get("contextKey") or "root"
                    usage[key] = pos
                    if key == inputs.key:  # it answered this model input up to itself
                        self.anchor = (reply_usage.prompt_tokens, self.base_tokens + self._capsule_cost
                                       + cum[pos - self._base] - cum[start - self._base] + REPLY_PRIMING)
                    elif self._past_capsule:  # a reply after the capsule to another input (one appended
                        self.anchor = None    # while it was in flight, a replayed session's usage)
        self._seen = len(path)
        return start

    def _since(self, pos: int) -> int:
        """Raw tokens of the entries at path positions ``pos`` and after."""
        return self._cum[-1] - self._cum[pos - self._base]

    def _usage_pos(self, start: int) -> int | None:
        pos = self._usage.get(self.inputs.key)
        return pos if pos is not None and pos >= start else None

    def estimate_raw(self) -> int:
        """Uncalibrated estimate of the whole next request."""
        start = self._catch_up()
        return self.base_tokens + self._capsule_cost + self._since(start) + REPLY_PRIMING + self._images()

    def _images(self) -> int:
        """Tokens of the images the next request sends (entries count theirs as one line of text)."""
        return self.counter.image_surcharge(e.message for e in self.inputs.image_messages())

    def sized(self, raw: int) -> int:
        """The best estimate of a request whose raw (uncalibrated) estimate is ``raw``.

        With an :attr:`anchor`, the reported prompt of the latest reply plus the calibrated
        difference: the calibration is learned from spans of messages, and what every request
        carries besides them (system prompt, tool schemas as the server renders them) may count
        quite differently on the server; the anchor holds it as the server counted it. Without one,
        the calibrated estimate of the whole request.
        """
        if self.anchor is not None:
            prompt, at = self.anchor
            anchored = prompt + self.counter.calibrated(raw - at)
            if anchored > 0:
                return anchored
        return self.counter.calibrated(raw)

    def check(self) -> BudgetCheck:
        start = self._catch_up()
        raw = self.estimate_raw()
        estimate = self.counter.calibrated(raw)
        effective = self.sized(raw)
        source: BudgetSource = "estimated"
        pos = self._usage_pos(start)
        if pos is not None and self._path is not None:  # _catch_up has set the path
            usage = self.store.get(self._path[pos]).usage
            if usage is not None and usage.prompt_tokens > 0:
                appended = self._since(pos)  # the reply itself and everything after it
                # the images sent are added whole: the ones the reported prompt already held are
                # counted twice, an over-estimate that keeps the request under the hard limit
                effective = usage.prompt_tokens + self.counter.calibrated(appended) + self._images()
                source = "provider_usage"
        return BudgetCheck(effective, self.hard_limit, self.soft_limit, self.context_window, source, estimate,
                           self.context_key, self.store.leaf_id)

    def usage_span(self) -> tuple[list[Entry], int] | None:
        """The entries of the next request since the latest reply that reported usage on this
        model input (that reply first), and that reply's prompt count; ``None`` without one."""
        start = self._catch_up()
        pos = self._usage_pos(start)
        if pos is None or self._path is None:
            return None
        usage = self.store.get(self._path[pos]).usage
        if usage is None or usage.prompt_tokens <= 0:
            return None
        return [self.store.get(entry_id) for entry_id in self._path[pos:]], usage.prompt_tokens

    def observe_usage(self, estimated_prompt: int, reported_prompt: int) -> None:
        """Feed one provider response (its reported prompt size) into the tokenizer calibration.

        The calibration learns what the check applies it to: when an earlier reply on the same
        model input reported usage, the check is that usage plus the calibrated estimate of the
        entries appended since, so the sample is that span (its estimate against the growth of
        the reported prompt), exactly the span :func:`soba_notebook.views.estimator_report`
        measures. Without one, the whole request (``estimated_prompt``) is the sample, a ``whole``
        one: the ratio until the first span's (:class:`~soba_notebook.tokens.Calibration`).
        """
        start = self._catch_up()
        pos = self._usage_pos(start)
        if pos is not None and self._path is not None:  # _catch_up has set the path
            usage = self.store.get(self._path[pos]).usage
            grown = reported_prompt - (usage.prompt_tokens if usage is not None else 0)
            span = self._since(pos)
            if usage is not None and usage.prompt_tokens > 0 and grown > 0 and span > 0:
                self.counter.observe_usage(span, grown)
                return
        self.counter.observe_usage(estimated_prompt, reported_prompt, whole=True)
