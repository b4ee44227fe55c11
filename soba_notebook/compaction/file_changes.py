"""Observed file changes: which workspace files one tool run created, modified or deleted.

SOBA's ``shell`` and ``python`` tools compare a cheap snapshot of the workspace taken before and
after each run (:mod:`soba_notebook.agent.file_changes` takes them) and record the difference in
the tool result entry as ``filesChanged``. This module owns that value and its JSON form, so the
extractor (:mod:`.extract`) can read it without touching the disk: a file written by
``open(p, "w")`` in the ``python`` tool, by a script the shell runs (``python fix.py``) or
restored with ``cp`` is a fact, not a guess from parsing the command line.

The notebook tools record their facts in the same field: ``notebook_edit`` the cells it changed,
as ``analysis.ipynb#a1b2c3`` (created: an inserted cell; modified: a replaced one; deleted), and
``notebook_read`` the notebook it read, in ``read`` (files a tool was observed to read).

``truncated`` says that the snapshot hit its bound (too many files, or too long to take), so
the lists may miss changes; then the extractor also keeps what shell parsing suggests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FileChanges"]


def _paths(raw: Any) -> tuple[str, ...]:
    return tuple(p for p in raw if isinstance(p, str) and p) if isinstance(raw, list) else ()


@dataclass(frozen=True, slots=True)
class FileChanges:
    """Workspace-relative paths (``/``-separated) a run created, modified and deleted."""

    created: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    #: why the observation may be incomplete (a bound was hit), or ``None`` when it is complete
    truncated: str | None = None
    #: files the tool read (not changes: ``bool`` and ``complete`` ignore them)
    read: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.truncated is None

    def __bool__(self) -> bool:
        return bool(self.created or self.modified or self.deleted or self.truncated)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"created": list(self.created), "modified": list(self.modified),
                               "deleted": list(self.deleted)}
        if self.truncated is not None:
            out["truncated"] = self.truncated
        if self.read:
            out["read"] = list(self.read)
        return out

    @classmethod
    def from_json(cls, raw: Any) -> FileChanges | None:
        """The value of a ``filesChanged`` field; ``None`` when absent or not an object."""
        if not isinstance(raw, Mapping):
            return None
        truncated = raw.get("truncated")
        return cls(_paths(raw.get("created")), _paths(raw.get("modified")), _paths(raw.get("deleted")),
                   truncated if isinstance(truncated, str) and truncated else None, _paths(raw.get("read")))

    def summary(self, limit: int = 8) -> str:
        """One line for people and the model: ``created a.py; modified b.py, c.py (+3 more)``."""
        parts = []
        for label, paths in (("created", self.created), ("modified", self.modified), ("deleted", self.deleted)):
            if paths:
                shown = ", ".join(paths[:limit])
                more = f" (+{len(paths) - limit:,} more)" if len(paths) > limit else ""
                parts.append(f"{label} {shown}{more}")
        if self.read and not parts:
            parts.append("read " + ", ".join(self.read[:limit]))
        text = "; ".join(parts) or "no workspace files changed"
        return f"{text} [{self.truncated}]" if self.truncated else text
