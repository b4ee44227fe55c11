"""The notebook open in JupyterLab as the notebook tools' document: read and edited in place.

:class:`LiveNotebooks` is the :class:`~soba_notebook.agent.notebook_access.NotebookDocuments` the
notebook layer gives the agent's tools. It asks SOBA's JupyterLab extension (``labextension/``,
over :class:`.live_channel.FrontEndChannel`) for the open document of a path, so ``notebook_read``
sees what the user sees, unsaved edits included; ``notebook_edit`` computes the edit on that
document with the same :func:`~soba_notebook.agent.notebook_doc.apply_edit` the file path uses
(ids, validation, the diff) and sends the front end one cell operation, which it applies to the
open model (so no file changes under JupyterLab: no "File Changed" dialog, no lost unsaved edits,
and JupyterLab's own undo takes it back) and marks the cell until the user touches it.
``notebook_run`` runs the open document's cells in this kernel and :meth:`LiveNotebooks.show_run`
sends each cell's state to the front end (``outputs``: "running" with its outputs so far, none at
first; then "done" with its execution count and nbformat outputs), which sets them on the open cell
as JupyterLab does after its own run: unsaved, like an edit. The kernel runs the cell, not the
front end, because a front end's Run would queue behind the busy ``%soba`` cell of a foreground
turn, which waits for it.

``None`` from :meth:`read`/:meth:`apply` means "not open in a live JupyterLab": the tools use the
file, and :meth:`fallback_note` says why, once per reason and path. An edit of a notebook that *is*
open is never sent to the file behind JupyterLab's back: a refusal there is a ``ToolError``.

Stale edits: the agent's last read (:class:`~soba_notebook.agent.notebook_access.ReadStamp`) keeps
each cell's source hash; a replace or delete of a cell the user changed since is refused (re-read),
while the user typing in *other* cells is fine, as it is in JupyterLab itself. The front end checks
again that the cell still holds the source the edit was computed on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import nbformat

from ..agent.notebook_access import ReadStamp
from ..agent.notebook_doc import EditResult, NotebookEdit, apply_edit, assign_ids, cell_source, source_hash
from ..errors import ToolError
from .live_channel import FrontEndChannel, Reply

__all__ = ["LiveNotebooks"]

Request = Callable[[Mapping[str, Any]], Reply]


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(os.path.expanduser(a), b)
    except OSError:
        return False


class LiveNotebooks:
    """Open notebooks in the kernel's JupyterLab front end (module docstring)."""

    def __init__(self, request: Request | None = None) -> None:
        self._request: Request = request if request is not None else FrontEndChannel().request
        self._said: set[str] = set()
        self._pending: dict[str, str] = {}  # path -> why the last call fell back to the file
        self._matched: dict[str, str] = {}  # path -> the path the front end knows it by (last read)
        self._lock = threading.Lock()

    # -- NotebookDocuments ---------------------------------------------------------------------

    def read(self, path: Path) -> nbformat.NotebookNode | None:
        found = self._find(path)
        if found is None:
            return None
        nb = nbformat.from_dict(dict(found["notebook"]))
        assign_ids(nb)
        return nb

    def apply(self, path: Path, edit: NotebookEdit, seen: ReadStamp | None) -> EditResult | None:
        found = self._find(path)
        if found is None:
            return None
        shown = path.name
        nb = nbformat.from_dict(dict(found["notebook"]))
        assign_ids(nb)
        if seen is None:
            raise ToolError(f"read {shown} with notebook_read before editing it (it is open in JupyterLab; the edit "
                            f"must match what the open notebook holds); nothing was changed")
        if edit.action != "insert_after" and edit.cell_id is not None:
            current = {str(c.get("id")): source_hash(cell_source(c)) for c in nb.cells}
            if edit.cell_id in current and seen.cells.get(edit.cell_id) != current[edit.cell_id]:
                raise ToolError(f"cell {edit.cell_id} of {shown} changed in JupyterLab since you last read it (the "
                                f"user may be editing it); read it again with notebook_read and redo the edit on what "
                                f"it holds now; nothing was changed")
        result = apply_edit(nb, edit, shown)
        reply = self._request({"op": "apply", "path": str(found["matched"]), "home": str(Path.home()),
                               "edit": _operation(edit, result)})
        if reply.data is None:
            raise ToolError(f"JupyterLab did not confirm the edit of {shown} ({reply.reason}); look at the open "
                            f"notebook, then read it again with notebook_read before another edit")
        if not reply.data.get("ok"):
            raise ToolError(f"JupyterLab refused the edit of {shown}: {reply.data.get('error') or 'no reason given'}; "
                            f"read it again with notebook_read; nothing was changed")
        return result

    def show_run(self, path: Path, cell_id: str, number: int | None, outputs: Sequence[Mapping[str, Any]]) -> str:
        with self._lock:
            known = self._matched.get(str(path), str(path))
        state: dict[str, Any] = {"state": "running"} if number is None else {"state": "done", "execution_count": number}
        reply = self._request({"op": "outputs", "path": known, "home": str(Path.home()), "cell_id": cell_id,
                               "outputs": [dict(o) for o in outputs], **state})
        if reply.data is None:
            return reply.reason
        if not reply.data.get("found"):
            return f"{path.name} is no longer open in JupyterLab"
        return "" if reply.data.get("ok") else str(reply.data.get("error") or "no reason given")

    # -- the fallback note ---------------------------------------------------------------------

    def fallback_note(self, path: Path) -> str | None:
        """Why the last :meth:`read`/:meth:`apply` of ``path`` used the file, the first time for
        that reason (``None`` afterwards, and when the live document was used)."""
        with self._lock:
            reason = self._pending.pop(str(path), None)
            if reason is None or reason in self._said:
                return None
            self._said.add(reason)
        return f"(not the live JupyterLab document: {reason}; the file was used)"

    # -- the front end -------------------------------------------------------------------------

    def _find(self, path: Path) -> dict[str, Any] | None:
        """The front end's reply for the open document of ``path`` (with ``matched``: the path
        string it knows it by), or ``None`` with the reason kept for :meth:`fallback_note`."""
        wanted = str(path)
        reply = self._request({"op": "read", "path": wanted, "home": str(Path.home())})
        if reply.data is not None and not reply.data.get("found"):
            # the front end names its open notebooks by server root + path; a link or ~ may differ
            other = next((p for p in reply.data.get("open", ()) if isinstance(p, str) and p != wanted
                          and _same_file(p, path)), None)
            if other is not None:
                wanted = other
                reply = self._request({"op": "read", "path": wanted, "home": str(Path.home())})
        if reply.data is None or not reply.data.get("found") or not isinstance(reply.data.get("notebook"), Mapping):
            why = reply.reason if reply.data is None else (
                reply.data.get("error") or f"{path.name} is not open in JupyterLab")
            with self._lock:
                self._pending[str(path)] = str(why)
            return None
        with self._lock:
            self._pending.pop(str(path), None)
            self._matched[str(path)] = wanted
        return {**reply.data, "matched": wanted}


def _operation(edit: NotebookEdit, result: EditResult) -> dict[str, Any]:
    """The one cell operation the front end applies (labextension/src/index.js, ``applyEdit``)."""
    change = result.change
    if change.action == "deleted":
        return {"action": "delete", "cell_id": change.cell_id, "expect": change.before}
    cell = result.notebook.cells[change.index]
    shape = {"id": cell["id"], "cell_type": cell["cell_type"], "source": cell_source(cell),
             "metadata": dict(cell.get("metadata", {}))}
    if change.action == "inserted":
        return {"action": "insert", "after_id": edit.cell_id, "cell": shape}
    return {"action": "replace", "cell_id": change.cell_id, "expect": change.before, "cell": shape}
