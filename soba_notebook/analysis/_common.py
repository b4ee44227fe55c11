"""What every analysis view starts from: resolve a session, snapshot it, count it, type its columns.

A view accepts a SOBA session file, a :class:`~soba_notebook.session.SessionStore`, or a
transcript recorded by another agent (pi, Claude Code, mini-swe-agent, SWE-agent, an OpenAI
message list), which is imported once per process into a temporary sessions directory.

Views are read-only. A path is opened with :meth:`SessionStore.open` (shared lock, complete lines
only); a store object is read as it is, through a :class:`Snapshot` taken from one copy of its
entry list, so an agent appending from another thread while a view is built cannot make the
view's rows disagree with each other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args

import pandas as pd

from ..errors import SessionError
from ..session.entries import Entry
from ..session.payloads import BudgetSource, Outcome, Quality, TriggerName, leaf_data
from ..session.store import SessionStore
from ..tokens import TokenCounter

__all__ = [
    "OUTCOME_CATEGORIES",
    "QUALITY_CATEGORIES",
    "SOURCE_CATEGORIES",
    "TRIGGER_CATEGORIES",
    "SessionLike",
    "Snapshot",
    "categorical",
    "clear_caches",
    "counter_for",
    "find_flight_file",
    "first_json_line",
    "int64",
    "is_native_tokenizer",
    "open_session",
    "run_blocking",
    "snapshot",
    "utc_times",
]

#: What a view accepts as its ``session`` argument.
SessionLike = str | os.PathLike[str] | SessionStore

#: Fixed categories, so frames of different sessions concatenate without losing the dtype.
#: Each is its Literal's values (session/payloads.py), in the Literal's order.
TRIGGER_CATEGORIES: tuple[str, ...] = get_args(TriggerName)
OUTCOME_CATEGORIES: tuple[str, ...] = get_args(Outcome)
QUALITY_CATEGORIES: tuple[str, ...] = get_args(Quality)
SOURCE_CATEGORIES: tuple[str, ...] = get_args(BudgetSource)

_T = TypeVar("_T")


# -- typed columns --------------------------------------------------------------------------------
def int64(values: Iterable[int | None]) -> pd.Series:
    """A nullable ``Int64`` series (None becomes ``<NA>``)."""
    return pd.Series(pd.array(list(values), dtype="Int64"))


def categorical(values: Iterable[str | None], categories: Sequence[str] | None = None) -> pd.Series:
    """A ``category`` series; with ``categories`` the set is fixed (unknown values become NA)."""
    codes_of: dict[str, int] = {c: i for i, c in enumerate(categories)} if categories is not None else {}
    fixed = categories is not None
    codes: list[int] = []
    append = codes.append
    for value in values:  # a dict lookup per row: much faster than pandas' factorize on strings
        if value is None:
            append(-1)
            continue
        code = codes_of.get(value)
        if code is None:
            if fixed or not isinstance(value, str):
                append(-1)
                continue
            code = codes_of[value] = len(codes_of)
        append(code)
    categorical = pd.Categorical.from_codes(  # type: ignore[call-overload]  # stubs: an Index; pandas: any list
        codes, categories=list(codes_of))
    return pd.Series(categorical)


def utc_times(values: Iterable[str | None]) -> pd.Series:
    """ISO-8601 strings as ``datetime64[ns, UTC]``; anything unparseable becomes ``NaT``."""
    parsed = pd.to_datetime(pd.Series(list(values), dtype=object), utc=True, format="ISO8601", errors="coerce")
    return parsed.astype("datetime64[ns, UTC]")


# -- resolving a session --------------------------------------------------------------------------
#: imported transcripts, least recently used first; the oldest is forgotten (its temporary
#: directory removed) beyond :data:`MAX_IMPORTS`, so a long analysis session does not keep them all
_imports: OrderedDict[tuple[str, int, int], tuple[tempfile.TemporaryDirectory[str], SessionStore]] = OrderedDict()
_imports_lock = threading.Lock()
MAX_IMPORTS = 8


def first_json_line(file: Path, limit: int = 1 << 16) -> Any:
    """The first line of ``file`` parsed as JSON, or None when it is not JSON."""
    with open(file, "rb") as fh:
        head = fh.read(limit)
    line = head.lstrip(b"\xef\xbb\xbf \t\r\n").split(b"\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        return None


def _is_soba_header(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "session" and value.get("producer") == "soba_notebook"


def _check_path(session: str | os.PathLike[str]) -> Path:
    file = Path(session).expanduser()
    if not file.exists():
        raise SessionError(f"{file}: no such session or transcript file")
    if file.is_dir():
        raise SessionError(f"{file}: is a directory; pass a session file (.soba/sessions/<id>.jsonl) or a "
                           f"transcript file recorded by another agent")
    return file


def open_session(session: SessionLike) -> SessionStore:
    """The :class:`SessionStore` behind ``session``, opened read-only (nothing is ever appended).

    * a :class:`SessionStore` is returned as it is (call its ``refresh()`` to see lines other
      processes appended since it was opened);
    * a path to a SOBA session (its header says ``"producer": "soba_notebook"``) is opened;
    * any other file is imported with :func:`~soba_notebook.importers.import_transcript` into a
      temporary sessions directory, once per process for an unchanged file.

    Raises :class:`~soba_notebook.errors.SessionError` naming the file when it is missing, a
    directory, or of no known format, and ``TypeError`` for anything that is not a path or store.
    """
    if isinstance(session, SessionStore):
        return session
    if not isinstance(session, str | os.PathLike):
        raise TypeError(f"session must be a path to a session or transcript file, or a SessionStore; "
                        f"got {type(session).__name__}")
    file = _check_path(session)
    if _is_soba_header(first_json_line(file)):
        return SessionStore.open(file)
    return _imported(file)


def _imported(file: Path) -> SessionStore:
    from ..importers import import_transcript

    st = file.stat()
    key = (str(file.resolve()), st.st_mtime_ns, st.st_size)
    with _imports_lock:
        hit = _imports.get(key)
        if hit is not None:
            _imports.move_to_end(key)
            return hit[1]
        tmp = tempfile.TemporaryDirectory(prefix="soba-import-")
        try:
            path = import_transcript(file, Path(tmp.name) / "sessions")
            store = SessionStore.open(path)
        except BaseException:
            tmp.cleanup()
            raise
        _imports[key] = (tmp, store)
        evicted = [_imports.popitem(last=False)[1] for _ in range(len(_imports) - MAX_IMPORTS)]
    for old_tmp, _ in evicted:  # a store already returned keeps its entries; its file is gone
        old_tmp.cleanup()
    return store


def find_flight_file(store: SessionStore) -> Path | None:
    """``<project>/.soba/flight.jsonl`` for a session at ``<project>/.soba/sessions/<id>.jsonl``."""
    parent = store.file.parent
    if parent.name != "sessions":
        return None
    candidate = parent.parent / "flight.jsonl"
    return candidate if candidate.is_file() else None


# -- a consistent snapshot ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's entries at one moment: file order, the root-to-leaf path, the leaf."""

    store: SessionStore
    entries: tuple[Entry, ...]
    by_id: Mapping[str, Entry]
    path: tuple[Entry, ...]
    leaf_id: str | None

    @property
    def id(self) -> str:
        return self.store.id

    def model(self) -> str | None:
        """The model that answered last (the one to count tokens for), else the imported one."""
        for entry in reversed(self.entries):
            if entry.type == "message":
                model = entry.message.get("model")
                if isinstance(model, str) and model:
                    return model
        info = self.store.header.get("importedInfo")
        model = info.get("modelId") if isinstance(info, Mapping) else None
        return model if isinstance(model, str) and model else None

    def path_of(self, entry_id: str) -> list[Entry]:
        """Root-to-``entry_id`` path inside this snapshot."""
        out: list[Entry] = []
        seen: set[str] = set()
        cur: str | None = entry_id
        while cur is not None and cur in self.by_id and cur not in seen:
            seen.add(cur)
            entry = self.by_id[cur]
            out.append(entry)
            cur = entry.parent_id
        out.reverse()
        return out


