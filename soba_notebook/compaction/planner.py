"""Where to cut, and the immutable plan of one compaction. Pure functions over the session path.

The *context* is what the model currently sees: the entries from the previous capsule's
``firstKeptEntryId`` (or the root) to the leaf, without the capsule entries themselves. A new
compaction summarizes a prefix of that context and keeps the rest verbatim, so the entries an
earlier capsule kept but the new one does not are summarized, never silently lost.

A cut is valid only at a boundary: the first kept entry is a user or assistant message (never a
tool result), and every tool call before the cut has all its results before the cut, so a tool
call is never separated from its result, nor a batch of parallel calls from any of theirs.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, replace

from ..session.context import context_start
from ..session.entries import Entry
from ..session.payloads import BudgetSource, CompactionStartPayload, OperationTrigger
from .capsule import Capsule

__all__ = ["CompactionPlan", "context_slice", "find_cut_point", "valid_boundaries"]


def context_slice(path: Sequence[Entry]) -> tuple[list[Entry], Entry | None]:
    """The entries of the current model context (capsule entries excluded) and the capsule in force."""
    start, capsule = context_start(path)
    return [e for e in path[start:] if e.type != "capsule"], capsule


def valid_boundaries(entries: Sequence[Entry]) -> tuple[list[int], bool]:
    """Indices where a kept tail may begin, and whether cutting after the last entry is valid.

    A boundary is valid only where no tool call before it still waits for a result after it,
    whatever lies between a call and its result: user messages (a second kernel on the same
    session, an imported transcript), config changes, checkpoints. A call whose result appears
    nowhere in ``entries`` holds boundaries open only until the user speaks again: then it was
    abandoned (an aborted reply in an imported session) and no result can follow; before that
    its result may still be coming, so the cut may not pass it.
    """
    answered = {e.tool_call_id for e in entries if e.role == "tool" and e.tool_call_id}
    return scan_boundaries(entries, answered, set(), 0)


def scan_boundaries(entries: Sequence[Entry], answered: Container[str], open_calls: set[str],
                    start: int, stop: int | None = None) -> tuple[list[int], bool]:
    """The walk of :func:`valid_boundaries` from ``start`` (0, or a user message where
    ``open_calls`` are the calls still waiting for a result that comes later): the valid
    boundaries at ``start`` and after (before ``stop``, when given: the walk ends there), and
    whether the end is one (meaningful only when walked to the end). ``open_calls`` is consumed."""
    valid: list[int] = []
    unanswered: set[str] = set()  # calls with no result anywhere in entries
    for i in range(start, len(entries) if stop is None else min(stop, len(entries))):
        e = entries[i]
        role = e.role
        if role == "user":
            unanswered.clear()
        if i > 0 and not open_calls and not unanswered and role != "tool" and e.is_model_input:
            valid.append(i)
        if role == "assistant":
            for call_id in e.tool_call_ids:
                (open_calls if call_id in answered else unanswered).add(call_id)
        elif role == "tool":
            open_calls.discard(e.tool_call_id or "")
    return valid, not open_calls and not unanswered


def find_cut_point(entries: Sequence[Entry], tokens: Sequence[int], keep_recent_tokens: int, *,
                   max_tail_tokens: int | None = None) -> int | None:
    """Index of the first entry to keep verbatim, or None when nothing can be summarized.

    Keeps the smallest valid tail holding at least ``keep_recent_tokens``. When the tail must
    also fit under ``max_tail_tokens`` (mandatory compactions), a later boundary is taken
    instead, down to keeping nothing (``len(entries)``) if the calls are all answered.
    """
    valid, end_valid = valid_boundaries(entries)
    suffix = [0] * (len(entries) + 1)
    for i in range(len(entries) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + tokens[i]
    cut = None
    for i in reversed(valid):
        if suffix[i] >= keep_recent_tokens:
            cut = i
            break
    if max_tail_tokens is not None and (cut is None or suffix[cut] > max_tail_tokens):
        candidates = valid + ([len(entries)] if end_valid and entries else [])
        cut = next((i for i in candidates if suffix[i] <= max_tail_tokens), None)
    return cut if cut is not None and cut > 0 else None


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Everything one compaction will do, fixed before it starts."""

    operation_id: str
    trigger: OperationTrigger
    leaf_id: str | None
    tokens_before: int
    source: BudgetSource
    hard_limit: int
    soft_limit: int
    keep_recent_tokens: int
    summarize: tuple[Entry, ...]
    first_kept_entry_id: str | None
    kept_tokens: int
    summarized_tokens: int
    previous_capsule: Capsule | None
    previous_checkpoint_id: str | None
    instructions: str | None = None
    #: the retained tail holds a user message: the user's latest request is in model input word for word
    tail_has_request: bool = False

    @property
    def entry_count(self) -> int:
        return len(self.summarize)

    def with_request_rule(self, capsule: Capsule) -> Capsule:
        """``capsule`` as this plan appends it: without ``latestRequest`` when the retained tail already
        shows a newer user request verbatim (the capsule's would be an older one, twice the cost for
        nothing the model needs; docs/CAPSULE_FORMAT.md)."""
        return replace(capsule, latest_request="") if self.tail_has_request and capsule.latest_request else capsule

    def to_event(self) -> CompactionStartPayload:
        return {"operation_id": self.operation_id, "trigger": self.trigger, "tokens_before": self.tokens_before,
                "hard_limit": self.hard_limit, "soft_limit": self.soft_limit, "source": self.source,
                "summarized_entries": self.entry_count, "summarized_tokens": self.summarized_tokens,
                "kept_tokens": self.kept_tokens, "first_kept_entry_id": self.first_kept_entry_id}
