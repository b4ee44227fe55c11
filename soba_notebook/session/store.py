"""The append-only JSONL session store: one file per session, one entry per line.

What this module guarantees:

* **Append-only.** A line once written is never rewritten, truncated or removed. Rewind appends a
  ``leaf`` entry; upgrades and repairs happen in memory only.
* **One write per entry.** An entry is serialized to one line and written with a single
  ``write`` on an ``O_APPEND`` descriptor while an exclusive lock (:mod:`..locking`) is held, so two kernels or
  processes appending to the same session never interleave. ``fsync`` is optional.
* **Crash safety.** A torn last line (a writer killed mid-write, a write that failed on a full
  disk) is detected on open, reported once as a :class:`~soba_notebook.errors.SessionWarning`,
  skipped for reading, left in place and copied to ``<id>.jsonl.torn-<offset>`` where the user
  can see it; the next append starts on a fresh line. A failed append raises a
  :class:`~soba_notebook.errors.SessionError` naming the file and the cause.
* **One writer per session.** A store that holds the session's writer lease (:meth:`SessionStore.claim`,
  :mod:`.lease`) checks it under the exclusive lock before every append, so once another process
  took the session over, this one writes nothing more (two kernels never interleave turns).
* **Any text.** An entry whose text holds UTF-16 surrogates (an emoji's pair split across two
  stream chunks, a lone ``\ud83d`` escape in tool arguments) is written with the pair joined and a
  lone half as U+FFFD (:mod:`..surrogates`); :meth:`SessionStore.append` returns it as written.
* **Live readers.** :meth:`SessionStore.refresh` picks up lines other writers appended; readers
  only ever consume complete lines, so a half-written entry is never seen.
* **Clear errors.** A missing header, a non-JSON line, a parent that points nowhere: the message
  names the file and the line. Nothing is silently dropped: skipped lines are listed in
  :attr:`SessionStore.problems`.
* **Flat memory.** A long session does not keep its transcript in memory: a small record per
  entry, whole entries only for the newest and for those someone else holds; any other entry is
  read back from its line by byte offset when asked (:mod:`.records`). The live turn reads
  nothing back.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import SessionError, SessionHeldError, SessionLockedError, SessionWarning, StaleLeafError, StateFileError
from ..locking import lock_exclusive, lock_shared, unlock
from ..statefiles import open_state_file
from ..surrogates import clean_surrogates
from .entries import Entry, new_id, now_iso
from .jsonl import FORMAT_VERSION, line_starts, open_session_file, parse_header, parse_lines, quarantine
from .lease import WriterLease
from .payloads import leaf_data
from .records import KEPT_BYTES, KEPT_ENTRIES, EntryRecords

__all__ = ["FORMAT_VERSION", "KEPT_BYTES", "KEPT_ENTRIES", "BatchEntryError", "SessionStore"]

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

#: How much of a session file :meth:`SessionStore.open` reads and parses at a time.
OPEN_CHUNK_BYTES = 8 << 20


class SessionStore:
    """An open session file: its entries, their tree, and the current leaf. The queries read
    entries by their records (:class:`~.records.EntryRecords`): whatever is not held is read back,
    and the record-only ones (:meth:`type_of`, :meth:`role_of`, ``len``, ``in``) read nothing."""

    #: whole entries kept beyond those held elsewhere, by count and by the bytes of their lines
    #: (None: no bound; a store with no file keeps every one)
    _keep: int | None = KEPT_ENTRIES
    _keep_bytes: int | None = KEPT_BYTES

    def __init__(self, file: Path, header: dict[str, Any], *, fsync: bool = False,
                 lock_timeout: float = 10.0, clock: Callable[[], datetime] | None = None) -> None:
        self.file = file
        self.header = header
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self._clock = clock
        self._mutex = threading.RLock()
        self._rec = EntryRecords(file, self._keep, self._mutex, self._keep_bytes)  # records; entries kept whole
        self._leaf: str | None = None
        self._path_ids: list[str] | None = []
        # the entries of _path_ids, kept with it while the store holds every entry whole anyway
        # (path() then copies one list); None once any entry was let go, or the path recomputed
        self._path_entries: list[Entry] | None = []
        self._offset = 0  # bytes consumed: always just after a newline (or 0)
        self._line_no = 0
        self._needs_newline = False  # a torn tail was skipped; next write starts a fresh line
        self.problems: list[str] = []
        #: increases on every change of entries or leaf; a cheap staleness token
        self.version = 0
        #: this process's writer lease on the session, once :meth:`claim` took it
        self.lease: WriterLease | None = None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: str | os.PathLike[str], *, session_id: str | None = None,
               cwd: str | None = None, fsync: bool = False, meta: dict[str, Any] | None = None,
               lock_timeout: float = 10.0, clock: Callable[[], datetime] | None = None) -> SessionStore:
        """Create ``<directory>/<session-id>.jsonl`` with its header line and open it."""
        directory = Path(directory)
        session_id = session_id or time.strftime("%Y%m%d-%H%M%S-") + new_id()[:8]
        file = directory / f"{session_id}.jsonl"
        header = {"type": "session", "version": FORMAT_VERSION, "id": session_id,
                  "created": now_iso(clock() if clock else None), "cwd": cwd or os.getcwd(),
                  "producer": "soba_notebook"}
        if meta:
            header.update({k: v for k, v in meta.items() if k not in header})
        line = (json.dumps(header, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        try:
            fd = open_state_file(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, create_dirs=True)
        except FileExistsError:
            raise SessionError(f"{file}: a session with id {session_id!r} already exists") from None
        except StateFileError:
            raise
        except OSError as exc:
            raise SessionError(f"{file}: cannot create the session file ({exc.strerror or exc})") from None
        try:
            os.write(fd, line)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return cls.open(file, fsync=fsync, lock_timeout=lock_timeout, clock=clock)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, fsync: bool = False, lock_timeout: float = 10.0,
             clock: Callable[[], datetime] | None = None) -> SessionStore:
        """Open an existing session file, reporting (not raising) skipped or repaired lines."""
        file = Path(path)
        try:
            fh = open_session_file(file)
        except FileNotFoundError:
            raise SessionError(f"{file}: no such session file") from None
        except OSError as exc:
            raise SessionError(f"{file}: cannot open session file ({exc.strerror})") from None
        with fh:
            lock_shared(fh.fileno())  # a writer mid-append finishes first
            try:
                size = os.fstat(fh.fileno()).st_size  # no writer is mid-append: these bytes are final
            finally:
                unlock(fh.fileno())
            first = fh.readline(size)
            if not first.endswith(b"\n"):
                raise SessionError(f"{file}:1: missing session header (file is empty or has no complete line)")
            header = parse_header(file, first[:-1])
            store = cls(file, header, fsync=fsync, lock_timeout=lock_timeout, clock=clock)
            store._offset = len(first)
            store._line_no = 1
            # Appends only ever add after ``size``: an unterminated last line before it is torn.
            store._consume_stream(fh, size - len(first))
        return store

    # -- reading -----------------------------------------------------------------------------
    def _consume(self, raw: bytes, base: int, *, tail_is_torn: bool) -> list[Entry]:
        """Index the complete lines of ``raw`` (bytes that start at file offset ``base``).

        ``tail_is_torn`` says whether an unterminated last line can only be a torn write (we hold
        a lock, so no writer is mid-append) or may still be in progress (a lock-free refresh).
        """
        start = self._offset - base
        end = max(raw.rfind(b"\n") + 1, start)
        new: list[Entry] = []
        first_line = self._line_no + 1
        region = raw[start:end]
        lines = region.count(b"\n")
        self._line_no += lines
        # Loading builds millions of small containers and nothing here can form a cycle: the cyclic
        # GC would rescan the growing heap again and again (it doubled the time to open 100 MB).
        paused = gc.isenabled() and lines > 1_000
        if paused:
            gc.disable()
        starts = line_starts(region)
        at = base + start
        try:
            for line_no, obj in parse_lines(self.file, region, first_line, self._problem):
                if obj.__class__ is not dict or obj.get("type").__class__ is not str:
                    self._problem(f"{self.file}:{line_no}: not an entry object with a 'type'; line skipped")
                    continue
                entry = Entry.from_parsed(obj, line_no)
                k = line_no - first_line
                if self._index(entry, at + starts[k], starts[k + 1] - starts[k] - 1):
                    new.append(entry)
        finally:
            if paused:
                gc.enable()
        self._offset = base + end
        tail = len(raw) - end
        if tail and tail_is_torn:
            self._line_no += 1
            kept = quarantine(self.file, raw[end:], base + end)
            self._problem(f"{self.file}:{self._line_no}: torn last line ({tail:,} bytes: a writer was killed "
                          f"mid-write or a write failed, e.g. on a full disk); skipped for reading and left in "
                          f"place{kept}, the next entry starts on a fresh line")
            self._offset += tail
            self._needs_newline = True
        if new:
            self.version += 1
        return new

    def _consume_stream(self, fh: Any, remaining: int) -> None:
        """Index the next ``remaining`` bytes of ``fh`` (positioned at ``self._offset``), a chunk of
        complete lines at a time.

        Peak memory stays at the parsed entries plus one chunk: the file is never held whole,
        neither as bytes nor as one decoded string (one emoji makes Python store a whole string
        at four bytes per character). A line longer than a chunk is read on until it ends.
        """
        chunk_size = OPEN_CHUNK_BYTES
        carry = b""
        paused = gc.isenabled()  # see _consume: nothing loaded here can form a cycle
        if paused:
            gc.disable()
        try:
            while remaining > 0:
                block = fh.read(min(chunk_size, remaining))
                if not block:
                    break
                remaining -= len(block)
                buf = carry + block if carry else block
                if buf.rfind(b"\n") < 0:
                    carry = buf  # no complete line yet: read on
                    continue
                base = self._offset
                self._consume(buf, base, tail_is_torn=False)
                carry = buf[self._offset - base:]
                del buf, block
            if carry:
                self._consume(carry, self._offset, tail_is_torn=True)
        finally:
            if paused:
                gc.enable()
                # the young generation now holds everything just loaded: collect it here, so open pays
                # for its own objects instead of whatever allocates next (the first request built)
                gc.collect(0)

    def _problem(self, message: str) -> None:
        self.problems.append(message)
        warnings.warn(message, SessionWarning, stacklevel=5)

    def _index(self, entry: Entry, offset: int = -1, size: int = 0) -> bool:
        """Record ``entry`` (its line at ``offset``, ``size`` bytes; -1: nowhere to read it back)
        and move the leaf; False when it is refused (no id, a duplicate)."""
        eid = entry.id
        rec = self._rec
        pos = rec.pos
        if eid.__class__ is not str or not eid or eid in pos:
            return self._reject(entry)
        parent = entry.parent_id
        if parent is not None:
            at = pos.get(parent)
            if at is None:
                self._problem(f"{self.file}:{entry.line}: parentId {parent!r} of entry {eid!r} points to no "
                              f"earlier entry; it is kept as the root of its own branch")
            else:
                parent = rec.ids[at]  # the parent's own id object: one string per id in the records
        rec.add(entry, eid, parent, offset, size)
        if entry.type == "leaf":
            target = leaf_data(entry).get("targetId")
            if isinstance(target, str) and target in pos:
                self._set_leaf(target)
            else:
                self._problem(f"{self.file}:{entry.line}: leaf entry {eid!r} points to {target!r}, which is no "
                              f"earlier entry; ignored, the leaf stays at {self._leaf!r} and no history is dropped")
            return True
        path = self._path_ids
        if path is not None and parent == self._leaf:
            path.append(eid)
            entries = self._path_entries
            if entries is not None:
                if rec.evicted:
                    self._path_entries = None
                else:
                    entries.append(entry)
        else:
            self._path_ids = self._path_entries = None  # recomputed lazily
        self._leaf = eid
        return True

    def _reject(self, entry: Entry) -> bool:
        eid = entry.id
        if not isinstance(eid, str) or not eid:
            self._problem(f"{self.file}:{entry.line}: entry of type {entry.type!r} has no id; skipped")
        else:
            self._problem(f"{self.file}:{entry.line}: duplicate entry id {eid!r} (first on line "
                          f"{self._rec.lines[self._rec.pos[eid]]}); the later line is ignored")
        return False

    def _set_leaf(self, target: str | None) -> None:
        self._leaf = target
        self._path_ids = self._path_entries = None

    def refresh(self) -> list[Entry]:
        """Read entries other writers appended since we last looked; returns them."""
        with self._mutex:
            try:
                with open(self.file, "rb") as fh:
                    fh.seek(self._offset)
                    raw = fh.read()
            except OSError as exc:
                raise SessionError(f"{self.file}: cannot read session file ({exc.strerror})") from None
            return self._consume(raw, self._offset, tail_is_torn=False) if raw else []

    # -- queries -----------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return str(self.header["id"])

    @property
    def read_only(self) -> bool:
        return int(self.header.get("version", 1)) > FORMAT_VERSION

    @property
    def next_line(self) -> int:
        """The line the next appended entry lands on, unless another writer appends first: an
        importer builds each entry with it, so :meth:`append_many` keeps that entry instead of
        building it again (one ``Entry`` per record)."""
        return self._line_no + 1

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    def leaf(self) -> Entry | None:
        return self.get(self._leaf) if self._leaf else None

    def path(self, leaf_id: str | None = None) -> list[Entry]:
        """Entries from the root to ``leaf_id`` (default: the current leaf), in order. Those the
        store no longer holds are read back: a live caller reads :meth:`path_ids` and gets only
        the entries it needs."""
        if leaf_id is not None and leaf_id != self._leaf:
            return self._rec.whole([self._rec.pos[i] for i in self._walk(leaf_id)])
        ids = self._current_path()
        cached = self._path_entries
        if cached is not None and not self._rec.evicted and len(cached) == len(ids):
            return list(cached)
        pos = self._rec.pos
        entries = self._rec.whole([pos[i] for i in ids])
        self._path_entries = None if self._rec.evicted else list(entries)
        return entries

    def path_ids(self) -> list[str]:
        """Ids on the current root-to-leaf path. The list is shared: read it, never mutate it.

        It is the same list object for as long as the leaf only moves forward by appends, so a
        caller can remember how far it has read and pick up only what is new
        (:class:`~soba_notebook.budget.BudgetTracker` does).
        """
        return self._current_path()

    def _current_path(self) -> list[str]:
        if self._path_ids is None:
            self._path_ids = self._walk(self._leaf) if self._leaf else []
        return self._path_ids

    def _walk(self, leaf_id: str) -> list[str]:
        pos, parents = self._rec.pos, self._rec.parents
        if leaf_id not in pos:
            raise SessionError(f"{self.file}: no entry with id {leaf_id!r}")
        ids: list[str] = []
        seen: set[str] = set()
        cur: str | None = leaf_id
        while cur is not None and cur in pos and cur not in seen:
            seen.add(cur)
            ids.append(cur)
            cur = parents[pos[cur]]
        ids.reverse()
        return ids

    def entries(self) -> list[Entry]:
        """Every entry in file order (header excluded), unknown types included; those the store
        no longer holds are read back from the file (in large sequential reads)."""
        return self._rec.whole(range(len(self._rec)))

    def entries_of_type(self, kind: str) -> list[Entry]:
        """The entries of type ``kind`` in file order; only they are read back, never the rest."""
        types = self._rec.types
        return self._rec.whole([i for i in range(len(types)) if types[i] == kind])

    def type_of(self, entry_id: str) -> str:
        """The type of entry ``entry_id``, from its record: nothing is read back."""
        try:
            return self._rec.types[self._rec.pos[entry_id]]
        except KeyError:
            raise SessionError(f"{self.file}: no entry with id {entry_id!r}") from None

    def role_of(self, entry_id: str) -> str | None:
        """The role of message ``entry_id`` (None for other entries), from its record: nothing is
        read back (a walk for the latest replies reads back only the assistant messages)."""
        try:
            return self._rec.roles[self._rec.pos[entry_id]]
        except KeyError:
            raise SessionError(f"{self.file}: no entry with id {entry_id!r}") from None

    def get_many(self, entry_ids: Sequence[str]) -> list[Entry]:
        """The entries ``entry_ids``, in that order: like :meth:`get` for each, with the ones to read
        back read in one pass over the file."""
        pos = self._rec.pos
        try:
            return self._rec.whole([pos[eid] for eid in entry_ids])
        except KeyError as exc:
            raise SessionError(f"{self.file}: no entry with id {exc.args[0]!r}") from None

    @property
    def read_back(self) -> int:
        """How many entries were read back from the file so far (a test and the soak count them)."""
        return self._rec.read_back

    def __len__(self) -> int:
        return len(self._rec)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries())

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._rec.pos

    def get(self, entry_id: str) -> Entry:
        """The entry ``entry_id``: the object the store or anyone else still holds, else read back
        from its line (one read) and kept among the most recent."""
        pos = self._rec.pos.get(entry_id)
        if pos is None:
            raise SessionError(f"{self.file}: no entry with id {entry_id!r}")
        return self._rec.get(entry_id, pos)

    def children(self, entry_id: str | None) -> list[Entry]:
        """Entries whose parent is ``entry_id`` (None: the roots), in file order. O(entries),
        reading back only the children."""
        parents = self._rec.parents
        return self._rec.whole([i for i in range(len(parents)) if parents[i] == entry_id])

    # -- writing -----------------------------------------------------------------------------
    def _stamped(self, entry: Entry, expect_leaf: str | object | None) -> Entry:
        """``entry`` with its id, parent (the leaf when it names none) and time, once the leaf is
        the expected one and the id is new; under the mutex, caught up (every store's append)."""
        if expect_leaf is not ... and self._leaf != expect_leaf:
            raise StaleLeafError(f"{self.file}: session leaf is {self._leaf!r}, not the expected "
                                 f"{expect_leaf!r}; nothing was appended")
        entry = entry.with_ids(entry.id or new_id(), entry.parent_id if entry.parent_id is not None else self._leaf,
                               entry.ts or now_iso(self._clock() if self._clock else None))
        if entry.id in self._rec.pos:
            raise SessionError(f"{self.file}: entry id {entry.id!r} already exists")
        return entry

    def _appended(self, entry: Entry, offset: int = -1, size: int = 0) -> Entry:
        """``entry`` on the next line (written at ``offset``, ``size`` bytes; -1: in memory only),
        indexed, and the store's version moved on."""
        self._line_no += 1
        entry = Entry(entry.type, entry.data, entry.id, entry.parent_id, entry.ts, self._line_no)
        self._index(entry, offset, size)
        self.version += 1
        return entry

    def append(self, entry: Entry, *, expect_leaf: str | object | None = ...) -> Entry:
        """Append ``entry`` as one line; returns it with ``id``, ``parentId`` and ``ts`` filled in.

        A missing ``parentId`` means "child of the current leaf" (after picking up whatever other
        writers appended). The line is written with one ``write`` call under an exclusive lock.
        With ``expect_leaf``, the append happens only if the leaf (after catching up, under the
        lock) is still that entry; otherwise :class:`StaleLeafError` and nothing is written.
        """
        if self.read_only:
            raise SessionError(f"{self.file}: written by a newer format (version {self.header.get('version')}); "
                               f"this soba_notebook only reads it")
        with self._mutex, self._locked():
            self._catch_up_locked()
            if self.lease is not None:
                self.lease.verify()
            entry = self._stamped(entry, expect_leaf)
            try:
                payload = json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise SessionError(f"{self.file}: entry of type {entry.type!r} is not JSON-serializable: {exc}") \
                    from None
            except RecursionError:  # a value nested past Python's recursion limit: an error, not a crash
                raise SessionError(f"{self.file}: entry of type {entry.type!r} is nested too deeply to write; "
                                   f"it was not saved") from None
            # U+2028/2029 are line breaks to str.splitlines and to many JSONL readers: escape them
            # so one entry stays one line for every reader, not only ours.
            payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            try:
                data = (("\n" if self._needs_newline else "") + payload + "\n").encode()
            except UnicodeEncodeError:
                # UTF-16 surrogates (a pair split by a stream, a lone half): their pairs joined, lone
                # halves as U+FFFD, and the entry kept in memory is the one on disk. Never a crash
                # that loses the reply.
                payload = clean_surrogates(payload)
                entry = Entry.from_json(json.loads(payload))
                data = (("\n" if self._needs_newline else "") + payload + "\n").encode()
            self._write(data, f"{entry.type} entry")
            at = self._offset + self._needs_newline  # the line itself, after the newline a torn tail needs
            self._needs_newline = False
            self._offset += len(data)
            return self._appended(entry, at, self._offset - 1 - at)

    def append_many(self, entries: list[Entry]) -> list[Entry]:
        """Append ``entries`` in order with one lock, one ``write`` and at most one ``fsync``.

        For importers and other bulk writers. Each entry is still one line and gets ``id``,
        ``parentId`` (default: the entry before it, or the leaf) and ``ts`` filled in as
        :meth:`append` would; a ``leaf`` entry in the batch moves the default parent of the entries
        after it. All lines are serialized before anything is written: if one entry is invalid
        (a duplicate id, not JSON-serializable, text that is not encodable) nothing is written and
        the error names its index in the batch.
        """
        if self.read_only:
            raise SessionError(f"{self.file}: written by a newer format (version {self.header.get('version')}); "
                               f"this soba_notebook only reads it")
        if not entries:
            return []
        with self._mutex, self._locked():
            self._catch_up_locked()
            if self.lease is not None:
                self.lease.verify()
            filled, sizes, data = self._serialize_batch(entries)
            self._write(data, f"batch of {len(filled):,} entries")
            at = self._offset + self._needs_newline
            self._needs_newline = False
            self._offset += len(data)
            out: list[Entry] = []
            for entry, size in zip(filled, sizes, strict=True):
                self._line_no += 1
                if entry.line != self._line_no:  # a bulk writer may build it with its line (see next_line)
                    entry = Entry(entry.type, entry.data, entry.id, entry.parent_id, entry.ts, self._line_no)
                self._index(entry, at, size)
                at += size + 1
                out.append(entry)
            self.version += 1
            return out

    def _serialize_batch(self, entries: list[Entry]) -> tuple[list[Entry], list[int], bytes]:
        """The entries with ids filled in, the bytes of each one's line and the lines to write."""
        leaf = self._leaf
        batch_ids: set[str] = set()
        filled: list[Entry] = []
        parts: list[bytes] = [b""] if self._needs_newline else []
        stamp = now_iso(self._clock() if self._clock else None)
        for i, entry in enumerate(entries):
            eid = entry.id or new_id()
            # importers fill all three (a root's parent is None, as is a fresh session's leaf)
            if entry.id is None or (entry.parent_id is None and leaf is not None) or not entry.ts:
                entry = entry.with_ids(eid, entry.parent_id if entry.parent_id is not None else leaf,
                                       entry.ts or stamp)
            if eid in self._rec.pos or eid in batch_ids:
                raise SessionError(f"{self.file}: entry {i} of the batch: id {entry.id!r} already exists; "
                                   f"nothing was appended")
            try:
                payload = _ENCODE(entry.to_json())
                if "\u2028" in payload or "\u2029" in payload:
                    payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
                parts.append(payload.encode())
            except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
                raise BatchEntryError(i, f"{self.file}: entry {i} of the batch (type {entry.type!r}) cannot be "
                                          f"written: {exc}; nothing was appended") from exc
            batch_ids.add(eid)
            filled.append(entry)
            if entry.type == "leaf":
                target = leaf_data(entry).get("targetId")
                leaf = target if isinstance(target, str) and (target in self._rec.pos or target in batch_ids) else None
            else:
                leaf = entry.id
        sizes = [len(part) for part in parts[len(parts) - len(filled):]]
        parts.append(b"")
        return filled, sizes, b"\n".join(parts)

    def _write(self, data: bytes, what: str) -> None:
        """The one write path of :meth:`append` and :meth:`append_many`: ``data`` (whole lines)
        appended, or a :class:`SessionError` naming the file, ``what`` was not saved and the cause
        (a full disk, a vanished file), never a raw ``OSError``. Bytes that did land before the
        failure are a torn line the next append steps over (and the next open quarantines), never a
        half-entry glued to the next one."""
        written = 0
        try:
            fd = open_state_file(self.file, os.O_WRONLY | os.O_APPEND)
            try:
                while written < len(data):  # a regular file writes fully or fails; loop to be exact
                    written += os.write(fd, memoryview(data)[written:])
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._write_failed(what, exc.strerror or str(exc), written, len(data)) from None

    def _write_failed(self, what: str, cause: str, written: int, size: int) -> SessionError:
        if written:
            self._offset += written
            self._line_no += 1
            self._needs_newline = True
        landed = f"; {written:,} of {size:,} bytes landed and are set aside as a torn line" if written else ""
        return SessionError(f"{self.file}: could not append the {what} ({cause}); it was not saved{landed}. "
                            f"Free some space (or fix the disk) and go on: the session stays readable")

    # -- the writer lease --------------------------------------------------------------------
    def claim(self, *, take_over: bool = False, meta: dict[str, str | None] | None = None) -> WriterLease:
        """Become the session's one writer (:mod:`.lease`): :class:`SessionHeldError` names a live
        holder, unless ``take_over``, which happens under the append lock, so the displaced writer's
        next append is refused, never interleaved. The lease's ``previous`` is that holder."""
        with self._mutex:
            if self.lease is not None and self.lease.held:
                return self.lease
            self.release()  # a lease lost to a take-over still locks the replaced file
            os.close(open_state_file(self.file, os.O_RDONLY))  # never a writer of a link's target
            try:
                self.lease = WriterLease.acquire(self.file, session_id=self.id, meta=meta)
            except SessionHeldError:
                if not take_over:
                    raise
                with self._locked():
                    self.lease = WriterLease.acquire(self.file, session_id=self.id, meta=meta, take_over=True)
            return self.lease

    def release(self) -> None:
        """Give up the writer lease (if held); the store stays readable."""
        with self._mutex:
            if self.lease is not None:
                self.lease.release()

    def rewind(self, entry_id: str, reason: str = "rewind") -> Entry:
        """Move the leaf to ``entry_id`` by appending a ``leaf`` entry; no earlier line changes."""
        from .entries import leaf_marker

        if entry_id not in self._rec.pos:
            raise SessionError(f"{self.file}: cannot rewind to {entry_id!r}: no such entry in this session")
        return self.append(leaf_marker(entry_id, reason))

    def _catch_up_locked(self) -> None:
        with open(self.file, "rb") as fh:
            fh.seek(self._offset)
            raw = fh.read()
        if raw:  # under the exclusive lock nobody is writing: an unterminated tail is torn
            self._consume(raw, self._offset, tail_is_torn=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = open_state_file(self.file, os.O_RDONLY)
        try:
            deadline = time.monotonic() + self.lock_timeout
            delay = 0.001
            while not lock_exclusive(fd, blocking=False):
                if time.monotonic() >= deadline:
                    raise SessionLockedError(
                        f"{self.file}: session {self.id!r} is locked by another writer for more than "
                        f"{self.lock_timeout:g}s; is another kernel still appending to it?")
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            try:
                yield
            finally:
                unlock(fd)
        finally:
            os.close(fd)


class BatchEntryError(SessionError):
    """One entry of :meth:`SessionStore.append_many` cannot be written; ``index`` says which."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
