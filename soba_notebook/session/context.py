"""What the model sees: the latest capsule on the leaf's path plus its retained tail.

Pure functions over a root-to-leaf path (DESIGN.md, "Model input"). Older capsules stay in the
transcript but never enter the request; entries that are not model input (leaf markers,
checkpoints, config changes, unknown types from newer versions) are skipped.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, indexOf
from typing import Any

from ..errors import SessionWarning
from .capsule_schema import validate_capsule_json
from .entries import MODEL_ROLES, Entry
from .payloads import capsule_data

__all__ = ["ModelContext", "build_context", "capsule_is_usable", "context_key", "context_start",
           "first_kept_index", "latest_capsule_index", "pair_problems"]


@dataclass(frozen=True, slots=True)
class ModelContext:
    """The model input selected from a path: capsule in force (if any) and the messages after it."""

    capsule: Entry | None
    messages: tuple[Entry, ...]
    first_kept_index: int  # index on the path where the verbatim part starts
    key: str

    @property
    def message_dicts(self) -> list[Mapping[str, Any]]:
        return [e.message for e in self.messages]


#: capsule entry object -> whether its state is a valid capsule, for the most recently checked
#: :data:`CAPSULE_CHECKS_KEPT` entries; beyond that the oldest is forgotten and would be checked
#: again. The entry is referenced weakly: a cached answer is for that object only (never for
#: another that reuses its ``id``), and the cache never keeps an old capsule alive (the session
#: store reads old entries back from the file instead of holding them).
_CAPSULE_OK: OrderedDict[int, tuple[weakref.ref[Entry], bool]] = OrderedDict()
_CAPSULE_OK_LOCK = threading.Lock()
CAPSULE_CHECKS_KEPT = 256


def capsule_is_usable(entry: Entry) -> bool:
    """Whether a capsule entry's ``state`` is a valid capsule; warns once (naming the line) when not.

    An invalid capsule (hand-edited, written by a buggy tool) is skipped for model input: the
    capsule before it (or the root) is in force again, so the budget grows and the engine
    compacts again, instead of every later turn failing on it.
    """
    with _CAPSULE_OK_LOCK:
        cached = _CAPSULE_OK.get(id(entry))
        if cached is not None and cached[0]() is entry:
            _CAPSULE_OK.move_to_end(id(entry))
            return cached[1]
    try:
        problems = validate_capsule_json(capsule_data(entry).get("state"))
    except RecursionError:
        problems = ["nested too deeply"]
    if problems:
        where = f"line {entry.line}: " if entry.line else ""
        warnings.warn(f"{where}capsule entry {entry.id} is invalid ({'; '.join(problems[:3])}); it is skipped for "
                      f"model input and the session compacts again when needed", SessionWarning, stacklevel=3)
    with _CAPSULE_OK_LOCK:
        _CAPSULE_OK[id(entry)] = (weakref.ref(entry), not problems)
        _CAPSULE_OK.move_to_end(id(entry))
        while len(_CAPSULE_OK) > CAPSULE_CHECKS_KEPT:
            _CAPSULE_OK.popitem(last=False)
    return not problems


_TYPE = attrgetter("type")
_ROLE = attrgetter("role")
_IS_INPUT = MODEL_ROLES.__contains__  # an entry is model input when it has a model role


def latest_capsule_index(path: Sequence[Entry]) -> int | None:
    # The walk runs in C (operator.indexOf over the types from the leaf back): it stops at the
    # newest capsule, and it walks a whole path when there is none, so no interpreter step per entry.
    types = map(_TYPE, reversed(path))
    last, skipped = len(path) - 1, 0
    while True:
        try:
            skipped += indexOf(types, "capsule")
        except ValueError:
            return None
        i = last - skipped
        if capsule_is_usable(path[i]):
            return i
        skipped += 1


def context_key(capsule: Entry | None) -> str:
    """Identifies the model-input prefix: same key means the request grew only by appending."""
    return f"capsule:{capsule.id}" if capsule is not None else "root"


def context_start(path: Sequence[Entry]) -> tuple[int, Entry | None]:
    """Where the model input begins on ``path``, and the capsule in force (None: the root).

    The context builder and the compaction planner both ask it, so they can never disagree about
    what the model sees.
    """
    cap_i = latest_capsule_index(path)
    if cap_i is None:
        return 0, None
    return first_kept_index(path, cap_i, warn=True), path[cap_i]


def first_kept_index(path: Sequence[Entry], capsule_index: int, *, warn: bool = False) -> int:
    """Where the verbatim tail of the capsule at ``capsule_index`` starts on ``path``.

    The one place that resolves a capsule's ``firstKeptEntryId`` (the model input, the planner and
    the analysis views ask it): the index of that entry before the capsule, or just after the
    capsule when it keeps none or names an entry not on the path (``warn``: say so).
    """
    capsule = path[capsule_index]
    first_kept = capsule_data(capsule).get("firstKeptEntryId")
    if isinstance(first_kept, str):
        for i in range(capsule_index - 1, -1, -1):
            if path[i].id == first_kept:
                return i
        if warn:  # a hand-edited or damaged transcript: say so rather than shrink the input quietly
            warnings.warn(f"capsule {capsule.id}: firstKeptEntryId {first_kept!r} is not on the path to the "
                          f"leaf; the model input starts after the capsule (the transcript keeps every entry)",
                          SessionWarning, stacklevel=4)
    return capsule_index + 1


def build_context(path: Sequence[Entry]) -> ModelContext:
    """Select model input from ``path`` (root to leaf), per the seed's section 2.1."""
    start, capsule = context_start(path)
    tail = path[start:] if start else path
    # Entry.is_model_input, asked in C for every entry (a context is most of a path)
    messages = tuple(compress(tail, map(_IS_INPUT, map(_ROLE, tail))))
    return ModelContext(capsule, messages, start, context_key(capsule))


def pair_problems(messages: Sequence[Entry]) -> list[str]:
    """Broken tool pairs in ``messages``: results without their call, calls without a result."""
    problems: list[str] = []
    open_calls: dict[str, str] = {}
    seen_calls: set[str] = set()
    for e in messages:
        if e.role == "assistant":
            for call in e.tool_calls:
                open_calls[call.id] = e.id or "?"
                seen_calls.add(call.id)
        elif e.role == "tool":
            cid = e.tool_call_id or ""
            if cid not in seen_calls:
                problems.append(f"tool result {e.id} has no call {cid!r} before it")
            open_calls.pop(cid, None)
    problems.extend(f"tool call {cid!r} in {eid} has no result" for cid, eid in open_calls.items())
    return problems
