"""The model input of a session's leaf, kept up to date as entries are appended.

:func:`~.context.build_context` selects the model input from a whole root-to-leaf path; called
before every inference it costs O(history), which made long sessions (and the replay simulator,
which infers thousands of times) close to quadratic. A :class:`ModelInputBuilder` follows the
store instead: it remembers the capsule in force, where the verbatim part starts and the entries
from there to the leaf, and on each call only looks at the entries appended since. It starts over
only when the path is not an extension of the one it saw (the leaf moved: a rewind, a branch) or
when a new capsule arrives, and even then it reads only from the leaf back to the capsule in force
and its first kept entry, never the whole history.

Its answer is always the one :func:`~.context.build_context` gives for ``store.path()`` (a
property test holds it to that); it is the single source of the model input for the compaction
engine, the budget tracker and the simulator.

Beside the context it keeps what the compaction planner asks of it, so preparing a compaction
reads the tail, not the history: a :class:`~.tool_index.ToolCallIndex` (where each call was made
and first answered), updated as entries are appended, and, when given a ``count`` function, the
running token totals of the context, each entry counted once, when a total is first asked for
after it arrived (never at open: a session that is only looked at is never tokenized).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import overload

from .context import ModelContext, context_key, context_start
from .entries import Entry
from .store import SessionStore
from .tool_index import ToolCallIndex

__all__ = ["ModelInputBuilder"]


class _PathView(Sequence[Entry]):
    """The store's root-to-leaf path as entries, resolved only where it is read (no O(history) copy)."""

    __slots__ = ("_get", "_ids")

    def __init__(self, ids: list[str], get: Callable[[str], Entry]) -> None:
        self._ids, self._get = ids, get

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            get = self._get
            return [get(x) for x in self._ids[i]]
        return self._get(self._ids[i])


class ModelInputBuilder:
    """Incremental model input of ``store``'s current leaf. Not thread-safe (one agent loop)."""

    def __init__(self, store: SessionStore, *, count: Callable[[Entry], int] | None = None) -> None:
        self.store = store
        self._count = count
        self._cum: list[int] = [0]  # _cum[i]: tokens of context[:i], for the first len(_cum) - 1 entries
        self._index = ToolCallIndex()
        self._indexed = 0  # context entries the index has seen: it catches up when asked, like _cum
        #: how often the builder started over (leaf moves, new capsules); a test and a bench read it
        self.rebuilds = 0
        self._path: list[str] | None = None
        self._seen = 0
        self._start = 0
        self._capsule: Entry | None = None
        self._context: list[Entry] = []  # path[start:] without capsule entries
        self._messages: list[Entry] = []  # the model-input entries among them
        self._imaged: list[Entry] = []  # the messages among them that carry images, oldest first

    # -- following the store -----------------------------------------------------------------
    def _catch_up(self) -> None:
        path = self.store.path_ids()
        if path is not self._path or len(path) < self._seen:
            self._rebuild(path)
            return
        n = len(path)
        if n == self._seen:
            return
        get = self.store.get
        new = [get(i) for i in path[self._seen:n]]
        if any(e.type == "capsule" for e in new):
            self._rebuild(path)
            return
        context, messages = self._context, self._messages
        for entry in new:
            context.append(entry)
            if entry.is_model_input:
                messages.append(entry)
                if "attachments" in entry.message:
                    self._imaged.append(entry)
        self._seen = n

    def _rebuild(self, path: list[str]) -> None:
        """Start over from the leaf: O(entries from the first kept entry to the leaf)."""
        self.rebuilds += 1
        view = _PathView(path, self.store.get)
        start, capsule = context_start(view)
        context = [e for e in view[start:] if e.type != "capsule"]
        self._path, self._seen, self._start, self._capsule = path, len(path), start, capsule
        self._context = context
        self._messages = [e for e in context if e.is_model_input]
        self._imaged = [e for e in self._messages if "attachments" in e.message]
        self._index, self._indexed = ToolCallIndex(), 0
        self._cum = [0]

    # -- answers -----------------------------------------------------------------------------
    @property
    def start(self) -> int:
        """Index on the current path where the verbatim part of the model input begins."""
        self._catch_up()
        return self._start

    @property
    def capsule(self) -> Entry | None:
        """The capsule in force (the latest on the leaf's path), or None."""
        self._catch_up()
        return self._capsule

    @property
    def key(self) -> str:
        self._catch_up()
        return context_key(self._capsule)

    def context(self) -> ModelContext:
        """What :func:`~.context.build_context` returns for the current path."""
        self._catch_up()
        return ModelContext(self._capsule, tuple(self._messages), self._start, context_key(self._capsule))

    def messages(self) -> list[Entry]:
        """The model-input entries after the capsule (a fresh list: O(what the request holds))."""
        self._catch_up()
        return list(self._messages)

    def image_messages(self) -> list[Entry]:
        """The entries of :meth:`messages` that carry images, oldest first (O(those), not O(history))."""
        self._catch_up()
        return list(self._imaged)

    def context_slice(self) -> tuple[list[Entry], Entry | None]:
        """What :func:`~soba_notebook.compaction.planner.context_slice` returns for the current path."""
        self._catch_up()
        return list(self._context), self._capsule

    def context_entries(self) -> Sequence[Entry]:
        """The entries :meth:`context_slice` returns, not copied: read it, never change it, and
        ask again after the next append (a rebuild replaces it)."""
        self._catch_up()
        return self._context

    @property
    def tool_index(self) -> ToolCallIndex:
        """The tool calls of :meth:`context_entries`, by position (read only); indexes only the
        entries that arrived since the last call."""
        self._catch_up()
        index, context = self._index, self._context
        for pos in range(self._indexed, len(context)):
            index.add(pos, context[pos])
        self._indexed = len(context)
        return index

    def cumulative_tokens(self) -> Sequence[int]:
        """``t[i]`` = tokens of the first ``i`` context entries (``len(context) + 1`` items, read
        only). Counts only the entries that arrived since the last call; needs ``count``."""
        self._catch_up()
        if self._count is None:
            raise ValueError("this ModelInputBuilder was made without a count function")
        cum, context, count = self._cum, self._context, self._count
        total = cum[-1]
        for e in context[len(cum) - 1:]:
            total += count(e)
            cum.append(total)
        return cum

    def invalidate_counts(self) -> None:
        """Forget the running totals (the count function now counts differently)."""
        self._cum = [0]

    def position_in_context(self, entry_id: str) -> int | None:
        """Index of ``entry_id`` in :meth:`context_slice`'s entries, or None (a scan from the leaf
        back: the entries asked for are kept ones, near the end; ids on a path are distinct)."""
        self._catch_up()
        context = self._context
        for i in range(len(context) - 1, -1, -1):
            if context[i].id == entry_id:
                return i
        return None
