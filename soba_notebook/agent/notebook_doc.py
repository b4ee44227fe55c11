"""A notebook as cells: parsing, cell ids, one edit, and the bytes written back. Pure, no I/O.

``notebook_edit`` must change one cell and leave every other byte of structure alone: the other
cells, their outputs, the notebook's metadata. So a notebook is parsed from its JSON without
nbformat's read path (whose validation would give id-less cells *random* ids), edited on a copy,
checked with ``nbformat.validate`` and written with ``nbformat.writes`` plus the final newline,
which is exactly what Jupyter Server writes: a notebook JupyterLab saved round-trips byte for byte
except for the edited cell.

Cell ids (nbformat 4.5): a notebook without them gets ids for reading that depend only on each
cell's position, type and source (:func:`assign_ids`), so two reads of the same file show the same
ids and an edit finds the cell the model read. They are saved, with ``nbformat_minor`` raised to
5, only with the next edit. An nbformat 3 notebook is read the same way: converted to nbformat 4
as Jupyter converts it on opening (heading cells become markdown), with derived ids rather than
the random ones the converter makes up, and the next edit saves it as nbformat 4.5 (what
JupyterLab does when it saves one). Refusing nbformat 3 instead would leave such a notebook
unreadable to the agent for the sake of a conversion Jupyter makes anyway.

A file that is JSON but not a notebook (a cell that is not an object, a source that is not text)
is refused with ``… is not a notebook: …`` naming the cell and what was found, before any code
that expects a notebook's shapes sees it.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import nbformat
from nbformat import NotebookNode

from ..errors import ToolError
from ..textclip import clip_line, head_tail

__all__ = ["CELL_TYPES", "CellChange", "EditAction", "EditResult", "NotebookEdit", "apply_edit", "assign_ids",
           "cell_source", "dumps", "new_notebook", "parse_notebook", "source_hash"]

EditAction = Literal["replace", "insert_after", "delete"]
CellType = Literal["code", "markdown", "raw"]
CELL_TYPES: tuple[CellType, ...] = ("code", "markdown", "raw")
#: Lines of one cell's diff kept (head + tail) in a tool result and in the cell's display.
DIFF_HEAD_LINES = 12
DIFF_TAIL_LINES = 12


def cell_source(cell: Any) -> str:
    """A cell's source as one string (on disk it may be a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source or "")


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _found(value: object) -> str:
    """What a JSON value is, in words, for a message: ``a number (1)``, ``a string ('x')``."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    kind = kinds.get(type(value), type(value).__name__)
    return kind if value is None or isinstance(value, (list, dict)) else f"{kind} ({clip_line(repr(value), 40)})"


def _check_cells(cells: list[Any], shown: str, types: tuple[str, ...] = CELL_TYPES, where: str = "") -> None:
    """Each cell an object with a known type and a text source, or a ToolError naming the cell."""
    for index, cell in enumerate(cells):
        name = f"{where}cell {index:,}"
        if not isinstance(cell, dict):
            raise ToolError(f"{shown} is not a notebook: {name} is {_found(cell)}, not an object")
        kind = cell.get("cell_type")
        if kind not in types:
            raise ToolError(f"{shown} is not a notebook: {name} has cell_type {_found(kind)}; known types: "
                            f"{', '.join(types)}")
        for key in ("source", "input"):
            text = cell.get(key, "")
            if not isinstance(text, str) and not (isinstance(text, list) and all(isinstance(t, str) for t in text)):
                raise ToolError(f"{shown} is not a notebook: {name}'s {key} is {_found(text)}, not text")
        outputs = cell.get("outputs", [])
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise ToolError(f"{shown} is not a notebook: {name}'s outputs are {_found(outputs)}, not a list of "
                            f"objects")
        if not isinstance(cell.get("metadata", {}), dict):
            raise ToolError(f"{shown} is not a notebook: {name}'s metadata is {_found(cell['metadata'])}, "
                            f"not an object")


def _v3_cells(data: dict[str, Any], shown: str) -> None:
    sheets = data.get("worksheets")
    if not isinstance(sheets, list):
        raise ToolError(f"{shown} is not a notebook: it has no cells list")
    for number, sheet in enumerate(sheets):
        if not isinstance(sheet, dict) or not isinstance(sheet.get("cells", []), list):
            raise ToolError(f"{shown} is not a notebook: worksheet {number:,} is {_found(sheet)}, not an object "
                            f"with a cells list")
        _check_cells(sheet.get("cells", []), shown, (*CELL_TYPES, "heading"), f"worksheet {number:,} ")


def parse_notebook(raw: bytes | str, shown: str) -> tuple[NotebookNode, int]:
    """The notebook in ``raw`` as nbformat 4 and the file's own major version, or a ToolError
    naming ``shown`` and what is wrong where (``… is not a notebook: cell 3 is a number (1) …``).

    nbformat 3 is converted as Jupyter converts it when it opens one; the ids the conversion makes
    up are random, so they are dropped for :func:`assign_ids` to derive stable ones (module text).
    """
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ToolError(f"{shown} is not a notebook: its JSON does not parse ({exc})") from None
    if not isinstance(data, dict):
        raise ToolError(f"{shown} is not a notebook: it is {_found(data)}, not an object with a cells list")
    major = data.get("nbformat")
    if not isinstance(major, int) or isinstance(major, bool) or not 3 <= major <= 4:
        raise ToolError(f"{shown} has nbformat {major!r}; the notebook tools read nbformat 4 (and convert 3)")
    if major == 3:
        _v3_cells(data, shown)
    elif not isinstance(data.get("cells"), list):
        raise ToolError(f"{shown} is not a notebook: it has no cells list")
    else:
        _check_cells(data["cells"], shown)
    if not isinstance(data.get("metadata", {}), dict):
        raise ToolError(f"{shown} is not a notebook: its metadata is {_found(data['metadata'])}, not an object")
    if major == 4:
        return nbformat.from_dict(data), major
    try:  # lines joined as nbformat's own v3 reader joins them, then converted as Jupyter converts
        node = nbformat.convert(nbformat.v3.to_notebook_json(data), 4)
    except Exception as exc:  # nbformat's converter raises whatever the content makes it raise
        raise ToolError(f"{shown} is not a notebook: its nbformat 3 content does not convert to nbformat 4 "
                        f"({type(exc).__name__}: {clip_line(str(exc), 200)})") from None
    for cell in node.cells:
        cell.pop("id", None)
    return node, major


def _made_id(index: int, cell: Any, taken: set[str]) -> str:
    seed = f"{index}\0{cell.get('cell_type')}\0{cell_source(cell)}"
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()
    for start in range(0, len(digest) - 8, 4):
        candidate = digest[start:start + 8]
        if candidate not in taken:
            return candidate
    return f"{digest[:8]}-{index}"


def assign_ids(nb: NotebookNode) -> int:
    """Give every cell without an id (or with a duplicate one) an id derived from its position,
    type and source, in place; the number of cells given one. The same file gives the same ids."""
    taken: set[str] = set()
    added = 0
    for index, cell in enumerate(nb.cells):
        current = cell.get("id")
        if isinstance(current, str) and current and current not in taken:
            taken.add(current)
            continue
        cell["id"] = _made_id(index, cell, taken)
        taken.add(cell["id"])
        added += 1
    return added


def new_notebook() -> NotebookNode:
    """An empty nbformat 4.5 notebook for Python (what ``notebook_edit`` creates for a new path)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


