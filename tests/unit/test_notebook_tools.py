"""notebook_read / notebook_edit on real .ipynb files: cells by id, outputs as text, edits that
leave every other cell as it was, stale-file refusal, confinement, id normalisation, the file
tools' notebook rule, and the facts compaction keeps of notebook work.

Notebooks are written with nbformat, as Jupyter Server writes them, into ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
import pytest

from soba_notebook.agent.notebook_access import KernelRun
from soba_notebook.agent.notebook_view import render_cells
from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools
from soba_notebook.compaction.extract import extract_facts
from soba_notebook.config import ToolsConfig
from soba_notebook.notebook import cellview
from soba_notebook.session.entries import ToolCall, assistant_message, tool_result


def run(name: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    return asyncio.run(asyncio.wait_for(default_tools(ctx.config).run(name, args, ctx), 120))


def png(width: int, height: int, body: int = 64) -> str:
    """A base64 PNG whose header says ``width`` x ``height`` (the body is filler of ``body`` bytes)."""
    raw = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02\0\0\0"
    return base64.b64encode(raw + os.urandom(body)).decode()


def sample() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["custom"] = {"keep": [1, 2, 3]}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Sales\nmonthly figures"),
        nbformat.v4.new_code_cell("import pandas as pd\ndf = pd.read_csv('sales.csv')", execution_count=1),
        nbformat.v4.new_code_cell("print('rows', len(df))\ndf.total / 0", execution_count=2, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="rows 12\n"),
            nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[
                "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
                *[f"\x1b[0;32mframe {i}\x1b[0m" for i in range(40)],
                "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"])]),
        nbformat.v4.new_code_cell("df.plot()", execution_count=3, outputs=[
            nbformat.v4.new_output("display_data", data={"image/png": png(640, 480),
                                                         "text/plain": "<Figure size 640x480 with 1 Axes>"}),
            nbformat.v4.new_output("execute_result", execution_count=3,
                                   data={"text/html": "<table>" + "<tr><td>1</td></tr>" * 500 + "</table>"})]),
    ]
    return nb


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def write(path: Path, nb: nbformat.NotebookNode) -> None:
    nbformat.write(nb, path)  # exactly what Jupyter Server writes


def cells_json(path: Path) -> dict[str, Any]:
    """The file's cells as raw JSON, by id (the on-disk form, not nbformat's reading of it)."""
    return {cell["id"]: cell for cell in json.loads(path.read_text())["cells"]}


def test_notebook_read_shows_cells_by_id_with_outputs_as_text_tracebacks_clipped_and_images_as_one_line(
        ws: Path) -> None:
    nb = sample()
    write(ws / "sales.ipynb", nb)
    out = run("notebook_read", {"path": "sales.ipynb"}, ToolContext(ws))
    assert not out.is_error, out.content
    text = out.content
    for cell in nb.cells:
        assert f"## cell {cell.id} · {cell.cell_type}" in text
    assert "## cell " + nb.cells[2].id + " · code · [2]" in text
    assert "[stdout]\nrows 12" in text
    assert "[error] ZeroDivisionError: division by zero" in text
    assert "\x1b[" not in text  # ANSI colours stripped
    assert "frame 0" in text and "frame 39" in text and "frame 20" not in text  # head and tail of the traceback
    assert "lines omitted" in text
    assert "[image/png 640×480] <Figure size 640x480 with 1 Axes>" in text
    assert "[text/html 9,515 characters]" in text and "<td>" not in text
    assert out.data["files_changed"]["read"] == ["sales.ipynb"]

    only = run("notebook_read", {"path": "sales.ipynb", "cell_ids": [nb.cells[3].id]}, ToolContext(ws)).content
    assert nb.cells[3].id in only and nb.cells[0].id not in only


def test_a_300_cell_notebook_with_large_image_outputs_reads_within_a_bounded_size(ws: Path) -> None:
    nb = nbformat.v4.new_notebook()
    big = png(1920, 1080, body=300_000)
    nb.cells = [nbformat.v4.new_code_cell(f"plot({i})\n" + "x = 1\n" * 80, execution_count=i + 1, outputs=[
        nbformat.v4.new_output("display_data", data={"image/png": big, "text/plain": "<Figure>"}),
        nbformat.v4.new_output("stream", name="stdout", text="line\n" * 2_000)]) for i in range(300)]
    write(ws / "big.ipynb", nb)
    file_chars = (ws / "big.ipynb").stat().st_size
    assert file_chars > 100_000_000

    config = ToolsConfig()
    out = run("notebook_read", {"path": "big.ipynb"}, ToolContext(ws, config))
    assert not out.is_error
    assert len(out.content) <= config.max_output_chars + 500  # what the model sees, whatever the notebook
    rendered = render_cells(nbformat.reads((ws / "big.ipynb").read_text(), as_version=4), "big.ipynb")
    assert len(rendered) < 300 * 3_000  # every cell clipped: no image bytes, no 2,000-line outputs
    assert rendered.count("[image/png 1920×1080]") == 300
    assert out.data.get("spill_path")  # the whole rendering is kept for reading in pieces


def test_replace_clears_a_code_cells_outputs_and_every_other_cell_and_the_metadata_stay_byte_identical(
        ws: Path) -> None:
    path = ws / "sales.ipynb"
    write(path, sample())
    before_bytes = path.read_text()
    before = cells_json(path)
    ids = list(before)
    ctx = ToolContext(ws)
    run("notebook_read", {"path": "sales.ipynb"}, ctx)
    out = run("notebook_edit", {"path": "sales.ipynb", "cell_id": ids[2], "action": "replace",
                                "source": "print('rows', len(df))\ndf.total / 2"}, ctx)
    assert not out.is_error, out.content
    assert f"replaced cell {ids[2]} (code, position 3) in sales.ipynb; its 2 outputs cleared" in out.content
    assert "-df.total / 0\n+df.total / 2" in out.content
    after = cells_json(path)
    assert list(after) == ids
    for cid in (ids[0], ids[1], ids[3]):
        assert after[cid] == before[cid]  # outputs of untouched cells identical after the round trip
    assert after[ids[2]]["outputs"] == [] and after[ids[2]]["execution_count"] is None
    assert after[ids[2]]["metadata"] == before[ids[2]]["metadata"]
    assert json.loads(path.read_text())["metadata"] == json.loads(before_bytes)["metadata"]
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    # byte for byte, the file is the one Jupyter would write with only that cell changed
    expected = json.loads(before_bytes)
    expected["cells"][2].update(source=["print('rows', len(df))\n", "df.total / 2"], outputs=[], execution_count=None)
    assert path.read_text() == json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert out.data["files_changed"] == {"created": [], "modified": [f"sales.ipynb#{ids[2]}"], "deleted": []}


def test_insert_after_null_inserts_at_the_top_after_an_id_below_it_and_delete_removes_the_cell(ws: Path) -> None:
    path = ws / "sales.ipynb"
    write(path, sample())
    ids = list(cells_json(path))
    ctx = ToolContext(ws)
    run("notebook_read", {"path": "sales.ipynb"}, ctx)
    top = run("notebook_edit", {"path": "sales.ipynb", "cell_id": None, "action": "insert_after",
                                "source": "# Setup", "cell_type": "markdown"}, ctx)
    assert not top.is_error, top.content
    below = run("notebook_edit", {"path": "sales.ipynb", "cell_id": ids[3], "action": "insert_after",
                                  "source": "df.describe()"}, ctx)  # no re-read: the tool's own write is known
    gone = run("notebook_edit", {"path": "sales.ipynb", "cell_id": ids[1], "action": "delete"}, ctx)
    assert not below.is_error and not gone.is_error, (below.content, gone.content)
    cells = json.loads(path.read_text())["cells"]
    new_top, new_below = top.data["cell_id"], below.data["cell_id"]
    assert [c["id"] for c in cells] == [new_top, ids[0], ids[2], ids[3], new_below]
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"] == ["# Setup"]
    assert cells[4]["cell_type"] == "code" and cells[4]["outputs"] == []
    assert below.data["files_changed"]["created"] == [f"sales.ipynb#{new_below}"]
    assert gone.data["files_changed"]["deleted"] == [f"sales.ipynb#{ids[1]}"]
    assert "deleted cell" in gone.content and "-import pandas as pd" in gone.content
    missing = run("notebook_edit", {"path": "sales.ipynb", "cell_id": "nope", "action": "delete"}, ctx)
    assert missing.is_error and "no cell with id 'nope'" in missing.content and new_top in missing.content


def test_an_edit_of_a_notebook_changed_since_it_was_read_is_refused_and_the_file_left_alone(ws: Path) -> None:
    path = ws / "sales.ipynb"
    nb = sample()
    write(path, nb)
    ctx = ToolContext(ws)
    never_read = run("notebook_edit", {"path": "sales.ipynb", "cell_id": nb.cells[1].id, "action": "delete"}, ctx)
    assert never_read.is_error and "read sales.ipynb with notebook_read before editing" in never_read.content
    run("notebook_read", {"path": "sales.ipynb"}, ctx)
    nb.cells[0].source = "# Sales (edited by the user in JupyterLab)"
    write(path, nb)  # JupyterLab saved meanwhile
    saved = path.read_bytes()
    stale = run("notebook_edit", {"path": "sales.ipynb", "cell_id": nb.cells[1].id, "action": "delete"}, ctx)
    assert stale.is_error and "changed since you last read it" in stale.content
    assert "nothing was written" in stale.content
    assert path.read_bytes() == saved
    run("notebook_read", {"path": "sales.ipynb"}, ctx)  # the model re-reads
    again = run("notebook_edit", {"path": "sales.ipynb", "cell_id": nb.cells[1].id, "action": "delete"}, ctx)
    assert not again.is_error
    assert json.loads(path.read_text())["cells"][0]["source"] == ["# Sales (edited by the user in JupyterLab)"]


def test_notebooks_outside_the_workspace_or_under_soba_are_refused_for_reading_and_editing(
        ws: Path, tmp_path: Path) -> None:
    write(tmp_path / "outside.ipynb", sample())
    (ws / ".soba").mkdir()
    write(ws / ".soba" / "state.ipynb", sample())
    (ws / "link.ipynb").symlink_to(tmp_path / "outside.ipynb")
    outside, state = (tmp_path / "outside.ipynb").read_bytes(), (ws / ".soba" / "state.ipynb").read_bytes()
    ctx = ToolContext(ws)
    for path in (str(tmp_path / "outside.ipynb"), "../outside.ipynb", ".soba/state.ipynb", "link.ipynb"):
        read = run("notebook_read", {"path": path}, ctx)
        assert read.is_error, path
        edit = run("notebook_edit", {"path": path, "cell_id": None, "action": "insert_after", "source": "x"}, ctx)
        assert edit.is_error, path
        also = run("read_file", {"path": path}, ctx)
        assert also.is_error, path
    assert (tmp_path / "outside.ipynb").read_bytes() == outside
    assert (ws / ".soba" / "state.ipynb").read_bytes() == state


def test_a_notebook_without_cell_ids_reads_with_stable_ids_and_saves_them_normalised_only_on_the_next_edit(
        ws: Path) -> None:
    nb = sample()
    raw = json.loads(nbformat.writes(nb))
    raw["nbformat_minor"] = 4
    for cell in raw["cells"]:
        del cell["id"]
    path = ws / "old.ipynb"
    path.write_text(json.dumps(raw, indent=1))
    original = path.read_bytes()
    ctx = ToolContext(ws)
    first = run("notebook_read", {"path": "old.ipynb"}, ctx)
    second = run("notebook_read", {"path": "old.ipynb"}, ToolContext(ws))
    assert first.content == second.content and "4 of its cells have no id" in first.content
    assert path.read_bytes() == original  # reading never writes
    ids = [line.split()[2] for line in first.content.splitlines() if line.startswith("## cell ")]
    assert len(set(ids)) == 4
    out = run("notebook_edit", {"path": "old.ipynb", "cell_id": ids[1], "action": "replace", "source": "import pandas"},
              ctx)
    assert not out.is_error, out.content
    saved = json.loads(path.read_text())
    assert saved["nbformat_minor"] == 5 and [c["id"] for c in saved["cells"]] == ids
    assert saved["cells"][2]["outputs"] == raw["cells"][2]["outputs"]
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))


def test_read_file_shows_a_notebooks_cells_and_write_file_and_edit_file_refuse_one_pointing_to_notebook_edit(
        ws: Path) -> None:
    nb = sample()
    write(ws / "sales.ipynb", nb)
    saved = (ws / "sales.ipynb").read_bytes()
    ctx = ToolContext(ws)
    shown = run("read_file", {"path": "sales.ipynb"}, ctx)
    assert f"## cell {nb.cells[1].id} · code" in shown.content and '"cell_type"' not in shown.content
    for name, args in (("edit_file", {"old": "Sales", "new": "Costs"}), ("write_file", {"content": "{}"})):
        refused = run(name, {"path": "sales.ipynb", **args}, ctx)
        assert refused.is_error and "use notebook_edit" in refused.content, refused.content
    assert (ws / "sales.ipynb").read_bytes() == saved
    assert not run("write_file", {"path": "notes.txt", "content": "x"}, ctx).is_error  # other files as before


def test_notebook_edit_creates_a_new_notebook_and_is_removed_with_allow_write_false(ws: Path) -> None:
    ctx = ToolContext(ws)
    made = run("notebook_edit", {"path": "new/analysis.ipynb", "action": "insert_after", "source": "1 + 1"}, ctx)
    assert not made.is_error, made.content
    nb = nbformat.read(ws / "new" / "analysis.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells] == ["1 + 1"]
    locked = ToolsConfig(allow_write=False)
    names = default_tools(locked).names()
    assert "notebook_read" in names and "notebook_edit" not in names
    refused = run("notebook_edit", {"path": "new/analysis.ipynb", "action": "delete", "cell_id": nb.cells[0].id},
                  ToolContext(ws, locked))
    assert refused.is_error and len(nbformat.read(ws / "new" / "analysis.ipynb", as_version=4).cells) == 1


def test_without_a_path_the_kernels_own_notebook_is_read_with_its_runs_or_the_tool_asks_for_a_path(
        ws: Path) -> None:
    nb = sample()
    write(ws / "sales.ipynb", nb)
    ctx = ToolContext(ws)
    unknown = run("notebook_read", {}, ctx)
    assert unknown.is_error and "pass path" in unknown.content
    runs = [KernelRun(1, nb.cells[1].id, "import pandas as pd", "ok"),
            KernelRun(2, None, "x = 1", "ok"),
            KernelRun(5, nb.cells[2].id, "df.total / 0", "ZeroDivisionError: division by zero",
                      'Traceback (most recent call last):\n  File "<cell>", line 2\n'
                      "ZeroDivisionError: division by zero\n")]
    ctx.notebooks.kernel_notebook = lambda: str(ws / "sales.ipynb")
    ctx.notebooks.kernel_runs = lambda: runs
    own = run("notebook_read", {}, ctx)
    assert not own.is_error, own.content
    assert "kernel's own notebook" in own.content
    assert "ran in this kernel: [5] ZeroDivisionError: division by zero" in own.content
    assert "(the file shows [2]: it was not saved since the kernel ran this cell)" in own.content
    assert "kernel traceback of [5]:" in own.content and 'File "<cell>", line 2' in own.content
    assert own.content.index("[1] cell " + nb.cells[1].id) < own.content.index("[2] no cell id") \
        < own.content.index("[5] cell " + nb.cells[2].id)
    other = run("notebook_read", {"path": "sales.ipynb"}, ctx)
    assert "ran in this kernel" in other.content  # the same notebook named by path is still the kernel's own
    edited = run("notebook_edit", {"cell_id": nb.cells[3].id, "action": "insert_after", "source": "df.head()"}, ctx)
    assert not edited.is_error and len(cells_json(ws / "sales.ipynb")) == 5


def test_capsule_facts_record_notebook_edits_by_cell_and_reads_from_results_never_from_the_models_words(
        ws: Path) -> None:
    nb = sample()
    write(ws / "sales.ipynb", nb)
    ctx = ToolContext(ws)
    read = run("notebook_read", {"path": "sales.ipynb"}, ctx)
    edit = run("notebook_edit", {"path": "sales.ipynb", "cell_id": nb.cells[2].id, "action": "replace",
                                 "source": "df.total / 2"}, ctx)
    failed = run("notebook_edit", {"path": "sales.ipynb", "cell_id": "missing", "action": "delete"}, ctx)
    entries = [
        assistant_message("I also fixed report.ipynb#zz99 earlier.", [ToolCall("r1", "notebook_read", {})]),
        tool_result("r1", "notebook_read", read.content, files_changed=read.data["files_changed"]),
        assistant_message("", [ToolCall("e1", "notebook_edit", {"cell_id": nb.cells[2].id, "action": "replace",
                                                               "source": "df.total / 2"})]),
        tool_result("e1", "notebook_edit", edit.content, files_changed=edit.data["files_changed"]),
        assistant_message("", [ToolCall("e2", "notebook_edit", {"cell_id": "missing", "action": "delete"})]),
        tool_result("e2", "notebook_edit", failed.content, is_error=True),
    ]
    facts = extract_facts(entries)
    assert facts.files_read == ("sales.ipynb",)
    assert facts.files_modified == (f"sales.ipynb#{nb.cells[2].id}",)


def test_views_transcript_shows_notebook_calls_and_their_observed_cells_in_words(ws: Path, tmp_path: Path) -> None:
    from soba_notebook import views
    from soba_notebook.session.store import SessionStore

    nb = sample()
    write(ws / "sales.ipynb", nb)
    ctx = ToolContext(ws)
    read = run("notebook_read", {"path": "sales.ipynb", "cell_ids": [nb.cells[2].id]}, ctx)
    edit = run("notebook_edit", {"path": "sales.ipynb", "cell_id": nb.cells[2].id, "action": "replace",
                                 "source": "df.total / 2"}, ctx)
    store = SessionStore.create(tmp_path / "sessions")
    store.append(assistant_message("", [ToolCall("r1", "notebook_read", {"path": "sales.ipynb",
                                                                         "cell_ids": [nb.cells[2].id]})]))
    store.append(tool_result("r1", "notebook_read", read.content, files_changed=read.data["files_changed"]))
    store.append(assistant_message("", [ToolCall("e1", "notebook_edit", {"path": "sales.ipynb", "action": "replace",
                                                                         "cell_id": nb.cells[2].id, "source": "x"}),
                                        ToolCall("e2", "notebook_edit", {"action": "insert_after", "source": "y"})]))
    store.append(tool_result("e1", "notebook_edit", edit.content, files_changed=edit.data["files_changed"]))
    detail = views.transcript(store.file)["detail"].tolist()
    cid = nb.cells[2].id
    assert detail == [f"notebook_read: sales.ipynb (cells {cid})", "read sales.ipynb",
                      f"notebook_edit: replace cell {cid} in sales.ipynb; notebook_edit: insert at the top in "
                      f"the kernel's notebook", f"modified sales.ipynb#{cid}"]


def test_the_cell_shows_an_edit_as_a_collapsed_diff_in_html_and_text(ws: Path) -> None:
    write(ws / "sales.ipynb", sample())
    ctx = ToolContext(ws)
    run("notebook_read", {"path": "sales.ipynb"}, ctx)
    cid = list(cells_json(ws / "sales.ipynb"))[1]
    out = run("notebook_edit", {"path": "sales.ipynb", "cell_id": cid, "action": "replace",
                                "source": "import pandas as pd\ndf = pd.read_csv('sales_2024.csv')"}, ctx)
    block = cellview.notebook_edit_block(out.data["notebook"])
    assert block.html.startswith("<details") and "<summary>" in block.html and " open" not in block.html
    assert f"replaced cell {cid} (code) in sales.ipynb" in block.html
    assert "-df = pd.read_csv(&#x27;sales.csv&#x27;)" in block.html
    assert "+df = pd.read_csv(&#x27;sales_2024.csv&#x27;)" in block.html
    assert block.text.startswith(f"[ok] notebook_edit: replaced cell {cid} (code) in sales.ipynb")
    assert "    -df = pd.read_csv('sales.csv')\n    +df = pd.read_csv('sales_2024.csv')" in block.text


def test_an_nbformat_3_notebook_reads_with_the_same_ids_every_time_and_an_edit_by_them_saves_it_as_4_5(
        ws: Path) -> None:
    v3 = nbformat.v3
    old = v3.new_notebook(worksheets=[v3.new_worksheet(cells=[
        v3.new_heading_cell("Sales", level=1),
        v3.new_code_cell(input="total = 1 + 1", prompt_number=1,
                         outputs=[v3.new_output("pyout", output_text="2", prompt_number=1)]),
        v3.new_code_cell(input="print(total)")])])
    path = ws / "old3.ipynb"
    path.write_text(nbformat.writes(old, version=3))
    original = path.read_bytes()
    first = run("notebook_read", {"path": "old3.ipynb"}, ToolContext(ws))
    second = run("notebook_read", {"path": "old3.ipynb"}, ToolContext(ws))
    assert not first.is_error, first.content
    assert first.content == second.content
    assert "the file is nbformat 3" in first.content and "saves the notebook as nbformat 4.5" in first.content
    assert path.read_bytes() == original  # reading never writes
    ids = [line.split()[2] for line in first.content.splitlines() if line.startswith("## cell ")]
    assert len(set(ids)) == 3
    ctx = ToolContext(ws)
    run("notebook_read", {"path": "old3.ipynb"}, ctx)
    out = run("notebook_edit", {"path": "old3.ipynb", "cell_id": ids[2], "action": "replace",
                                "source": "print(total * 2)"}, ctx)
    assert not out.is_error, out.content
    assert "the file was nbformat 3; it is saved as nbformat 4.5" in out.content
    saved = json.loads(path.read_text())
    assert (saved["nbformat"], saved["nbformat_minor"]) == (4, 5) and [c["id"] for c in saved["cells"]] == ids
    assert saved["cells"][0]["source"] == ["# Sales"] and saved["cells"][2]["source"] == ["print(total * 2)"]
    assert saved["cells"][1]["outputs"][0]["data"]["text/plain"] == ["2"]
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    again = run("notebook_read", {"path": "old3.ipynb"}, ctx)
    assert [line.split()[2] for line in again.content.splitlines() if line.startswith("## cell ")] == ids


@pytest.mark.parametrize(("cells", "says"), [
    ([1], "cell 0 is a number (1), not an object"),
    ([{"cell_type": "code", "source": "x", "metadata": {}, "outputs": []}, "print(1)"],
     "cell 1 is a string ('print(1)'), not an object"),
    ([None], "cell 0 is null, not an object"),
    ([[]], "cell 0 is a list, not an object"),
    ([{"cell_type": "code", "source": 5, "metadata": {}, "outputs": []}], "cell 0's source is a number (5), not text"),
    ([{"cell_type": "code", "source": "x", "metadata": {}, "outputs": {"a": 1}}],
     "cell 0's outputs are an object, not a list of objects"),
    ([{"cell_type": "code", "source": "x", "metadata": {}, "outputs": [3]}],
     "cell 0's outputs are a list, not a list of objects"),
    ([{"cell_type": "chart", "source": "x", "metadata": {}}], "cell 0 has cell_type a string ('chart')"),
])
def test_a_notebook_whose_cells_hold_a_non_object_is_not_a_notebook_naming_the_cell_and_what_was_found(
        ws: Path, cells: list[Any], says: str) -> None:
    path = ws / "odd.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    before = path.read_bytes()
    ctx = ToolContext(ws)
    for name, args in (("notebook_read", {}), ("read_file", {}),
                       ("notebook_edit", {"cell_id": None, "action": "insert_after", "source": "y"})):
        out = run(name, {"path": "odd.ipynb", **args}, ctx)
        assert out.is_error, (name, out.content)
        if name == "notebook_edit":
            assert "read odd.ipynb with notebook_read before editing" in out.content
            continue
        assert f"odd.ipynb is not a notebook: {says}" in out.content, (name, out.content)
        assert "internal error" not in out.content and "Traceback" not in out.content
    assert path.read_bytes() == before
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [7], "metadata": {}}]}
    path.write_text(json.dumps(v3))
    out = run("notebook_read", {"path": "odd.ipynb"}, ctx)
    assert out.is_error and "odd.ipynb is not a notebook: worksheet 0 cell 0 is a number (7), not an object" in \
        out.content, out.content
