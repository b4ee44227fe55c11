"""Where each tool call of the model input was made and answered, kept as entries arrive.

The compaction cut may never separate a tool call from any of its results (seed section 2.1).
Knowing that for a cut near the end of a long context used to need a walk of the whole context:
a call made long ago could still be waiting for a result after the cut. A :class:`ToolCallIndex`
is kept by :class:`~.model_input.ModelInputBuilder` beside its context list, one O(1) step per
entry, so the planner can decide from the tail alone (``compaction/tail_cut.py``).

The rule it serves is :func:`~soba_notebook.compaction.planner.valid_boundaries`': a call whose id
has a result anywhere in the context is open from the call until the next result with its id.
So an id is open at a position exactly when its last event before that position (a call or a
result) is a call, and the id is answered somewhere. Ids that repeat (servers that number calls
``call_0``, ``call_1`` afresh in every reply) and results written before their call (merged or
hand-edited files) follow from that with no special case: :meth:`ToolCallIndex.open_at` looks
up, for each id answered at or after a position, its last event before it, and keeps aside the
few ids whose last event is a call made after all their results (open to the end).
Positions are indices into the builder's context list (the entries from the capsule's first
kept entry to the leaf, capsules excluded).
"""

from __future__ import annotations

from bisect import bisect_left

from .entries import Entry

__all__ = ["ToolCallIndex"]


class ToolCallIndex:
    """Tool calls and results of one context, by position. Append-only; rebuilt with the context."""

    __slots__ = ("_result_ids", "_result_positions", "answered", "calls", "results", "stuck", "users")

    def __init__(self) -> None:
        #: call id -> positions of the assistant entries that called it (non-empty ids only)
        self.calls: dict[str, list[int]] = {}
        #: call id -> positions of its results (non-empty ids only, called or not)
        self.results: dict[str, list[int]] = {}
        self.answered = self.results  # the ids with a result somewhere: the reference's `answered`
        #: answered ids whose last event is a call made after all their results -> the first such call's position
        self.stuck: dict[str, int] = {}
        self._result_positions: list[int] = []  # every result, in order, for bisect
        self._result_ids: list[str] = []
        #: positions of user messages (where calls left without any result stop holding a cut back)
        self.users: list[int] = []

    def add(self, pos: int, entry: Entry) -> None:
        """Record the entry at context position ``pos`` (positions arrive in increasing order)."""
        if entry.type != "message":
            return
        role = entry.role
        if role == "user":
            self.users.append(pos)
        elif role == "assistant":
            for call_id in entry.tool_call_ids:
                if not call_id:  # never answerable: the planner treats it as abandoned, like the full walk
                    continue
                self.calls.setdefault(call_id, []).append(pos)
                if call_id in self.results:  # open from the FIRST call after its last result on
                    self.stuck.setdefault(call_id, pos)
        elif role == "tool":
            result_of = entry.tool_call_id
            if result_of:
                self.results.setdefault(result_of, []).append(pos)
                self.stuck.pop(result_of, None)
                self._result_positions.append(pos)
                self._result_ids.append(result_of)

    def open_at(self, pos: int) -> set[str]:
        """Answered calls still waiting for a result at ``pos`` (the reference's ``open_calls``
        there, before the entry at ``pos``): O(results from ``pos`` on, and the stuck ids)."""
        found = {cid for cid, called in self.stuck.items() if called < pos}
        seen: set[str] = set()
        calls, results = self.calls, self.results
        for cid in self._result_ids[bisect_left(self._result_positions, pos):]:
            if cid in seen:
                continue
            seen.add(cid)
            called = calls.get(cid)
            if not called:
                continue
            last_call = _last_before(called, pos)
            if last_call is not None:
                last_result = _last_before(results[cid], pos)
                if last_result is None or last_result < last_call:
                    found.add(cid)
        return found

    def user_at_or_before(self, pos: int) -> int:
        """The position of the last user message at or before ``pos``, or 0 (the context's start)."""
        users = self.users
        i = bisect_left(users, pos + 1) - 1
        return users[i] if i >= 0 else 0


def _last_before(positions: list[int], pos: int) -> int | None:
    i = bisect_left(positions, pos) - 1
    return positions[i] if i >= 0 else None
