"""What the notebook tools know beyond the workspace: the seams a front end fills in.

The agent layer never imports IPython, yet ``notebook_read`` without a path means "the notebook
this kernel runs", and "why does cell 5 fail" needs the kernel's own record of what ran. So the
notebook layer injects plain values and callables into :class:`NotebookAccess`, which every
:class:`~soba_notebook.agent.tools.ToolContext` carries (a headless agent keeps the empty default):

* ``kernel_notebook()`` — the path Jupyter Server gave the kernel (``JPY_SESSION_NAME``, IPython's
  ``__session__``), or ``None`` when unknown (terminal IPython, some front ends);
* ``kernel_runs()`` — the cells executed in this kernel, oldest first (:class:`KernelRun`: the
  execution count, the notebook cell id the front end sent, the outcome and a failure's traceback);
* ``documents`` — a :class:`NotebookDocuments` for notebooks open in a live front end (JupyterLab):
  ``read`` returns the open document, ``apply`` changes it in place; either returns ``None`` when
  that notebook is not open there, and the tools then use the file. The file path is the default.
  ``show_run`` puts a cell ``notebook_run`` ran (its count and outputs) into the open document;
* ``cells`` — how ``notebook_run`` runs a cell in this kernel (:class:`.cell_exec.CellKernel`: the
  notebook layer lends IPython's transformer, execution count and display publisher; a headless
  agent runs plain Python), and ``ran`` each notebook's cells the agent ran, with the source hash
  they ran with (``notebook_run``'s ``stale``);
* ``reads`` — what the agent last read of each notebook in this session (:class:`ReadStamp`), so
  ``notebook_edit`` refuses to write over a file that changed since (the model re-reads first).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .cell_exec import CellKernel, PlainCells

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from .notebook_doc import EditResult, NotebookEdit

__all__ = ["KernelRun", "NotebookAccess", "NotebookDocuments", "ReadStamp", "kernel_notebook_path"]


@dataclass(frozen=True, slots=True)
class KernelRun:
    """One cell executed in this kernel: ``number`` its execution count, ``cell_id`` the notebook
    cell id the front end sent with it (``None`` from a terminal), ``outcome`` ``"ok"`` or
    ``"Type: message"``, ``traceback`` a failure's plain-text traceback (``""`` otherwise)."""

    number: int | None
    cell_id: str | None
    source: str
    outcome: str
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class ReadStamp:
    """A notebook as the agent last read it: the file's size, mtime and SHA-256 (``live``: it was
    read from the open document, whose ``cells`` hashes are then the reference), and each cell
    id with a hash of its source."""

    size: int
    mtime_ns: int
    sha256: str
    cells: Mapping[str, str] = field(default_factory=dict)
    live: bool = False


class NotebookDocuments(Protocol):
    """Notebooks open in a live front end. ``None`` from either method: not open there (use the file).

    ``apply`` receives the edit and the stamp of the agent's last read (``None``: never read) and
    returns what changed; :func:`soba_notebook.agent.notebook_doc.apply_edit` computes that on any
    ``NotebookNode``, so an implementation can apply it to the open document's model.
    """

    def read(self, path: Path) -> NotebookNode | None: ...

    def apply(self, path: Path, edit: NotebookEdit, seen: ReadStamp | None) -> EditResult | None: ...

    def fallback_note(self, path: Path) -> str | None:
        """After a ``None``: why the file was used, once per reason (the tool result shows it)."""
        ...

    def show_run(self, path: Path, cell_id: str, number: int | None, outputs: Sequence[Mapping[str, Any]]) -> str:
        """Show in the open notebook that cell ``cell_id`` runs (``number`` ``None``: ``[*]`` and its
        nbformat outputs so far, none when it starts) or ran (its execution count and outputs); ``""``
        when shown, else why not (the cell ran in the kernel all the same)."""
        ...


@dataclass(slots=True)
class NotebookAccess:
    """The notebook seams of one agent's tool context (module docstring); all optional."""

    kernel_notebook: Callable[[], str | None] | None = None
    kernel_runs: Callable[[], Sequence[KernelRun]] | None = None
    documents: NotebookDocuments | None = None
    reads: dict[str, ReadStamp] = field(default_factory=dict)
    cells: CellKernel = field(default_factory=PlainCells)
    ran: dict[str, dict[str, str]] = field(default_factory=dict)


def kernel_notebook_path(raw: str | None, cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The kernel's notebook as a path, from what Jupyter Server set (``JPY_SESSION_NAME``).

    The server sets the notebook's full path when it knows the kernel's directory, else its path
    relative to the server root; a relative one is tried against the kernel's directory, then by
    its file name there (the kernel starts in the notebook's directory). ``None`` when unknown.
    """
    if not raw or not raw.strip():
        return None
    path = Path(raw.strip()).expanduser()
    if path.is_absolute():
        return path
    base = Path(cwd or os.getcwd())
    for candidate in (base / path, base / path.name):
        if candidate.is_file():
            return candidate
    return base / path
