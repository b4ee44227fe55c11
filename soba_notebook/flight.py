"""Flight records: one JSON line per compaction operation and per inference budget check.

``.soba/flight.jsonl`` is for diagnosis and analysis (``views.flight_records``). A record holds
ids, triggers, limits, outcomes, durations and token figures; never summary text, never a
secret (every string passes through the one scrubber, :mod:`.scrub`). Records are written
with one ``write`` under an exclusive lock, like the session store.

One spelling per layer: Python hands the recorder snake_case fields (``hard_limit``, the
``budget`` event's names) and the file holds camelCase (``hardLimit``), as the seed's files and
the transcript do (:func:`camel_fields`). :func:`read_flight_records` gives them back in
snake_case (:func:`snake_fields`), and it is the ONE reader of older files: those spelled some
fields in snake_case (``hard_limit``, ``tokens_before``), some in camelCase, and one under an
older name (``effectiveTokens``); every spelling reads as the same field.
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

__all__ = ["FORBIDDEN_FIELDS", "FlightRecorder", "camel_fields", "read_flight_records", "snake_fields"]

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
        """Append one record (``fields`` in Python's snake_case); returns it as written (camelCase)."""
        leaked = FORBIDDEN_FIELDS.intersection(snake_fields(fields))
        if leaked:
            raise ValueError(f"flight records never hold summary contents; refusing fields {sorted(leaked)}")
        rec: dict[str, Any] = {"kind": kind, "ts": now_iso(), "sessionId": self.session_id,
                               **camel_fields(Scrubber.from_environ().json(dict(fields)))}
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
    """All complete records in ``path``, their fields in snake_case whichever spelling the file
    used (:func:`snake_fields`); a torn or corrupt line is skipped with a warning."""
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
            out.append(snake_fields(rec))
    return out


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_SNAKE = re.compile(r"_([a-z0-9])")
#: Names an older writer used for a field that now has another (read as the new one).
_RENAMED = {"effective_tokens": "effective"}


def camel_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record``'s fields (and those of nested objects) under their camelCase names, the file's spelling."""
    return {_SNAKE.sub(lambda m: m[1].upper(), str(key)): camel_fields(value) if isinstance(value, Mapping) else value
            for key, value in record.items()}


def snake_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record``'s fields (and those of nested objects) under their snake_case names, the one
    spelling Python reads.

    Records on disk spell their fields in camelCase (``sessionId``, ``hardLimit``); older files
    spell some of the same fields in snake_case too, and where both spellings are present the
    first one that holds a value wins."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = _CAMEL.sub(r"_\1", str(key)).lower()
        name = _RENAMED.get(name, name)
        if out.get(name) is None:
            out[name] = snake_fields(value) if isinstance(value, Mapping) else value
    return out
