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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from .context import ModelContext, context_key, context_start
from .entries import Entry
from .store import SessionStore

__all__ = ["ModelInputBuilder"]


class _PathView(Sequence[Entry]):
    """The store's root-to-leaf path as entries, resolved only where it is read (no O(history) copy)."""

    __slots__ = ("_get", "_ids")

    def __init__(self, ids: list[str], get: dict[str, Entry]) -> None:
        self._ids, self._get = ids, get

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self._get[x] for x in self._ids[i]]
        return self._get[self._ids[i]]


class ModelInputBuilder:
    """Incremental model input of ``store``'s current leaf. Not thread-safe (one agent loop)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        #: how often the builder started over (leaf moves, new capsules); a test and a bench read it
        self.rebuilds = 0
        self._path: list[str] | None = None
        self._seen = 0
        self._start = 0
        self._capsule: Entry | None = None
        self._context: list[Entry] = []  # path[start:] without capsule entries
        self._messages: list[Entry] = []  # the model-input entries among them

    # -- following the store -----------------------------------------------------------------
    def _catch_up(self) -> None:
        path = self.store.path_ids()
        if path is not self._path or len(path) < self._seen:
            self._rebuild(path)
            return
        n = len(path)
        if n == self._seen:
            return
        get = self.store._by_id  # read-only use of the index; avoids a method call per entry
        new = [get[i] for i in path[self._seen:n]]
        if any(e.type == "capsule" for e in new):
            self._rebuild(path)
            return
        for entry in new:
            self._context.append(entry)
            if entry.is_model_input:
                self._messages.append(entry)
        self._seen = n

    def _rebuild(self, path: list[str]) -> None:
        """Start over from the leaf: O(entries from the first kept entry to the leaf)."""
        self.rebuilds += 1
        view = _PathView(path, self.store._by_id)
        start, capsule = context_start(view)
        context = [e for e in view[start:] if e.type != "capsule"]
        self._path, self._seen, self._start, self._capsule = path, len(path), start, capsule
        self._context = context
        self._messages = [e for e in context if e.is_model_input]

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

    def context_slice(self) -> tuple[list[Entry], Entry | None]:
        """What :func:`~soba_notebook.compaction.planner.context_slice` returns for the current path."""
        self._catch_up()
        return list(self._context), self._capsule

    def position_in_context(self, entry_id: str) -> int | None:
        """Index of ``entry_id`` in :meth:`context_slice`'s entries, or None (a scan of the tail)."""
        self._catch_up()
        for i, e in enumerate(self._context):
            if e.id == entry_id:
                return i
        return None
