"""The notebook open in JupyterLab, live: the kernel side of the request/reply protocol.

A real kernel whose Jupyter session names a notebook, and a loopback front end
(``live_frontend.LoopbackLab``: a second jupyter_client connection answering the comm as SOBA's
JupyterLab extension does) that holds the open document with the user's unsaved typing. During a
foreground ``%soba`` turn (the kernel's main shell busy), a scripted model reads the notebook and
edits it: the reads see the open document, the edits change it and never the file. Without a
front end the tools use the file and say so once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project, run_cell
from live_frontend import LoopbackLab

from soba_notebook.agent.notebook_access import ReadStamp
from soba_notebook.agent.notebook_doc import NotebookEdit, cell_source, source_hash
from soba_notebook.errors import ToolError
from soba_notebook.notebook.live_channel import Reply
from soba_notebook.notebook.live_notebook import LiveNotebooks

UNSAVED = "total = 10  # typed in JupyterLab, not saved"


def _notebook(path: Path) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Totals"), nbformat.v4.new_code_cell("total = 1"),
                nbformat.v4.new_code_cell("print(total)")]
    for cell, cid in zip(nb.cells, ("intro", "setup", "show"), strict=True):
        cell["id"] = cid
    nbformat.write(nb, path)
    return json.loads(path.read_text())


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


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


def _script(*calls: dict[str, Any]) -> Any:
    """A model that makes ``calls`` one per request, then answers in text."""
    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        done = len(_tool_texts(body))
        if done < len(calls):
            return {"tool_calls": [{"id": f"c{done}", **calls[done]}], "usage": False}
        return {"text": "Done.", "usage": False}
    return handler


@pytest.mark.kernel
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


@pytest.mark.kernel
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


@pytest.mark.kernel
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


# -- the kernel-side rules without a kernel -----------------------------------------------------


class _Front:
    """A front end as a request function: knows notebooks by the paths in ``docs``."""

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs = docs
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Reply:
        self.sent.append(dict(request))
        doc = self.docs.get(request["path"])
        if doc is None:
            return Reply({"found": False, "open": sorted(self.docs)})
        if request["op"] == "read":
            return Reply({"found": True, "notebook": doc})
        return Reply({"found": True, "ok": True})


def test_a_notebook_the_front_end_names_by_another_path_to_the_same_file_is_found(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    doc = _notebook(real / "a.ipynb")
    (tmp_path / "link").symlink_to(real)
    front = _Front({str(tmp_path / "link" / "a.ipynb"): doc})  # the server root is the link
    nb = LiveNotebooks(front).read((real / "a.ipynb").resolve())
    assert nb is not None and [c["id"] for c in nb.cells] == ["intro", "setup", "show"]
    assert [r["path"] for r in front.sent] == [str(real / "a.ipynb"), str(tmp_path / "link" / "a.ipynb")]


def test_an_open_notebook_is_never_edited_without_a_read_and_a_refusal_is_an_error_not_the_file(
        tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    doc = _notebook(path)
    live = LiveNotebooks(_Front({str(path): doc}))
    edit = NotebookEdit("replace", "show", "print(2)")
    with pytest.raises(ToolError, match=r"read a\.ipynb with notebook_read before editing it"):
        live.apply(path, edit, None)
    seen = ReadStamp(0, 0, "", {c["id"]: source_hash(cell_source(c)) for c in doc["cells"]}, live=True)
    refused = LiveNotebooks(lambda request: Reply({"found": True, "notebook": doc}) if request["op"] == "read"
                            else Reply({"found": True, "ok": False, "error": "cell show changed"}))
    with pytest.raises(ToolError, match=r"JupyterLab refused the edit of a\.ipynb: cell show changed"):
        refused.apply(path, edit, seen)


def test_a_notebook_not_open_in_the_front_end_falls_back_to_the_file_and_says_why_once_per_reason(
        tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    _notebook(path)
    live = LiveNotebooks(_Front({}))
    assert live.read(path) is None
    assert live.fallback_note(path) == "(not the live JupyterLab document: a.ipynb is not open in JupyterLab; the " \
                                       "file was used)"
    assert live.read(path) is None and live.fallback_note(path) is None
