"""A notebook as text a model can use: each cell's id, type, source, execution count and outputs.

What ``notebook_read`` (and ``read_file`` on an ``.ipynb``) returns. Outputs become text: stream
output and ``text/plain`` results as they are, errors as ``ename: evalue`` with the traceback's
head and tail (ANSI colours stripped), images and other rich outputs as one line
(``[image/png 640×480]``, the size read from the PNG header); a DataFrame whose output metadata
holds the kernel's table facts (:mod:`.table_facts`) is headed by its shape and dtypes. Every
source and output is clipped head + tail with the ``… N lines omitted …`` marker
(:func:`soba_notebook.textclip.head_tail`), an over-long line (the last one too) around a
``… N characters omitted …`` marker, so a notebook with large outputs reads small; the tool layer
bounds the whole result on top.

When the notebook is the kernel's own, the cells that ran in this kernel (:class:`KernelRun`) are
shown too: each cell's runs by execution count, a failure's traceback as the kernel saw it (the
file may not be saved since), and the order of every run at the end.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from nbformat import NotebookNode

from ..textclip import clip_line, head_tail
from .notebook_access import KernelRun
from .notebook_doc import cell_source
from .table_facts import table_facts

__all__ = ["image_size", "output_text", "render_cells", "strip_ansi"]

SOURCE_HEAD, SOURCE_TAIL = 40, 20
OUTPUT_HEAD, OUTPUT_TAIL = 8, 12
TRACE_HEAD, TRACE_TAIL = 4, 10
LINE_CHARS = 400
#: Kernel runs listed at the end at most (the newest).
MAX_RUNS = 60
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_RICH_NAMES = {"application/vnd.jupyter.widget-view+json": "widget"}


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor escapes (IPython colours its tracebacks)."""
    return _ANSI.sub("", text)


