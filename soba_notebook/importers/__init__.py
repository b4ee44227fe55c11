"""Importers: transcripts recorded by other coding agents, turned into new SOBA sessions.

This package owns the step *foreign transcript file → new SOBA session file*. The public entry
points are :func:`import_transcript`, :func:`import_transcript_with_report` and (a whole folder, in
parallel) :func:`import_transcripts`; format modules
(:mod:`.pi`, :mod:`.claude_code`, :mod:`.openai_messages`) convert a source into a list of
:class:`Planned` entries, and this module writes them through :meth:`SessionStore.append`, so an
imported session obeys every rule of a native one (append-only, one line per entry, a tree with
a leaf). The source file is only ever read; its sha256 goes into the session header as
``importedFrom`` so an import can be traced and repeated.

What an import promises:

* Every source message becomes one ``message`` entry in SOBA's neutral form (user / assistant
  with ``toolCalls``, ``usage``, ``model``, ``provider``, ``stopReason``, ``thinking`` / tool
  with ``toolCallId``, ``name``, ``isError``); content blocks are joined into one string, images
  become ``"images": n`` plus an ``[image]`` placeholder. Records that are not model input (system
  prompts, compactions, configuration changes, unknown record types) are kept as entries of their
  own type, never dropped.
* Ids and the parent tree are kept when the source has them; sources without ids are chained in
  file order. The leaf is the source's last conversation entry. An entry the source gives no id
  gets one derived from the source's sha256, numbered in file order (:func:`_derived_ids`), so the same
  file imports to the same ids in every process: a fleet replayed on many workers, each importing
  for itself, measures the same capsules (they name the entries they summarize).
* Nothing is invented: a tool result whose call is missing, or a call that never got a result,
  is kept as it is and listed in :attr:`ImportReport.problems`, with ``file:line`` of the entry.

The building blocks the format modules share (:class:`ImportLog`, :class:`Planned`,
:class:`Converted` and the small value normalizers) are the contract between the converters and
the writer; they live in :mod:`._common`, which the converters import, and are implementation,
not part of this package's public names. The converters themselves are imported lazily, when a
transcript of their format is imported, so importing this package stays cheap.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SessionError
from ..session.entries import Entry
from ..session.store import BatchEntryError, SessionStore
from ._common import Converted, ImportLog, Planned
from .detect import FORMATS, detect_format, detect_format_and_parsed
from .fleet import FolderImport, import_transcripts, transcript_files
from .jsonl_reader import JsonlRead

__all__ = [
    "FORMATS",
    "FolderImport",
    "ImportReport",
    "detect_format",
    "import_transcript",
    "import_transcript_with_report",
    "import_transcripts",
    "transcript_files",
]


# -- the report ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one import did: counts, and every problem with the ``file:line`` it concerns.

    ``skipped`` counts source data that was read but deliberately not written, by kind (image
    bytes, UI-only tool details, SWE-agent ``trajectory`` steps that duplicate ``history``…);
    ``problems`` lists what was wrong or had to be repaired. ``unpaired_tool_calls`` and
    ``orphan_tool_results`` are measured on the written session tree.
    """

    format: str
    source: Path
    session: Path
    sha256: str
    entries_written: int
    source_messages: int
    message_entries: int
    tool_calls: int
    tool_results: int
    unpaired_tool_calls: int
    orphan_tool_results: int
    problems: tuple[str, ...]
    skipped: Mapping[str, int]
    seconds: float

    @property
    def tool_pairs_intact(self) -> bool:
        return self.unpaired_tool_calls == 0 and self.orphan_tool_results == 0

    def summary(self) -> str:
        """One line for a notebook or a log."""
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "nothing"
        return (f"imported {self.source.name} ({self.format}) -> {self.session.name}: "
                f"{self.entries_written} entries ({self.message_entries} messages from "
                f"{self.source_messages} source messages), {self.tool_calls} tool calls / "
                f"{self.tool_results} results ({self.unpaired_tool_calls} calls without a result, "
                f"{self.orphan_tool_results} results without a call), {len(self.problems)} problems, "
                f"skipped: {skipped}; {self.seconds * 1000:.0f} ms")


