"""``notebook_run``'s rules: which cells each scope chooses, that it asks like ``python``, and that a
running cell reports its outputs so far (what a live front end shows)."""

from __future__ import annotations

import asyncio
import threading

import nbformat
import pytest

from soba_notebook.agent.approval import Rule, needs_approval, suggested_rules
from soba_notebook.agent.cell_exec import PlainCells, run_cell
from soba_notebook.agent.notebook_doc import source_hash
from soba_notebook.agent.notebook_run import select_cells
from soba_notebook.errors import ToolError


def _nb() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("a = 1"),
                nbformat.v4.new_code_cell("b = a"), nbformat.v4.new_code_cell("c = b")]
    for cell, cid in zip(nb.cells, ("md", "a", "b", "c"), strict=True):
        cell["id"] = cid
    return nb


def test_stale_is_the_first_changed_or_never_run_cell_and_every_code_cell_below_it() -> None:
    nb = _nb()
    ran = {"a": {source_hash("a = 1")}, "b": {source_hash("b = a  # old")}, "c": {source_hash("c = b")}}
    assert select_cells(nb, "stale", [], ran) == ["b", "c"]
    assert select_cells(nb, "stale", [], {cid: {source_hash(src)} for cid, src in
                                          (("a", "a = 1"), ("b", "b = a"), ("c", "c = b"))}) == []
    assert select_cells(nb, "stale", [], {}) == ["a", "b", "c"]


def test_cells_keep_notebook_order_and_from_runs_to_the_end() -> None:
    nb = _nb()
    assert select_cells(nb, "cells", ["c", "a"], {}) == ["a", "c"]
    assert select_cells(nb, "from", ["b"], {}) == ["b", "c"]
    assert select_cells(nb, "all", [], {}) == ["a", "b", "c"]


def test_a_bad_id_a_markdown_cell_or_a_missing_id_is_refused_by_name() -> None:
    nb = _nb()
    with pytest.raises(ToolError, match="no cell with id 'zz'"):
        select_cells(nb, "cells", ["zz"], {})
    with pytest.raises(ToolError, match=r"md of .* is not a code cell"):
        select_cells(nb, "cells", ["md"], {})
    with pytest.raises(ToolError, match="scope 'from' needs cell_ids"):
        select_cells(nb, "from", [], {})


def test_notebook_run_asks_like_python_and_the_python_rule_covers_it() -> None:
    args = {"cell_ids": ["a"]}
    assert needs_approval("edits", "none", (), "notebook_run", args)
    assert needs_approval("ask", "bwrap", (), "notebook_run", args, sandbox_skips_approval=True)
    assert not needs_approval("never", "none", (), "notebook_run", args)
    assert suggested_rules("notebook_run", args) == (Rule("python", "*"),)
    assert not needs_approval("ask", "none", (Rule("python", "*"),), "notebook_run", args)


def test_a_running_cell_reports_its_outputs_so_far_before_it_ends() -> None:
    """``run_cell``'s ``progress`` sees what the cell printed while it still runs (the live front end
    shows it), then the run's own outputs are the whole; the cell waits on the progress to go on."""
    seen: list[list[dict[str, object]]] = []
    go_on = threading.Event()

    async def progress(outputs: list[dict[str, object]]) -> None:
        seen.append(outputs)
        if any("step 1" in str(o.get("text")) for o in outputs):
            go_on.set()

    source = ("print('step 1')\nif not go_on.wait(60):\n    raise TimeoutError('no progress was reported')\n"
              "print('step 2')")
    run = asyncio.run(run_cell(source, {"go_on": go_on}, PlainCells(), progress=progress, every=0.05))
    assert run.error is None, run.outputs
    assert seen[0] == [{"output_type": "stream", "name": "stdout", "text": "step 1\n"}], seen
    assert run.outputs == [{"output_type": "stream", "name": "stdout", "text": "step 1\nstep 2\n"}]
