"""The notebook open in JupyterLab, live, in a real kernel: the kernel side of the request/reply protocol.

A real kernel whose Jupyter session names a notebook, and a loopback front end
(``live_frontend.LoopbackLab``: a second jupyter_client connection answering the comm as SOBA's
JupyterLab extension does) that holds the open document with the user's unsaved typing. During a
foreground ``%soba`` turn (the kernel's main shell busy), a scripted model reads the notebook and
edits it: the reads see the open document, the edits change it and never the file. Without a
front end the tools use the file and say so once. The kernel-free rules are in
``tests/unit/test_live_notebook.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project, run_cell
from live_frontend import LoopbackLab
from unit.test_live_notebook import UNSAVED, _notebook, _script, _tool_texts

from soba_notebook.agent.notebook_doc import cell_source


@pytest.fixture
def live_kernel(tmp_path: Path, fake_server: FakeServer) -> Iterator[tuple[Kernel, Path]]:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    notebook = (project / "analysis.ipynb").resolve()
    _notebook(notebook)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test-not-secret",
                                                     "JPY_SESSION_NAME": str(notebook)})
    try:
        yield kernel, notebook
    finally:
        kernel.close()


def test_a_foreground_turn_reads_the_open_document_and_edits_it_in_place_never_the_file(
        live_kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    kernel, notebook = live_kernel
    on_disk = notebook.read_bytes()
    doc = json.loads(on_disk)
    doc["cells"][1]["source"] = UNSAVED  # the user's unsaved edit, only in the open document
    lab = LoopbackLab(kernel.km, {str(notebook): doc})
    try:
        fake_server.handler = _script(
            {"name": "notebook_read", "arguments": {}},
            {"name": "notebook_edit", "arguments": {"cell_id": "intro", "action": "insert_after",
                                                    "source": "import math"}},
            {"name": "notebook_edit", "arguments": {"cell_id": "show", "action": "replace",
                                                    "source": "print(math.sqrt(total))"}})
        reply, _ = run_cell(kernel.kc, "%soba add an import and show the square root")
        assert reply["status"] == "ok"
    finally:
        lab.close()
    texts = _tool_texts(fake_server.requests[-1].body)
    assert UNSAVED in texts[0], texts[0]  # the read saw what the user sees
    assert "changed in the open notebook" in texts[1] and "changed in the open notebook" in texts[2], texts
    cells = lab.documents[str(notebook)]["cells"]
    ids = [c["id"] for c in cells]
    assert ids[0] == "intro" and ids[2:] == ["setup", "show"] and cell_source(cells[1]) == "import math"
    assert cell_source(cells[2]) == UNSAVED  # the unsaved edit survived both agent edits
    assert cell_source(cells[3]) == "print(math.sqrt(total))"
    assert notebook.read_bytes() == on_disk  # the file was never written
    # one read per tool call, plus one apply per edit
    assert [r["op"] for r in lab.requests] == ["read", "read", "apply", "read", "apply"]


def test_a_cell_the_user_changed_after_the_read_is_not_replaced_and_other_cells_do_not_block(
        live_kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    kernel, notebook = live_kernel
    doc = json.loads(notebook.read_text())
    lab = LoopbackLab(kernel.km, {str(notebook): doc})

    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        done = len(_tool_texts(body))
        if done == 0:
            return {"tool_calls": [{"id": "r", "name": "notebook_read", "arguments": {}}], "usage": False}
        if done == 1:  # the user types in two cells after the agent read them
            with lab.lock:
                doc["cells"][1]["source"] = "total = 2  # the user's"
                doc["cells"][0]["source"] = "# Totals, retitled"
            return {"tool_calls": [{"id": "e1", "name": "notebook_edit", "arguments": {
                "cell_id": "setup", "action": "replace", "source": "total = 3"}}], "usage": False}
        if done == 2:
            return {"tool_calls": [{"id": "e2", "name": "notebook_edit", "arguments": {
                "cell_id": "show", "action": "replace", "source": "print(total * 2)"}}], "usage": False}
        return {"text": "Done.", "usage": False}

    fake_server.handler = handler
    try:
        reply, _ = run_cell(kernel.kc, "%soba change the total")
        assert reply["status"] == "ok"
    finally:
        lab.close()
    texts = _tool_texts(fake_server.requests[-1].body)
    assert "cell setup of analysis.ipynb changed in JupyterLab since you last read it" in texts[1], texts[1]
    assert "changed in the open notebook" in texts[2], texts[2]  # an edit elsewhere did not block it
    assert [cell_source(c) for c in doc["cells"]] == ["# Totals, retitled", "total = 2  # the user's",
                                                       "print(total * 2)"]


def test_without_a_front_end_the_tools_use_the_file_say_so_once_and_ask_once(
        live_kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    kernel, notebook = live_kernel
    fake_server.handler = _script(
        {"name": "notebook_read", "arguments": {}},
        {"name": "notebook_edit", "arguments": {"cell_id": "show", "action": "replace", "source": "print(total)\n"}},
        {"name": "notebook_read", "arguments": {"cell_ids": ["show"]}})
    listener = LoopbackLab(kernel.km, {}, answer=False)  # sees the requests, answers none
    try:
        reply, _ = run_cell(kernel.kc, "%soba fix the cell")
    finally:
        listener.close()
    assert reply["status"] == "ok"
    texts = _tool_texts(fake_server.requests[-1].body)
    notes = [t for t in texts if "not the live JupyterLab document" in t]
    assert len(notes) == 1 and notes[0] is texts[0], texts
    assert "no JupyterLab front end with SOBA's extension answered" in notes[0]
    assert cell_source(json.loads(notebook.read_text())["cells"][2]) == "print(total)\n"  # the file was edited
    assert len(listener.requests) == 1  # the silence was remembered: the edit and the second read did not wait


def test_notebook_run_during_a_foreground_turn_shows_each_cell_running_then_its_outputs_in_the_open_notebook(
        live_kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    kernel, notebook = live_kernel
    on_disk = notebook.read_bytes()
    doc = json.loads(on_disk)
    doc["cells"][1]["source"] = UNSAVED  # total = 10, only in the open document
    lab = LoopbackLab(kernel.km, {str(notebook): doc})
    try:
        fake_server.handler = _script({"name": "notebook_read", "arguments": {}},
                                      {"name": "notebook_run", "arguments": {"scope": "all"}})
        reply, _ = run_cell(kernel.kc, "%soba run the notebook")
        assert reply["status"] == "ok"
    finally:
        lab.close()
    texts = _tool_texts(fake_server.requests[-1].body)
    assert "its cells show these outputs, unsaved" in texts[1], texts[1]
    first = next(number for _, state, number in lab.runs if state == "done")
    # the main shell was busy with the %soba cell all along: each state reached the front end during the turn
    assert lab.runs == [("setup", "running", None), ("setup", "done", first), ("show", "running", None),
                        ("show", "done", first + 1)], lab.runs
    cells = lab.documents[str(notebook)]["cells"]
    assert cells[1]["outputs"] == [] and cells[1]["execution_count"] == first
    assert cells[2]["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "10\n"}]  # the open document ran
    assert cells[2]["execution_count"] == first + 1
    assert reply["execution_count"] == first + 2  # the %soba cell's own count comes after its runs, never one of them
    assert notebook.read_bytes() == on_disk  # the file under the open notebook was never written
