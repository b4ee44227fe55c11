"""The notebook cells a span of history ran, and the figures the model saw: a capsule's ``cellsRun``.

After a compaction the model no longer has the ``notebook_run`` results it read, so the capsule
says which cells ran (notebook, cell id, execution count, outcome) and which figures the model saw
(its size, and what the model said of it: the first text the assistant wrote after the result,
clipped). Like files modified, these are facts of the transcript, never the model's prose:

* a run comes from the ``cellRuns`` value ``notebook_run`` stores on its tool-result entry
  (``{"path": …, "cells": [{"id", "count", "outcome"}]}``);
* a figure from the result's ``attachments`` (:mod:`soba_notebook.session.attachments`), of
  ``notebook_run`` or of ``notebook_read`` with ``include_images``;
* the remark from the next assistant message's text.

One item per cell, the latest state of it (:func:`item_key` names the cell), most recently touched
last, at most :data:`MAX_CELLS`; :func:`merge_cell_items` rolls a previous capsule's items under
newer ones the same way. A figure's item says where to see it again: ``notebook_read`` with the
cell id and ``include_images``. Pure values; nothing here reads a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..session.attachments import ImageAttachment, attachments_of

__all__ = ["MAX_CELLS", "REMARK_CHARS", "CellFacts", "cell_item", "item_key", "merge_cell_items"]

#: cells a capsule's extractor lists (the most recently run or seen)
MAX_CELLS = 40
#: characters of the model's remark on a figure kept in the item
REMARK_CHARS = 160
OUTCOME_CHARS = 120
_RUN_TOOL = "notebook_run"
_IMAGE_TOOLS = frozenset({"notebook_run", "notebook_read"})
#: the notebook named when a ``notebook_read`` of the kernel's own notebook names no path
OWN_NOTEBOOK = "(the kernel's notebook)"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class _Cell:
    path: str
    cell_id: str
    run: str = ""
    figures: tuple[str, ...] = ()
    remark: str = ""

    @property
    def key(self) -> str:
        return f"{self.path} cell {self.cell_id}"


def cell_item(path: str, cell_id: str, run: str = "", figures: Iterable[str] = (), remark: str = "") -> str:
    """The capsule item of one cell: ``nb.ipynb cell c3: ran [7] ok; figure 640×480 (…) — the model
    said: "…"``. Its part before the first ``": "`` is :func:`item_key`."""
    shown = tuple(figures)
    parts = [run] if run else []
    if shown:
        parts.append(f"{'figure' if len(shown) == 1 else f'{len(shown)} figures'} {', '.join(shown)} seen "
                     f"(to see again: notebook_read cell {cell_id} include_images)")
    text = f"{path} cell {cell_id}: " + ("; ".join(parts) or "seen")
    return text + (f' — the model said: "{remark}"' if remark else "")


def item_key(item: str) -> str:
    """The cell an item is about (``nb.ipynb cell c3``): what a newer item of the same cell replaces."""
    return item.split(": ", 1)[0]


def merge_cell_items(older: Iterable[str], newer: Iterable[str]) -> tuple[str, ...]:
    """``older`` items with each cell ``newer`` names replaced by its newer item, moved last."""
    merged: dict[str, str] = {}
    for item in (*older, *newer):
        item = item.strip()
        if item:
            merged.pop(item_key(item), None)
            merged[item_key(item)] = item
    return tuple(merged.values())


def _outcome(raw: Mapping[str, Any]) -> str:
    count = raw.get("count")
    number = f"[{count}] " if isinstance(count, int) and not isinstance(count, bool) else ""
    outcome = raw.get("outcome")
    return f"ran {number}{_clip(outcome, OUTCOME_CHARS) if isinstance(outcome, str) and outcome else 'ok'}"


@dataclass(slots=True)
class CellFacts:
    """What one pass over the entries learns of cells: fed each notebook tool result and each
    assistant text in transcript order (module docstring)."""

    cells: dict[str, _Cell] = field(default_factory=dict)
    #: cells whose figures wait for the model's next words
    awaiting: list[str] = field(default_factory=list)

    def _touch(self, cell: _Cell) -> None:
        self.cells.pop(cell.key, None)
        self.cells[cell.key] = cell

    def tool_result(self, name: str, args: Mapping[str, Any], message: Mapping[str, Any] | None) -> None:
        """A finished call of ``name``: the cells it ran and the figures its result showed."""
        if name not in _IMAGE_TOOLS or message is None:
            return
        runs = message.get("cellRuns") if name == _RUN_TOOL else None
        path = runs.get("path") if isinstance(runs, Mapping) else None
        if not isinstance(path, str) or not path:
            given = args.get("path")
            path = given if isinstance(given, str) and given.strip() else OWN_NOTEBOOK
        ran = runs.get("cells") if isinstance(runs, Mapping) else None
        for raw in ran if isinstance(ran, list) else ():
            if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
                self._touch(_Cell(path, raw["id"], _outcome(raw)))  # a new run: its old figures are gone
        seen: dict[str, list[ImageAttachment]] = {}
        for image in attachments_of(message):
            if image.cell_id:
                seen.setdefault(image.cell_id, []).append(image)
        for cell_id, images in seen.items():
            prior = self.cells.get(f"{path} cell {cell_id}") or _Cell(path, cell_id)
            sizes = tuple(f"{i.width}×{i.height}" for i in images)
            self._touch(replace(prior, figures=sizes, remark=""))
            self.awaiting.append(prior.key)

    def assistant(self, text: str) -> None:
        """The assistant's text: its remark on the figures it was last shown."""
        if not text.strip() or not self.awaiting:
            return
        remark = _clip(text, REMARK_CHARS)
        for key in self.awaiting:
            cell = self.cells.get(key)
            if cell is not None:
                self.cells[key] = replace(cell, remark=remark)
        self.awaiting.clear()

    def items(self) -> tuple[str, ...]:
        """The capsule items, the most recently touched last, at most :data:`MAX_CELLS`."""
        return tuple(cell_item(c.path, c.cell_id, c.run, c.figures, c.remark)
                     for c in list(self.cells.values())[-MAX_CELLS:])
