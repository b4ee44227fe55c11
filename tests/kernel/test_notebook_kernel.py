"""A real kernel whose Jupyter session names a notebook: a scripted model reads the kernel's own
notebook (with the cell that failed in this kernel and its traceback) and inserts a cell; the
file then has it, and the %soba cell shows the edit as a collapsed diff."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project, run_cell


def _notebook(path: Path) -> list[str]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Totals"), nbformat.v4.new_code_cell("total = 10"),
                nbformat.v4.new_code_cell("share = total / 0")]
    for cell, cid in zip(nb.cells, ("intro", "setup", "ratio"), strict=True):
        cell["id"] = cid
    nbformat.write(nb, path)
    return [c["id"] for c in nb.cells]


def _execute_as_cell(kernel: Kernel, code: str, cell_id: str) -> tuple[str, str]:
    """Run ``code`` as JupyterLab runs a cell: with its ``cellId`` in the request's metadata."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
               "stop_on_error": True}
    msg = kernel.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
    kernel.kc.shell_channel.send(msg)
    return kernel.wait(msg["header"]["msg_id"])


@pytest.fixture
def notebook_kernel(tmp_path: Path, fake_server: FakeServer) -> Iterator[tuple[Kernel, Path]]:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    notebook = project / "analysis.ipynb"
    _notebook(notebook)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test-not-secret",
                                                     "JPY_SESSION_NAME": str(notebook)})
    try:
        yield kernel, notebook
    finally:
        kernel.close()


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def test_a_scripted_model_reads_the_kernels_own_notebook_with_its_runs_and_inserts_a_cell_the_file_then_holds(
        notebook_kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    kernel, notebook = notebook_kernel
    assert _execute_as_cell(kernel, "total = 10", "setup")[0] == "ok"
    status, shown = _execute_as_cell(kernel, "share = total / 0", "ratio")
    assert status == "error" and "ZeroDivisionError" in shown

    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        done = _tool_texts(body)
        if not done:
            return {"tool_calls": [{"id": "r1", "name": "notebook_read", "arguments": {}}], "usage": False}
        if len(done) == 1:
            return {"tool_calls": [{"id": "e1", "name": "notebook_edit", "arguments": {
                "cell_id": "ratio", "action": "insert_after", "source": "share = total / 2"}}], "usage": False}
        return {"text": "Inserted a fixed cell below the failing one.", "usage": False}

    fake_server.handler = handler
    reply, messages = run_cell(kernel.kc, "%soba why does the ratio cell fail? add a fixed cell below it")
    assert reply["status"] == "ok"

    read = _tool_texts(fake_server.requests[1].body)[0]
    assert "analysis.ipynb: 3 cells" in read and "kernel's own notebook" in read
    assert "## cell ratio · code · not run" in read
    # (In [1] was the fixture's %load_ext, which is SOBA's own and not listed)
    assert "ran in this kernel: [3] ZeroDivisionError: division by zero" in read, read
    assert "kernel traceback of [3]:" in read and "share = total / 0" in read
    assert "[2] cell setup → ok" in read and "[3] cell ratio → ZeroDivisionError" in read

    cells = json.loads(notebook.read_text())["cells"]
    assert [c["id"] for c in cells][:3] == ["intro", "setup", "ratio"]
    assert len(cells) == 4 and "".join(cells[3]["source"]) == "share = total / 2"
    nbformat.validate(nbformat.read(notebook, as_version=4))

    shown_texts = [m["content"]["data"].get("text/plain", "") for m in messages
                   if m["msg_type"] in ("display_data", "update_display_data", "execute_result")]
    shown_html = [m["content"]["data"].get("text/html", "") for m in messages
                  if m["msg_type"] in ("display_data", "update_display_data")]
    assert any(t.startswith(f"[ok] notebook_edit: inserted cell {cells[3]['id']} (code) in analysis.ipynb")
               for t in shown_texts), shown_texts
    assert any("<details class='soba-tool soba-notebook-edit'" in h and "+share = total / 2" in h for h in shown_html)
