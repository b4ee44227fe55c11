"""The ``notebook_run`` tool: run cells of a notebook in this kernel, their results in the cells.

The model's ``python`` tool runs code off-screen; ``notebook_run`` runs the notebook's own cells
as the user would, in order, and the results become those cells' outputs: the kernel's execution
counts, stdout/stderr, rich outputs and errors with their tracebacks (:mod:`.cell_exec`). Which
cells (:func:`select_cells`, pure): ``cells`` (the given ids, in notebook order), ``all`` (every
code cell), ``from`` (the given cell and every code cell below it), ``stale`` (the first code cell
whose source changed since it last ran in this kernel, or never ran, and every code cell below it).
A cell's error stops the run, like Run All, and is the tool's result.

Where the outputs go: with no live front end, into the ``.ipynb`` file, atomically and under
``notebook_edit``'s rule (the file must be what the agent last read, checked again before the
rename: a save made while the cells ran is never overwritten; the cells ran, the outputs are then
reported but not saved). A notebook open in JupyterLab is run from the open document (unsaved edits
included) and each cell shows its run there as it happens (``NotebookDocuments.show_run``: ``[*]``
and its outputs cleared when it starts, its outputs so far while it runs, its execution count and
outputs when it ends), unsaved, as after the user's own run; the file under an open notebook is
never written behind its back. The cells run here, in the kernel, never through the front end's
Run: during a foreground ``%soba`` the kernel's shell is busy with that cell, so a Run sent by the
front end would wait behind the very turn that waits for it.

What the model is given is :func:`run_text`, one function: each cell's outputs as
:func:`.cell_outputs.outputs_for_model` renders them (text clipped head + tail, errors, DataFrames
as compact tables), and each PNG/JPEG output as an image on the tool result. A model that takes no
images is sent each one's one-line description instead; that is decided where the request is built
(``TokenCounter.model_messages``), not here.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import nbformat
from nbformat import NotebookNode

from ..compaction.file_changes import FileChanges
from ..errors import ToolError
from ..providers.base import ToolSpec
from ..session.attachments import ImageAttachment
from . import workspace as ws
from .cell_exec import CellRun, Progress, run_cell
from .cell_outputs import outputs_for_model
from .notebook_doc import assign_ids, cell_source, dumps, parse_notebook, source_hash
from .notebook_tools import PATH_DESCRIPTION, changed_while, notebook_target, read_stamp
from .tools import Tool, ToolContext, ToolResult

__all__ = ["NOTEBOOK_RUN_TOOL", "SCOPES", "cell_runs", "preview_run", "run_text", "select_cells"]

Scope = Literal["cells", "all", "stale", "from"]
SCOPES: tuple[Scope, ...] = ("cells", "all", "stale", "from")


def select_cells(nb: NotebookNode, scope: str, cell_ids: Sequence[str], last_ran: Mapping[str, set[str]],
                 shown: str = "the notebook") -> list[str]:
    """The ids of the code cells to run, in notebook order (module docstring). ``last_ran``: each
    cell id's source hashes it last ran with in this kernel. A ToolError names a bad id or scope."""
    if scope not in SCOPES:
        raise ToolError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    code = [str(c.get("id")) for c in nb.cells if c.get("cell_type") == "code"]
    every = {str(c.get("id")): c for c in nb.cells}
    if scope in ("cells", "from"):
        if not cell_ids:
            raise ToolError(f"scope {scope!r} needs cell_ids: the cells to run (notebook_read shows the ids)")
        missing = [c for c in cell_ids if c not in every]
        if missing:
            raise ToolError(f"no cell with id {', '.join(map(repr, missing))} in {shown}; notebook_read shows the ids")
        not_code = [c for c in cell_ids if every[c].get("cell_type") != "code"]
        if not_code:
            raise ToolError(f"cell {', '.join(not_code)} of {shown} is not a code cell; only code cells run")
    if scope == "cells":
        wanted = set(cell_ids)
        return [c for c in code if c in wanted]
    if scope == "from":
        return code[code.index(cell_ids[0]):]
    if scope == "all":
        return code
    for at, cid in enumerate(code):
        if source_hash(cell_source(every[cid])) not in last_ran.get(cid, set()):
            return code[at:]
    return []