@dataclass(frozen=True, slots=True)
class NotebookEdit:
    """One ``notebook_edit`` call: ``cell_id`` ``None`` with ``insert_after`` inserts at the top."""

    action: EditAction
    cell_id: str | None
    source: str | None = None
    cell_type: CellType | None = None


@dataclass(frozen=True, slots=True)
class CellChange:
    """What one edit did to one cell: ``action`` ``replaced``/``inserted``/``deleted``, the source
    before and after (``""`` for a cell that did not exist), and whether outputs were cleared."""

    cell_id: str
    action: Literal["replaced", "inserted", "deleted"]
    cell_type: str
    before: str
    after: str
    index: int
    outputs_cleared: int = 0
    type_before: str | None = None

    def diff(self) -> str:
        """A short unified diff of the source (head + tail when long), without file headers."""
        lines = list(difflib.unified_diff(self.before.splitlines(), self.after.splitlines(), lineterm="", n=1))
        body = "\n".join(line for line in lines[2:]) if lines else "(source unchanged)"
        return head_tail(body, head_lines=DIFF_HEAD_LINES, tail_lines=DIFF_TAIL_LINES)

    def headline(self, shown: str) -> str:
        same = self.type_before in (None, self.cell_type)
        kind = self.cell_type if same else f"{self.type_before} → {self.cell_type}"
        where = f"cell {self.cell_id} ({kind}, position {self.index + 1:,})"
        text = f"{self.action} {where} in {shown}"
        if self.outputs_cleared:
            text += f"; its {self.outputs_cleared:,} output{'s' if self.outputs_cleared > 1 else ''} cleared"
        return text

    def to_json(self) -> dict[str, Any]:
        """The form carried in tool results and ``tool_end`` events (the cell's diff display)."""
        return {"cell_id": self.cell_id, "action": self.action, "cell_type": self.cell_type,
                "before": head_tail(self.before), "after": head_tail(self.after), "index": self.index,
                "outputs_cleared": self.outputs_cleared, "diff": self.diff()}


