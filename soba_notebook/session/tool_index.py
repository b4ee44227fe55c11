"""Where each tool call of the model input was made and first answered, kept as entries arrive.

The compaction cut may never separate a tool call from any of its results (seed section 2.1).
Knowing that for a cut near the end of a long context used to need a walk of the whole context:
a call made long ago could still be waiting for a result after the cut. A :class:`ToolCallIndex`
is kept by :class:`~.model_input.ModelInputBuilder` beside its context list, one O(1) step per
appended entry, so the planner can decide from the tail alone (``compaction/tail_cut.py``): the
calls still open at a position are exactly those called before it whose first result lies at or
after it, and those results are in the tail.

That holds only while call ids behave: each id called once, no result before its call. A
transcript where they do not (a merged or hand-edited file) sets :attr:`ToolCallIndex.disordered`
and the planner walks the whole context as before. Positions are indices into the builder's
context list (the entries from the capsule's first kept entry to the leaf, capsules excluded).
"""

from __future__ import annotations

from bisect import bisect_left

from .entries import Entry

__all__ = ["ToolCallIndex"]


class ToolCallIndex:
    """Tool calls and results of one context, by position. Append-only; rebuilt with the context."""

    __slots__ = ("_result_positions", "answered", "called_at", "disordered", "spans", "users")

    def __init__(self) -> None:
        #: call id -> position of the assistant entry that made the call (non-empty ids only)
        self.called_at: dict[str, int] = {}
        #: call id -> position of its first result (every non-empty result id, called or not)
        self.answered: dict[str, int] = {}
        #: (first result position, call position, call id) of answered calls, by result position
        self.spans: list[tuple[int, int, str]] = []
        self._result_positions: list[int] = []  # spans' first element, for bisect
        #: positions of user messages (where calls left without a result stop holding a cut back)
        self.users: list[int] = []
        #: an id called twice, or answered before its call: the tail rule does not hold, walk all
        self.disordered = False

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
                if call_id in self.called_at or call_id in self.answered:
                    self.disordered = True
                self.called_at[call_id] = pos
        elif role == "tool":
            result_of = entry.tool_call_id
            if result_of and result_of not in self.answered:
                self.answered[result_of] = pos
                called = self.called_at.get(result_of)
                if called is not None:
                    self.spans.append((pos, called, result_of))
                    self._result_positions.append(pos)

    def open_at(self, pos: int) -> set[str]:
        """Calls made before ``pos`` whose first result is at ``pos`` or later: O(results after pos)."""
        spans = self.spans
        return {cid for _, called, cid in spans[bisect_left(self._result_positions, pos):] if called < pos}

    def user_at_or_before(self, pos: int) -> int:
        """The position of the last user message at or before ``pos``, or 0 (the context's start)."""
        users = self.users
        i = bisect_left(users, pos + 1) - 1
        return users[i] if i >= 0 else 0