# -- public API ---------------------------------------------------------------------------------
def import_transcript(source_path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str]) -> Path:
    """Import the transcript at ``source_path`` into a new session in ``sessions_dir``; its path.

    The format is detected (:func:`detect_format`); the source is only read. Raises
    :class:`~soba_notebook.errors.SessionError` for unreadable files and unknown formats; problems
    inside a recognized file are reported, not raised (see :func:`import_transcript_with_report`).
    """
    path, _report = import_transcript_with_report(source_path, sessions_dir)
    return path


def import_transcript_with_report(source_path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str],
                                  *, session_id: str | None = None,
                                  format: str | None = None) -> tuple[Path, ImportReport]:
    """Like :func:`import_transcript`, also returning the :class:`ImportReport`.

    ``format`` skips detection (one of :data:`FORMATS`); ``session_id`` names the new session.
    """
    started = time.perf_counter()
    source = Path(source_path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        raise SessionError(f"{source}: no such transcript file") from None
    except IsADirectoryError:
        raise SessionError(f"{source}: is a directory, not a transcript file") from None
    except OSError as exc:
        raise SessionError(f"{source}: cannot read transcript ({exc.strerror})") from None
    if format is not None and format not in FORMATS:
        raise SessionError(f"{source}: unknown import format {format!r}; expected one of {', '.join(FORMATS)}")
    with _cyclic_gc_paused():  # _import's values are freed when it returns, before the collector is back
        return _import(data, source, sessions_dir, session_id, format, started)


def _import(data: bytes, source: Path, sessions_dir: str | os.PathLike[str], session_id: str | None,
            format: str | None, started: float) -> tuple[Path, ImportReport]:
    name = str(source)
    doc: Any = None  # the whole JSON document, when detection parsed it: never parsed twice
    head: JsonlRead | None = None  # the JSON Lines head detection parsed: not parsed again either
    if format is None:
        format, doc, head = detect_format_and_parsed(data, name)
    digest = hashlib.sha256(data).hexdigest()
    log = ImportLog(name)
    converted = _convert(format, data, name, log, doc, head)
    meta: dict[str, Any] = {"importedFrom": {"path": str(source.resolve()), "format": format, "sha256": digest}}
    if converted.info:
        meta["importedInfo"] = dict(converted.info)
    store = SessionStore.create(sessions_dir, session_id=session_id, meta=meta)
    written: list[Entry] = []  # what the appends returned: the store reads old entries back from the file
    where_by_id = _write(converted.entries, store, log, _derived_ids(digest), written)
    pairs = _check_tool_pairs(written, where_by_id, log)
    messages = sum(1 for e in written if e.type == "message")
    report = ImportReport(
        format=format, source=source, session=store.file, sha256=digest,
        entries_written=len(written), source_messages=converted.source_messages,
        message_entries=messages, tool_calls=pairs[0], tool_results=pairs[1],
        unpaired_tool_calls=pairs[2], orphan_tool_results=pairs[3], problems=tuple(log.problems),
        skipped=dict(log.skipped), seconds=time.perf_counter() - started)
    return store.file, report


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cyclic GC off while one transcript is converted and written.

    An import builds a few containers per source value while every parsed record is still alive,
    and nothing it builds can form a cycle: the collector rescanned that growing heap over and over
    (a seventh of a pi import's time). Reference counting still frees everything; the collector is
    back on when the import ends (``SessionStore.open`` does the same while it loads a file).
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _convert(format: str, data: bytes, name: str, log: ImportLog, doc: Any, head: JsonlRead | None) -> Converted:
    if format == "pi":
        from .pi import convert_pi

        return convert_pi(data, name, log, head=head)
    if format == "claude_code":
        from .claude_code import convert_claude_code

        return convert_claude_code(data, name, log, head=head)
    from .openai_messages import convert_openai_format

    return convert_openai_format(format, data, name, log, doc=doc)


# -- writing ------------------------------------------------------------------------------------
_ID_OK = re.compile(r"^[\x21-\x7e]{1,200}$")


def _derived_ids(digest: str) -> Iterator[str]:
    """Fresh entry ids for a source with this sha256: 16 hex digits like a new id, the same for the
    same file, different for different files."""
    for n in itertools.count():
        yield hashlib.blake2b(f"{digest}:{n}".encode(), digest_size=8).hexdigest()


def _write(planned: Sequence[Planned], store: SessionStore, log: ImportLog, fresh: Iterator[str],
           written: list[Entry]) -> dict[str, str]:
    """Append ``planned`` to ``store`` in order (each entry as written added to ``written``);
    returns entry id -> source location. Entries without a usable source id take the next
    unused one of ``fresh``.

    An entry without a source timestamp gets the previous entry's (the first known one for
    leading entries), marked ``imported.tsInferred``, so ``ts`` stays in source order instead of
    jumping to the import time.
    """
    last_ts = next((p.ts for p in planned if p.ts), None)
    refmap: dict[str, str] = {}
    where_by_id: dict[str, str] = {}  # its keys are the ids used so far
    prev: str | None = None
    leaf_target: str | None = None
    tree_written = False
    batch: list[Entry] = []
    line = store.next_line  # the line the next entry of the batch lands on
    id_ok = _ID_OK.match
    # unpacked in one step: a Planned is a named tuple, and this loop runs once per imported entry
    for kind, data, where, ref, keep_id, aliases, parent_ref, tree, own_ts, leaf_candidate, id_refs in planned:
        eid = None
        if ref is not None and keep_id and id_ok(ref) and ref not in where_by_id:
            eid = ref
        elif ref is not None and ref in refmap:
            log.problem(where, f"id {ref!r} appears twice in the source; this entry gets a fresh id and "
                               f"references resolve to the first one")
        while eid is None or eid in where_by_id:
            eid = next(fresh)
        if tree and parent_ref is not None:
            parent = refmap.get(parent_ref)
            if parent is None:
                log.problem(where, f"parent {parent_ref!r} is not an earlier entry of this file; attached to "
                                   f"the previous entry")
                parent = prev
        else:
            if tree and parent_ref is None and tree_written:
                log.problem(where, "a second root in the source tree; attached to the previous entry")
            parent = prev
        ts = own_ts or last_ts
        if (own_ts is None and ts is not None) or id_refs:  # only then is the data changed: copy it
            data = dict(data)
            if own_ts is None and ts is not None:
                data["imported"] = {**data.get("imported", {}), "tsInferred": True}
            for key in id_refs:
                value = data.get(key)
                if isinstance(value, str) and value in refmap:
                    data[key] = refmap[value]
        last_ts = ts
        # built once, with the line it lands on: append_many keeps it as it is
        batch.append(Entry(kind, data, eid, parent, ts, line))
        line += 1
        where_by_id[eid] = where
        if len(batch) >= _BATCH:
            _flush(store, batch, where_by_id, log, written)
            line = store.next_line
        if ref is not None:
            refmap.setdefault(ref, eid)
        for alias in aliases:
            refmap[alias] = eid
        prev = eid
        tree_written = tree_written or tree
        if leaf_candidate:
            leaf_target = eid
    _flush(store, batch, where_by_id, log, written)
    if leaf_target is not None and store.leaf_id != leaf_target:
        written.append(store.rewind(leaf_target, reason="import"))
    return where_by_id


#: Entries written per batch: one lock and one write each (a per-entry append cost 8-10x the floor).
_BATCH = 2_000


def _flush(store: SessionStore, batch: list[Entry], where_by_id: Mapping[str, str], log: ImportLog,
           written: list[Entry]) -> None:
    """Append ``batch`` in one go, add the entries as written to ``written`` and empty it
    (``where_by_id``: each entry's source location)."""
    while batch:
        try:
            written.extend(store.append_many(batch))
        except BatchEntryError as exc:
            if not isinstance(exc.__cause__, UnicodeEncodeError):
                raise
            # lone surrogates from \\ud800-style escapes in the source
            e = batch[exc.index]
            log.problem(where_by_id[e.id or ""], "text holds unpaired UTF-16 surrogates; replaced with U+FFFD")
            batch[exc.index] = Entry(e.type, _scrub(dict(e.data)), e.id, e.parent_id, e.ts, e.line)
            continue
        batch.clear()


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")  # lone ones -> U+FFFD
    if isinstance(value, Mapping):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _check_tool_pairs(entries: Sequence[Entry], where_by_id: Mapping[str, str],
                      log: ImportLog) -> tuple[int, int, int, int]:
    """Walk the written tree: every tool result must follow its call on its root-to-entry path.

    Reports results whose call is not an ancestor and calls with no result below them; returns
    ``(calls, results, unpaired calls, orphan results)``. The walk reads call ids
    (:attr:`Entry.tool_call_ids`), not :class:`ToolCall` values: it runs over every imported entry.
    """
    open_calls: dict[str, list[str]] = {}
    answered: set[tuple[str, str]] = set()
    results = orphans = 0

    def result(e: Entry) -> None:  # a tool result, reached after everything on its path
        nonlocal results, orphans
        results += 1
        cid = e.tool_call_id or ""
        owners = open_calls.get(cid)
        if owners:
            answered.add((owners[-1], cid))
        else:
            orphans += 1
            log.problem(where_by_id.get(e.id or "", log.name),
                        f"tool result for call {cid!r} has no matching call before it; kept as it is")

    if all(e.parent_id == before.id for before, e in itertools.pairwise(entries)):
        # one chain (most transcripts): the walk is the written order, and no call is ever closed
        for e in entries:
            role = e.role
            if role == "tool":
                result(e)
            elif role == "assistant":
                for cid in e.tool_call_ids:
                    open_calls.setdefault(cid, []).append(e.id or "")
    elif (found := _answered_on_paths(entries)) is not None:
        answered, results = found  # a tree without an orphan result (a problem names them in walk order)
    else:
        ids = {e.id for e in entries}
        children: dict[str | None, list[Entry]] = {}
        for e in entries:
            children.setdefault(e.parent_id if e.parent_id in ids else None, []).append(e)
        # depth first; a tuple on the stack is the call ids to close when the walk leaves an entry
        stack: list[Entry | tuple[str, ...]] = list(reversed(children.get(None, [])))
        while stack:
            item = stack.pop()
            if isinstance(item, tuple):
                for cid in item:
                    open_calls[cid].pop()
                continue
            role = item.role
            if role == "tool":
                result(item)
            elif role == "assistant" and (own := item.tool_call_ids):
                for cid in own:
                    open_calls.setdefault(cid, []).append(item.id or "")
                stack.append(own)  # only an entry that opened calls has anything to close
            kids = children.get(item.id)
            if kids:
                stack.extend(reversed(kids))
    calls = unpaired = 0
    for e in entries:
        # the raw call dicts, read as ToolCall.from_json would: building ToolCall values for every
        # imported call cost more than the walk itself, and only an unpaired call's name is needed
        raw_calls = e.message.get("toolCalls") if e.role == "assistant" else None
        for raw in raw_calls or ():
            if not isinstance(raw, Mapping):
                continue
            calls += 1
            call_id = str(raw.get("id", ""))
            if (e.id, call_id) not in answered:
                unpaired += 1
                log.problem(where_by_id.get(e.id or "", log.name),
                            f"tool call {call_id!r} ({raw.get('name', '')!s}) has no result in the source; "
                            f"kept, no result invented")
    return calls, results, unpaired, orphans


def _answered_on_paths(entries: Sequence[Entry]) -> tuple[set[tuple[str, str]], int] | None:
    """``(answered, results)`` of the depth-first walk, found without it: ``None`` when a result
    has no call on its path, or a parent is not an earlier entry (then only the walk says it all).

    Every parent is written before its children, so a result's path goes to ever earlier entries,
    and the deepest call of its id on that path is the latest one in file order that the path
    meets: found by going up from the result until the path passes below it (a few steps: a result
    follows its call).
    """
    ids = {e.id for e in entries}
    index: dict[str | None, int] = {}
    parent_at: list[int] = []  # the index of each entry's parent; -1: a root
    owners: dict[str, list[int]] = {}  # call id -> the entries that made a call with it, in file order
    answered: set[tuple[str, str]] = set()
    results = 0
    budget = 4 * len(entries) + 64  # steps up: past it (many calls of one id on other branches), walk
    for i, e in enumerate(entries):
        up = index.get(e.parent_id, -1)
        if up < 0 and e.parent_id in ids:
            return None  # its parent comes after it
        index[e.id] = i
        parent_at.append(up)
        role = e.role
        if role == "assistant":
            for cid in e.tool_call_ids:
                owners.setdefault(cid, []).append(i)
        elif role == "tool":
            results += 1
            cid = e.tool_call_id or ""
            for owner in reversed(owners.get(cid, ())):
                at = up
                while at > owner:
                    at = parent_at[at]
                    budget -= 1
                if budget < 0:
                    return None
                if at == owner:
                    answered.add((entries[owner].id or "", cid))
                    break
            else:
                return None
    return answered, results