def snapshot(session: SessionLike) -> Snapshot:
    """Open ``session`` and take a consistent :class:`Snapshot` of it.

    The entry list is copied once; the leaf and the path are recomputed from that copy with the
    store's rules (the newest entry, unless a ``leaf`` entry moved it), never read from the live
    store, so they always agree with the entries.
    """
    store = open_session(session)
    entries = tuple(store.entries())  # one copy; another thread may keep appending to the store
    by_id: dict[str, Entry] = {}
    leaf: str | None = None
    for entry in entries:
        eid = entry.id
        if eid is None:
            continue
        by_id[eid] = entry
        if entry.type == "leaf":
            target = leaf_data(entry).get("targetId")
            leaf = target if isinstance(target, str) and target in by_id else None
        else:
            leaf = eid
    snap = Snapshot(store, entries, by_id, (), leaf)
    path = tuple(snap.path_of(leaf)) if leaf is not None else ()
    return Snapshot(store, entries, by_id, path, leaf)


# -- token counting -------------------------------------------------------------------------------
_counters: OrderedDict[tuple[str, str], TokenCounter] = OrderedDict()
_counters_lock = threading.Lock()
_MAX_COUNTERS = 16


def counter_for(model: str | None, session_id: str = "") -> TokenCounter:
    """A :class:`TokenCounter` for ``model``, kept per session so its per-entry cache makes the
    next view of the same session cost no tokenization at all."""
    key = (model or "", session_id)
    with _counters_lock:
        counter = _counters.get(key)
        if counter is None:
            counter = TokenCounter(model)
            _counters[key] = counter
            while len(_counters) > _MAX_COUNTERS:
                _counters.popitem(last=False)
        else:
            _counters.move_to_end(key)
        return counter


def clear_caches() -> None:
    """Forget the per-session token counters and the imported transcripts (their temporary
    directories are removed). The next view of a session counts its tokens again."""
    with _counters_lock:
        _counters.clear()
    with _imports_lock:
        entries = list(_imports.values())
        _imports.clear()
    for tmp, _ in entries:
        tmp.cleanup()


_NATIVE_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-", "text-embedding", "gpt-oss")


def is_native_tokenizer(counter: TokenCounter) -> bool:
    """True when ``counter`` tokenizes with the model's own encoding (OpenAI models), so its
    counts are exact; for other models (Claude, open models) tiktoken is the nearest estimate."""
    name = counter.model.lower().rsplit("/", 1)[-1]
    return counter.exact and name.startswith(_NATIVE_PREFIXES)


# -- running engine code from a notebook ----------------------------------------------------------
def run_blocking(fn: Callable[[], _T]) -> _T:
    """Call ``fn`` (which may use ``asyncio.run``) even where an event loop is already running.

    In a Jupyter kernel cell code runs while the kernel's loop is running, and ``asyncio.run``
    refuses to start there; the work then runs on a short-lived worker thread and this call waits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="soba-analysis") as pool:
        return pool.submit(fn).result()
