"""What a session store keeps of each entry: a small record, and the entry itself only for a while.

Why it exists: a store that kept every :class:`~.entries.Entry` of a long session would grow by the
whole transcript, turn after turn. :class:`EntryRecords` keeps, for every entry, the few fields the
tree, the leaf and a read back need (id, parent, type, role, the byte offset and length of its line,
its line number: about 200 bytes), and whole entries only for the newest indexed or read back whose
lines come to at most :data:`KEPT_BYTES` (16 MiB of lines: a session of up to about 20,000 typical
entries is held whole, as before, so reading its whole path costs nothing; a longer one stops
growing there), plus any entry someone else still holds (a weak reference: it stays the same object
while the model input, or a caller's list, holds it). Any other entry is read back from its line
when asked, checked to be the entry indexed there: a line changed in place (sessions are
append-only) is a :class:`~soba_notebook.errors.SessionError` naming it, never a wrong entry.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import SessionError
from .entries import Entry
from .jsonl import parse_lines

__all__ = ["KEPT_BYTES", "KEPT_ENTRIES", "READ_SPAN_BYTES", "EntryRecords"]

#: How many bytes of lines the whole entries a file store keeps by itself may come to: the newest
#: it indexed and the ones most recently read back. Beyond them it keeps only the entries someone
#: else still holds (the model input's, a caller's list); every other entry is read back from the
#: file when asked. Sized so that reading a whole path back (views, a context built from the path,
#: pi's own sessions at 16x in bench/bench_pi.py) stays an in-memory walk for sessions of usual
#: size, while a session of thousands of turns stops growing: whole entries take about 2.5x their
#: line in memory, so about 40 MiB at most.
KEPT_BYTES = 16 << 20

#: How many whole entries a file store keeps by itself, whatever their size (None: no count bound;
#: tests set one to make every query read back).
KEPT_ENTRIES: int | None = None

#: The most a read back of many entries reads at once (they are read in file order).
READ_SPAN_BYTES = 8 << 20

#: the fewest weak references kept before those whose entries are gone are swept out
_SWEEP_MIN = 1024

#: stands for an entry still to be read back, in a list being filled
_PLACEHOLDER = Entry("placeholder")


class EntryRecords:
    """The records of one session's entries, by position in file order, and the whole entries
    kept (``keep``: how many by itself; None: every one, for a store with no file to read from).

    ``mutex`` is the store's: reads back and sweeps run under it, lookups of a held entry do not.
    """

    def __init__(self, file: Path, keep: int | None, mutex: threading.RLock,
                 keep_bytes: int | None = None) -> None:
        self.file = file
        self.keep_at_most = keep
        self.keep_bytes = keep_bytes
        self.kept_bytes = 0  # the lines of the entries in ``kept``
        #: whether any entry was ever let go (until then every entry is held whole)
        self.evicted = False
        self.mutex = mutex
        self.pos: dict[str, int] = {}  # id -> position
        self.ids: list[str] = []
        self.parents: list[str | None] = []  # the parent's own id object (one string per id)
        self.types: list[str] = []
        self.roles: list[str | None] = []  # a message's role (shared objects), None for other entries
        self.offsets = array("q")  # where the entry's line starts in the file; -1: in memory only
        self.sizes = array("q")  # the line's bytes, its newline excluded
        self.lines = array("q")
        self.kept: OrderedDict[str, Entry] = OrderedDict()  # the newest indexed or read back
        self.held: dict[str, weakref.ref[Entry]] = {}  # any other someone may still hold
        self.sweep_at = _SWEEP_MIN
        #: entries read back from the file so far (a test counts them)
        self.read_back = 0

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, entry: Entry, eid: str, parent: str | None, offset: int, size: int) -> None:
        """Record ``entry`` (id ``eid``, known ``parent``), whose line is ``size`` bytes at ``offset``."""
        self.ids.append(eid)
        self.parents.append(parent)
        self.types.append(entry.type)
        self.roles.append(entry.role)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.lines.append(entry.line or 0)
        self.pos[eid] = len(self.ids) - 1  # last: a reader that finds the id finds its record
        self.keep(eid, entry)

    # -- whole entries -----------------------------------------------------------------------
    def keep(self, eid: str, entry: Entry) -> None:
        """Keep ``entry`` as one of the newest; the oldest kept one is then held only weakly (it
        stays the same object for as long as anyone else holds it, and is read back after)."""
        kept = self.kept
        if eid not in kept:
            self.kept_bytes += self._size(eid)
        kept[eid] = entry
        most, budget = self.keep_at_most, self.keep_bytes
        while len(kept) > 1 and ((most is not None and len(kept) > most)
                                 or (budget is not None and self.kept_bytes > budget)):
            old_id, old = kept.popitem(last=False)
            self.evicted = True
            self.kept_bytes -= self._size(old_id)
            self._hold_weakly(old_id, old)

    def _size(self, eid: str) -> int:
        pos = self.pos.get(eid)
        return self.sizes[pos] if pos is not None else 0

    def _hold_weakly(self, eid: str, entry: Entry) -> None:
        """Remember ``entry`` while someone else holds it: plain weak references, no callback per
        entry; the dead ones are swept when the map has doubled (under the mutex: it iterates)."""
        held = self.held
        held[eid] = weakref.ref(entry)
        if len(held) > self.sweep_at:
            for gone in [k for k, ref in held.items() if ref() is None]:
                del held[gone]
            self.sweep_at = max(2 * len(held), _SWEEP_MIN)  # amortized O(1) an entry

    def held_entry(self, eid: str) -> Entry | None:
        """The entry ``eid`` if the store or anyone else holds it, without reading."""
        entry = self.kept.get(eid)
        if entry is None:
            ref = self.held.get(eid)
            entry = ref() if ref is not None else None
        return entry

    def get(self, eid: str, pos: int) -> Entry:
        """The entry ``eid`` at position ``pos``: held, or read back (one read) and kept."""
        entry = self.held_entry(eid)
        if entry is None:
            with self.mutex:
                entry = self._read_back([pos])[0]
                self.keep(eid, entry)
        return entry

    def whole(self, positions: Sequence[int]) -> list[Entry]:
        """The entries at ``positions`` (in that order): held ones as they are, the others read
        back in one pass over the file and then held weakly (the same object while the caller
        keeps it)."""
        ids, held = self.ids, self.held_entry
        out: list[Entry] = []
        missing: list[int] = []  # indexes into out of the entries to read back
        for i in positions:
            entry = held(ids[i])
            if entry is None:
                missing.append(len(out))
                entry = _PLACEHOLDER
            out.append(entry)
        if missing:
            with self.mutex:
                found = self._read_back([positions[k] for k in missing])
                for k, entry in zip(missing, found, strict=True):
                    out[k] = entry
                    self._hold_weakly(ids[positions[k]], entry)
        return out

    # -- reading back ------------------------------------------------------------------------
    def _read_back(self, positions: Sequence[int]) -> list[Entry]:
        """The entries at ``positions`` parsed again from their lines, in that order. They are read
        in file order, in spans of up to :data:`READ_SPAN_BYTES` when there are several, and parsed
        as one batch (one object per distinct key, as at open): a whole session is read back in
        one pass over the file, like opening it."""
        order = sorted(range(len(positions)), key=lambda k: self.offsets[positions[k]])
        raws = self._raw_lines([positions[k] for k in order])
        out: list[Entry] = [_PLACEHOLDER] * len(positions)
        paused = gc.isenabled() and len(positions) > 1_000  # as at open: nothing read here forms a cycle
        if paused:
            gc.disable()
        try:
            parsed = dict(parse_lines(self.file, b"\n".join(raws) + b"\n", 0, self._changed))
            del raws
            for n, k in enumerate(order):
                out[k] = self._checked(positions[k], parsed.pop(n, None))
        finally:
            if paused:
                gc.enable()
        self.read_back += len(positions)
        return out

    def _raw_lines(self, positions: list[int]) -> list[bytes]:
        """The bytes of the lines at ``positions`` (in increasing offsets), newline excluded."""
        offsets, sizes = self.offsets, self.sizes
        span = READ_SPAN_BYTES if len(positions) > 1 else 0
        end = offsets[positions[-1]] + sizes[positions[-1]] if positions else 0  # never read past the last line
        raws: list[bytes] = []
        try:
            fd = os.open(self.file, os.O_RDONLY)
        except OSError as exc:
            raise SessionError(f"{self.file}: cannot read session file ({exc.strerror})") from None
        try:
            buf, buf_at = b"", 0
            for i in positions:
                at, size = offsets[i], sizes[i]
                if at < 0:
                    raise SessionError(f"{self.file}: entry {self.ids[i]!r} lives in memory only and is no longer "
                                       f"held; it cannot be read back")
                if at < buf_at or at + size > buf_at + len(buf):
                    buf, buf_at = os.pread(fd, max(size, min(span, end - at)), at), at
                raws.append(buf[at - buf_at:at - buf_at + size])
        except OSError as exc:
            raise SessionError(f"{self.file}: cannot read session file ({exc.strerror})") from None
        finally:
            os.close(fd)
        return raws

    def _changed(self, message: str) -> None:
        """A line read back no longer parses: the file was changed in place."""
        raise SessionError(f"{self.file}: an entry read back from the file no longer reads as it did when the "
                           f"session was opened; the file was changed in place (sessions are append-only): "
                           f"{message}")

    def _checked(self, i: int, obj: Any) -> Entry:
        """The entry at position ``i`` from its line's parsed value, checked to be the entry indexed there."""
        eid = self.ids[i]
        if obj.__class__ is not dict or obj.get("id") != eid or obj.get("type") != self.types[i]:
            raise SessionError(f"{self.file}:{self.lines[i]}: the line of entry {eid!r} no longer reads as it did "
                               f"when the session was opened; the file was changed in place (sessions are "
                               f"append-only)")
        return Entry.from_parsed(obj, self.lines[i])
