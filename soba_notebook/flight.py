"""Flight records: one JSON line per compaction operation and per inference budget check.

``.soba/flight.jsonl`` is for diagnosis and analysis (``views.flight_records``). A record holds
ids, triggers, limits, outcomes, durations and token figures; never summary text, never a
secret (every string passes through the one scrubber, :mod:`.scrub`). Records are written
with one ``write`` under an exclusive lock, like the session store.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .events import Event
from .locking import lock_exclusive, unlock
from .scrub import Scrubber
from .session.entries import now_iso
from .statefiles import open_state_file

__all__ = ["FORBIDDEN_FIELDS", "FlightRecorder", "read_flight_records", "snake_fields"]

#: Fields that would leak what a capsule says; a record carrying one is refused.
FORBIDDEN_FIELDS = frozenset({"summary", "state", "text", "content", "capsule", "rendered", "prompt"})


class FlightRecorder:
    """Appends records to a JSONL file; subscribe it to an EventBus to record operations."""

    def __init__(self, path: str | os.PathLike[str], session_id: str | None = None) -> None:
        self.path = Path(path)
        self.session_id = session_id
        self._lock = threading.Lock()
        self._failed = False

    def record(self, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        leaked = FORBIDDEN_FIELDS.intersection(fields)
        if leaked:
            raise ValueError(f"flight records never hold summary contents; refusing fields {sorted(leaked)}")
        rec: dict[str, Any] = {"kind": kind, "ts": now_iso(), "sessionId": self.session_id,
                               **Scrubber.from_environ().json(dict(fields))}
        line = (json.dumps(rec, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            try:
                fd = open_state_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644, create_dirs=True)
                try:
                    lock_exclusive(fd)
                    try:
                        os.write(fd, line)
                    finally:
                        unlock(fd)
                finally:
                    os.close(fd)
            except OSError as exc:  # diagnostics must never fail a turn; say so once per recorder
                if not self._failed:
                    self._failed = True
                    warnings.warn(f"{self.path}: flight records are not being saved "
                                  f"({exc.strerror or exc})", RuntimeWarning, stacklevel=2)
        return rec

    def __call__(self, event: Event) -> None:
        """EventBus subscriber: compaction ends and budget checks become records."""
        if event.type == "compaction_end":
            self.record("compaction", {k: v for k, v in event.data.items() if k not in FORBIDDEN_FIELDS})
        elif event.type == "budget":
            self.record("budget", {k: v for k, v in event.data.items() if k not in FORBIDDEN_FIELDS})


def read_flight_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records in ``path``; a torn or corrupt line is skipped with a warning."""
    out: list[dict[str, Any]] = []
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return out
    end = raw.rfind(b"\n") + 1
    for n, line in enumerate(raw[:end].split(b"\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            warnings.warn(f"{path}:{n}: not valid JSON; flight record skipped", RuntimeWarning, stacklevel=2)
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
#: Names an older writer used for a field that now has another (read as the new one).
_RENAMED = {"effective_tokens": "effective"}


def snake_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record``'s top-level fields under their snake_case names, the one spelling Python reads.

    Records on disk spell some fields in camelCase (``sessionId``, ``hardLimit``) and, in older
    files, some of the same fields in snake_case too; a reader converts each record here, once,
    and where both spellings are present the first one that holds a value wins."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = _CAMEL.sub(r"_\1", str(key)).lower()
        name = _RENAMED.get(name, name)
        if out.get(name) is None:
            out[name] = value
    return out