@dataclass(frozen=True, slots=True)
class _Loaded:
    shown: str
    nb: NotebookNode
    live: bool
    sha256: str
    real: Path


def _load(ctx: ToolContext, path: str, verb: str, *, check: bool) -> _Loaded:
    """The notebook to run: the open document, else the file (``check``: as the agent last read it)."""
    access = ctx.notebooks
    real = ws.resolve_in_workspace(ctx.workspace, path)
    live = access.documents.read(real) if access.documents is not None else None
    if live is not None:
        assign_ids(live)
        return _Loaded(ws.display_path(ctx.workspace, real), live, True, "", real)
    shown, raw, _ = ws.read_whole(ctx.workspace, path, verb)
    assert raw is not None
    sha = hashlib.sha256(raw).hexdigest()
    if check:
        seen = access.reads.get(shown)
        if seen is None:
            raise ToolError(f"read {shown} with notebook_read before running its cells (the run must match what "
                            f"the notebook holds); nothing was run")
        if seen.sha256 != sha:
            raise ToolError(f"{shown} changed since you last read it (saved by JupyterLab or another program); read "
                            f"it again with notebook_read, then run; nothing was run")
    nb, _ = parse_notebook(raw, shown)
    assign_ids(nb)
    return _Loaded(shown, nb, False, sha, real)


def _last_ran(ctx: ToolContext, shown: str, own: bool) -> dict[str, set[str]]:
    """Each cell's source hashes at its last run in this kernel: the agent's runs, and the user's
    (the kernel's history names cells of the kernel's own notebook only)."""
    found = {cid: {h} for cid, h in ctx.notebooks.ran.get(shown, {}).items()}
    ask = ctx.notebooks.kernel_runs
    if own and ask is not None:
        latest: dict[str, str] = {}
        for run in ask():
            if run.cell_id:
                latest[run.cell_id] = source_hash(run.source)
        for cid, digest in latest.items():
            found.setdefault(cid, set()).add(digest)
    return found


def _choose(ctx: ToolContext, args: Mapping[str, Any], verb: str, *, check: bool) -> tuple[_Loaded, list[str], bool]:
    path, own = notebook_target(dict(args), ctx)
    loaded = _load(ctx, path, verb, check=check)
    ids = [str(c) for c in args.get("cell_ids") or ()]
    scope = str(args.get("scope") or ("cells" if ids else "stale"))
    chosen = select_cells(loaded.nb, scope, ids, _last_ran(ctx, loaded.shown, own), loaded.shown)
    return loaded, chosen, own


