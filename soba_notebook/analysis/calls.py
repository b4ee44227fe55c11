"""One readable line per tool call and per tool result, for ``views.transcript``'s ``detail`` column.

A row that only says ``notebook_edit`` does not tell what happened to the notebook; this says
``notebook_edit: replace cell a1b2c3 in analysis.ipynb`` for the call and ``modified
analysis.ipynb#a1b2c3`` for its result (from the ``filesChanged`` the tool recorded, never from
the model's words). Other tools show their main argument (``shell: pytest -q``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..compaction.file_changes import FileChanges

__all__ = ["describe_call", "describe_result"]

_MAIN_ARGUMENTS = ("command", "path", "pattern", "name", "entry_id", "kind", "code")
_CHARS = 80


def _short(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= _CHARS else text[:_CHARS - 1] + "…"


def describe_call(name: str, args: Mapping[str, Any]) -> str:
    """``notebook_edit: insert after cell a1b2c3 in x.ipynb``, ``notebook_read: x.ipynb``, ``shell: ls``."""
    where = _short(args.get("path") or "the kernel's notebook")
    if name == "notebook_edit":
        action, cell = str(args.get("action") or "edit"), args.get("cell_id")
        if action == "insert_after":
            target = f"insert after cell {cell}" if cell else "insert at the top"
        else:
            target = f"{action} cell {cell}" if cell else action
        return f"notebook_edit: {target} in {where}"
    if name == "notebook_read":
        cells = args.get("cell_ids")
        listed = ", ".join(map(str, cells)) if isinstance(cells, list) else ""
        chosen = f" {_short(f'(cells {listed})')}" if listed else ""
        return f"notebook_read: {where}{chosen}"
    for key in _MAIN_ARGUMENTS:
        if args.get(key):
            return f"{name}: {_short(args[key])}"
    return name


def describe_result(message: Mapping[str, Any]) -> str | None:
    """What a tool result observed (files changed or read), or ``None`` when it recorded nothing."""
    changes = FileChanges.from_json(message.get("filesChanged"))
    if changes is None or not (changes or changes.read):
        return None
    return changes.summary()
