"""A session that lives in memory only: what a replay appends to.

A replay (:mod:`soba_notebook.compaction.simulate`) re-appends every entry of the session it
replays, and the compaction engine appends its capsules, to a store the engine reads its model
input from. The figures a replay reports come from that model input, the counts and the engine's
decisions, never from a file: written through :class:`~.store.SessionStore`, each entry cost an
``open`` and a lock on the file, a read of what other writers added (none can), a JSON encoding
of the entry and a ``write``, per-call costs that also rose with the size of the process.

:class:`MemoryStore` is a :class:`~.store.SessionStore` with the same entries, tree, leaf, line
numbers and version as one that wrote the same appends to a file, and no file: no open, no
lock, no encoding. What an append does to the entry in memory is exactly what the file store
does: ids, parent and timestamp filled in, a duplicate id refused, a stale ``expect_leaf``
refused, and text holding UTF-16 surrogates replaced by the entry as it would have been written
(pairs joined, lone halves U+FFFD; found without encoding: a walk that asks ``str.isascii``,
free for ASCII text, and searches only the rest). :meth:`MemoryStore.save` writes the entries to
a real session file in one append, when a caller wants to open the replayed session afterwards.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import SessionError
from ..surrogates import clean_surrogates
from .entries import Entry, new_id, now_iso
from .jsonl import FORMAT_VERSION
from .lease import WriterLease
from .store import SessionStore

__all__ = ["MemoryStore", "holds_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def holds_surrogates(value: Any) -> bool:
    """Whether any string in ``value`` (keys included, as JSON would write them) holds a UTF-16
    surrogate, i.e. whether :meth:`SessionStore.append` would have to clean the entry."""
    cls = value.__class__
    if cls is str:
        return not value.isascii() and _SURROGATE.search(value) is not None
    # loops, not any(generator): no generator frame per container (this runs on every replayed entry)
    if cls is dict:
        for key, item in value.items():  # noqa: SIM110
            if holds_surrogates(key) or holds_surrogates(item):
                return True
        return False
    if cls is list or cls is tuple:
        for item in value:  # noqa: SIM110
            if holds_surrogates(item):
                return True
        return False
    if isinstance(value, str):  # subclasses, as the encoder sees them
        return holds_surrogates(str(value))
    if isinstance(value, Mapping):  # a dict subclass, or an entry's data of another mapping type
        return holds_surrogates(dict(value))
    if isinstance(value, (list, tuple)):
        return holds_surrogates(list(value))
    return False


class MemoryStore(SessionStore):
    """A :class:`~.store.SessionStore` with no file (see the module's docstring). One writer: this
    process; :meth:`refresh` finds nothing and :meth:`claim` is refused. It keeps every entry
    whole: there is no file to read one back from."""

    _keep = None
    _keep_bytes = None

    @classmethod
    def create_in_memory(cls, *, session_id: str | None = None, cwd: str | None = None,
                         meta: dict[str, Any] | None = None,
                         clock: Callable[[], datetime] | None = None) -> MemoryStore:
        """An empty session with the header :meth:`SessionStore.create` would write."""
        session_id = session_id or time.strftime("%Y%m%d-%H%M%S-") + new_id()[:8]
        header = {"type": "session", "version": FORMAT_VERSION, "id": session_id,
                  "created": now_iso(clock() if clock else None), "cwd": cwd or os.getcwd(),
                  "producer": "soba_notebook"}
        if meta:
            header.update({k: v for k, v in meta.items() if k not in header})
        store = cls(Path(f"<in-memory session {session_id}>"), header, clock=clock)
        store._line_no = 1  # the header's line, as in a file
        return store

    def refresh(self) -> list[Entry]:
        return []  # nobody else can append to memory

    def claim(self, *, take_over: bool = False, meta: dict[str, str | None] | None = None) -> WriterLease:
        raise SessionError(f"{self.file}: lives in memory only; there is no file to hold a writer lease on")

    def append(self, entry: Entry, *, expect_leaf: str | object | None = ...) -> Entry:
        """:meth:`SessionStore.append` without the file: the same entry, line and leaf."""
        with self._mutex:
            entry = self._stamped(entry, expect_leaf)
            if holds_surrogates(entry.data) or holds_surrogates(entry.id) or holds_surrogates(entry.parent_id) \
                    or holds_surrogates(entry.ts) or holds_surrogates(entry.type):
                # the entry as the file store writes and keeps it (the same JSON round trip)
                payload = json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":"))
                entry = Entry.from_json(json.loads(clean_surrogates(payload)))
            return self._appended(entry)

    def append_many(self, entries: list[Entry]) -> list[Entry]:
        """Each entry appended in turn, after checking that no id is taken (as the file store
        refuses the whole batch then); one timestamp for the entries that have none."""
        seen: set[str] = set()
        for eid in (e.id for e in entries if e.id is not None):
            if eid in self or eid in seen:
                raise SessionError(f"{self.file}: an entry of the batch: id {eid!r} already exists; "
                                   f"nothing was appended")
            seen.add(eid)
        stamp = now_iso(self._clock() if self._clock else None)
        return [self.append(e if e.ts else Entry(e.type, e.data, e.id, e.parent_id, stamp, e.line)) for e in entries]

    def save(self, directory: str | os.PathLike[str]) -> SessionStore:
        """The session written to ``<directory>/<id>.jsonl`` (one append) and opened from there."""
        meta = {k: v for k, v in self.header.items() if k not in ("type", "version", "id", "created", "cwd")}
        store = SessionStore.create(directory, session_id=self.id, cwd=self.header.get("cwd"), meta=meta,
                                    clock=self._clock)
        store.append_many(self.entries())
        return store