def _clip(text: str, head: int, tail: int) -> str:
    return head_tail(text.rstrip("\n"), head_lines=head, tail_lines=tail, line_chars=LINE_CHARS,
                     last_whole=False) if text else text


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def image_size(mime: str, data: Any) -> tuple[int, int] | None:
    """Width and height of a base64 PNG or GIF from its header (the first few bytes only)."""
    text = "".join(_joined(data).split()[:4])[:64]
    try:
        head = base64.b64decode(text[: len(text) // 4 * 4], validate=False)
    except (binascii.Error, ValueError):
        return None
    if mime == "image/png" and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if mime == "image/gif" and head[:4] == b"GIF8" and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    return None


def _rich_line(mime: str, data: Any) -> str:
    size = image_size(mime, data) if mime.startswith("image/") else None
    if size is not None:
        return f"[{mime} {size[0]}×{size[1]}]"
    if mime in _RICH_NAMES:
        return f"[{_RICH_NAMES[mime]}]"
    if mime.startswith("text/"):
        return f"[{mime} {len(_joined(data)):,} characters]"
    return f"[{mime}]"


def output_text(output: Mapping[str, Any]) -> str:
    """One output as text (module docstring): stream, result, error or a one-line rich output."""
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name", "stdout")
        return f"[{name}]\n" + _clip(strip_ansi(_joined(output.get("text"))), OUTPUT_HEAD, OUTPUT_TAIL)
    if kind == "error":
        head = f"{output.get('ename', 'Error')}: {clip_line(str(output.get('evalue', '')), LINE_CHARS)}"
        trace = strip_ansi("\n".join(str(line) for line in output.get("traceback") or ()))
        return f"[error] {head}" + (f"\n{_clip(trace, TRACE_HEAD, TRACE_TAIL)}" if trace.strip() else "")
    data = output.get("data") or {}
    label = "[result]" if kind == "execute_result" else "[display]"
    dims, dtypes = table_facts(output.get("metadata"))
    if dims is not None:
        typed = f" dtypes: {', '.join(dtypes)}" if dtypes else ""
        label += f" [table {dims[0]:,} rows × {dims[1]:,} columns]{typed}"
    rich = [_rich_line(mime, value) for mime, value in data.items() if mime != "text/plain"
            and not (mime == "text/html" and "text/plain" in data)]
    plain = _clip(strip_ansi(_joined(data.get("text/plain"))), OUTPUT_HEAD, OUTPUT_TAIL) if "text/plain" in data else ""
    if rich and plain and "\n" not in plain:
        return f"{label} {' '.join(rich)} {plain}"
    if rich:
        return f"{label} {' '.join(rich)}" + (f"\n{plain}" if plain else "")
    return f"{label}\n{plain}" if "\n" in plain else f"{label} {plain}"


def _runs_by_cell(runs: Sequence[KernelRun]) -> dict[str, list[KernelRun]]:
    out: dict[str, list[KernelRun]] = {}
    for run in runs:
        if run.cell_id:
            out.setdefault(run.cell_id, []).append(run)
    return out


def _count(number: int | None) -> str:
    return f"[{number}]" if number is not None else "[?]"


def _kernel_lines(cell: Any, runs: list[KernelRun]) -> list[str]:
    shown = ", ".join(f"{_count(r.number)} {clip_line(r.outcome, 120)}" for r in runs[-5:])
    more = f" (+{len(runs) - 5:,} earlier)" if len(runs) > 5 else ""
    lines = [f"ran in this kernel: {shown}{more}"]
    last = runs[-1]
    saved = cell.get("execution_count")
    if last.number is not None and saved != last.number:
        lines.append(f"(the file shows {_count(saved)}: it was not saved since the kernel ran this cell)")
    if last.traceback.strip():
        lines.append(f"kernel traceback of {_count(last.number)}:\n" + _clip(strip_ansi(last.traceback), TRACE_HEAD,
                                                                              TRACE_TAIL))
    return lines


def _cell_text(cell: Any, runs: list[KernelRun] | None) -> str:
    kind = str(cell.get("cell_type"))
    header = f"## cell {cell.get('id')} · {kind}"
    if kind == "code":
        header += f" · {_count(cell.get('execution_count'))}" if cell.get("execution_count") is not None \
            else " · not run"
    source = cell_source(cell)
    parts = [header, _clip(source, SOURCE_HEAD, SOURCE_TAIL) if source.strip() else "(empty)"]
    outputs = cell.get("outputs") or ()
    if outputs:
        parts.append(f"outputs ({len(outputs):,}):")
        parts.extend(output_text(o) for o in outputs)
    for name in sorted(cell.get("attachments") or {}):
        parts.append(f"[attachment {name}]")
    if runs:
        parts.extend(_kernel_lines(cell, runs))
    return "\n".join(parts)


def _history(runs: Sequence[KernelRun]) -> str:
    shown = runs[-MAX_RUNS:]
    lines = [f"This kernel ran {len(runs):,} cell{'s' if len(runs) != 1 else ''}, oldest first"
             + (f" (the last {len(shown):,})" if len(shown) < len(runs) else "") + ":"]
    for run in shown:
        first = next((line for line in run.source.splitlines() if line.strip()), "")
        where = f"cell {run.cell_id}" if run.cell_id else "no cell id"
        lines.append(f"{_count(run.number)} {where} → {clip_line(run.outcome, 120)} · {clip_line(first.strip(), 60)}")
    return "\n".join(lines)


def render_cells(nb: NotebookNode, shown: str, *, cell_ids: Collection[str] | None = None,
                 runs: Sequence[KernelRun] | None = None, notes: Iterable[str] = ()) -> str:
    """The notebook (or only ``cell_ids``) as text: a header line, ``notes``, then one block per cell,
    and, with ``runs``, the kernel's run order at the end."""
    cells = list(nb.cells)
    kinds: dict[str, int] = {}
    for cell in cells:
        kinds[str(cell.get("cell_type"))] = kinds.get(str(cell.get("cell_type")), 0) + 1
    counts = ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))
    header = [f"{shown}: {len(cells):,} cells ({counts or 'empty'}); nbformat {nb.get('nbformat')}."
              f"{nb.get('nbformat_minor')}"]
    header.extend(notes)
    by_cell = _runs_by_cell(runs or ())
    blocks: list[str] = []
    if cell_ids is not None:
        wanted = set(cell_ids)
        missing = [c for c in cell_ids if c not in {str(cell.get("id")) for cell in cells}]
        if missing:
            header.append(f"no cell with id {', '.join(missing)} (the ids are in a full notebook_read)")
        cells = [cell for cell in cells if str(cell.get("id")) in wanted]
    blocks.extend(_cell_text(cell, by_cell.get(str(cell.get("id")))) for cell in cells)
    if runs:
        blocks.append(_history(runs))
    return "\n\n".join(["\n".join(header), *blocks])
