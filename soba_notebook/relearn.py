"""Relearning the token calibration of a reopened session from what its transcript recorded.

Why it exists: the :class:`~soba_notebook.tokens.Calibration` ratio, learned from the provider's
reported prompt sizes, lives in memory. A fresh kernel on the same session would start from ratio
1.0, so wherever the budget is an estimate (right after a compaction, before the next reply reports
usage) it would show another figure than the kernel that wrote the session.

Every sample the live agent fed the calibration is recoverable from the transcript: each
assistant reply records the provider's usage and the context it answered (``contextKey``), and
its request held exactly the model-input entries before it on the path. :func:`relearn_calibration`
replays the samples of the last :data:`RELEARN_REPLIES` replies in the order the live agent saw
them, the way :meth:`~soba_notebook.budget.BudgetTracker.observe_usage` takes them: the span
since the previous reply on the same context against the growth of the reported prompt, or the
whole request when there is no earlier reply on that context. Older samples weigh
``decay ** RELEARN_REPLIES`` or less in the live ratio, so they are left out: reopening a long
session tokenizes its last replies' spans, not its history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .session.entries import Entry
from .session.payloads import capsule_data
from .session.store import SessionStore
from .tokens import REPLY_PRIMING, TokenCounter

__all__ = ["RELEARN_REPLIES", "Relearned", "relearn_calibration", "reported_replies"]

#: how many of the latest replies with reported usage are replayed (0.9 ** 32: under 4% weight left)
RELEARN_REPLIES = 32

#: assistant replies read back at a time by :func:`reported_replies`
_REPLIES_READ = 256


@dataclass(frozen=True, slots=True)
class Relearned:
    """What the transcript taught: how many calibration samples were offered, and the anchor
    (reported prompt, raw estimate of its request) of the latest reply with reported usage."""

    samples: int
    anchor: tuple[int, int] | None


def relearn_calibration(store: SessionStore, counter: TokenCounter, *, base_tokens: int,
                        capsule_tokens: Callable[[Entry], int], limit: int = RELEARN_REPLIES) -> Relearned:
    """Feed ``counter``'s calibration the samples of the last ``limit`` replies on ``store``'s
    path that carry provider-reported usage, and find the latest one's anchor.

    ``base_tokens`` is what every request carries besides history (system prompt and tool
    schemas, as counted now); ``capsule_tokens`` measures a capsule entry as model input.
    """
    path = store.path_ids()
    get = store.get
    replies, low = reported_replies(store, path, limit)
    if not replies:
        return Relearned(0, None)
    latest: dict[str, int] = {}  # context key -> position of its latest reply replayed so far
    offered = 0
    for pos in reversed(replies):  # oldest first, as the live agent saw them
        entry = get(path[pos])
        key = _key(entry)
        reported = entry.usage.prompt_tokens if entry.usage is not None else 0
        sample = _span_sample(get(path[latest[key]]), _raw(path, latest[key], pos, get, counter), reported) \
            if key in latest else None
        if sample is not None:
            counter.observe_usage(*sample)
            offered += 1
        elif (whole := _request_raw(path, pos, get, counter, base_tokens, capsule_tokens, low)) is not None:
            counter.observe_usage(whole, reported, whole=True)
            offered += 1
        latest[key] = pos
    newest = get(path[replies[0]])
    at = _request_raw(path, replies[0], get, counter, base_tokens, capsule_tokens, 0)
    anchor = (newest.usage.prompt_tokens, at) if newest.usage is not None and at is not None else None
    return Relearned(offered, anchor)


def reported_replies(store: SessionStore, path: list[str], limit: int) -> tuple[list[int], int]:
    """Positions on ``path`` of the last ``limit`` assistant replies with provider-reported usage,
    newest first, and the lowest position looked at (that of the last one found, or 0).

    Only assistant messages are read (their role is in the store's records), a block at a time
    from the leaf back: a long session whose replies report no usage (an offline model) is walked
    to its root, and the store reads old entries back from the file, so one at a time that walk
    cost many times what holding every entry in memory did.
    """
    replies: list[int] = []
    role_of = store.role_of
    low = len(path)
    while low > 0 and len(replies) < limit:
        candidates: list[int] = []
        while low > 0 and len(candidates) < _REPLIES_READ:
            low -= 1
            if role_of(path[low]) == "assistant":
                candidates.append(low)
        for pos, entry in zip(candidates, store.get_many([path[i] for i in candidates]), strict=True):
            usage = entry.usage
            if usage is not None and usage.reported:
                replies.append(pos)
                if len(replies) == limit:
                    return replies, pos
    return replies, low


def _key(entry: Entry) -> str:
    return entry.message.get("contextKey") or "root"


def _raw(path: list[str], start: int, end: int, get: Callable[[str], Entry], counter: TokenCounter) -> int:
    """Raw tokens of the entries at path positions ``start`` up to ``end`` (counts are cached)."""
    return sum(counter.count_entry(get(path[i])) for i in range(start, end))


def _span_sample(previous: Entry, span: int, reported: int) -> tuple[int, int] | None:
    """The span since ``previous`` (the last reply on the same context) against the growth of
    the reported prompt, or ``None`` when the live agent would have taken the whole request."""
    before = previous.usage.prompt_tokens if previous.usage is not None else 0
    grown = reported - before
    return (span, grown) if before > 0 and grown > 0 and span > 0 else None


def _request_raw(path: list[str], pos: int, get: Callable[[str], Entry], counter: TokenCounter, base_tokens: int,
                 capsule_tokens: Callable[[Entry], int], low: int) -> int | None:
    """The raw estimate of the whole request the reply at ``pos`` answered, or ``None`` when its
    model input starts before ``low`` or its capsule is not on the path."""
    key = _key(get(path[pos]))
    if key == "root":
        start, capsule_cost = 0, 0
    else:
        capsule_id = key.removeprefix("capsule:")
        try:
            capsule_at = path.index(capsule_id, low, pos)
        except ValueError:
            return None
        first_kept = capsule_data(get(capsule_id)).get("firstKeptEntryId")
        if not isinstance(first_kept, str):
            start = capsule_at + 1  # the capsule keeps nothing verbatim
        else:
            try:
                start = path.index(first_kept, 0, capsule_at)
            except ValueError:  # not on the path (a damaged transcript): no sample
                return None
        capsule_cost = capsule_tokens(get(capsule_id))
    if start < low:
        return None
    return base_tokens + capsule_cost + _raw(path, start, pos, get, counter) + REPLY_PRIMING