def preview_run(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    """What a ``notebook_run`` call would run, for its approval card: the notebook, then each chosen
    cell's id and source. Reads as the run reads; runs and records nothing."""
    loaded, chosen, _ = _choose(ctx, args, "notebook_run", check=False)
    by_id = {str(c.get("id")): c for c in loaded.nb.cells}
    if not chosen:
        return f"{loaded.shown}: no cell to run"
    blocks = [f"# cell {cid}\n{cell_source(by_id[cid]).rstrip()}" for cid in chosen]
    return f"{loaded.shown}: run {len(chosen):,} cell{'s' if len(chosen) != 1 else ''}\n\n" + "\n\n".join(blocks)


def run_text(shown: str, runs: Sequence[tuple[str, CellRun]], chosen: Sequence[str], notes: Sequence[str] = (),
             ) -> tuple[str, tuple[ImageAttachment, ...]]:
    """The tool result the model is given: a headline, ``notes``, then each cell run with its count
    and its outputs (:func:`.cell_outputs.outputs_for_model`: clipped text, tables, a line per
    figure), and the cells an error left unrun; with the figures as images, in cell order. The one
    place the result's form is decided."""
    last = runs[-1][1] if runs else None
    if last is not None and last.stopped:
        head = f"stopped ({last.stopped}) while running cell {runs[-1][0]} of {shown}"
    elif last is not None and last.error is not None:
        head = f"cell {runs[-1][0]} of {shown} raised {last.error.get('ename')}; the run stopped there"
    else:
        head = f"ran {len(runs):,} cell{'s' if len(runs) != 1 else ''} of {shown}" if runs else \
            f"no cell of {shown} needed running"
    blocks = ["\n".join([head, *notes])]
    images: list[ImageAttachment] = []
    for cid, run in runs:
        text, seen = outputs_for_model(run.outputs, cell_id=cid)
        images.extend(seen)
        parts = [f"## cell {cid} · [{run.number}]", text if run.outputs else "(no output)"]
        if run.still_running:
            parts.append("(the cell could not be interrupted and may still be running in the background)")
        blocks.append("\n".join(parts))
    left = list(chosen[len(runs):])
    if left:
        blocks.append(f"not run: {', '.join(left)}")
    return "\n\n".join(blocks), tuple(images)


def _outcome(run: CellRun) -> str:
    if run.stopped:
        return f"stopped ({run.stopped})"
    error = run.error
    return "ok" if error is None else f"raised {error.get('ename')}: {error.get('evalue')}"


def cell_runs(shown: str, runs: Sequence[tuple[str, CellRun]]) -> dict[str, Any]:
    """What the run's tool-result entry records of it (``cellRuns``): the notebook, and each cell's
    id, execution count and outcome (``ok``, ``raised ename: evalue``, ``stopped (why)``). The
    capsule's cells-run facts are read from it (:mod:`soba_notebook.compaction.cell_facts`)."""
    return {"path": shown, "cells": [{"id": cid, "count": run.number, "outcome": _outcome(run)} for cid, run in runs]}


def _save(ctx: ToolContext, loaded: _Loaded, runs: Sequence[tuple[str, CellRun]]) -> tuple[bool, str]:
    """The outputs written into the file, atomically, if it is still the version the run read."""
    with ws.held_whole(ctx.workspace, loaded.shown, "notebook_run") as held:
        if held.raw is None or hashlib.sha256(held.raw).hexdigest() != loaded.sha256:
            return False, f"({loaded.shown} changed while the cells ran; the outputs above were not saved into it)"
        nb, _ = parse_notebook(held.raw, loaded.shown)
        assign_ids(nb)
        by_id = {str(c.get("id")): c for c in nb.cells}
        for cid, run in runs:
            cell = by_id[cid]
            cell["outputs"] = [nbformat.from_dict(o) for o in run.outputs]
            cell["execution_count"] = run.number
        written = held.replace(dumps(nb, loaded.shown), "notebook_run", changed_while(loaded.shown, False))
    ctx.notebooks.reads[loaded.shown] = read_stamp(written.sha256, written.size, written.mtime_ns, nb)
    return True, f"(the outputs are saved in {loaded.shown})"


class _LiveShow:
    """Each cell's run shown in the notebook open in JupyterLab (nothing when the run is from the file)."""

    def __init__(self, ctx: ToolContext, loaded: _Loaded) -> None:
        self.documents = ctx.notebooks.documents if loaded.live else None
        self.real = loaded.real
        self.shown: list[str] = []
        self.problems: list[str] = []

    async def running(self, cell_id: str, outputs: Sequence[Mapping[str, Any]]) -> None:
        """The cell runs: ``[*]`` and its outputs so far."""
        await self._send(cell_id, None, outputs)

    def progress(self, cell_id: str) -> Progress | None:
        """What ``run_cell`` calls with the cell's outputs while it runs (``None``: nothing is shown live)."""
        if self.documents is None:
            return None

        async def shown_so_far(outputs: list[dict[str, Any]]) -> None:
            await self.running(cell_id, outputs)
        return shown_so_far

    async def ended(self, cell_id: str, run: CellRun) -> None:
        """The cell ran: its execution count and outputs."""
        if await self._send(cell_id, run.number, run.outputs):
            self.shown.append(cell_id)

    async def _send(self, cell_id: str, number: int | None, outputs: Sequence[Mapping[str, Any]]) -> bool:
        if self.documents is None:
            return False
        problem = await asyncio.to_thread(self.documents.show_run, self.real, cell_id, number, outputs)
        if problem and problem not in self.problems:
            self.problems.append(problem)
        return not problem

    def note(self) -> str:
        if not self.problems:
            return ("(run from the notebook open in JupyterLab: its cells show these outputs, unsaved, as after "
                    "your own run; the file is not written under it)")
        return (f"(run from the notebook open in JupyterLab; cells shown there: {', '.join(self.shown) or 'none'}; "
                f"JupyterLab did not show the rest: {'; '.join(self.problems)}; the file is not written under it)")


async def _notebook_run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    loaded, chosen, _ = await asyncio.to_thread(_choose, ctx, args, "notebook_run", check=True)
    by_id = {str(c.get("id")): c for c in loaded.nb.cells}
    kernel = ctx.notebooks.cells
    ran = ctx.notebooks.ran.setdefault(loaded.shown, {})
    runs: list[tuple[str, CellRun]] = []
    show = _LiveShow(ctx, loaded)
    for cid in chosen:
        source = cell_source(by_id[cid])
        await show.running(cid, [])
        run = await run_cell(source, ctx.python_namespace, kernel, ctx.cancel, ctx.config.notebook_run_timeout_sec,
                             show.progress(cid))
        runs.append((cid, run))
        ran[cid] = source_hash(source)
        kernel.ran(cid, run.number, source, run.error)
        await show.ended(cid, run)
        if run.error is not None:
            break
    notes: list[str] = []
    saved = False
    if loaded.live:
        notes.append(show.note())
    elif runs:
        saved, note = await asyncio.to_thread(_save, ctx, loaded, runs)
        notes.append(note)
    last = runs[-1][1] if runs else None
    failed = last is not None and (last.error is not None or bool(last.stopped))
    cells = tuple(f"{loaded.shown}#{cid}" for cid, _ in runs)
    data: dict[str, Any] = {"path": loaded.shown, "ran": [cid for cid, _ in runs], "live": loaded.live,
                            "shown_live": list(show.shown),
                            "files_changed": FileChanges(modified=cells if saved else ()).to_json(),
                            "cell_runs": cell_runs(loaded.shown, runs)}
    if last is not None and last.stopped == "cancelled":
        data["cancelled"] = True
    text, images = run_text(loaded.shown, runs, chosen, notes)
    return ToolResult(text, is_error=failed, data=data, images=images)


NOTEBOOK_RUN_TOOL = Tool(ToolSpec(
    "notebook_run", "Run cells of a Jupyter notebook in this kernel, in order, as the user would: the results "
    "(execution counts, printed output, rich outputs, errors with tracebacks) become the cells' outputs and are "
    "returned. A cell's error stops the run. Read the notebook first with notebook_read.",
    {"type": "object", "additionalProperties": False, "required": [],
     "properties": {"path": {"type": "string", "description": PATH_DESCRIPTION},
                    "cell_ids": {"type": "array", "items": {"type": "string"},
                                 "description": "The cells to run (scope cells), or the first one (scope from)."},
                    "scope": {"type": "string", "enum": list(SCOPES),
                              "description": "cells: the given cells; all: every code cell; from: the given cell "
                                             "and every code cell below it; stale: cells whose source changed "
                                             "since they last ran in this kernel (or never ran) and every cell "
                                             "below the first of them. Default: cells with cell_ids, else stale."}}}),
    _notebook_run, "allow_python", runs_code=True)
