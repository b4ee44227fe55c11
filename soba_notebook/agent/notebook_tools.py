"""The notebook tools, ``notebook_read`` and ``notebook_edit``, and the file tools' notebook rule.

The model works with cells, never with a notebook's JSON: ``notebook_read`` shows cells by id
(:mod:`.notebook_view`), ``notebook_edit`` replaces, inserts or deletes one cell
(:mod:`.notebook_doc`), ``read_file`` on an ``.ipynb`` shows the same cells and ``write_file``/
``edit_file`` refuse one, pointing to ``notebook_edit``. Without ``path`` both tools work on the
kernel's own notebook, which the notebook layer names through :class:`.NotebookAccess`.

Where the bytes go: a notebook open in a live front end is read and changed there when
``NotebookAccess.documents`` says so; otherwise the file, through the workspace's one confined
read and write path (:func:`.workspace.read_whole`, :func:`.workspace.held_whole`: inside the
workspace, never under ``.soba``, written atomically). An edit is refused when the file is not
what the agent last read (its SHA-256 differs from the :class:`.ReadStamp` of the last read or
edit in this session), so a notebook JupyterLab saved meanwhile is re-read, never overwritten.
That holds until the new file is renamed into place: the edit runs under a lock and checks the
file once more right before the rename (:mod:`.file_version`), so a save made while the edit
was working is refused the same way.

Facts for compaction: results carry ``files_changed`` (``read`` for a read, the cells as
``analysis.ipynb#a1b2c3`` for an edit, :class:`~soba_notebook.compaction.file_changes.FileChanges`)
and ``notebook`` (each change with its short diff, for the cell's display).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..compaction.file_changes import FileChanges
from ..config import ToolsConfig
from ..errors import ToolError
from ..providers.base import ToolSpec
from ..session.attachments import ImageAttachment
from . import workspace as ws
from .cell_outputs import outputs_for_model
from .notebook_access import KernelRun, ReadStamp, kernel_notebook_path
from .notebook_doc import (
    CELL_TYPES,
    EditResult,
    NotebookEdit,
    apply_edit,
    assign_ids,
    cell_source,
    dumps,
    new_notebook,
    parse_notebook,
    source_hash,
)
from .notebook_view import render_cells
from .tools import Tool, ToolContext, ToolResult

__all__ = ["NOTEBOOK_EDIT_TOOL", "NOTEBOOK_READ_TOOL", "PATH_DESCRIPTION", "changed_while", "is_notebook_path",
           "notebook_aware", "notebook_target", "notebook_tools", "preview_edit", "read_stamp"]

_NO_KERNEL_NOTEBOOK = ("this kernel does not know which notebook it runs (terminal IPython, or a front end that does "
                       "not tell the kernel its notebook path); pass path, e.g. {\"path\": \"analysis.ipynb\"}")


def is_notebook_path(path: object) -> bool:
    return isinstance(path, str) and path.strip().lower().endswith(".ipynb")


def _kernel_notebook(ctx: ToolContext) -> Path | None:
    ask = ctx.notebooks.kernel_notebook
    return kernel_notebook_path(ask() if ask is not None else None)


def notebook_target(args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    """``(path, is the kernel's own notebook)``: ``path`` as given, or the kernel's notebook."""
    kernel = _kernel_notebook(ctx)
    given = str(args.get("path") or "").strip()
    if not given:
        if kernel is None:
            raise ToolError(_NO_KERNEL_NOTEBOOK)
        return str(kernel), True
    if kernel is None:
        return given, False
    try:
        own = ws.resolve_in_workspace(ctx.workspace, given) == kernel.resolve()
    except (ToolError, OSError):
        own = False
    return given, own


def read_stamp(sha256: str, size: int, mtime_ns: int, nb: Any, *, live: bool = False) -> ReadStamp:
    cells = {str(cell.get("id")): source_hash(cell_source(cell)) for cell in nb.cells}
    return ReadStamp(size, mtime_ns, sha256, cells, live)


def _format_note(major: int, verb: str) -> list[str]:
    if major == 4:
        return []
    if verb == "notebook_edit":
        return [f"(the file was nbformat {major}; it is saved as nbformat 4.5, as JupyterLab saves one)"]
    return [f"(the file is nbformat {major}: shown converted to nbformat 4, as JupyterLab opens it; the ids are "
            f"derived from each cell, and notebook_edit saves the notebook as nbformat 4.5)"]


def _runs(ctx: ToolContext) -> Sequence[KernelRun]:
    ask = ctx.notebooks.kernel_runs
    return tuple(ask()) if ask is not None else ()


def read_notebook(ctx: ToolContext, path: str, own: bool, cell_ids: Sequence[str] | None, verb: str, *,
                  include_images: bool = False) -> ToolResult:
    """The notebook at ``path`` rendered as cells; its read recorded for the stale check. With
    ``include_images`` the shown cells' PNG and JPEG outputs come as images too (cell_outputs.py)."""
    access = ctx.notebooks
    real = ws.resolve_in_workspace(ctx.workspace, path)
    notes: list[str] = []
    live = access.documents.read(real) if access.documents is not None else None
    if live is None and access.documents is not None:
        notes.extend(filter(None, [access.documents.fallback_note(real)]))
    if live is not None:
        shown, nb = ws.display_path(ctx.workspace, real), live
        notes.append("(the notebook open in JupyterLab, unsaved changes included)")
        assign_ids(nb)
        stamp = read_stamp("", 0, 0, nb, live=True)
    else:
        shown, raw, st = ws.read_whole(ctx.workspace, path, verb)
        assert raw is not None and st is not None
        nb, major = parse_notebook(raw, shown)
        notes.extend(_format_note(major, verb))
        added = assign_ids(nb)
        if added and major == 4:
            notes.append(f"({added:,} of its cells have no id in the file: the ids shown are derived from each cell "
                         f"and stay the same until the file changes; notebook_edit saves them)")
        stamp = read_stamp(hashlib.sha256(raw).hexdigest(), st.st_size, st.st_mtime_ns, nb)
    access.reads[shown] = stamp
    runs = _runs(ctx) if own else ()
    if own:
        notes.append("(this is the kernel's own notebook" + ("; the cells it ran are listed with each cell and "
                                                              "at the end)" if runs else ")"))
    text = render_cells(nb, shown, cell_ids=cell_ids, runs=runs, notes=notes)
    data = {"path": shown, "cells": len(nb.cells), "live": live is not None,
            "files_changed": FileChanges(read=(shown,)).to_json()}
    images: tuple[ImageAttachment, ...] = ()
    if include_images:
        wanted = set(cell_ids) if cell_ids is not None else None
        images = tuple(image for cell in nb.cells if wanted is None or str(cell.get("id")) in wanted
                       for image in outputs_for_model(cell.get("outputs") or (), cell_id=str(cell.get("id")))[1])
    return ToolResult(text, data=data, images=images)


async def _notebook_read(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    path, own = notebook_target(args, ctx)
    raw_ids = args.get("cell_ids")
    cell_ids = [str(c) for c in raw_ids] if raw_ids else None
    return await asyncio.to_thread(read_notebook, ctx, path, own, cell_ids, "notebook_read",
                                   include_images=args.get("include_images") is True)


def _edit_of(args: dict[str, Any]) -> NotebookEdit:
    cell_id = args.get("cell_id")
    cell_id = str(cell_id).strip() or None if cell_id is not None else None
    if cell_id is not None and cell_id.lower() in ("null", "none"):
        cell_id = None
    return NotebookEdit(args["action"], cell_id, args.get("source"), args.get("cell_type"))


def _edit_text(shown: str, result: EditResult, notes: Sequence[str]) -> str:
    change = result.change
    return "\n".join([change.headline(shown), *notes, change.diff()])


def _facts(shown: str, result: EditResult) -> dict[str, Any]:
    change = result.change
    cell = f"{shown}#{change.cell_id}"
    changes = FileChanges(created=(cell,) if change.action == "inserted" else (),
                          modified=(cell,) if change.action == "replaced" else (),
                          deleted=(cell,) if change.action == "deleted" else ())
    return {"path": shown, "cell_id": change.cell_id, "action": change.action, "files_changed": changes.to_json(),
            "notebook": [{"path": shown, **change.to_json()}]}


_READ_AGAIN = "read it again with notebook_read and redo the edit on what it holds now; nothing was written"


def changed_while(shown: str, created: bool) -> str:
    """The refusal when the file changed while the edit was working on it (a save it must not lose)."""
    if created:
        return f"{shown} was created by another program while notebook_edit was creating it; {_READ_AGAIN}"
    return (f"{shown} changed since you last read it: it was saved (by JupyterLab or another program) while "
            f"notebook_edit was working on it, and the edit was not saved over it; {_READ_AGAIN}")


def edit_notebook(ctx: ToolContext, path: str, edit: NotebookEdit) -> ToolResult:
    """Apply ``edit`` to the notebook at ``path`` (live document or file; module docstring)."""
    access = ctx.notebooks
    real = ws.resolve_in_workspace(ctx.workspace, path)
    shown = ws.display_path(ctx.workspace, real)
    seen = access.reads.get(shown)
    if access.documents is not None:
        live = access.documents.apply(real, edit, seen)
        if live is not None:
            access.reads[shown] = read_stamp("", 0, 0, live.notebook, live=True)
            return ToolResult(_edit_text(shown, live, ["(changed in the open notebook)"]),
                              data={**_facts(shown, live), "live": True})
    notes: list[str] = [] if access.documents is None else list(filter(None, [access.documents.fallback_note(real)]))
    with ws.held_whole(ctx.workspace, path, "notebook_edit", missing_ok=True) as held:
        shown, raw = held.shown, held.raw
        if raw is None:
            if edit.action != "insert_after" or edit.cell_id is not None:
                raise ToolError(f"no such notebook: {shown}; notebook_edit creates one only with action insert_after "
                                f"and cell_id null")
            if not is_notebook_path(shown):
                raise ToolError(f"a new notebook's name must end in .ipynb, got {shown}")
            nb = new_notebook()
            notes.append(f"(created the notebook {shown})")
        else:
            if seen is None:
                raise ToolError(f"read {shown} with notebook_read before editing it (the edit must match what the "
                                f"notebook holds); nothing was written")
            if hashlib.sha256(raw).hexdigest() != seen.sha256:
                raise ToolError(f"{shown} changed since you last read it (saved by JupyterLab or another program); "
                                f"{_READ_AGAIN}")
            nb, major = parse_notebook(raw, shown)
            notes.extend(_format_note(major, "notebook_edit"))
            added = assign_ids(nb)
            if added and major == 4:
                notes.append(f"(the file had {added:,} cells without an id; they are saved with the ids you read, "
                             f"nbformat 4.5)")
        result = apply_edit(nb, edit, shown)
        written = held.replace(dumps(result.notebook, shown), "notebook_edit", changed_while(shown, raw is None))
    access.reads[shown] = read_stamp(written.sha256, written.size, written.mtime_ns, result.notebook)
    return ToolResult(_edit_text(shown, result, notes), data=_facts(shown, result))


def preview_edit(ctx: ToolContext, args: Mapping[str, Any]) -> tuple[str, str, str]:
    """What ``notebook_edit`` with ``args`` would change, for its approval card before it runs:
    ``("<notebook> cell <id>", source before, source after)``. The same read (the open document,
    else the file) and the same :func:`.apply_edit` as the edit, on a copy; nothing is written or
    recorded. Raises :class:`ToolError` as the edit would (no such cell, no notebook)."""
    path, _ = notebook_target(dict(args), ctx)
    real = ws.resolve_in_workspace(ctx.workspace, path)
    shown = ws.display_path(ctx.workspace, real)
    nb = ctx.notebooks.documents.read(real) if ctx.notebooks.documents is not None else None
    if nb is None:
        shown, raw, _ = ws.read_whole(ctx.workspace, path, "notebook_edit", missing_ok=True)
        nb = new_notebook() if raw is None else parse_notebook(raw, shown)[0]
    assign_ids(nb)
    change = apply_edit(nb, _edit_of(dict(args)), shown).change
    return f"{shown} cell {change.cell_id}", change.before, change.after


async def _notebook_edit(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    path, _ = notebook_target(args, ctx)
    return await asyncio.to_thread(edit_notebook, ctx, path, _edit_of(args))


# -- the file tools on notebooks ---------------------------------------------------------------

def notebook_aware(tool: Tool) -> Tool:
    """``tool`` with the notebook rule: ``read_file`` shows an ``.ipynb`` as cells; ``write_file``
    and ``edit_file`` refuse one (a notebook's JSON is not for text edits; JupyterLab may hold it
    open). Other tools are returned as they are."""
    if tool.name not in ("read_file", "write_file", "edit_file"):
        return tool
    inner = tool.handler
    name = tool.name

    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = args.get("path")
        if not is_notebook_path(path):
            return await inner(args, ctx)
        if name != "read_file":
            raise ToolError(f"{name} does not change notebooks ({path} is a notebook): use notebook_edit to replace, "
                            f"insert or delete a cell by id (notebook_read shows the ids; insert_after with cell_id "
                            f"null on a new path creates a notebook)")
        given, own = notebook_target({"path": path}, ctx)
        result = await asyncio.to_thread(read_notebook, ctx, given, own, None, "read_file")
        if args.get("start_line") is not None or args.get("end_line") is not None:
            result = dataclasses.replace(result, text=result.text + "\n\n(start_line/end_line do not apply to a "
                                         "notebook; notebook_read with cell_ids reads chosen cells)")
        return result

    return dataclasses.replace(tool, handler=handler)


# -- specs -------------------------------------------------------------------------------------

PATH_DESCRIPTION = ("The notebook, relative to the workspace root. Omit it for the notebook this kernel runs "
                    "(when the front end told the kernel its path).")

NOTEBOOK_READ_TOOL = Tool(ToolSpec(
    "notebook_read", "Read a Jupyter notebook as cells: each cell's id, type, source, execution count and outputs as "
    "text (errors with their traceback, images as one line). Without path: the kernel's own notebook, with which "
    "cells ran in this kernel and in what order. Cell ids are what notebook_edit takes.",
    {"type": "object", "additionalProperties": False, "required": [],
     "properties": {"path": {"type": "string", "description": PATH_DESCRIPTION},
                    "cell_ids": {"type": "array", "items": {"type": "string"},
                                 "description": "Only these cells (by id); default: all."},
                    "include_images": {"type": "boolean", "description": "Also show the cells' PNG and JPEG "
                                       "figures as images (to a model that sees images; default false)."}}}),
    _notebook_read)

NOTEBOOK_EDIT_TOOL = Tool(ToolSpec(
    "notebook_edit", "Change one cell of a Jupyter notebook by id: replace its source (a code cell's outputs are "
    "cleared), insert a new cell after it (cell_id null: at the top), or delete it. Read the notebook first with "
    "notebook_read; an edit of a notebook changed since that read is refused. Other cells stay as they were.",
    {"type": "object", "additionalProperties": False, "required": ["action"],
     "properties": {"path": {"type": "string", "description": PATH_DESCRIPTION},
                    "cell_id": {"type": "string", "description": "The cell to replace or delete, or to insert after; "
                                "null (or omitted) with insert_after inserts at the top."},
                    "action": {"type": "string", "enum": ["replace", "insert_after", "delete"],
                               "description": "replace, insert_after or delete."},
                    "source": {"type": "string", "description": "The cell's new source (replace, insert_after)."},
                    "cell_type": {"type": "string", "enum": list(CELL_TYPES),
                                  "description": "code, markdown or raw; default: code for a new cell, the "
                                                 "cell's own type for a replaced one."}}}),
    _notebook_edit, "allow_write")


def notebook_tools(config: ToolsConfig) -> list[Tool]:
    """``notebook_read``, and ``notebook_edit`` unless ``tools.allowWrite`` is false."""
    return [NOTEBOOK_READ_TOOL, *([NOTEBOOK_EDIT_TOOL] if config.allow_write else [])]