@dataclass(frozen=True, slots=True)
class EditResult:
    """The notebook after an edit (a new object; the input is untouched) and what changed."""

    notebook: NotebookNode
    change: CellChange


def _index(nb: NotebookNode, cell_id: str, shown: str) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.get("id") == cell_id:
            return index
    ids = [str(c.get("id")) for c in nb.cells]
    listed = ", ".join(ids[:30]) + (f" (+{len(ids) - 30:,} more)" if len(ids) > 30 else "")
    raise ToolError(f"no cell with id {cell_id!r} in {shown}; its cell ids: {listed or 'none (it has no cells)'}. "
                    f"notebook_read shows them")


def _new_cell(cell_type: CellType, source: str) -> NotebookNode:
    if cell_type == "markdown":
        return nbformat.v4.new_markdown_cell(source)
    if cell_type == "raw":
        return nbformat.v4.new_raw_cell(source)
    return nbformat.v4.new_code_cell(source)


def _retyped(cell: NotebookNode, cell_type: CellType, source: str) -> NotebookNode:
    """``cell`` as ``cell_type`` with ``source``: id and metadata kept, fields of the old type dropped."""
    fresh = _new_cell(cell_type, source)
    fresh["id"] = cell["id"]
    fresh["metadata"] = cell.get("metadata", {})
    if cell_type != "code" and "attachments" in cell:
        fresh["attachments"] = cell["attachments"]
    return fresh


def apply_edit(nb: NotebookNode, edit: NotebookEdit, shown: str = "the notebook") -> EditResult:
    """Apply ``edit`` to a copy of ``nb`` (whose cells all have ids: :func:`assign_ids`).

    ``replace`` sets the source (and the type, when given); a code cell's outputs and execution
    count are cleared. ``insert_after`` adds a new cell (default: code) after ``cell_id`` (``None``:
    at the top). ``delete`` removes the cell. Every other cell is left as it was.
    """
    out = copy.copy(nb)
    out["cells"] = list(nb.cells)  # the untouched cells are the very same objects, never re-made
    if edit.action == "insert_after":
        if edit.source is None:
            raise ToolError("insert_after needs source: the new cell's text")
        at = 0 if edit.cell_id is None else _index(nb, edit.cell_id, shown) + 1
        cell = _new_cell(edit.cell_type or "code", edit.source)
        taken = {str(c.get("id")) for c in nb.cells}
        while cell["id"] in taken:
            cell = _new_cell(edit.cell_type or "code", edit.source)
        out["cells"].insert(at, cell)
        return EditResult(out, CellChange(cell["id"], "inserted", cell["cell_type"], "", edit.source, at))
    if edit.cell_id is None:
        raise ToolError(f"{edit.action} needs cell_id: the id of the cell to {edit.action} (notebook_read shows ids)")
    at = _index(nb, edit.cell_id, shown)
    old = nb.cells[at]
    before, old_type = cell_source(old), str(old.get("cell_type"))
    if edit.action == "delete":
        del out["cells"][at]
        return EditResult(out, CellChange(edit.cell_id, "deleted", old_type, before, "", at))
    if edit.source is None:
        raise ToolError("replace needs source: the cell's new text")
    new_type = edit.cell_type or old_type
    if edit.source == before and new_type == old_type:
        raise ToolError(f"the new source is identical to cell {edit.cell_id}'s; nothing to change in {shown}")
    cell = copy.deepcopy(old) if new_type == old_type else _retyped(old, new_type, edit.source)  # type: ignore[arg-type]
    cell["source"] = edit.source
    cleared = len(old.get("outputs", ())) if old_type == "code" else 0
    if new_type == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    out["cells"][at] = cell
    return EditResult(out, CellChange(edit.cell_id, "replaced", new_type, before, edit.source, at, cleared,
                                      old_type))


def dumps(nb: NotebookNode, shown: str = "the notebook") -> str:
    """The notebook as Jupyter writes it (``nbformat.writes`` + final newline), after
    ``nbformat.validate``; ids require nbformat 4.5, so an older minor version is raised to 5."""
    if nb.get("nbformat_minor", 0) < 5:
        nb["nbformat_minor"] = 5
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolError(f"the edit would leave {shown} an invalid notebook ({first}); nothing was written") from None
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"
