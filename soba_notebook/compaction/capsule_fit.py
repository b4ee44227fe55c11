"""A capsule fitted to the room the plan reserves for it: the oldest history trimmed, and said so.

A compaction plans its continuation as base + capsule + retained tail under the hard limit, and
keeps :func:`capsule_reserve` tokens of it for the capsule (a quarter of the hard limit, at most
8,000). Rolling merges the previous capsule into the new one (seed section 2.2), so a long
session's capsule kept everything it ever accumulated: after hundreds of compactions the soak's
rolled capsule was about 6,400 tokens against a 3,500-token reserve, one turn's work no longer fit
beside it, and the hard-limit shrink summarized the turn's own prompt away (docs/BENCHMARKS.md,
"the `stopped` kind explained").

:func:`fit_capsule` trims a capsule that renders over its budget, deterministically and visibly:

* only the accumulating *history* lists are trimmed (:data:`TRIMMED`: completed work, decisions,
  files read, artifacts, verification, notebook cells run), each from its oldest item, the list holding the most text
  first, each down to a floor of its newest items;
* never the goal, active and pending work, blockers, next steps, files modified, active skills,
  the latest verification results, or the newest :data:`KEPT_CONSTRAINTS` constraints (the user's
  corrections). Of the constraints, the older *merged* items go with the history (``[N earlier
  constraints merged to bound the capsule] …``, the extractor's clipped bookkeeping: a model's
  capsule rolled over the extractor's kept one per roll, and in the soak they made most of the
  capsule); older corrections go only as the last resort, when nothing else may. The extractor
  takes every later user message for a correction, so on the model path (which, unlike the
  deterministic capsule, does not bound them) the soak's capsule held one per turn, 400 by turn 400;
* a note, the first item of completed work, says that older items were trimmed and how many of
  which list the latest trim dropped (one note: an earlier one is replaced; the counts are not
  summed across compactions, since an item dropped once, a file read again, can come back and be
  dropped again): the transcript keeps every one of them and the recall tool reads them, so
  nothing is lost silently.

When even the floors do not fit, the smallest capsule it can make is returned (the engine's hard
limit then decides, as before). Pure: the caller passes the counting function (the rendered
capsule as model input, kernel state included).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..session.capsule_schema import CAPSULE_FIELDS, Capsule
from ..tokens import REPLY_PRIMING
from .extract import MAX_ROLLED_CONSTRAINTS, MERGED_ITEM

__all__ = ["KEPT_CONSTRAINTS", "MAX_RESERVE", "TRIMMED", "capsule_reserve", "fit_capsule", "tail_room",
           "trimmed_counts"]

#: the most tokens the capsule's reserve holds, whatever the hard limit
MAX_RESERVE = 8_000
#: the history lists a capsule over its reserve loses items from (oldest first), and how many of
#: their newest items each keeps
TRIMMED: dict[str, int] = {"done": 3, "decisions": 3, "files_read": 0, "artifacts": 0, "verification": 5,
                           "cells_run": 5}
#: the constraints a capsule always keeps as given, newest last (the deterministic capsule's own
#: bound, ``extract.MAX_ROLLED_CONSTRAINTS``)
KEPT_CONSTRAINTS = MAX_ROLLED_CONSTRAINTS

_TITLES = {f.attr: f.title for f in CAPSULE_FIELDS}
_ATTRS = {title: attr for attr, title in _TITLES.items()}
_NOTE = ("(Older items were trimmed to fit the capsule's reserve, the latest time {counts}; the transcript keeps "
         "every one and the recall tool reads them.)")
_NOTE_AT = re.compile(r"\(Older items were trimmed to fit the capsule's reserve, the latest time (.+?); the "
                      r"transcript keeps every one and the recall tool reads them\.\)(?:; )?")
_COUNT = re.compile(r"^([\d,]+) of (.+)$")


def capsule_reserve(hard_limit: int) -> int:
    """The tokens a compaction plans for its capsule: a quarter of the hard limit, at most
    :data:`MAX_RESERVE` (the retained tail gets the rest, less the base)."""
    return min(MAX_RESERVE, hard_limit // 4)


def tail_room(hard_limit: int, base_tokens: int) -> int:
    """The most tokens a mandatory compaction's retained tail may hold: the hard limit less the
    base (system prompt, tools), the capsule's reserve and the reply's priming."""
    return max(0, hard_limit - base_tokens - capsule_reserve(hard_limit) - REPLY_PRIMING)


def trimmed_counts(capsule: Capsule) -> dict[str, int]:
    """How many items of each list the latest trim dropped (attribute -> count), read from the note
    in completed work; empty when there is none."""
    counts: dict[str, int] = {}
    for item in capsule.done:
        for match in _NOTE_AT.finditer(item):
            for part in match.group(1).split(", "):
                found = _COUNT.match(part)
                if found and found.group(2) in _ATTRS:
                    attr = _ATTRS[found.group(2)]  # a note copied twice (a model echoing it) counts once
                    counts[attr] = max(counts.get(attr, 0), int(found.group(1).replace(",", "")))
    return counts


def _note(counts: dict[str, int]) -> str:
    parts = [f"{counts[attr]:,} of {_TITLES[attr]}" for attr in (*TRIMMED, "constraints") if counts.get(attr)]
    return _NOTE.format(counts=", ".join(parts))


def _without_note(done: tuple[str, ...]) -> tuple[str, ...]:
    """``done`` with every trim note taken out (a note merged into a longer item leaves the rest)."""
    out = []
    for item in done:
        rest = _NOTE_AT.sub("", item).strip() if "(Older items were trimmed" in item else item
        if rest:
            out.append(rest)
    return tuple(out)


def _size(item: Any) -> int:
    """Characters an item renders as (near enough to rank the lists and size a batch)."""
    if isinstance(item, str):
        return len(item) + 3
    return sum(len(str(v)) for v in item.to_json().values()) + 16


def _next(attr: str, items: list[Any], last_resort: bool) -> int | None:
    """The position of the item ``attr`` loses next, or ``None`` when it keeps all it has left: the
    oldest item above the list's floor; in constraints, a merged item that a newer one follows, and
    as the ``last_resort`` (nothing else may go) the oldest one beyond the newest :data:`KEPT_CONSTRAINTS`."""
    if attr != "constraints":
        return 0 if len(items) > TRIMMED[attr] and not last_resort else None
    if last_resort:
        return 0 if len(items) > KEPT_CONSTRAINTS else None
    merged = [i for i, item in enumerate(items) if MERGED_ITEM.match(item)]
    return merged[0] if len(merged) > 1 else None


def _room(attr: str, items: list[Any]) -> int:
    """Characters ``attr`` can still lose."""
    if attr != "constraints":
        return sum(_size(i) for i in items[:max(0, len(items) - TRIMMED[attr])])
    return sum(_size(i) for i in items if MERGED_ITEM.match(i)) - max(
        (_size(i) for i in items if MERGED_ITEM.match(i)), default=0)


def fit_capsule(capsule: Capsule, budget: int, count: Callable[[Capsule], int]) -> Capsule:
    """``capsule`` when ``count(capsule) <= budget``; else the capsule with the oldest items of the
    :data:`TRIMMED` lists (and the older merged items of its constraints) dropped until it fits, or
    nothing more may go, and the trim note first in completed work. Deterministic: the same capsule
    and budget give the same result."""
    tokens = count(capsule)
    if tokens <= budget:
        return capsule
    counts: dict[str, int] = {}
    lists: dict[str, list[Any]] = {attr: list(getattr(capsule, attr)) for attr in (*TRIMMED, "constraints")}
    lists["done"] = list(_without_note(capsule.done))
    room = {attr: _room(attr, items) for attr, items in lists.items()}  # kept as items are dropped
    order = list(lists)
    fitted = capsule
    while tokens > budget:
        chars = sum(_size(i) for items in lists.values() for i in items) + len(capsule.goal)
        # the characters to drop for the tokens over, at this capsule's own rate (an estimate: the
        # loop measures again, and a batch never drops much more than the excess)
        want = max(1, (tokens - budget) * chars // max(1, tokens))
        dropped = 0
        while dropped < want:
            candidates = {attr: at for attr in order if (at := _next(attr, lists[attr], False)) is not None}
            if not candidates and (at := _next("constraints", lists["constraints"], True)) is not None:
                candidates = {"constraints": at}
            if not candidates:
                break
            attr = max(candidates, key=lambda a: (room[a], -order.index(a)))  # the most text; ties in order
            size = _size(lists[attr].pop(candidates[attr]))
            room[attr] -= size
            dropped += size
            counts[attr] = counts.get(attr, 0) + 1
        if not dropped:
            break  # nothing more may go: the smallest capsule this can make
        kept: dict[str, Any] = {attr: tuple(items) for attr, items in lists.items()}
        kept["done"] = (_note(counts), *kept["done"])
        fitted = replace(capsule, **kept)
        tokens = count(fitted)
    return fitted
